"""SIN in primitive loop-IR ops: x = k*pi + r, then an odd polynomial on r in [-pi/2, pi/2].

Ported from the LLVM renderer (same constants and operation order, so bit-identical to what the
llvm runtime computed before). Ordinary |x| reduce by Cody-Waite (pi in 3 or 4 parts, fused
multiply-adds); |x| >= 2**14 (f32) or 2**24 (f64) by Payne-Hanek: the integer product of the
mantissa with the bits of 1/pi that matter at x's exponent (a constant table, `lut`), exact for
every finite x. Both reductions are branch-free (vectorizable); a select picks one per lane.
"""

from __future__ import annotations

import math

from caten.ir import dtypes as T
from caten.loopir import X
from caten.lower import xops as O

SINPI_F32 = (3.140625, 0.0009670257568359375, 6.2771141529083251953e-07, 1.2154201256553420762e-10)
SINPI_F64 = (3.1415926218032836914, 3.1786509424591713469e-08, 1.2246467864107188502e-16,
             1.2736634327021899816e-24)
SIN_BIG_F32, SIN_BIG_F64 = 2.0 ** 14, 2.0 ** 24
PI_126 = (math.pi * 2.0 ** -126, 1.2246467991473532e-16 * 2.0 ** -126)  # pi * 2**-126, head + tail


def _inv_pi_windows(pad: int, count: int, prec: int = 1400) -> tuple[int, ...]:
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
    return tuple((inv >> (prec - 8 * (j - pad) - 63)) & ((1 << 64) - 1) for j in range(count))


# x = M * 2**E: the 1/pi bits that matter start near bit E (earlier ones give even multiples of
# x/pi). Table entry j = floor((E-1)/8) + pad, clamped to [0, TAB_MAX], the rest of E-1 shifts M.
TAB_PAD = 9
TAB_MAX = 121 + TAB_PAD  # f64's largest exponent: floor((971 - 1) / 8) = 121
INV_PI = _inv_pi_windows(TAB_PAD, TAB_MAX + 17)
MASK32 = 0xFFFFFFFF


def sin(x: X) -> X:
    dt = x.dtype
    f64 = dt.bits == 64
    ax = O.fabs(x)
    fin = O.lt(ax, math.inf)
    xs = O.where(fin, x, 0.0)
    k = O.rint(O.mul(xs, 1 / math.pi))
    nk = O.neg(k)
    r = xs
    for part in (SINPI_F64 if f64 else SINPI_F32):
        r = O.fma(nk, part, r)
    odd = _odd(O.cast(k, T.i64))  # |k| < 2**63 wherever this path is taken (not `big`)
    big = O.not_(O.lt(ax, SIN_BIG_F64 if f64 else SIN_BIG_F32))  # a nan lane ends nan (`fin`)
    rb, oddb = _big64(xs) if f64 else _big32(xs)
    r = O.where(big, rb, r)
    odd = O.where(big, oddb, odd)
    r2 = O.mul(r, r)
    nmax = 12 if f64 else 7
    coefs = [(-1) ** j / math.factorial(2 * j + 1) for j in range(nmax - 1, 0, -1)]
    p = O.fma(O.mul(r, r2), O.horner(r2, coefs), r)
    res = O.where(odd, O.neg(p), p)
    res = O.where(O.eq(xs, 0.0), xs, res)  # sin(-0.0) = -0.0
    return O.where(fin, res, math.nan)


def _odd(n: X) -> X:
    return O.ne(O.and_(n, 1), 0)


def _index(e1: X) -> tuple[X, X]:
    """(table index, shift (E-1) mod 8), both u64, from E-1 (a signed int)."""
    j = O.add(O.shr(e1, 3), TAB_PAD)
    j = O.where(O.lt(j, 0), O.c(0, e1.dtype), j)
    j = O.where(O.lt(j, TAB_MAX), j, O.c(TAB_MAX, e1.dtype))
    return O.cast(j, T.u64), O.cast(O.and_(e1, 7), T.u64)


def _tab(j: X, off: int) -> X:
    return O.lut(INV_PI, T.u64, O.cast(O.add(j, off), T.i64))


def _big32(x: X) -> tuple[X, X]:
    """f32 x -> (r, odd): R = (x/pi mod 4) * 2**62 mod 2**64 from the 24-bit mantissa times
    96 bits of 1/pi (error < 2 units of 2**-62); r = (R - round(R)) * pi, via f64."""
    bits = O.bitcast(x, T.i32)
    be = O.shr(O.and_(bits, 0x7FFFFFFF), 23)
    j, sh = _index(O.sub(be, 151))
    m = O.cast(O.or_(O.and_(bits, 0x7FFFFF), 0x800000), T.u64)
    ms = O.shl(m, sh)
    g0, g1 = _tab(j, 0), _tab(j, 8)
    rr = O.shl(O.mul(ms, O.shr(g0, 32)), 32)
    rr = O.add(rr, O.mul(ms, O.and_(g0, MASK32)))
    rr = O.add(rr, O.shr(O.mul(ms, O.shr(g1, 32)), 32))
    n = O.shr(O.add(rr, 1 << 61), 62)
    fr = O.sub(rr, O.shl(n, 62))
    rd = O.mul(O.cast(O.cast(fr, T.i64), T.f64), math.pi * 2.0 ** -62)
    r = O.cast(rd, T.f32)
    return O.where(O.lt(bits, 0), O.neg(r), r), _odd(n)


def _big64(x: X) -> tuple[X, X]:
    """f64 x -> (r, odd): R = (x/pi mod 4) * 2**126 as 128 bits (hi, lo) from the 53-bit
    mantissa times 192 bits of 1/pi in 32-bit limbs (column sums in 64 bits; error < 2 units)."""
    u = T.u64
    bits = O.bitcast(x, T.i64)
    be = O.shr(O.and_(bits, (1 << 63) - 1), 52)
    j, sh = _index(O.sub(be, 1076))
    m = O.cast(O.or_(O.and_(bits, (1 << 52) - 1), 1 << 52), u)
    ms = O.shl(m, sh)
    mh, ml = O.shr(ms, 32), O.and_(ms, MASK32)
    w: list[X] = []
    for off in (0, 8, 16):
        g = _tab(j, off)
        w += [O.shr(g, 32), O.and_(g, MASK32)]
    cols: dict[int, list[X]] = {q: [] for q in range(-1, 4)}  # column q has weight 2**(32q)
    for k, wk in enumerate(w):
        for limb, q in ((ml, 3 - k), (mh, 4 - k)):
            if q > 3 or (limb is mh and k == 0):
                continue
            p = O.mul(limb, wk)
            if q >= -1:
                cols[q].append(O.and_(p, MASK32))
            if -1 <= q + 1 <= 3:
                cols[q + 1].append(O.shr(p, 32))
    acc: dict[int, X] = {}
    carry: X | None = None
    for q in range(-1, 4):
        terms = cols[q] + ([carry] if carry is not None else [])
        s = terms[0]
        for t in terms[1:]:
            s = O.add(s, t)
        acc[q] = s
        carry = O.shr(s, 32)
    hi = O.or_(O.shl(acc[3], 32), O.and_(acc[2], MASK32))
    lo = O.or_(O.shl(acc[1], 32), O.and_(acc[0], MASK32))
    n = O.shr(O.add(hi, 1 << 61), 62)
    fhi = O.sub(hi, O.shl(n, 62))
    neg = O.lt(O.cast(fhi, T.i64), 0)
    borrow = O.cast(O.ne(lo, 0), u)
    nhi = O.sub(O.neg(fhi), borrow)
    mhi = O.cast(O.where(neg, nhi, fhi), T.i64)
    mlo = O.where(neg, O.neg(lo), lo)
    # |frac| * 2**126 = mhi * 2**64 + mlo as a double-double (exact but for < 2**-105 when
    # mhi >= 2**11), then times pi as a double-double: r to within ~0.5 ulp.
    d = T.f64
    h = O.cast(mhi, d)
    e = O.cast(O.sub(mhi, O.cast(h, T.i64)), d)
    rest = O.fma(e, 2.0 ** 64, O.cast(mlo, d))
    h = O.mul(h, 2.0 ** 64)
    mh_ = O.add(h, rest)
    ml_ = O.add(O.sub(h, mh_), rest)
    p1, p2 = PI_126
    rh = O.mul(mh_, p1)
    rl = O.fma(mh_, p1, O.neg(rh))
    rl = O.fma(ml_, p1, rl)
    rl = O.fma(mh_, p2, rl)
    r = O.add(rh, rl)
    flip = O.xor(neg, O.lt(bits, 0))
    return O.where(flip, O.neg(r), r), _odd(n)
