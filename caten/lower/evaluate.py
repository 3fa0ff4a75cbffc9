"""Evaluate a loop-IR expression over numpy arrays, with the renderers' exact semantics.

A second implementation of every expression op, independent of any renderer and compiler:
IEEE f32/f64 arithmetic rounded once per op (`fma` exactly: round-to-odd in f64 for f32, exact
integers for f64), f16/bf16/float8 computed in f32 and rounded after each op, integers wrapping. It
lets the decompose pass be checked bit for bit against a runtime and the op table's reference
without compiling anything. Ops that the pass rewrites (EXP2, IDIV, `rand`, ...) evaluate by the
op table's numpy reference, so a tree before the pass gives the reference answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import TABLE, Ctx, Op, rand_key, threefry2x32
from caten.ir.walk import post_order
from caten.loopir import X

Arr = np.ndarray


def _const(v: object, dt: DType) -> Arr:
    if dt.is_int:
        u = np.array(int(v) & ((1 << dt.bits) - 1), dtype=f"u{dt.itemsize}")  # type: ignore[arg-type]
        return u.view(dt.np)
    return np.array(v, dtype=dt.np)


def _fma64(a: float, b: float, d: float) -> float:
    """a*b + d for f64 scalars, rounded once: the exact sum as an integer times a power of two,
    rounded by Python's int-to-float conversion and int/int division (both correctly rounded)."""
    a, b, d = float(a), float(b), float(d)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(d)):
        return a * b + d
    (ma, ea), (mb, eb), (md, ed) = math.frexp(a), math.frexp(b), math.frexp(d)
    ia, ib, id_ = int(ma * 2.0 ** 53), int(mb * 2.0 ** 53), int(md * 2.0 ** 53)
    ep, ed = ea + eb - 106, ed - 53
    e = min(ep, ed)
    n = ((ia * ib) << (ep - e)) + (id_ << (ed - e))
    if n == 0:
        return a * b + d  # an exact zero: IEEE's sign rule for the sum
    try:
        return float(n << e) if e >= 0 else n / (1 << -e)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


_fma64_v = np.frompyfunc(_fma64, 3, 1)


def fma(a: Arr, b: Arr, d: Arr) -> Arr:
    """a*b + d rounded once to the operands' dtype (f32 or f64)."""
    if a.dtype == np.float64:
        return np.asarray(_fma64_v(a, b, d), dtype=np.float64)
    a64, b64, d64 = (np.asarray(v, np.float64) for v in (a, b, d))
    with np.errstate(all="ignore"):
        p = a64 * b64  # exact: 24 + 24 bits
        s = p + d64
        bb = s - p
        lo = (p - (s - bb)) + (d64 - bb)  # two-sum: s + lo == p + d exactly
        # round to odd in f64 (53 >= 2*24 + 2 bits), then once to f32: no double rounding
        toward0 = np.where((lo != 0) & (np.sign(lo) != np.sign(s)), np.nextafter(s, 0.0), s)
        bits = toward0.view(np.uint64) | np.where(lo != 0, np.uint64(1), np.uint64(0))
        odd = np.where(np.isfinite(s) & (lo != 0), bits.view(np.float64), s)
        return odd.astype(np.float32)


def _cast(x: Arr, dt: DType) -> Arr:
    """CAST as the renderers do it: float->int truncates and saturates (nan and inf give 0); to a
    narrow float it rounds (float8: overflowing as ml_dtypes, the program's saturation being
    explicit in the loop IR: caten.lower.numerics_narrow.saturating)."""
    if T.is_np_float(x.dtype):
        if dt.is_int:
            f = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=0.0, neginf=0.0)
            s = np.clip(f, -2.0 ** 63, 2.0 ** 63 - 1024).astype(np.int64)
            s = np.where(f >= 2.0 ** 63, np.iinfo(np.int64).max, s)
            if dt.kind == "uint":
                u = np.clip(f, 0, 2.0 ** 64 - 2048).astype(np.uint64)
                u = np.where(f >= 2.0 ** 64, np.iinfo(np.uint64).max, u)
                s = np.where(f < 0, s.view(np.uint64), u)
            return s.astype(dt.np)
        if dt.bits < 32 and x.dtype == np.float64:
            x = x.astype(np.float32)  # f64 -> f16/bf16/float8 rounds through f32, as the renderers do
    elif dt in T.FLOAT8:
        x = x.astype(np.float32)  # int -> float8 too
    return x.astype(dt.np)


def _lowp(fn: Callable[..., Arr]) -> Callable[..., Arr]:
    """fn computed in f32 for f16/bf16/float8 operands, then rounded to their dtype."""
    def run(*a: Arr) -> Arr:
        dt = a[0].dtype
        if dt.kind in "iub" or dt.itemsize >= 4:
            return fn(*a)
        return fn(*(v.astype(np.float32) for v in a)).astype(dt)
    return run


def _tdiv(a: Arr, b: Arr) -> Arr:
    if a.dtype.kind == "u":
        return a // b
    r = np.fmod(a, b)
    return ((a - r) // b).astype(a.dtype)


def _shift(fn: Callable[[Arr, Arr], Arr]) -> Callable[[Arr, Arr], Arr]:
    def run(a: Arr, n: Arr) -> Arr:
        return fn(a, n.astype(a.dtype)).astype(a.dtype)
    return run


def _max(a: Arr, b: Arr) -> Arr:
    if a.dtype.kind in "iub":
        return np.maximum(a, b)
    return np.where((a >= b) | np.isnan(a), a, b)


def _rand(ctr: Arr, seed: int, dyn: Arr | None = None) -> Arr:
    """`rand` at counters ctr; a runtime seed `dyn` (u64, one value per lane) keys each lane."""
    c = ctr.astype(np.uint64)
    lo, hi = (c & np.uint64(0xFFFFFFFF)).astype(np.uint32), (c >> np.uint64(32)).astype(np.uint32)
    if dyn is None:
        return threefry2x32(rand_key(seed), lo, hi)[0]
    lo, hi, d = np.broadcast_arrays(lo, hi, dyn)
    out = np.empty(lo.shape, np.uint32)
    for k in np.unique(d):  # one key per distinct seed (in practice one)
        sel = d == k
        out[sel] = threefry2x32(rand_key(seed, k), lo[sel], hi[sel])[0]
    return out


_OPS: dict[object, Callable[..., Arr]] = {
    Op.ADD: _lowp(np.add), Op.MUL: _lowp(np.multiply), Op.FDIV: _lowp(np.true_divide),
    Op.NEG: np.negative, Op.RECIP: _lowp(np.reciprocal), Op.SQRT: _lowp(np.sqrt),
    Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor,
    Op.NOT: lambda a: np.logical_not(a) if a.dtype == np.bool_ else np.invert(a),
    Op.CMPLT: np.less, Op.CMPNE: np.not_equal, Op.WHERE: np.where, Op.MAX: _max,
    "fma": _lowp(fma), "fmod": _lowp(np.fmod), "floor": np.floor, "rint": np.rint,
    "shl": _shift(np.left_shift), "shr": _shift(np.right_shift),
    "idiv": _tdiv, "imod": lambda a, b: np.fmod(a, b) if a.dtype.kind == "i" else a % b,
    "masked": lambda c, v: np.where(c, v, np.zeros((), v.dtype)),
    "bcheck": lambda i, n: np.where((i >= 0) & (i < n), i, np.zeros((), i.dtype)),  # (records nothing)
}
_REFERENCE = (Op.EXP2, Op.LOG2, Op.SIN, Op.IDIV, Op.MOD)


def evaluate(root: X, env: Mapping[str, Arr], buffers: Mapping[str, Arr] | None = None) -> Arr:
    """root's value: `var`s (and `dim`s, by name) from env, `load`s from buffers, broadcasting."""
    memo: dict[X, Arr] = {}
    for x in post_order([root]):
        with np.errstate(all="ignore"):
            memo[x] = np.asarray(_one(x, [memo[s] for s in x.src], env, buffers or {}))
    return memo[root]


def _one(x: X, a: list[Arr], env: Mapping[str, Arr], buffers: Mapping[str, Arr]) -> Arr:
    op, dt = x.op, x.dtype
    if op == "const":
        return _const(x.arg, dt)
    if op == "dim" and a:  # a dividing dim after the decompose pass: its value in primitives
        return a[0]
    if op in ("var", "dim"):
        return np.asarray(env[str(x.arg)]).astype(dt.np)
    if op == "load":  # clipped: a lane that `masked` discards may index past the end
        return np.take(np.asarray(buffers[x.arg]), a[0], mode="clip")
    if op is Op.CAST:
        return _cast(a[0], dt)
    if op == "ftoi":  # callers keep the value in range
        return np.trunc(a[0]).astype(dt.np)
    if op == "bitcast":
        if dt in T.NARROW:  # u32 bits of an f16/bf16/float8 register (an f32), exact
            return a[0].astype(np.uint32).view(np.float32).astype(dt.np)
        return a[0].copy().view(dt.np)
    if op == "lut":
        return np.array(x.arg, dtype=dt.np)[a[0]]
    if op == "rand":
        return _rand(a[0], x.arg, a[1] if len(a) > 1 else None)
    if op in _REFERENCE:  # INT_MIN // -1 wraps in numpy as in the renderers
        shape = np.broadcast_shapes(*(v.shape for v in a))
        return TABLE[op].ref(Ctx(x.arg, shape, dt, {}, {}), *a)
    return np.asarray(_OPS[op](*a)).astype(dt.np)
