"""sin in LLVM IR: Cody-Waite range reduction for ordinary |x| and Payne-Hanek (an exact integer
product with the bits of 1/pi, a private constant table) for large |x|, both branch-free vector
code, then an odd polynomial. The largest single piece of float numerics, hence its own module."""

from __future__ import annotations

import math

from caten.render.llvm.emit import Emitter
from caten.render.llvm.numerics import horner
from caten.render.llvm.values import int_str

_SINPI_F32 = (3.140625, 0.0009670257568359375, 6.2771141529083251953e-07, 1.2154201256553420762e-10)
_SINPI_F64 = (3.1415926218032836914, 3.1786509424591713469e-08, 1.2246467864107188502e-16,
              1.2736634327021899816e-24)


def _inv_pi_windows(pad: int, count: int, prec: int = 1400) -> list[int]:
    """64-bit windows of the bits of 1/pi = 0.b1 b2 b3 ... (b_i = 0 for i <= 0): entry j holds
    b_a .. b_(a+63), a = 8 * (j - pad). Exact integer arithmetic (Machin's formula, 32 guard bits)."""
    one = 1 << (prec + 64)

    def atan_inv(n: int) -> int:
        tot, term, k, n2 = 0, one // n, 0, n * n
        while term:
            tot += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
            term //= n2
            k += 1
        return tot

    pi_s = 16 * atan_inv(5) - 4 * atan_inv(239)  # pi * 2**(prec+64), error < 2**8 units
    inv = (1 << (2 * prec + 64)) // pi_s  # floor(2**prec / pi) up to the last few of prec bits
    return [(inv >> (prec - 8 * (j - pad) - 63)) & ((1 << 64) - 1) for j in range(count)]


# Payne-Hanek reduction for large |x| (both paths are computed; a select picks one per lane):
# x = M * 2**E, the 1/pi bits that matter start near bit E (earlier ones give even multiples of
# x/pi). Table entry j = floor((E-1)/8) + pad, clamped to [0, _SINTAB_MAX], the rest of E-1 shifts M.
_SINTAB_PAD = 9
_SINTAB_MAX = 121 + _SINTAB_PAD  # f64's largest exponent: floor((971 - 1) / 8) = 121
_SINTAB = _inv_pi_windows(_SINTAB_PAD, _SINTAB_MAX + 17)
_SIN_BIG_F32, _SIN_BIG_F64 = 2.0 ** 14, 2.0 ** 24  # |x| >= this: exact reduction
_PI_126 = (math.pi * 2.0 ** -126, 1.2246467991473532e-16 * 2.0 ** -126)  # pi * 2**-126, head + tail


def sin(g: Emitter, x: str, ty: str) -> str:
    """sin on [-pi/2, pi/2] after x = k*pi + r: Cody-Waite for ordinary |x|, Payne-Hanek
    (integer product of the mantissa with bits of 1/pi, exact for every finite x) above
    _SIN_BIG_*; both reductions are branch-free vector code, a select picks one."""
    f64 = ty == "double"
    ax = g.intr("fabs", ty, x)
    fin = g.fcmp("one", ty, ax, g.fc(math.inf, ty))
    xs = g.select(fin, ty, x, g.fc(0.0, ty))
    k = g.intr("rint", ty, g.fop("fmul", ty, xs, g.fc(1 / math.pi, ty)))
    nk = g.ins(f"fneg {ty} {k}")
    r = xs
    for part in (_SINPI_F64 if f64 else _SINPI_F32):
        r = g.call(f"llvm.fma.{'f64' if f64 else 'f32'}", ty, [(ty, nk), (ty, g.fc(part, ty)), (ty, r)])
    ki = g.call(f"llvm.fptosi.sat.i64.{'f64' if f64 else 'f32'}", "i64", [(ty, k)])
    odd = g.conv("trunc", "i64", ki, "i1")
    big = g.fcmp("oge", ty, ax, g.fc(_SIN_BIG_F64 if f64 else _SIN_BIG_F32, ty))
    rb, oddb = _sin_big64(g, xs) if f64 else _sin_big32(g, xs)
    r = g.select(big, ty, rb, r)
    odd = g.select(big, "i1", oddb, odd)
    r2 = g.fop("fmul", ty, r, r)
    nmax = 12 if f64 else 7
    coefs = [(-1) ** j / math.factorial(2 * j + 1) for j in range(nmax - 1, 0, -1)]
    p = g.fop("fadd", ty, r, g.fop("fmul", ty, g.fop("fmul", ty, r, r2), horner(g, r2, coefs, ty)))
    res = g.select(odd, ty, g.ins(f"fneg {ty} {p}"), p)
    res = g.select(g.fcmp("oeq", ty, xs, g.fc(0.0, ty)), ty, xs, res)  # sin(-0.0) = -0.0
    return g.select(fin, ty, res, g.fc(math.nan, ty))


def _sintab(g: Emitter, j: str, off: int) -> str:
    """Entry j + off of the 1/pi window table (a private constant global; gathers in vector loops)."""
    g.mod.decls.setdefault("@caten_inv_pi", f"@caten_inv_pi = private unnamed_addr constant "
                              f"[{len(_SINTAB)} x i64] [{', '.join(f'i64 {int_str(v, 64)}' for v in _SINTAB)}]")
    ji = g.ins(f"add i64 {j}, {off}") if off else j
    return g.ins(f"load i64, ptr {g.ins(f'getelementptr inbounds i64, ptr @caten_inv_pi, i64 {ji}')}")


def _sin_index(g: Emitter, e1: str, ity: str) -> tuple[str, str]:
    """(table index as i64, shift c = (E-1) mod 8 as i64) from E-1."""
    j = g.ins(f"add {ity} {g.ins(f'ashr {ity} {e1}, 3')}, {_SINTAB_PAD}")
    j = g.intr("smin", ity, g.intr("smax", ity, j, "0"), str(_SINTAB_MAX))
    c = g.ins(f"and {ity} {e1}, 7")
    if ity != "i64":
        j, c = g.conv("zext", ity, j, "i64"), g.conv("zext", ity, c, "i64")
    return j, c


def _sin_big32(g: Emitter, x: str) -> tuple[str, str]:
    """f32 x -> (r, odd): R = (x/pi mod 4) * 2**62 mod 2**64 from the 24-bit mantissa times
    96 bits of 1/pi (error < 2 units of 2**-62); r = (R - round(R)) * pi, via f64."""
    bits = g.conv("bitcast", "float", x, "i32")
    be = g.ins(f"lshr i32 {g.ins(f'and i32 {bits}, 2147483647')}, 23")
    j, c = _sin_index(g, g.ins(f"sub i32 {be}, 151"), "i32")
    m = g.conv("zext", "i32", g.ins(f"or i32 {g.ins(f'and i32 {bits}, 8388607')}, 8388608"), "i64")
    ms = g.ins(f"shl i64 {m}, {c}")
    g0, g1 = _sintab(g, j, 0), _sintab(g, j, 8)
    w0, w1 = g.ins(f"lshr i64 {g0}, 32"), g.ins(f"and i64 {g0}, 4294967295")
    w2 = g.ins(f"lshr i64 {g1}, 32")
    rr = g.ins(f"shl i64 {g.ins(f'mul i64 {ms}, {w0}')}, 32")
    rr = g.ins(f"add i64 {rr}, {g.ins(f'mul i64 {ms}, {w1}')}")
    p2 = g.ins(f"mul i64 {ms}, {w2}")
    rr = g.ins(f"add i64 {rr}, {g.ins(f'lshr i64 {p2}, 32')}")
    n = g.ins(f"lshr i64 {g.ins(f'add i64 {rr}, {1 << 61}')}, 62")
    fr = g.ins(f"sub i64 {rr}, {g.ins(f'shl i64 {n}, 62')}")
    rd = g.conv("sitofp", "i64", fr, "double")
    rd = g.fop("fmul", "double", rd, g.fc(math.pi * 2.0 ** -62, "double"))
    r = g.conv("fptrunc", "double", rd, "float")
    neg = g.icmp("slt", "i32", bits, "0")
    return g.select(neg, "float", g.ins(f"fneg float {r}"), r), g.conv("trunc", "i64", n, "i1")


def _sin_big64(g: Emitter, x: str) -> tuple[str, str]:
    """f64 x -> (r, odd): R = (x/pi mod 4) * 2**126 as 128 bits (hi, lo) from the 53-bit
    mantissa times 192 bits of 1/pi in 32-bit limbs (column sums in i64; error < 2 units)."""
    mask = "4294967295"
    bits = g.conv("bitcast", "double", x, "i64")
    be = g.ins(f"lshr i64 {g.ins(f'and i64 {bits}, {(1 << 63) - 1}')}, 52")
    j, c = _sin_index(g, g.ins(f"sub i64 {be}, 1076"), "i64")
    m = g.ins(f"or i64 {g.ins(f'and i64 {bits}, {(1 << 52) - 1}')}, {1 << 52}")
    ms = g.ins(f"shl i64 {m}, {c}")
    mh, ml = g.ins(f"lshr i64 {ms}, 32"), g.ins(f"and i64 {ms}, {mask}")
    w = []
    for off in (0, 8, 16):
        word = _sintab(g, j, off)
        w += [g.ins(f"lshr i64 {word}, 32"), g.ins(f"and i64 {word}, {mask}")]
    cols: dict[int, list[str]] = {q: [] for q in range(-1, 4)}  # column q has weight 2**(32q)
    for k, wk in enumerate(w):
        for limb, q in ((ml, 3 - k), (mh, 4 - k)):
            if q > 3 or (limb is mh and k == 0):
                continue
            p = g.ins(f"mul i64 {limb}, {wk}")
            if q >= -1:
                cols[q].append(g.ins(f"and i64 {p}, {mask}"))
            if -1 <= q + 1 <= 3:
                cols[q + 1].append(g.ins(f"lshr i64 {p}, 32"))
    acc: dict[int, str] = {}
    carry = None
    for q in range(-1, 4):
        terms = cols[q] + ([carry] if carry else [])
        s = terms[0]
        for t in terms[1:]:
            s = g.ins(f"add i64 {s}, {t}")
        acc[q] = s
        carry = g.ins(f"lshr i64 {s}, 32")
    hi = g.ins(f"or i64 {g.ins(f'shl i64 {acc[3]}, 32')}, {g.ins(f'and i64 {acc[2]}, {mask}')}")
    lo = g.ins(f"or i64 {g.ins(f'shl i64 {acc[1]}, 32')}, {g.ins(f'and i64 {acc[0]}, {mask}')}")
    n = g.ins(f"lshr i64 {g.ins(f'add i64 {hi}, {1 << 61}')}, 62")
    fhi = g.ins(f"sub i64 {hi}, {g.ins(f'shl i64 {n}, 62')}")
    neg = g.icmp("slt", "i64", fhi, "0")
    nlo = g.ins(f"sub i64 0, {lo}")
    borrow = g.conv("zext", "i1", g.icmp("ne", "i64", lo, "0"), "i64")
    nhi = g.ins(f"sub i64 {g.ins(f'sub i64 0, {fhi}')}, {borrow}")
    mhi, mlo = g.select(neg, "i64", nhi, fhi), g.select(neg, "i64", nlo, lo)
    # |frac| * 2**126 = mhi * 2**64 + mlo as a double-double (exact but for < 2**-105 when
    # mhi >= 2**11), then times pi as a double-double: r to within ~0.5 ulp.
    d = "double"
    h = g.conv("sitofp", "i64", mhi, d)
    hi_err = g.ins(f"sub i64 {mhi}, {g.conv('fptosi', d, h, 'i64')}")
    e = g.conv("sitofp", "i64", hi_err, d)
    lo_d = g.conv("uitofp", "i64", mlo, d)
    rest = g.call("llvm.fma.f64", d, [(d, e), (d, g.fc(2.0 ** 64, d)), (d, lo_d)])
    h = g.fop("fmul", d, h, g.fc(2.0 ** 64, d))
    mh = g.fop("fadd", d, h, rest, "")
    ml = g.fop("fadd", d, g.fop("fsub", d, h, mh, ""), rest, "")
    p1, p2 = _PI_126
    rh = g.fop("fmul", d, mh, g.fc(p1, d), "")
    rl = g.call("llvm.fma.f64", d, [(d, mh), (d, g.fc(p1, d)), (d, g.ins(f"fneg double {rh}"))])
    rl = g.call("llvm.fma.f64", d, [(d, ml), (d, g.fc(p1, d)), (d, rl)])
    rl = g.call("llvm.fma.f64", d, [(d, mh), (d, g.fc(p2, d)), (d, rl)])
    r = g.fop("fadd", d, rh, rl, "")
    flip = g.ins(f"xor i1 {neg}, {g.icmp('slt', 'i64', bits, '0')}")
    return g.select(flip, "double", g.ins(f"fneg double {r}"), r), g.conv("trunc", "i64", n, "i1")
