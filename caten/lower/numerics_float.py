"""EXP2, LOG2, float IDIV/MOD and NaN-propagating MAX written in primitive loop-IR ops.

Ported from the LLVM renderer's inline code (same constants, same operation order), so the
results are bit for bit what caten's llvm runtime computed before. Where that code let LLVM
contract a multiply into the add that uses it (`contract` flags: LLVM fuses them into an FMA on
a CPU that has one), the port writes the `fma` explicitly: the result no longer depends on the
host CPU. Each function takes and returns f32 or f64 expressions; f16/bf16 are widened by the
pass (caten.lower.decompose), as the renderers compute them in f32.
"""

from __future__ import annotations

import math

from caten.ir import dtypes as T
from caten.loopir import X
from caten.lower import xops as O

EXP2_F32 = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
            2.402264791363012e-1, 6.931472028550421e-1)
EXP2_F64 = tuple(math.log(2) ** k / math.factorial(k) for k in range(13, 0, -1))
LOG2_F64 = tuple(2.0 / (2 * k + 1) for k in range(10, -1, -1))  # 2 atanh(s) / s in s**2


def exp2(x: X) -> X:
    """2**x = 2**n * 2**f, n = round(x), |f| <= 1/2: a polynomial for 2**f - 1, and 2**n as two
    exponent-field scalings (n/2 each, so 2**-1080 and 2**1024 both reach their subnormal/inf)."""
    dt = x.dtype
    f64 = dt.bits == 64
    ity, mant, bias = (T.i64, 52, 1023) if f64 else (T.i32, 23, 127)
    hi, lo = (1024.0, -1080.0) if f64 else (128.0, -150.0)
    isn = O.isnan(x)
    xc = O.where(O.gt(x, hi), hi, x)
    xc = O.where(O.lt(xc, lo), lo, xc)
    xc = O.where(isn, 0.0, xc)
    n = O.floor(O.add(xc, 0.5))
    f = O.sub(xc, n)
    r = O.fma(O.horner(f, EXP2_F64 if f64 else EXP2_F32), f, 1.0)
    ni = O.ftoi(n, ity)  # n is an integer in [-150, 128] (or [-1080, 1024])
    n1 = O.shr(ni, 1)
    n2 = O.sub(ni, n1)
    s1 = O.bitcast(O.shl(O.add(n1, bias), mant), dt)
    s2 = O.bitcast(O.shl(O.add(n2, bias), mant), dt)
    return O.where(isn, x, O.mul(O.mul(r, s1), s2))


def log2_f64(x: X) -> X:
    """log2 x = e + log2 m, m in [sqrt(1/2), sqrt(2)] from the exponent field (subnormals scaled
    by 2**52 first); log m = 2 atanh((m-1)/(m+1)) as an odd series. f32 and narrower call this on
    the value widened to f64 (correctly rounded in practice, and still vectorizable)."""
    dt, u = x.dtype, T.u64
    small = O.lt(x, 2.0 ** -1022)
    xs = O.where(small, O.mul(x, 2.0 ** 52), x)
    bits = O.bitcast(xs, u)
    e = O.sub(O.cast(O.shr(bits, 52), T.i64), 1023)
    m = O.bitcast(O.or_(O.and_(bits, (1 << 52) - 1), 0x3FF0000000000000), dt)
    big = O.gt(m, math.sqrt(2.0))
    m = O.where(big, O.mul(m, 0.5), m)
    e = O.add(e, O.cast(big, T.i64))
    e = O.sub(e, O.where(small, O.c(52, T.i64), 0))
    s = O.fdiv(O.sub(m, 1.0), O.add(m, 1.0))
    ln = O.mul(O.horner(O.mul(s, s), LOG2_F64), s)
    res = O.fma(ln, 1 / math.log(2), O.cast(e, dt))
    res = O.where(O.eq(x, 0.0), -math.inf, res)
    res = O.where(O.lt(x, 0.0), math.nan, res)
    res = O.where(O.eq(x, math.inf), x, res)
    return O.where(O.isnan(x), x, res)


def divmod_(x: X, y: X, want_mod: bool) -> X:
    """numpy's npy_divmod: floor_divide (want_mod False) or remainder of two floats, from fmod."""
    mod = O.fmod(x, y)
    bz = O.eq(y, 0.0)
    mnz = O.ne(mod, 0.0)
    fix = O.and_(mnz, O.xor(O.lt(y, 0.0), O.lt(mod, 0.0)))
    if want_mod:
        m2 = O.where(fix, O.add(mod, y), mod)
        m2 = O.where(mnz, m2, O.signed_zero(y))
        return O.where(bz, mod, m2)
    div = O.fdiv(O.sub(x, mod), y)
    div = O.where(fix, O.sub(div, 1.0), div)
    fl = O.floor(div)
    fl = O.where(O.gt(O.sub(div, fl), 0.5), O.add(fl, 1.0), fl)
    q = O.fdiv(x, y)
    res = O.where(O.ne(div, 0.0), fl, O.signed_zero(q))
    return O.where(bz, q, res)


def fmax(a: X, b: X) -> X:
    """max(a, b) with a nan in either giving nan: a if a >= b or a is nan, else b."""
    keep_a = O.or_(O.or_(O.gt(a, b), O.eq(a, b)), O.isnan(a))
    return O.where(keep_a, a, b)
