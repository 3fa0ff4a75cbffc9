"""Conversions with caten's semantics, written once in primitives: rounding to f16/bf16/float8
and the saturating float->int cast.

Values of f16/bf16/float8 live in f32 registers and are rounded to their dtype after every op
that can leave the dtype's grid (caten.loopir). Rounding is to nearest, ties to even, on the f32
register's bits: bf16 keeps the top 16 bits; f16 keeps 10 mantissa bits in its normal range,
multiples of 2^-24 below it (a scale by 2^24, `rint`, and back: each step exact), and overflows to
inf from 65520 on. A float8 format (caten.ir.dtypes.MINIFLOAT) is rounded the same way, and a
value that rounds past its largest finite value overflows as ml_dtypes does: to +-inf in e5m2, to
nan in the formats without inf; the fnuz formats have no -0 (a zero is +0). A CAST to float8 in
the program (`saturating`, which the kernel lowering calls) is ONNX Cast's saturate=1 instead:
beyond the range, +-inf included, it gives +-max. A NaN stays a quiet NaN. The result is a
`bitcast` of u32 bits to the narrow dtype: the bits of its f32 register.

Float->int: truncation toward zero; NaN and +-inf give 0; finite values beyond the 64-bit range
saturate (to i64 for signed dtypes; unsigned dtypes take a negative value's saturated i64 bits and
saturate at 2^64 - 1 above); narrower integers then wrap, as an int->int CAST does. The operand of
`ftoi` is always in range, so no target sees an undefined conversion.

i4/u4 (`wrap4`): a target without native 4-bit integers (C-style: an i4 lives in an 8-bit register)
gets every i4/u4 op result wrapped to 4 bits, two's complement, by the pass, as i8 wraps at 8 bits;
a float->i4 CAST wraps the float->i64 conversion above, as a float->i8 CAST does.
"""

from __future__ import annotations

import numpy as np

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower import xops as O

NARROW = T.NARROW
_U = T.u32


def register(v: X) -> X:
    """v typed as its register (an f16/bf16/float8 value as the f32 it already is)."""
    return O.cast(v, L.register(v.dtype))


def round_to(v: X, dt: DType) -> X:
    """f32 value v rounded to f16, bf16 or a float8 dtype (to nearest, ties to even)."""
    v = register(v)
    b = O.bitcast(v, _U)
    if dt in T.MINIFLOAT:
        return _round_f8(b, dt)
    if dt == T.bf16:
        lsb = O.and_(O.shr(b, 16), 1)
        r = O.and_(O.add(b, O.add(lsb, 0x7FFF)), 0xFFFF0000)
        r = O.where(O.isnan(v), O.and_(O.or_(b, 0x400000), 0xFFFF0000), r)
        return O.bitcast(r, dt)
    sign = O.and_(b, 0x80000000)
    a = O.xor(b, sign)  # |v|'s bits
    normal = O.and_(O.add(a, O.add(O.and_(O.shr(a, 13), 1), 0xFFF)), 0xFFFFE000)
    tiny = O.bitcast(O.mul(O.rint(O.mul(O.bitcast(a, T.f32), 2.0 ** 24)), 2.0 ** -24), _U)
    r = O.where(O.lt(a, 0x38800000), tiny, normal)  # below 2^-14: f16's subnormal grid
    r = O.where(O.lt(r, 0x47800000), r, 0x7F800000)  # 65520 and up (inf too) round to inf
    r = O.where(O.gt(a, 0x7F800000), O.or_(a, 0x400000), r)  # NaN
    return O.bitcast(O.or_(r, sign), dt)


def _f32_bits(v: float) -> int:
    return int(np.array(v, np.float32).view(np.uint32))


def _round_f8(b: X, dt: DType) -> X:
    """The module docstring's float8 rounding, on the f32 bits b of a value."""
    f = T.MINIFLOAT[dt]
    sh = 23 - f.man  # the f32 mantissa bits the format drops
    sign = O.and_(b, 0x80000000)
    a = O.xor(b, sign)  # |v|'s bits
    normal = O.and_(O.add(a, O.add(O.and_(O.shr(a, sh), 1), (1 << (sh - 1)) - 1)), 0xFFFFFFFF ^ ((1 << sh) - 1))
    lo = f.bias + f.man - 1  # below the smallest normal: multiples of 2^-lo, by a scale, `rint`, and back
    tiny = O.bitcast(O.mul(O.rint(O.mul(O.bitcast(a, T.f32), 2.0 ** lo)), 2.0 ** -lo), _U)
    r = O.where(O.lt(a, _f32_bits(2.0 ** (1 - f.bias))), tiny, normal)
    r = O.where(O.gt(r, _f32_bits(f.max)), 0x7F800000 if f.inf else 0x7FC00000, r)  # past the largest finite
    r = O.where(O.gt(a, 0x7F800000), 0x7FC00000, r)  # NaN
    if f.fnuz:  # no -0; the one nan has no sign either
        sign = O.where(O.eq(r, 0), 0, O.where(O.eq(r, 0x7FC00000), 0, sign))
    return O.bitcast(O.or_(r, sign), dt)


def saturating(x: X, dt: DType) -> X:
    """A program's CAST of x to dt: for a float8 dt, ONNX Cast's saturate=1 (x through f32,
    clamped to +-max, inf too, then the CAST's rounding, which no longer overflows); otherwise
    the loop IR's CAST, whose narrow rounding the decompose pass writes."""
    f = T.MINIFLOAT.get(dt)
    if f is None or x.dtype == dt:
        return O.cast(x, dt)
    v = O.cast(x, T.f32)
    return O.cast(O.where(O.gt(v, f.max), f.max, O.where(O.lt(v, -f.max), -f.max, v)), dt)


# i4/u4 ops whose result stays in the 4-bit range when their operands are in it
KEEPS_INT4 = ("load", "const", "var", "masked", Op.WHERE, Op.MAX, Op.AND, Op.OR, Op.XOR)


def wrap4(v: X) -> X:
    """i4/u4 value v (held in a wider register) wrapped to its 4 bits: i4 sign-extends the low
    nibble ((v << 4) >> 4 in the 8-bit register), u4 keeps it."""
    return O.shr(O.shl(v, 4), 4) if v.dtype.kind == "int" else O.and_(v, 15)


def float_to_int(x: X, dt: DType) -> X:
    """CAST of float x to integer dtype dt (the module docstring's semantics)."""
    x = register(x)
    x = O.where(O.eq(O.add(x, O.neg(x)), 0.0), x, 0.0)  # x - x is 0 unless x is nan or +-inf
    top = 2.0 ** 63
    inside = O.and_(O.lt(x, top), O.not_(O.lt(x, -top)))
    s = O.ftoi(O.where(inside, x, 0.0), T.i64)
    s = O.where(O.lt(x, -top), -(1 << 63), O.where(O.lt(x, top), s, (1 << 63) - 1))
    if dt.kind == "uint":
        utop = 2.0 ** 64
        pos = O.and_(O.lt(x, utop), O.not_(O.lt(x, 0.0)))
        u = O.where(O.lt(x, utop), O.ftoi(O.where(pos, x, 0.0), T.u64), (1 << 64) - 1)
        s = O.where(O.lt(x, 0.0), O.bitcast(s, T.u64), u)
    return O.cast(s, dt)
