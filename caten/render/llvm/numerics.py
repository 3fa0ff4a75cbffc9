"""Integer and float numerics spelled inline in LLVM IR: floor division and modulo with numpy's
semantics (division by zero gives 0, never UB), the exp2/log2 polynomials (vectorizable; no libm
call in a loop) and the threefry counter-based random numbers. Functions of the FnGen `g` that
emits them, so FnGen itself stays the dispatcher."""

from __future__ import annotations

import math
from collections.abc import Sequence

from caten.ir.ops import Op
from caten.render.llvm.emit import Emitter
from caten.render.llvm.values import int_str

_EXP2_F32 = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
             2.402264791363012e-1, 6.931472028550421e-1)
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def idivmod(g: Emitter, op: Op, ty: str, signed: bool, a: str, b: str) -> str:
    """Integer floor division or modulo as numpy: by zero gives 0, MIN // -1 wraps (no UB)."""
    z = g.icmp("eq", ty, b, "0")
    if not signed:
        bs = g.select(z, ty, "1", b)
        r = g.ins(f"{'udiv' if op is Op.IDIV else 'urem'} {ty} {a}, {bs}")
        return g.select(z, ty, "0", r)
    m1 = g.icmp("eq", ty, b, "-1")
    bad = g.ins(f"or i1 {z}, {m1}")
    bs = g.select(bad, ty, "1", b)
    q = g.ins(f"sdiv {ty} {a}, {bs}")
    r = g.ins(f"srem {ty} {a}, {bs}")
    fix = g.ins(f"and i1 {g.icmp('ne', ty, r, '0')}, "
                   f"{g.icmp('slt', ty, g.ins(f'xor {ty} {r}, {bs}'), '0')}")
    if op is Op.IDIV:
        res = g.ins(f"sub {ty} {q}, {g.conv('zext', 'i1', fix, ty)}")
        res = g.select(m1, ty, g.ins(f"sub {ty} 0, {a}"), res)
    else:
        res = g.select(fix, ty, g.ins(f"add {ty} {r}, {bs}"), r)
        res = g.select(m1, ty, "0", res)
    return g.select(z, ty, "0", res)


def fdivmod(g: Emitter, op: Op, ty: str, a: str, b: str) -> str:
    """numpy's npy_divmod (floor_divide / remainder) for floats."""
    zero = g.fc(0.0, ty)
    mod = g.fop("frem", ty, a, b, "")
    bz = g.fcmp("oeq", ty, b, zero)
    mnz = g.fcmp("une", ty, mod, zero)
    sgn = g.ins(f"xor i1 {g.fcmp('olt', ty, b, zero)}, {g.fcmp('olt', ty, mod, zero)}")
    fix = g.ins(f"and i1 {mnz}, {sgn}")
    if op is Op.MOD:
        m2 = g.select(fix, ty, g.fop("fadd", ty, mod, b, ""), mod)
        m2 = g.select(mnz, ty, m2, g.intr("copysign", ty, zero, b))
        return g.select(bz, ty, mod, m2)
    div = g.fop("fdiv", ty, g.fop("fsub", ty, a, mod, ""), b, "")
    div = g.select(fix, ty, g.fop("fsub", ty, div, g.fc(1.0, ty), ""), div)
    fl = g.intr("floor", ty, div)
    gt = g.fcmp("ogt", ty, g.fop("fsub", ty, div, fl, ""), g.fc(0.5, ty))
    fl = g.select(gt, ty, g.fop("fadd", ty, fl, g.fc(1.0, ty), ""), fl)
    q = g.fop("fdiv", ty, a, b, "")
    res = g.select(g.fcmp("une", ty, div, zero), ty, fl, g.intr("copysign", ty, zero, q))
    return g.select(bz, ty, q, res)


def horner(g: Emitter, x: str, coefs: Sequence[float], ty: str) -> str:
    """The polynomial with `coefs` (highest degree first) at x."""
    acc = g.fc(coefs[0], ty)
    for c in coefs[1:]:
        acc = g.fop("fadd", ty, g.fop("fmul", ty, acc, x), g.fc(c, ty))
    return acc


def exp2(g: Emitter, x: str, ty: str) -> str:
    """2**x: x = n + f, |f| <= 1/2, a polynomial in f times 2**n built in two exponent halves."""
    f64 = ty == "double"
    ity, mant, bias = ("i64", 52, 1023) if f64 else ("i32", 23, 127)
    hi, lo = (1024.0, -1080.0) if f64 else (128.0, -150.0)
    isn = g.fcmp("uno", ty, x, x)
    xc = g.select(g.fcmp("ogt", ty, x, g.fc(hi, ty)), ty, g.fc(hi, ty), x)
    xc = g.select(g.fcmp("olt", ty, xc, g.fc(lo, ty)), ty, g.fc(lo, ty), xc)
    xc = g.select(isn, ty, g.fc(0.0, ty), xc)
    n = g.intr("floor", ty, g.fop("fadd", ty, xc, g.fc(0.5, ty)))
    f = g.fop("fsub", ty, xc, n)
    if f64:
        coefs = [math.log(2) ** k / math.factorial(k) for k in range(13, 0, -1)]
        p = g.fop("fmul", ty, horner(g, f, coefs, ty), f)
    else:
        p = g.fop("fmul", ty, horner(g, f, _EXP2_F32, ty), f)
    r = g.fop("fadd", ty, p, g.fc(1.0, ty))
    ni = g.conv("fptosi", ty, n, ity)
    n1 = g.ins(f"ashr {ity} {ni}, 1")
    n2 = g.ins(f"sub {ity} {ni}, {n1}")
    s1 = g.conv("bitcast", ity, g.ins(f"shl {ity} {g.ins(f'add {ity} {n1}, {bias}')}, {mant}"), ty)
    s2 = g.conv("bitcast", ity, g.ins(f"shl {ity} {g.ins(f'add {ity} {n2}, {bias}')}, {mant}"), ty)
    res = g.fop("fmul", ty, g.fop("fmul", ty, r, s1), s2)
    return g.select(isn, ty, x, res)


def log2(g: Emitter, x: str, ty: str) -> str:
    """log2 x: exponent plus an atanh series of the mantissa in [sqrt(1/2), sqrt(2)]."""
    f64 = ty == "double"
    if f64:
        ity, mant, bias, one, minn, sc = "i64", 52, 1023, 0x3FF0000000000000, 2.0 ** -1022, 52
    else:
        ity, mant, bias, one, minn, sc = "i32", 23, 127, 0x3F800000, 2.0 ** -126, 23
    small = g.fcmp("olt", ty, x, g.fc(minn, ty))
    xs = g.select(small, ty, g.fop("fmul", ty, x, g.fc(2.0 ** sc, ty)), x)
    bits = g.conv("bitcast", ty, xs, ity)
    e = g.ins(f"sub {ity} {g.ins(f'lshr {ity} {bits}, {mant}')}, {bias}")
    mb = g.ins(f"or {ity} {g.ins(f'and {ity} {bits}, {(1 << mant) - 1}')}, {int_str(one, 64 if f64 else 32)}")
    m = g.conv("bitcast", ity, mb, ty)
    big = g.fcmp("ogt", ty, m, g.fc(math.sqrt(2.0), ty))
    m = g.select(big, ty, g.fop("fmul", ty, m, g.fc(0.5, ty)), m)
    e = g.ins(f"add {ity} {e}, {g.conv('zext', 'i1', big, ity)}")
    e = g.ins(f"sub {ity} {e}, {g.select(small, ity, str(sc), '0')}")
    s = g.fop("fdiv", ty, g.fop("fsub", ty, m, g.fc(1.0, ty)),
                 g.fop("fadd", ty, m, g.fc(1.0, ty)), "")
    s2 = g.fop("fmul", ty, s, s)
    nterm = 11 if f64 else 5
    coefs = [2.0 / (2 * k + 1) for k in range(nterm - 1, -1, -1)]
    ln = g.fop("fmul", ty, horner(g, s2, coefs, ty), s)
    ef = g.conv("sitofp", ity, e, ty)
    res = g.fop("fadd", ty, ef, g.fop("fmul", ty, ln, g.fc(1 / math.log(2), ty)))
    res = g.select(g.fcmp("oeq", ty, x, g.fc(0.0, ty)), ty, g.fc(-math.inf, ty), res)
    res = g.select(g.fcmp("olt", ty, x, g.fc(0.0, ty)), ty, g.fc(math.nan, ty), res)
    res = g.select(g.fcmp("oeq", ty, x, g.fc(math.inf, ty)), ty, x, res)
    return g.select(g.fcmp("uno", ty, x, x), ty, x, res)


def threefry(g: Emitter, ctr: str, seed: int) -> str:
    """Threefry-2x32 (20 rounds) of the 64-bit counter under the key `seed`: its first word."""
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    c0 = g.conv("trunc", "i64", ctr, "i32")
    c1 = g.conv("trunc", "i64", g.ins(f"lshr i64 {ctr}, 32"), "i32")
    x0 = g.ins(f"add i32 {c0}, {int_str(ks[0], 32)}")
    x1 = g.ins(f"add i32 {c1}, {int_str(ks[1], 32)}")
    for r in range(20):
        x0 = g.ins(f"add i32 {x0}, {x1}")
        rot = g.call("llvm.fshl.i32", "i32", [("i32", x1), ("i32", x1), ("i32", str(_ROT[r % 8]))])
        x1 = g.ins(f"xor i32 {rot}, {x0}")
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = g.ins(f"add i32 {x0}, {int_str(ks[i % 3], 32)}")
            x1 = g.ins(f"add i32 {x1}, {int_str((ks[(i + 1) % 3] + i) & 0xFFFFFFFF, 32)}")
    return x0
