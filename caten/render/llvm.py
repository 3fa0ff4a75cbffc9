"""Loop IR -> LLVM IR text for the host CPU.

Text rather than llvmlite.ir because kernels need fast-math flags on reduction updates and
string function attributes ("prefer-vector-width"="512"), which llvmlite.ir cannot spell.
EXP2/LOG2/SIN are inline polynomials (vectorizable; no libm call in a loop). f16/bf16 are
computed in f32 and rounded after every op. Integer division by zero gives 0, never UB.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.walk import Visit, drive
from caten.lower import loopir as L
from caten.lower.loopir import X


def rty(dt: DType) -> str:
    if dt.is_bool:
        return "i1"
    if dt.is_int:
        return f"i{dt.bits}"
    return "double" if dt.bits == 64 else "float"


def mty(dt: DType) -> str:
    if dt.is_bool:
        return "i8"
    if dt.name == "f16":
        return "half"
    if dt.name == "bf16":
        return "i16"
    return rty(dt)


def _fhex(v: float, ty: str) -> str:
    if ty == "float":
        v = float(np.float32(v))
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def _int(v: int, bits: int) -> str:
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


def const_str(v, dt: DType) -> str:
    if dt.is_bool:
        return "true" if v else "false"
    if dt.is_int:
        return _int(int(v), dt.bits)
    v = float(v)
    if dt.name == "f16":
        with np.errstate(over="ignore"):  # beyond f16's range the constant is inf, as the cast says
            v = float(np.float16(v))
    elif dt.name == "bf16":
        v = float(ml_dtypes.bfloat16(v))
    return _fhex(v, rty(dt))


_EXP2_F32 = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
             2.402264791363012e-1, 6.931472028550421e-1)
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
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


class FnGen:
    """Builds one function's body; values are strings (SSA names or literals)."""

    def __init__(self, mod: ModuleGen, dims: Sequence[str], defines: dict[str, D.Dim]):
        self.mod, self.dims, self.defines = mod, list(dims), defines
        self.lines: list[str | None] = []
        self.entry: list[str | None] = []  # hoisted into the entry block (dim values)
        self.dimmemo: dict = {}
        self.allocas: list[str] = []
        self.n = 0
        self.cur = "entry"
        self.scopes: list[dict] = [{}]
        self.accs: dict[str, tuple[str, DType]] = {}

    # plumbing ---------------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def emit(self, s: str) -> None:
        self.lines.append("  " + s)

    def block(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.cur = name

    def ins(self, text: str) -> str:
        t = self.tmp()
        self.emit(f"{t} = {text}")
        return t

    def call(self, name: str, ret: str, args: Sequence[tuple[str, str]]) -> str:
        self.mod.declare(name, ret, [a for a, _ in args])
        return self.ins(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")

    def intr(self, base: str, ty: str, *vals: str) -> str:
        suffix = {"float": "f32", "double": "f64"}.get(ty, ty)
        return self.call(f"llvm.{base}.{suffix}", ty, [(ty, v) for v in vals])

    def fop(self, op: str, ty: str, a: str, b: str, flags: str = "contract") -> str:
        return self.ins(f"{op} {flags} {ty} {a}, {b}" if flags else f"{op} {ty} {a}, {b}")

    def fc(self, v: float, ty: str) -> str:
        return _fhex(v, ty)

    def select(self, c: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"select i1 {c}, {ty} {a}, {ty} {b}")

    def fcmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"fcmp {pred} {ty} {a}, {b}")

    def icmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"icmp {pred} {ty} {a}, {b}")

    def conv(self, op: str, fty: str, v: str, tty: str) -> str:
        return self.ins(f"{op} {fty} {v} to {tty}")

    # values -------------------------------------------------------------------------------------
    def v(self, x: X) -> str:
        """The SSA name of x, emitting what it needs (walked without recursion: caten.ir.walk)."""
        return drive(self._vis(x))

    def _vis(self, x: X) -> Visit[str]:
        if x.op == "const":
            return const_str(x.arg, x.dtype)
        if x.op == "var" and x.arg in self.accs:
            ptr, dt = self.accs[x.arg]
            return self.ins(f"load {rty(dt)}, ptr {ptr}")
        for sc in reversed(self.scopes):
            r = sc.get(x)
            if r is not None:
                return r
        r = yield from self._v(x)
        self.scopes[-1][x] = r
        return r

    def dimval(self, d) -> str:
        """The i64 value of a dim expression: computed once per function, in its entry block
        (it reads only dim arguments, so the value dominates every use)."""
        if isinstance(d, int):
            return str(d)
        key = D._key(d)
        hit = self.dimmemo.get(key)
        if hit is None:
            body, self.lines = self.lines, self.entry
            try:
                hit = self.dimmemo[key] = self._dimval(d)
            finally:
                self.lines = body
        return hit

    def _dimval(self, d) -> str:
        total = None
        for m, c in sorted(d.terms.items(), key=lambda mc: repr(mc[0])):
            term = str(c)
            for a in m:
                av = self.atom(a)
                term = av if term == "1" else self.ins(f"mul i64 {term}, {av}")
            total = term if total is None else self.ins(f"add i64 {total}, {term}")
        return total or "0"

    def atom(self, a) -> str:
        if a.op == "sym":
            name = a.args[0]
            if name in self.defines:  # an int (-D), or a derived dim's expression (where K = (/ N 2))
                v = self.defines[name]
                return str(int(v)) if isinstance(v, int) else self.dimval(v)
            if name not in self.dims:
                raise KeyError(f"dimension {name} is neither a dynamic dim nor defined")
            return f"%d_{name}"
        x, y = (self.dimval(s) for s in a.args)
        if a.op in ("idiv", "mod") and isinstance(a.args[1], int) and a.args[1] > 0 and D.sign_of(a.args[0]) == 1:
            return self.ins(f"{'udiv' if a.op == 'idiv' else 'urem'} i64 {x}, {y}")  # both sides known >= 0
        if a.op in ("idiv", "mod"):
            z = self.icmp("eq", "i64", y, "0")
            ys = self.select(z, "i64", "1", y)
            q = self.ins(f"{'sdiv' if a.op == 'idiv' else 'srem'} i64 {x}, {ys}")
            if a.op == "idiv":  # floor
                r = self.ins(f"srem i64 {x}, {ys}")
                fix = self.ins(f"and i1 {self.icmp('ne', 'i64', r, '0')}, "
                               f"{self.icmp('slt', 'i64', self.ins(f'xor i64 {r}, {ys}'), '0')}")
                q = self.ins(f"sub i64 {q}, {self.conv('zext', 'i1', fix, 'i64')}")
            else:
                fix = self.ins(f"and i1 {self.icmp('ne', 'i64', q, '0')}, "
                               f"{self.icmp('slt', 'i64', self.ins(f'xor i64 {q}, {ys}'), '0')}")
                q = self.select(fix, "i64", self.ins(f"add i64 {q}, {ys}"), q)
            return self.select(z, "i64", "0", q)
        c = self.icmp("sgt" if a.op == "max" else "slt", "i64", x, y)
        return self.select(c, "i64", x, y)

    def _v(self, x: X) -> Visit[str]:
        op = x.op
        if op == "dim":
            return self.dimval(x.arg)
        if op == "var":
            return f"%v_{x.arg}"
        if op == "load":
            return self.load(x.arg, (yield self._vis(x.src[0])), x.dtype)
        if op == "masked":
            return (yield from self.masked(x))
        if op == "bcheck":
            return (yield from self.bcheck(x))
        if op == "rand":
            return self.threefry((yield self._vis(x.src[0])), x.arg)
        if op in ("idiv", "imod"):
            a, b = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
            return self.ins(f"{'sdiv' if op == 'idiv' else 'srem'} i64 {a}, {b}")
        if op is Op.CAST:
            return self.cast((yield self._vis(x.src[0])), x.src[0].dtype, x.dtype)
        if x.arg == "acc" and op is Op.ADD and x.dtype.is_float and x.dtype.name not in ("f16", "bf16") \
                and x.src[1].op is Op.MUL and not any(x.src[1] in sc for sc in self.scopes):
            # a product feeding a reduction may fuse into an FMA (elementwise ops never contract)
            m = x.src[1]
            ma, mb = (yield self._vis(m.src[0])), (yield self._vis(m.src[1]))
            prod = self.fop("fmul", rty(m.dtype), ma, mb, "contract")
            return self.alu(op, x.dtype, x.dtype, [(yield self._vis(x.src[0])), prod], x.arg)
        srcs = []
        for s in x.src:
            srcs.append((yield self._vis(s)))
        return self.alu(op, x.dtype, x.src[0].dtype if x.src else x.dtype, srcs, x.arg)

    def masked(self, x: X) -> Visit[str]:
        cond = yield self._vis(x.src[0])
        pre = self.cur
        lt, lj = self.label("mt"), self.label("mj")
        self.emit(f"br i1 {cond}, label %{lt}, label %{lj}")
        self.block(lt)
        self.scopes.append({})
        try:
            val = yield self._vis(x.src[1])
        finally:
            self.scopes.pop()
        tend = self.cur
        self.emit(f"br label %{lj}")
        self.block(lj)
        ty = rty(x.dtype)
        zero = "false" if ty == "i1" else "0" if ty.startswith("i") else self.fc(0.0, ty)
        return self.ins(f"phi {ty} [{val}, %{tend}], [{zero}, %{pre}]")

    def bcheck(self, x: X) -> Visit[str]:
        """The index if it lies in [0, extent), else 0 after recording the failure (caten.lower.bounds)."""
        idx, ext = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
        slot, kid, bid = x.arg
        ok = self.icmp("ult", "i64", idx, ext)
        bad, join = self.label("oob"), self.label("inb")
        self.emit(f"br i1 {ok}, label %{join}, label %{bad}, !prof !{self.mod.oob_record(slot)}")
        self.block(bad)
        self.emit(f"call void @caten_oob_record(ptr @{slot}, i64 {kid}, i64 {bid}, i64 {idx}, i64 {ext})")
        self.emit(f"br label %{join}")
        self.block(join)
        return self.select(ok, "i64", idx, "0")

    # memory -------------------------------------------------------------------------------------
    def ptr(self, buf: str, idx: str, dt: DType) -> str:
        return self.ins(f"getelementptr inbounds {mty(dt)}, ptr %b_{buf}, i64 {idx}")

    def load(self, buf: str, idx: str, dt: DType) -> str:
        p = self.ptr(buf, idx, dt)
        raw = self.ins(f"load {mty(dt)}, ptr {p}, align {dt.itemsize}")
        if dt.is_bool:
            return self.icmp("ne", "i8", raw, "0")
        if dt.name == "f16":
            return self.conv("fpext", "half", raw, "float")
        if dt.name == "bf16":
            w = self.conv("zext", "i16", raw, "i32")
            return self.conv("bitcast", "i32", self.ins(f"shl i32 {w}, 16"), "float")
        return raw

    def store(self, buf: str, idx: str, val: str, dt: DType) -> None:
        if dt.is_bool:
            val = self.conv("zext", "i1", val, "i8")
        elif dt.name == "f16":
            val = self.conv("fptrunc", "float", val, "half")
        elif dt.name == "bf16":
            b = self.conv("bitcast", "float", val, "i32")
            val = self.conv("trunc", "i32", self.ins(f"lshr i32 {b}, 16"), "i16")
        p = self.ptr(buf, idx, dt)
        self.emit(f"store {mty(dt)} {val}, ptr {p}, align {dt.itemsize}")

    # rounding and casts -----------------------------------------------------------------------
    def round(self, dt: DType, v: str) -> str:
        if dt.name == "f16":
            return self.conv("fpext", "half", self.conv("fptrunc", "float", v, "half"), "float")
        if dt.name == "bf16":
            b = self.conv("bitcast", "float", v, "i32")
            lsb = self.ins(f"and i32 {self.ins(f'lshr i32 {b}, 16')}, 1")
            r = self.ins(f"add i32 {b}, {self.ins(f'add i32 {lsb}, 32767')}")
            r = self.ins(f"and i32 {r}, -65536")
            q = self.ins(f"and i32 {self.ins(f'or i32 {b}, 4194304')}, -65536")
            r = self.select(self.fcmp("uno", "float", v, v), "i32", q, r)
            return self.conv("bitcast", "i32", r, "float")
        return v

    def cast(self, v: str, src: DType, dst: DType) -> str:
        fs, ts = rty(src), rty(dst)
        if src == dst:
            return v
        if dst.is_bool:
            if src.is_float:
                return self.fcmp("une", fs, v, self.fc(0.0, fs))
            return self.icmp("ne", fs, v, "0")
        if src.is_bool:
            if dst.is_float:
                return self.conv("uitofp", "i1", v, ts)
            return self.conv("zext", "i1", v, ts)
        if src.is_int and dst.is_int:
            if src.bits == dst.bits:
                return v
            if src.bits > dst.bits:
                return self.conv("trunc", fs, v, ts)
            return self.conv("sext" if src.kind == "int" else "zext", fs, v, ts)
        if src.is_int and dst.is_float:
            r = self.conv("sitofp" if src.kind == "int" else "uitofp", fs, v, ts)
            return self.round(dst, r)
        if src.is_float and dst.is_int:
            a = self.intr("fabs", fs, v)
            fin = self.fcmp("one", fs, a, self.fc(math.inf, fs))
            xs = self.select(fin, fs, v, self.fc(0.0, fs))
            s = self.call(f"llvm.fptosi.sat.i64.{'f64' if fs == 'double' else 'f32'}", "i64", [(fs, xs)])
            if dst.kind == "uint":
                u = self.call(f"llvm.fptoui.sat.i64.{'f64' if fs == 'double' else 'f32'}", "i64", [(fs, xs)])
                s = self.select(self.fcmp("olt", fs, xs, self.fc(0.0, fs)), "i64", s, u)
            return s if dst.bits == 64 else self.conv("trunc", "i64", s, ts)
        # float -> float
        if fs == "float" and ts == "double":
            return self.conv("fpext", "float", v, "double")
        if fs == "double" and ts == "float":
            v = self.conv("fptrunc", "double", v, "float")
        return self.round(dst, v)

    # ALU ------------------------------------------------------------------------------------------
    def alu(self, op: Op, dt: DType, sdt: DType, s: list[str], arg) -> str:
        ty, sty = rty(dt), rty(sdt)
        acc = arg == "acc"
        if op is Op.WHERE:
            return self.select(s[0], ty, s[1], s[2])
        if op in (Op.CMPLT, Op.CMPNE):
            if sdt.is_float:
                return self.fcmp("olt" if op is Op.CMPLT else "une", sty, s[0], s[1])
            pred = "ne" if op is Op.CMPNE else ("slt" if sdt.kind == "int" else "ult")
            return self.icmp(pred, sty, s[0], s[1])
        if dt.is_float:
            r = self.falu(op, ty, s, acc)
            return self.round(dt, r)
        return self.ialu(op, dt, ty, s, acc)

    def falu(self, op: Op, ty: str, s: list[str], acc: bool) -> str:
        fl = "reassoc nsz contract" if acc else ""
        if op is Op.ADD:
            return self.fop("fadd", ty, s[0], s[1], fl)
        if op is Op.MUL:
            return self.fop("fmul", ty, s[0], s[1], fl)
        if op is Op.NEG:
            return self.ins(f"fneg {ty} {s[0]}")
        if op is Op.RECIP:
            return self.fop("fdiv", ty, self.fc(1.0, ty), s[0], "")
        if op is Op.FDIV:
            return self.fop("fdiv", ty, s[0], s[1], "")
        if op is Op.SQRT:
            return self.intr("sqrt", ty, s[0])
        if op is Op.MAX:
            if acc:
                return self.intr("maximum", ty, s[0], s[1])
            c = self.ins(f"or i1 {self.fcmp('oge', ty, s[0], s[1])}, {self.fcmp('uno', ty, s[0], s[0])}")
            return self.select(c, ty, s[0], s[1])
        if op is Op.EXP2:
            return self.exp2(s[0], ty)
        if op is Op.LOG2:
            if ty == "float":  # f32 via f64: correctly rounded in practice, still vectorized
                return self.conv("fptrunc", "double", self.log2(self.conv("fpext", "float", s[0], "double"), "double"),
                                 "float")
            return self.log2(s[0], ty)
        if op is Op.SIN:
            return self.sin(s[0], ty)
        if op in (Op.IDIV, Op.MOD):
            return self.fdivmod(op, ty, s[0], s[1])
        raise NotImplementedError(f"{op} on floats")

    def ialu(self, op: Op, dt: DType, ty: str, s: list[str], acc: bool) -> str:
        signed = dt.kind == "int"
        if op is Op.ADD:
            return self.ins(f"add {ty} {s[0]}, {s[1]}")
        if op is Op.MUL:
            return self.ins(f"mul {ty} {s[0]}, {s[1]}")
        if op is Op.NEG:
            return self.ins(f"sub {ty} 0, {s[0]}")
        if op is Op.NOT:
            return self.ins(f"xor {ty} {s[0]}, {'true' if ty == 'i1' else -1}")
        if op in (Op.AND, Op.OR, Op.XOR):
            return self.ins(f"{op.value.lower()} {ty} {s[0]}, {s[1]}")
        if op is Op.MAX:
            if dt.is_bool:
                return self.ins(f"or i1 {s[0]}, {s[1]}")
            if acc:
                return self.intr("smax" if signed else "umax", ty, s[0], s[1])
            c = self.icmp("sgt" if signed else "ugt", ty, s[0], s[1])
            return self.select(c, ty, s[0], s[1])
        if op in (Op.IDIV, Op.MOD):
            return self.idivmod(op, ty, signed, s[0], s[1])
        raise NotImplementedError(f"{op} on {dt}")

    def idivmod(self, op: Op, ty: str, signed: bool, a: str, b: str) -> str:
        z = self.icmp("eq", ty, b, "0")
        if not signed:
            bs = self.select(z, ty, "1", b)
            r = self.ins(f"{'udiv' if op is Op.IDIV else 'urem'} {ty} {a}, {bs}")
            return self.select(z, ty, "0", r)
        m1 = self.icmp("eq", ty, b, "-1")
        bad = self.ins(f"or i1 {z}, {m1}")
        bs = self.select(bad, ty, "1", b)
        q = self.ins(f"sdiv {ty} {a}, {bs}")
        r = self.ins(f"srem {ty} {a}, {bs}")
        fix = self.ins(f"and i1 {self.icmp('ne', ty, r, '0')}, "
                       f"{self.icmp('slt', ty, self.ins(f'xor {ty} {r}, {bs}'), '0')}")
        if op is Op.IDIV:
            res = self.ins(f"sub {ty} {q}, {self.conv('zext', 'i1', fix, ty)}")
            res = self.select(m1, ty, self.ins(f"sub {ty} 0, {a}"), res)
        else:
            res = self.select(fix, ty, self.ins(f"add {ty} {r}, {bs}"), r)
            res = self.select(m1, ty, "0", res)
        return self.select(z, ty, "0", res)

    def fdivmod(self, op: Op, ty: str, a: str, b: str) -> str:
        """numpy's npy_divmod (floor_divide / remainder) for floats."""
        zero = self.fc(0.0, ty)
        mod = self.fop("frem", ty, a, b, "")
        bz = self.fcmp("oeq", ty, b, zero)
        mnz = self.fcmp("une", ty, mod, zero)
        sgn = self.ins(f"xor i1 {self.fcmp('olt', ty, b, zero)}, {self.fcmp('olt', ty, mod, zero)}")
        fix = self.ins(f"and i1 {mnz}, {sgn}")
        if op is Op.MOD:
            m2 = self.select(fix, ty, self.fop("fadd", ty, mod, b, ""), mod)
            m2 = self.select(mnz, ty, m2, self.intr("copysign", ty, zero, b))
            return self.select(bz, ty, mod, m2)
        div = self.fop("fdiv", ty, self.fop("fsub", ty, a, mod, ""), b, "")
        div = self.select(fix, ty, self.fop("fsub", ty, div, self.fc(1.0, ty), ""), div)
        fl = self.intr("floor", ty, div)
        gt = self.fcmp("ogt", ty, self.fop("fsub", ty, div, fl, ""), self.fc(0.5, ty))
        fl = self.select(gt, ty, self.fop("fadd", ty, fl, self.fc(1.0, ty), ""), fl)
        q = self.fop("fdiv", ty, a, b, "")
        res = self.select(self.fcmp("une", ty, div, zero), ty, fl, self.intr("copysign", ty, zero, q))
        return self.select(bz, ty, q, res)

    # transcendental polynomials ----------------------------------------------------------------
    def horner(self, x: str, coefs: Sequence[float], ty: str) -> str:
        acc = self.fc(coefs[0], ty)
        for c in coefs[1:]:
            acc = self.fop("fadd", ty, self.fop("fmul", ty, acc, x), self.fc(c, ty))
        return acc

    def exp2(self, x: str, ty: str) -> str:
        f64 = ty == "double"
        ity, mant, bias = ("i64", 52, 1023) if f64 else ("i32", 23, 127)
        hi, lo = (1024.0, -1080.0) if f64 else (128.0, -150.0)
        isn = self.fcmp("uno", ty, x, x)
        xc = self.select(self.fcmp("ogt", ty, x, self.fc(hi, ty)), ty, self.fc(hi, ty), x)
        xc = self.select(self.fcmp("olt", ty, xc, self.fc(lo, ty)), ty, self.fc(lo, ty), xc)
        xc = self.select(isn, ty, self.fc(0.0, ty), xc)
        n = self.intr("floor", ty, self.fop("fadd", ty, xc, self.fc(0.5, ty)))
        f = self.fop("fsub", ty, xc, n)
        if f64:
            coefs = [math.log(2) ** k / math.factorial(k) for k in range(13, 0, -1)]
            p = self.fop("fmul", ty, self.horner(f, coefs, ty), f)
        else:
            p = self.fop("fmul", ty, self.horner(f, _EXP2_F32, ty), f)
        r = self.fop("fadd", ty, p, self.fc(1.0, ty))
        ni = self.conv("fptosi", ty, n, ity)
        n1 = self.ins(f"ashr {ity} {ni}, 1")
        n2 = self.ins(f"sub {ity} {ni}, {n1}")
        s1 = self.conv("bitcast", ity, self.ins(f"shl {ity} {self.ins(f'add {ity} {n1}, {bias}')}, {mant}"), ty)
        s2 = self.conv("bitcast", ity, self.ins(f"shl {ity} {self.ins(f'add {ity} {n2}, {bias}')}, {mant}"), ty)
        res = self.fop("fmul", ty, self.fop("fmul", ty, r, s1), s2)
        return self.select(isn, ty, x, res)

    def log2(self, x: str, ty: str) -> str:
        f64 = ty == "double"
        if f64:
            ity, mant, bias, one, minn, sc = "i64", 52, 1023, 0x3FF0000000000000, 2.0 ** -1022, 52
        else:
            ity, mant, bias, one, minn, sc = "i32", 23, 127, 0x3F800000, 2.0 ** -126, 23
        small = self.fcmp("olt", ty, x, self.fc(minn, ty))
        xs = self.select(small, ty, self.fop("fmul", ty, x, self.fc(2.0 ** sc, ty)), x)
        bits = self.conv("bitcast", ty, xs, ity)
        e = self.ins(f"sub {ity} {self.ins(f'lshr {ity} {bits}, {mant}')}, {bias}")
        mb = self.ins(f"or {ity} {self.ins(f'and {ity} {bits}, {(1 << mant) - 1}')}, {_int(one, 64 if f64 else 32)}")
        m = self.conv("bitcast", ity, mb, ty)
        big = self.fcmp("ogt", ty, m, self.fc(math.sqrt(2.0), ty))
        m = self.select(big, ty, self.fop("fmul", ty, m, self.fc(0.5, ty)), m)
        e = self.ins(f"add {ity} {e}, {self.conv('zext', 'i1', big, ity)}")
        e = self.ins(f"sub {ity} {e}, {self.select(small, ity, str(sc), '0')}")
        s = self.fop("fdiv", ty, self.fop("fsub", ty, m, self.fc(1.0, ty)),
                     self.fop("fadd", ty, m, self.fc(1.0, ty)), "")
        s2 = self.fop("fmul", ty, s, s)
        nterm = 11 if f64 else 5
        coefs = [2.0 / (2 * k + 1) for k in range(nterm - 1, -1, -1)]
        ln = self.fop("fmul", ty, self.horner(s2, coefs, ty), s)
        ef = self.conv("sitofp", ity, e, ty)
        res = self.fop("fadd", ty, ef, self.fop("fmul", ty, ln, self.fc(1 / math.log(2), ty)))
        res = self.select(self.fcmp("oeq", ty, x, self.fc(0.0, ty)), ty, self.fc(-math.inf, ty), res)
        res = self.select(self.fcmp("olt", ty, x, self.fc(0.0, ty)), ty, self.fc(math.nan, ty), res)
        res = self.select(self.fcmp("oeq", ty, x, self.fc(math.inf, ty)), ty, x, res)
        return self.select(self.fcmp("uno", ty, x, x), ty, x, res)

    def sin(self, x: str, ty: str) -> str:
        """sin on [-pi/2, pi/2] after x = k*pi + r: Cody-Waite for ordinary |x|, Payne-Hanek
        (integer product of the mantissa with bits of 1/pi, exact for every finite x) above
        _SIN_BIG_*; both reductions are branch-free vector code, a select picks one."""
        f64 = ty == "double"
        ax = self.intr("fabs", ty, x)
        fin = self.fcmp("one", ty, ax, self.fc(math.inf, ty))
        xs = self.select(fin, ty, x, self.fc(0.0, ty))
        k = self.intr("rint", ty, self.fop("fmul", ty, xs, self.fc(1 / math.pi, ty)))
        nk = self.ins(f"fneg {ty} {k}")
        r = xs
        for part in (_SINPI_F64 if f64 else _SINPI_F32):
            r = self.call(f"llvm.fma.{'f64' if f64 else 'f32'}", ty, [(ty, nk), (ty, self.fc(part, ty)), (ty, r)])
        ki = self.call(f"llvm.fptosi.sat.i64.{'f64' if f64 else 'f32'}", "i64", [(ty, k)])
        odd = self.conv("trunc", "i64", ki, "i1")
        big = self.fcmp("oge", ty, ax, self.fc(_SIN_BIG_F64 if f64 else _SIN_BIG_F32, ty))
        rb, oddb = self._sin_big64(xs) if f64 else self._sin_big32(xs)
        r = self.select(big, ty, rb, r)
        odd = self.select(big, "i1", oddb, odd)
        r2 = self.fop("fmul", ty, r, r)
        nmax = 12 if f64 else 7
        coefs = [(-1) ** j / math.factorial(2 * j + 1) for j in range(nmax - 1, 0, -1)]
        p = self.fop("fadd", ty, r, self.fop("fmul", ty, self.fop("fmul", ty, r, r2), self.horner(r2, coefs, ty)))
        res = self.select(odd, ty, self.ins(f"fneg {ty} {p}"), p)
        res = self.select(self.fcmp("oeq", ty, xs, self.fc(0.0, ty)), ty, xs, res)  # sin(-0.0) = -0.0
        return self.select(fin, ty, res, self.fc(math.nan, ty))

    def _sintab(self, j: str, off: int) -> str:
        """Entry j + off of the 1/pi window table (a private constant global; gathers in vector loops)."""
        self.mod.decls.setdefault("@caten_inv_pi", f"@caten_inv_pi = private unnamed_addr constant "
                                  f"[{len(_SINTAB)} x i64] [{', '.join(f'i64 {_int(v, 64)}' for v in _SINTAB)}]")
        ji = self.ins(f"add i64 {j}, {off}") if off else j
        return self.ins(f"load i64, ptr {self.ins(f'getelementptr inbounds i64, ptr @caten_inv_pi, i64 {ji}')}")

    def _sin_index(self, e1: str, ity: str) -> tuple[str, str]:
        """(table index as i64, shift c = (E-1) mod 8 as i64) from E-1."""
        j = self.ins(f"add {ity} {self.ins(f'ashr {ity} {e1}, 3')}, {_SINTAB_PAD}")
        j = self.intr("smin", ity, self.intr("smax", ity, j, "0"), str(_SINTAB_MAX))
        c = self.ins(f"and {ity} {e1}, 7")
        if ity != "i64":
            j, c = self.conv("zext", ity, j, "i64"), self.conv("zext", ity, c, "i64")
        return j, c

    def _sin_big32(self, x: str) -> tuple[str, str]:
        """f32 x -> (r, odd): R = (x/pi mod 4) * 2**62 mod 2**64 from the 24-bit mantissa times
        96 bits of 1/pi (error < 2 units of 2**-62); r = (R - round(R)) * pi, via f64."""
        bits = self.conv("bitcast", "float", x, "i32")
        be = self.ins(f"lshr i32 {self.ins(f'and i32 {bits}, 2147483647')}, 23")
        j, c = self._sin_index(self.ins(f"sub i32 {be}, 151"), "i32")
        m = self.conv("zext", "i32", self.ins(f"or i32 {self.ins(f'and i32 {bits}, 8388607')}, 8388608"), "i64")
        ms = self.ins(f"shl i64 {m}, {c}")
        g0, g1 = self._sintab(j, 0), self._sintab(j, 8)
        w0, w1 = self.ins(f"lshr i64 {g0}, 32"), self.ins(f"and i64 {g0}, 4294967295")
        w2 = self.ins(f"lshr i64 {g1}, 32")
        rr = self.ins(f"shl i64 {self.ins(f'mul i64 {ms}, {w0}')}, 32")
        rr = self.ins(f"add i64 {rr}, {self.ins(f'mul i64 {ms}, {w1}')}")
        p2 = self.ins(f"mul i64 {ms}, {w2}")
        rr = self.ins(f"add i64 {rr}, {self.ins(f'lshr i64 {p2}, 32')}")
        n = self.ins(f"lshr i64 {self.ins(f'add i64 {rr}, {1 << 61}')}, 62")
        fr = self.ins(f"sub i64 {rr}, {self.ins(f'shl i64 {n}, 62')}")
        rd = self.conv("sitofp", "i64", fr, "double")
        rd = self.fop("fmul", "double", rd, self.fc(math.pi * 2.0 ** -62, "double"))
        r = self.conv("fptrunc", "double", rd, "float")
        neg = self.icmp("slt", "i32", bits, "0")
        return self.select(neg, "float", self.ins(f"fneg float {r}"), r), self.conv("trunc", "i64", n, "i1")

    def _sin_big64(self, x: str) -> tuple[str, str]:
        """f64 x -> (r, odd): R = (x/pi mod 4) * 2**126 as 128 bits (hi, lo) from the 53-bit
        mantissa times 192 bits of 1/pi in 32-bit limbs (column sums in i64; error < 2 units)."""
        mask = "4294967295"
        bits = self.conv("bitcast", "double", x, "i64")
        be = self.ins(f"lshr i64 {self.ins(f'and i64 {bits}, {(1 << 63) - 1}')}, 52")
        j, c = self._sin_index(self.ins(f"sub i64 {be}, 1076"), "i64")
        m = self.ins(f"or i64 {self.ins(f'and i64 {bits}, {(1 << 52) - 1}')}, {1 << 52}")
        ms = self.ins(f"shl i64 {m}, {c}")
        mh, ml = self.ins(f"lshr i64 {ms}, 32"), self.ins(f"and i64 {ms}, {mask}")
        w = []
        for off in (0, 8, 16):
            g = self._sintab(j, off)
            w += [self.ins(f"lshr i64 {g}, 32"), self.ins(f"and i64 {g}, {mask}")]
        cols: dict[int, list[str]] = {q: [] for q in range(-1, 4)}  # column q has weight 2**(32q)
        for k, wk in enumerate(w):
            for limb, q in ((ml, 3 - k), (mh, 4 - k)):
                if q > 3 or (limb is mh and k == 0):
                    continue
                p = self.ins(f"mul i64 {limb}, {wk}")
                if q >= -1:
                    cols[q].append(self.ins(f"and i64 {p}, {mask}"))
                if -1 <= q + 1 <= 3:
                    cols[q + 1].append(self.ins(f"lshr i64 {p}, 32"))
        acc: dict[int, str] = {}
        carry = None
        for q in range(-1, 4):
            terms = cols[q] + ([carry] if carry else [])
            s = terms[0]
            for t in terms[1:]:
                s = self.ins(f"add i64 {s}, {t}")
            acc[q] = s
            carry = self.ins(f"lshr i64 {s}, 32")
        hi = self.ins(f"or i64 {self.ins(f'shl i64 {acc[3]}, 32')}, {self.ins(f'and i64 {acc[2]}, {mask}')}")
        lo = self.ins(f"or i64 {self.ins(f'shl i64 {acc[1]}, 32')}, {self.ins(f'and i64 {acc[0]}, {mask}')}")
        n = self.ins(f"lshr i64 {self.ins(f'add i64 {hi}, {1 << 61}')}, 62")
        fhi = self.ins(f"sub i64 {hi}, {self.ins(f'shl i64 {n}, 62')}")
        neg = self.icmp("slt", "i64", fhi, "0")
        nlo = self.ins(f"sub i64 0, {lo}")
        borrow = self.conv("zext", "i1", self.icmp("ne", "i64", lo, "0"), "i64")
        nhi = self.ins(f"sub i64 {self.ins(f'sub i64 0, {fhi}')}, {borrow}")
        mhi, mlo = self.select(neg, "i64", nhi, fhi), self.select(neg, "i64", nlo, lo)
        # |frac| * 2**126 = mhi * 2**64 + mlo as a double-double (exact but for < 2**-105 when
        # mhi >= 2**11), then times pi as a double-double: r to within ~0.5 ulp.
        d = "double"
        h = self.conv("sitofp", "i64", mhi, d)
        hi_err = self.ins(f"sub i64 {mhi}, {self.conv('fptosi', d, h, 'i64')}")
        e = self.conv("sitofp", "i64", hi_err, d)
        lo_d = self.conv("uitofp", "i64", mlo, d)
        rest = self.call("llvm.fma.f64", d, [(d, e), (d, self.fc(2.0 ** 64, d)), (d, lo_d)])
        h = self.fop("fmul", d, h, self.fc(2.0 ** 64, d))
        mh = self.fop("fadd", d, h, rest, "")
        ml = self.fop("fadd", d, self.fop("fsub", d, h, mh, ""), rest, "")
        p1, p2 = _PI_126
        rh = self.fop("fmul", d, mh, self.fc(p1, d), "")
        rl = self.call("llvm.fma.f64", d, [(d, mh), (d, self.fc(p1, d)), (d, self.ins(f"fneg double {rh}"))])
        rl = self.call("llvm.fma.f64", d, [(d, ml), (d, self.fc(p1, d)), (d, rl)])
        rl = self.call("llvm.fma.f64", d, [(d, mh), (d, self.fc(p2, d)), (d, rl)])
        r = self.fop("fadd", d, rh, rl, "")
        flip = self.ins(f"xor i1 {neg}, {self.icmp('slt', 'i64', bits, '0')}")
        return self.select(flip, "double", self.ins(f"fneg double {r}"), r), self.conv("trunc", "i64", n, "i1")

    def threefry(self, ctr: str, seed: int) -> str:
        k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
        ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
        c0 = self.conv("trunc", "i64", ctr, "i32")
        c1 = self.conv("trunc", "i64", self.ins(f"lshr i64 {ctr}, 32"), "i32")
        x0 = self.ins(f"add i32 {c0}, {_int(ks[0], 32)}")
        x1 = self.ins(f"add i32 {c1}, {_int(ks[1], 32)}")
        for r in range(20):
            x0 = self.ins(f"add i32 {x0}, {x1}")
            rot = self.call("llvm.fshl.i32", "i32", [("i32", x1), ("i32", x1), ("i32", str(_ROT[r % 8]))])
            x1 = self.ins(f"xor i32 {rot}, {x0}")
            if r % 4 == 3:
                i = r // 4 + 1
                x0 = self.ins(f"add i32 {x0}, {_int(ks[i % 3], 32)}")
                x1 = self.ins(f"add i32 {x1}, {_int((ks[(i + 1) % 3] + i) & 0xFFFFFFFF, 32)}")
        return x0

    # statements ------------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        for s in body:
            if isinstance(s, L.Parallel):
                self.parallel(s)
            elif isinstance(s, L.Loop):
                self.loop(s)
            elif isinstance(s, L.Store):
                self.store(s.buf, self.v(s.idx), self.v(s.value), s.value.dtype)
            elif isinstance(s, L.Acc):
                ptr = f"%a_{s.var}"
                if s.var not in self.accs:
                    self.allocas.append(f"  {ptr} = alloca {rty(s.dtype)}")
                    self.accs[s.var] = (ptr, s.dtype)
                self.emit(f"store {rty(s.dtype)} {self.v(s.init)}, ptr {ptr}")
            elif isinstance(s, L.SetAcc):
                ptr, dt = self.accs[s.var]
                self.emit(f"store {rty(dt)} {self.v(s.value)}, ptr {ptr}")
            elif isinstance(s, L.TileMM):
                self.tilemm(s)
            elif isinstance(s, L.MacroMM):
                args = [f"ptr %b_{b}" for b in (s.a, s.b, s.out)] + [f"i64 {self.v(x)}" for x in s.exprs()[:-1]]
                self.emit(f"call void @{self.mod.macromm(s)}({', '.join(args)}, i1 {self.v(s.beta)})")
            elif isinstance(s, _Call):
                self.emit(f"call void @{s.name}({', '.join(s.args)})")
            else:
                raise TypeError(s)

    def loop(self, s: L.Loop) -> None:
        ext = self.v(s.extent)
        pre = self.cur
        h, b, e = self.label("lh"), self.label("lb"), self.label("le")
        iv = f"%v_{s.var}"
        self.emit(f"br label %{h}")
        self.block(h)
        at = len(self.lines)
        self.lines.append(None)
        c = self.icmp("slt", "i64", iv, ext)
        self.emit(f"br i1 {c}, label %{b}, label %{e}")
        self.block(b)
        self.scopes.append({})
        self.stmts(s.body)
        self.scopes.pop()
        nxt = self.ins(f"add nuw nsw i64 {iv}, 1")
        latch = self.cur
        self.emit(f"br label %{h}" + (f", !llvm.loop {self.mod.cold_md()}" if s.hint == "cold" else ""))
        self.lines[at] = f"  {iv} = phi i64 [0, %{pre}], [{nxt}, %{latch}]"
        self.block(e)

    def parallel(self, s: L.Parallel) -> None:
        """Iterations on threads: the body becomes a function of its own; iterations 1.. start on
        pthreads (one that cannot start runs here), iteration 0 runs here, then all are joined."""
        free, bufs = _uses(s.body)
        free.discard(s.var)
        if any(v in self.accs or v == "?" for v in free):
            raise TypeError("a parallel loop body must not read enclosing accumulators")
        params = [("ptr", f"%b_{b}") for b in sorted(bufs)] + [("i64", f"%d_{d}") for d in self.dims]
        params += [("i64", f"%v_{v}") for v in sorted(free)] + [("i64", f"%v_{s.var}")]
        body, tramp = self.mod.fresh("par"), self.mod.fresh("par_thread")
        g = FnGen(self.mod, self.dims, self.defines)
        g.stmts(s.body)
        sig = ", ".join(f"{t} {'noalias ' if t == 'ptr' else ''}{n}" for t, n in params)
        self.mod.funcs.append(g.text(f"define internal void @{body}({sig}) #1 {{"))
        ctxty = f"[{len(params)} x i64]"
        t = FnGen(self.mod, self.dims, self.defines)
        vals = []
        for i, (ty, _) in enumerate(params):
            w = t.ins(f"load i64, ptr {t.ins(f'getelementptr inbounds {ctxty}, ptr %ctx, i64 0, i64 {i}')}")
            vals.append(f"ptr {t.conv('inttoptr', 'i64', w, 'ptr')}" if ty == "ptr" else f"i64 {w}")
        t.emit(f"call void @{body}({', '.join(vals)})")
        self.mod.funcs.append(t.text(f"define internal ptr @{tramp}(ptr %ctx) #1 {{", "ret ptr null"))
        self.mod.declare("pthread_create", "i32", ["ptr", "ptr", "ptr", "ptr"])
        self.mod.declare("pthread_join", "i32", ["i64", "ptr"])

        n, most = self.v(s.extent), s.most
        ctx, hs, ok = f"%{tramp}_ctx", f"%{tramp}_h", f"%{tramp}_ok"
        self.allocas += [f"  {ctx} = alloca [{most} x {ctxty}], align 8", f"  {hs} = alloca [{most} x i64], align 8",
                         f"  {ok} = alloca [{most} x i1], align 1"]
        words = [self.conv("ptrtoint", "ptr", v, "i64") if ty == "ptr" else v for ty, v in params[:-1]]

        def slot(arr: str, ty: str, i: str) -> str:
            return self.ins(f"getelementptr inbounds [{most} x {ty}], ptr {arr}, i64 0, i64 {i}")

        def each(first: str, emit_body) -> None:
            pre = self.cur
            h, b, e = self.label("ph"), self.label("pb"), self.label("pe")
            i, i1 = self.tmp(), self.tmp()
            self.emit(f"br label %{h}")
            self.block(h)
            at = len(self.lines)
            self.lines.append(None)
            self.emit(f"br i1 {self.icmp('slt', 'i64', i, n)}, label %{b}, label %{e}")
            self.block(b)
            emit_body(i)
            self.emit(f"{i1} = add nuw nsw i64 {i}, 1")
            self.lines[at] = f"  {i} = phi i64 [{first}, %{pre}], [{i1}, %{self.cur}]"
            self.emit(f"br label %{h}")
            self.block(e)

        def spawn(i: str) -> None:
            c = slot(ctx, ctxty, i)
            for j, w in enumerate(words + [i]):
                self.emit(f"store i64 {w}, ptr {self.ins(f'getelementptr inbounds {ctxty}, ptr {c}, i64 0, i64 {j}')}")
            hp = slot(hs, "i64", i)
            rc = self.ins(f"call i32 @pthread_create(ptr {hp}, ptr null, ptr @{tramp}, ptr {c})")
            started = self.icmp("eq", "i32", rc, "0")
            self.emit(f"store i1 {started}, ptr {slot(ok, 'i1', i)}")
            run, go = self.label("pr"), self.label("pg")
            self.emit(f"br i1 {started}, label %{go}, label %{run}")
            self.block(run)
            self.emit(f"call ptr @{tramp}(ptr {c})")
            self.emit(f"br label %{go}")
            self.block(go)

        def join(i: str) -> None:
            started = self.ins(f"load i1, ptr {slot(ok, 'i1', i)}")
            jn, go = self.label("pj"), self.label("pg")
            self.emit(f"br i1 {started}, label %{jn}, label %{go}")
            self.block(jn)
            h = self.ins(f"load i64, ptr {slot(hs, 'i64', i)}")
            self.emit(f"call i32 @pthread_join(i64 {h}, ptr null)")
            self.emit(f"br label %{go}")
            self.block(go)

        each("1", spawn)
        self.emit(f"call void @{body}({', '.join(f'{ty} {v}' for ty, v in params[:-1])}, i64 0)")
        each("1", join)

    def tilemm(self, s: L.TileMM) -> None:
        """The micro-kernel: rows accumulators of <cols x T> carried in phis through the k loop,
        one vector load of B and one broadcast of A per row and k, then full-tile vector stores
        (or, for an edge tile, a spill to a stack tile and scalar stores of the valid part)."""
        ty, rows, cols = rty(s.dtype), s.rows, s.cols
        vt = f"<{cols} x {ty}>"
        fma = f"llvm.fma.v{cols}{'f64' if ty == 'double' else 'f32'}"
        self.mod.declare(fma, vt, [vt, vt, vt])
        aoff, boff, kext = self.v(s.aoff), self.v(s.boff), self.v(s.kext)
        pre = self.cur
        h, b, e = self.label("th"), self.label("tb"), self.label("te")
        k, k1 = self.tmp(), self.tmp()
        accs = [self.tmp() for _ in range(rows)]
        news = [self.tmp() for _ in range(rows)]
        self.emit(f"br label %{h}")
        self.block(h)
        self.emit(f"{k} = phi i64 [0, %{pre}], [{k1}, %{b}]")
        for a, nw in zip(accs, news):
            self.emit(f"{a} = phi {vt} [zeroinitializer, %{pre}], [{nw}, %{b}]")
        c = self.icmp("slt", "i64", k, kext)
        self.emit(f"br i1 {c}, label %{b}, label %{e}")
        self.block(b)
        bi = self.ins(f"add i64 {self.ins(f'mul i64 {k}, {cols}')}, {boff}")
        bv = self.ins(f"load {vt}, ptr {self.ins(f'getelementptr inbounds {ty}, ptr %b_{s.b}, i64 {bi}')}, align 4")
        ai = self.ins(f"add i64 {self.ins(f'mul i64 {k}, {rows}')}, {aoff}")
        ap = self.ins(f"getelementptr inbounds {ty}, ptr %b_{s.a}, i64 {ai}")
        for r in range(rows):
            pr = ap if r == 0 else self.ins(f"getelementptr inbounds {ty}, ptr {ap}, i64 {r}")
            av = self.ins(f"load {ty}, ptr {pr}, align 4")
            ins = self.ins(f"insertelement {vt} poison, {ty} {av}, i32 0")
            sp = self.ins(f"shufflevector {vt} {ins}, {vt} poison, <{cols} x i32> zeroinitializer")
            self.emit(f"{news[r]} = call {vt} @{fma}({vt} {sp}, {vt} {bv}, {vt} {accs[r]})")
        self.emit(f"{k1} = add nuw nsw i64 {k}, 1")
        self.emit(f"br label %{h}, !llvm.loop {self.mod.unroll_md(4)}")
        self.block(e)
        ooff, ostr, rv, cv, beta = (self.v(x) for x in (s.ooff, s.ostride, s.rvalid, s.cvalid, s.beta))
        full = self.ins(f"and i1 {self.icmp('eq', 'i64', rv, str(rows))}, {self.icmp('eq', 'i64', cv, str(cols))}")
        lf, lp, lj = self.label("tf"), self.label("tp"), self.label("tj")
        self.emit(f"br i1 {full}, label %{lf}, label %{lp}")
        self.block(lf)
        for r, a in enumerate(accs):
            oi = self.ins(f"add i64 {ooff}, {self.ins(f'mul i64 {ostr}, {r}')}")
            op = self.ins(f"getelementptr inbounds {ty}, ptr %b_{s.out}, i64 {oi}")
            old = self.ins(f"load {vt}, ptr {op}, align 4")
            val = self.select(beta, vt, self.fop("fadd", vt, old, a, ""), a)
            self.emit(f"store {vt} {val}, ptr {op}, align 4")
        self.emit(f"br label %{lj}")
        self.block(lp)
        tname = f"{s.var}_tile"
        self.allocas.append(f"  %b_{tname} = alloca [{rows * cols} x {ty}], align 64")
        for r, a in enumerate(accs):
            tp = self.ins(f"getelementptr inbounds {ty}, ptr %b_{tname}, i64 {r * cols}")
            self.emit(f"store {vt} {a}, ptr {tp}, align 4")
        rvar, cvar = f"{s.var}_er", f"{s.var}_ec"
        oidx = L.iadd(s.ooff, L.iadd(L.imul(L.var(rvar), s.ostride), L.var(cvar)))
        tv = L.load(tname, L.iadd(L.imul(L.var(rvar), L.const(cols)), L.var(cvar)), s.dtype)
        val = L.alu(Op.WHERE, s.dtype, s.beta, L.alu(Op.ADD, s.dtype, L.load(s.out, oidx, s.dtype), tv), tv)
        self.scopes.append({})
        self.stmts([L.Loop(rvar, s.rvalid, [L.Loop(cvar, s.cvalid, [L.Store(s.out, oidx, val)], "cold")], "cold")])
        self.scopes.pop()
        self.emit(f"br label %{lj}")
        self.block(lj)

    def text(self, header: str, ret: str = "ret void") -> str:
        body = [ln for ln in self.lines if ln is not None]
        return "\n".join([header, "entry:", *self.allocas, *self.entry, *body, "  " + ret, "}"])


class _Call:
    """A call of an outlined stage (renderer-private statement)."""

    def __init__(self, name: str, args: list[str]):
        self.name, self.args = name, args


def _uses(stmts: list) -> tuple[set[str], set[str]]:
    """The variables a statement list reads but does not bind (loop counters, accumulators),
    and the buffers it loads or stores."""
    used: set[str] = set()
    bound: set[str] = set()
    bufs: set[str] = set()
    seen: set[int] = set()

    def x(e: X) -> None:
        stack = [e]
        while stack:
            e = stack.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if e.op == "var":
                used.add(e.arg)
            elif e.op == "load":
                bufs.add(e.arg)
            stack.extend(e.src)

    def walk(ss: list) -> None:
        for s in ss:
            if isinstance(s, L.Loop):
                bound.add(s.var)
                x(s.extent)
                walk(s.body)
            elif isinstance(s, L.Store):
                bufs.add(s.buf)
                x(s.idx)
                x(s.value)
            elif isinstance(s, L.Acc):
                bound.add(s.var)
                x(s.init)
            elif isinstance(s, L.SetAcc):
                used.add(s.var)
                x(s.value)
            elif isinstance(s, L.TileMM):
                bufs.update((s.a, s.b, s.out))
                for e in (s.kext, s.aoff, s.boff, s.ooff, s.ostride, s.rvalid, s.cvalid, s.beta):
                    x(e)
            elif isinstance(s, L.MacroMM):
                bufs.update((s.a, s.b, s.out))
                for e in s.exprs():
                    x(e)
            else:
                used.add("?")
    walk(stmts)
    return used - bound, bufs


def _free_vars(stmts: list) -> set[str]:
    return _uses(stmts)[0]


class ModuleGen:
    def __init__(self, triple: str, layout: str, cpu: str, features: str, vector_bits: int = 512):
        self.triple, self.layout, self.cpu, self.features = triple, layout, cpu, features
        self.vector_bits = vector_bits
        self.decls: dict[str, str] = {}
        self.funcs: list[str] = []
        self.mds: list[str] = []
        self.md_props: dict[str, int] = {}
        self.nfresh = 0
        self.shared: set[str] = set()

    def cold_md(self) -> str:
        """Loop metadata: neither vectorize nor unroll (cold or tiny loops; saves compile time)."""
        return self._loop_md('!{!"llvm.loop.vectorize.enable", i1 false}', '!{!"llvm.loop.unroll.disable"}')

    def unroll_md(self, count: int) -> str:
        """Loop metadata: unroll `count` times (the pipeline unrolls only loops that ask)."""
        return self._loop_md(f'!{{!"llvm.loop.unroll.count", i32 {count}}}')

    def _loop_md(self, *props: str) -> str:
        ids = []
        for p in props:
            if p not in self.md_props:
                self.md_props[p] = len(self.mds)
                self.mds.append(f"!{len(self.mds)} = {p}")
            ids.append(f"!{self.md_props[p]}")
        n = len(self.mds)
        self.mds.append(f"!{n} = distinct !{{!{n}, {', '.join(ids)}}}")
        return f"!{n}"

    def macromm(self, s: L.MacroMM) -> str:
        """The function running a packed block's tiles, defined once per module for each tile
        shape: `(ptr a, ptr b, ptr out, i64 aoff, boff, ooff, ostride, ni, nj, mrem, nrem, kext, i1 beta)`."""
        name = f"caten_tiles_{s.dtype.name}_{s.rows}x{s.cols}_{s.astep}_{s.bstep}"
        if name not in self.shared:
            self.shared.add(name)
            names = ("kext", "aoff", "boff", "ooff", "ostride", "ni", "nj", "mrem", "nrem")
            v = {n: L.var(n) for n in names}
            gen = L.MacroMM("mm", s.dtype, s.rows, s.cols, v["kext"], "A", v["aoff"], s.astep, "B", v["boff"],
                            s.bstep, "O", v["ooff"], v["ostride"], v["ni"], v["nj"], v["mrem"], v["nrem"],
                            L.var("beta", T.bool_))
            g = FnGen(self, [], {})
            g.stmts(gen.expand())
            params = [f"ptr noalias %b_{b}" for b in "ABO"] + [f"i64 %v_{n}" for n in names] + ["i1 %v_beta"]
            self.funcs.append(g.text(f"define internal void @{name}({', '.join(params)}) #1 {{"))
        return name

    def oob_record(self, slot: str) -> int:
        """The bounds-checked mode's error record `slot` and its recorder, defined once per module;
        returns the number of the branch-weight metadata that marks a failing check unlikely."""
        if slot not in self.shared:
            self.shared.add(slot)
            self.funcs.append(f"@{slot} = global [5 x i64] zeroinitializer, align 8")
        if "caten_oob_record" not in self.shared:
            self.shared.add("caten_oob_record")
            from caten.render.checks import LLVM_RECORDER

            self.funcs.append(LLVM_RECORDER)
            self.oob_md = len(self.mds)
            self.mds.append(f'!{self.oob_md} = !{{!"branch_weights", i32 1048576, i32 1}}')
        return self.oob_md

    def fresh(self, hint: str) -> str:
        """A function name not yet used in this module."""
        self.nfresh += 1
        return f"caten_{hint}{self.nfresh}"

    def declare(self, name: str, ret: str, args: Sequence[str]) -> None:
        if name not in self.decls:
            self.decls[name] = f"declare {ret} @{name}({', '.join(args)})"

    def kernel(self, k: L.Kernel, defines: dict[str, D.Dim]) -> None:
        """One function per kernel; the stages inside its shared outer loops are outlined into
        functions of their own (smaller functions: much faster register allocation and LSR)."""
        params = [f"ptr noalias %b_{p.name}" for p in k.params] + [f"i64 %d_{d}" for d in k.dims]
        args = [f"ptr %b_{p.name}" for p in k.params] + [f"i64 %d_{d}" for d in k.dims]
        chain: list[L.Loop] = []
        body = k.body
        while len(body) == 1 and type(body[0]) is L.Loop:
            chain.append(body[0])
            body = body[0].body
        if len(body) >= 2:
            outer = [lp.var for lp in chain]
            new: list = []
            for i, st in enumerate(body):
                if isinstance(st, (L.Loop, L.TileMM, L.MacroMM)) and _free_vars([st]) <= set(outer):
                    name = f"{k.name}__s{i}"
                    g = FnGen(self, k.dims, defines)
                    g.stmts([st])
                    ps = params + [f"i64 %v_{v}" for v in outer]
                    self.funcs.append(g.text(f"define internal void @{name}({', '.join(ps)}) #1 {{"))
                    new.append(_Call(name, args + [f"i64 %v_{v}" for v in outer]))
                else:
                    new.append(st)
            for lp in reversed(chain):
                new = [L.Loop(lp.var, lp.extent, new)]
            body = new
        else:
            body = k.body
        g = FnGen(self, k.dims, defines)
        g.stmts(body)
        self.funcs.append(g.text(f"define internal void @{k.name}({', '.join(params)}) #1 {{"))

    def text(self) -> str:
        attrs = f'attributes #0 = {{ nounwind "prefer-vector-width"="{self.vector_bits}" "target-cpu"="{self.cpu}"'
        if self.features:
            attrs += f' "target-features"="{self.features}"'
        attrs += " }"
        attrs += "\n" + attrs.replace("#0 = { nounwind", "#1 = { noinline nounwind", 1)
        head = [f'target datalayout = "{self.layout}"', f'target triple = "{self.triple}"', ""]
        return "\n".join(head + self.funcs + [""] + list(self.decls.values()) + ["", attrs, ""] + self.mds + [""])


def entry_functions(mod: ModuleGen, name: str, sched, kernels: list[L.Kernel], defines: dict[str, D.Dim]) -> None:
    """`NAME__impl(in..., out..., arena, dims...)` and the C ABI `int32_t NAME(in..., out..., dims...)`."""
    prog = sched.program
    ins = [f"in{i}" for i in range(len(prog.inputs))]
    outs = [f"out{i}" for i in range(len(prog.outputs))]
    g = FnGen(mod, prog.dims, defines)
    ptrs = {b: f"%b_{b}" for b in ins + outs}
    for b in sched.buffers.values():
        if b.role == "temp":
            off = g.dimval(b.offset)
            ptrs[b.name] = g.ins(f"getelementptr inbounds i8, ptr %arena, i64 {off}")
    for k in kernels:
        args = [f"ptr {ptrs[p.name]}" for p in k.params] + [f"i64 %d_{d}" for d in k.dims]
        g.emit(f"call void @{k.name}({', '.join(args)})")
    params = [f"ptr %b_{b}" for b in ins + outs] + ["ptr %arena"] + [f"i64 %d_{d}" for d in prog.dims]
    mod.funcs.append(g.text(f"define void @{name}__impl({', '.join(params)}) #0 {{"))

    g = FnGen(mod, prog.dims, defines)
    fail = None
    for c in prog.constraints:
        ne = g.icmp("ne", "i64", g.dimval(c.lhs), g.dimval(c.rhs))
        fail = ne if fail is None else g.ins(f"or i1 {fail}, {ne}")
    if fail is not None:
        g.emit(f"br i1 {fail}, label %bad, label %ok")
        g.block("bad")
        g.emit("ret i32 1")
        g.block("ok")
    size = g.dimval(sched.arena_size)
    mod.declare("malloc", "ptr", ["i64"])
    mod.declare("free", "void", ["ptr"])
    a = g.ins(f"call ptr @malloc(i64 {g.ins(f'add i64 {size}, 64')})")
    g.emit(f"br i1 {g.icmp('eq', 'ptr', a, 'null')}, label %nomem, label %mem")  # malloc failed: 2, no crash
    g.block("nomem")
    g.emit("ret i32 2")
    g.block("mem")
    ai = g.ins(f"ptrtoint ptr {a} to i64")
    pad = g.ins(f"and i64 {g.ins(f'sub i64 0, {ai}')}, 63")
    aligned = g.ins(f"getelementptr inbounds i8, ptr {a}, i64 {pad}")
    args = [f"ptr %b_{b}" for b in ins + outs] + [f"ptr {aligned}"] + [f"i64 %d_{d}" for d in prog.dims]
    g.emit(f"call void @{name}__impl({', '.join(args)})")
    g.emit(f"call void @free(ptr {a})")
    params = [f"ptr %b_{b}" for b in ins + outs] + [f"i64 %d_{d}" for d in prog.dims]
    mod.funcs.append(g.text(f"define i32 @{name}({', '.join(params)}) #0 {{", "ret i32 0"))


def c_type(dt: DType) -> str:
    if dt.is_bool:
        return "bool"
    if dt.is_int:
        return f"{'u' if dt.kind == 'uint' else ''}int{dt.bits}_t"
    return {"f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double"}[dt.name]


def c_header(progs, names: Sequence[str], library: str | None = None) -> str:
    """One C header declaring the entry of every program (LANGUAGE.md section 8). Its include
    guard derives from the library's name (else its entries' names), so the headers of several
    caten libraries can be included in one C file."""
    guard = f"CATEN_{re.sub(r'[^A-Za-z0-9]', '_', library or '_'.join(names)).upper()}_H"
    lines = [f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>", "#include <stdint.h>",
             "#ifdef __cplusplus", 'extern "C" {', "#endif"]
    for prog, name in zip(progs, names):
        args = [f"const {c_type(s.dtype)} *{s.name}" for s in prog.inputs]
        args += [f"{c_type(s.dtype)} *{s.name}" for s in prog.outputs]
        args += [f"int64_t {d}" for d in prog.dims]
        lines.append(f"/* {prog.name}: {' '.join(map(str, prog.inputs))} -> {' '.join(map(str, prog.outputs))}"
                     " (f16/bf16 as uint16_t bits). Returns 0, 1 if a where-constraint fails, 2 if its scratch memory"
                     " cannot be allocated. */")
        lines.append(f"int32_t {name}({', '.join(args) or 'void'});")
    lines += ["#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


__all__ = ["ModuleGen", "FnGen", "entry_functions", "c_header", "D", "T"]
