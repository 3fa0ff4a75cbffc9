"""Typed constructors for the loop-IR expressions the decompose pass builds.

The numerics modules read like the LLVM IR they replace (`fma(a, b, c)`, `shr(x, 3)`), while
each helper picks the loop-IR op and dtype; constants take the operand's dtype, so a literal is
written once as a Python number. Only primitive ops come out of here, the ones every renderer
is to spell (caten.loopir's docstring lists them).
"""

from __future__ import annotations

import numpy as np

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.loopir import X


def c(v: float | int, dt: DType) -> X:
    """A constant of dtype dt: floats rounded to dt (f32) as the renderers do, ints wrapped to dt."""
    if dt.is_float:
        v = float(np.float32(v)) if dt.bits == 32 else float(v)
    elif dt.is_int:
        v = int(v) & ((1 << dt.bits) - 1)
        if dt.kind == "int" and v >= 1 << (dt.bits - 1):
            v -= 1 << dt.bits
    return X.make("const", dt, (), v)


def _x(v: X | float | int, dt: DType) -> X:
    return v if isinstance(v, X) else c(v, dt)


def _bin(op: Op, a: X, b: X | float | int) -> X:
    return X.make(op, a.dtype, (a, _x(b, a.dtype)))


def add(a: X, b: X | float | int) -> X:
    return _bin(Op.ADD, a, b)


def sub(a: X, b: X | float | int) -> X:
    """a - b as a + (-b): the same IEEE result (both round the exact difference)."""
    return add(a, neg(_x(b, a.dtype)))


def mul(a: X, b: X | float | int) -> X:
    return _bin(Op.MUL, a, b)


def fdiv(a: X, b: X | float | int) -> X:
    return _bin(Op.FDIV, a, b)


def neg(a: X) -> X:
    if a.op == "const":
        return c(-a.arg, a.dtype)
    return X.make(Op.NEG, a.dtype, (a,))


def and_(a: X, b: X | int) -> X:
    return _bin(Op.AND, a, b)


def or_(a: X, b: X | int) -> X:
    return _bin(Op.OR, a, b)


def xor(a: X, b: X | int) -> X:
    return _bin(Op.XOR, a, b)


def not_(a: X) -> X:
    return X.make(Op.NOT, a.dtype, (a,))


def lt(a: X, b: X | float | int) -> X:
    """a < b: ordered for floats, signed or unsigned by the dtype for integers."""
    return X.make(Op.CMPLT, T.bool_, (a, _x(b, a.dtype)))


def gt(a: X, b: X | float | int) -> X:
    return X.make(Op.CMPLT, T.bool_, (_x(b, a.dtype), a))


def ne(a: X, b: X | float | int) -> X:
    """a != b, unordered (true when either is nan)."""
    return X.make(Op.CMPNE, T.bool_, (a, _x(b, a.dtype)))


def eq(a: X, b: X | float | int) -> X:
    """a == b, ordered (false when either is nan)."""
    return not_(ne(a, b))


def isnan(a: X) -> X:
    return ne(a, a)


def where(cond: X, a: X | float | int, b: X | float | int) -> X:
    dt = a.dtype if isinstance(a, X) else b.dtype  # type: ignore[union-attr]
    return X.make(Op.WHERE, dt, (cond, _x(a, dt), _x(b, dt)))


def cast(a: X, dt: DType) -> X:
    """CAST: int<->int truncates or extends by the source's signedness, float->int truncates
    toward zero (callers keep the value in range), int->float rounds to nearest."""
    return a if a.dtype == dt else X.make(Op.CAST, dt, (a,))


def ftoi(a: X, dt: DType) -> X:
    """A float whose truncation toward zero is in dt's range, converted (one instruction; CAST
    saturates and maps nan to 0 in primitives: caten.lower.numerics_narrow)."""
    return X.make("ftoi", dt, (a,))


def bitcast(a: X, dt: DType) -> X:
    return a if a.dtype == dt else X.make("bitcast", dt, (a,))


def shl(a: X, n: X | int) -> X:
    return X.make("shl", a.dtype, (a, _x(n, a.dtype)))


def shr(a: X, n: X | int) -> X:
    """Right shift: arithmetic for signed dtypes, logical for unsigned ones."""
    return X.make("shr", a.dtype, (a, _x(n, a.dtype)))


def tdiv(a: X, b: X) -> X:
    """Truncating integer division; the caller guarantees b != 0 and no INT_MIN / -1."""
    return X.make("idiv", a.dtype, (a, b))


def trem(a: X, b: X) -> X:
    """Truncating integer remainder (the dividend's sign), under tdiv's guarantees."""
    return X.make("imod", a.dtype, (a, b))


def fma(a: X, b: X | float, d: X | float) -> X:
    """a * b + d rounded once."""
    return X.make("fma", a.dtype, (a, _x(b, a.dtype), _x(d, a.dtype)))


def floor(a: X) -> X:
    return X.make("floor", a.dtype, (a,))


def rint(a: X) -> X:
    """Round to the nearest integer, ties to even."""
    return X.make("rint", a.dtype, (a,))


def fmod(a: X, b: X) -> X:
    return X.make("fmod", a.dtype, (a, b))


def lut(table: tuple[int, ...], dt: DType, idx: X) -> X:
    """table[idx] from a constant table of dt values (idx an in-range i64)."""
    return X.make("lut", dt, (idx,), table)


def uint(dt: DType) -> DType:
    """The unsigned integer dtype as wide as float or int dtype dt (for bitcasts)."""
    return {16: T.u16, 32: T.u32, 64: T.u64}[dt.bits]


def sint(dt: DType) -> DType:
    return {16: T.i16, 32: T.i32, 64: T.i64}[dt.bits]


def fabs(x: X) -> X:
    """|x| by clearing the sign bit (exact for every value, nan included)."""
    u = uint(x.dtype)
    return bitcast(and_(bitcast(x, u), (1 << (x.dtype.bits - 1)) - 1), x.dtype)


def signed_zero(x: X) -> X:
    """copysign(0, x): a zero with x's sign bit."""
    u = uint(x.dtype)
    return bitcast(and_(bitcast(x, u), 1 << (x.dtype.bits - 1)), x.dtype)


def horner(x: X, coefs: tuple[float, ...] | list[float]) -> X:
    """coefs[0]*x**(n-1) + ... + coefs[-1], one fused multiply-add a step."""
    acc = c(coefs[0], x.dtype)
    for k in coefs[1:]:
        acc = fma(acc, x, k)
    return acc
