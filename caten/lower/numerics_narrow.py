"""Conversions with caten's semantics, written once in primitives: rounding to f16/bf16 and the
saturating float->int cast.

Values of f16/bf16 live in f32 registers and are rounded to their dtype after every op that can
leave the dtype's grid (caten.loopir). Rounding is to nearest, ties to even, on the f32
register's bits: bf16 keeps the top 16 bits; f16 keeps 10 mantissa bits in its normal range,
multiples of 2^-24 below it (a scale by 2^24, `rint`, and back: each step exact), and overflows to
inf from 65520 on. A NaN stays a quiet NaN. The result is a `bitcast` of u32 bits to the narrow
dtype: the bits of its f32 register.

Float->int: truncation toward zero; NaN and +-inf give 0; finite values beyond the 64-bit range
saturate (to i64 for signed dtypes; unsigned dtypes take a negative value's saturated i64 bits and
saturate at 2^64 - 1 above); narrower integers then wrap, as an int->int CAST does. The operand of
`ftoi` is always in range, so no target sees an undefined conversion.
"""

from __future__ import annotations

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.loopir import X
from caten.lower import xops as O

NARROW = (T.f16, T.bf16)
_U = T.u32


def register(v: X) -> X:
    """v typed as its register (an f16/bf16 value as the f32 it already is)."""
    return O.cast(v, L.register(v.dtype))


def round_to(v: X, dt: DType) -> X:
    """f32 value v rounded to f16 or bf16 (to nearest, ties to even)."""
    v = register(v)
    b = O.bitcast(v, _U)
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
