"""Runtime magnitude bounds: an upper bound of |x| over every element of a computed value, as graph
nodes built from its leaves' largest magnitudes (one pass over each leaf).

The causal cuts (caten.schedule.causal) need it where an exact zero multiplies a computed factor
past a block's last key (the softmax gradient's row dot sums P * dP, dP = dO Vᵀ): the product is a
zero only where the factor is finite, and an overflowing dot product is as non-finite as an inf
in dO or V. A bound well under the dtype's largest value proves the factor finite everywhere; when
it does not hold (a nan or inf in a leaf, or values near overflow), the cut is not taken at run
time and the loops run over every key, as uncut.

The bound is exact arithmetic's, computed in f64, and the check leaves a factor of 4 for the
rounding of the factor's own f32/f64 operations: each rounds up by at most (1 + eps), and a sum of
n terms by (1 + eps)^n, under e for n <= 1/eps (a sum of at most 2^20 terms here).
"""

from __future__ import annotations

import math

import numpy as np

from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op

HEADROOM = 4.0  # the bound times this must stay under the dtype's largest finite value
MAX_TERMS = 1 << 20  # elements a bounded factor's reductions sum, at most


def bound(f: Node) -> Node | None:
    """An f64 scalar node >= |f| at every element (nan or inf where a leaf holds a non-finite
    value), or None when f's cone holds an op this module cannot bound."""
    if f.dtype not in (T.f32, T.f64):
        return None
    return _bound(f, {}, [1])


def safe(bounds: list[Node], dtypes: list[T.DType], positive: list[Node] = ()) -> Node:
    """An i64 [1] node, realized by the scheduler: 0 when every bound (of a factor of that dtype)
    times HEADROOM is under its dtype's largest value and every value of `positive` is > 0, 1 when
    not (or a bound is nan)."""
    ok: Node | None = None
    for b, dt in zip(bounds, dtypes):
        limit = float(np.finfo(dt.np).max) / HEADROOM
        c = B.alu(Op.CMPLT, b, B.const(limit, T.f64, ()))
        ok = c if ok is None else B.alu(Op.AND, ok, c)
    for x in positive:  # max(-x) < 0 (a nan is caught by its bound, `largest`, which it also has)
        neg = B.alu(Op.NEG, x)
        most = B.reshape(B.reduce(neg, "max", tuple(range(x.rank))), ()) if x.rank else neg
        c = B.alu(Op.CMPLT, most, B.const(0, x.dtype, ()))
        ok = c if ok is None else B.alu(Op.AND, ok, c)
    assert ok is not None
    unsafe = B.alu(Op.WHERE, ok, B.const(0, T.i64, ()), B.const(1, T.i64, ()))
    return B.reduce(B.reshape(unsafe, (1,)), "max", (0,))


def _leaf(n: Node) -> Node | None:
    while n.op is Op.VIEW:
        n = n.src[0]
    return n if n.op in (Op.BUFFER, Op.CONST) else None


def _bound(n: Node, memo: dict[Node, Node | None], terms: list[int]) -> Node | None:
    if n in memo:
        return memo[n]
    memo[n] = r = _rule(n, memo, terms)
    return r


def _rule(n: Node, memo: dict[Node, Node | None], terms: list[int]) -> Node | None:  # noqa: C901 - a case per op
    leaf = _leaf(n)
    if leaf is not None:
        if leaf.op is Op.CONST:
            if not isinstance(leaf.arg, (int, float)) or not math.isfinite(leaf.arg):
                return None
            return B.const(abs(float(leaf.arg)), T.f64, ())
        return largest(leaf)
    if n.op is Op.VIEW or n.op is Op.NEG:
        return _bound(n.src[0], memo, terms)
    if n.op is Op.CAST:
        if not (n.dtype.is_float and n.src[0].dtype.is_float and n.dtype.bits >= n.src[0].dtype.bits):
            return None
        return _bound(n.src[0], memo, terms)
    if n.op in (Op.ADD, Op.MUL):
        a, b = (_bound(s, memo, terms) for s in n.src)
        if a is None or b is None:
            return None
        return B.alu(n.op, a, b)
    if n.op is Op.REDUCE and n.arg[0] in ("add", "max"):
        x = _bound(n.src[0], memo, terms)
        if x is None or n.arg[0] == "max":
            return x
        count = 1
        for a in n.arg[1]:
            d = n.src[0].shape[a]
            if not isinstance(d, int):
                return None
            count *= d
        terms[0] *= max(count, 1)
        if terms[0] > MAX_TERMS:
            return None
        return B.alu(Op.MUL, x, B.const(float(count), T.f64, ()))
    return None


def largest(buf: Node) -> Node:
    """max |x| over the whole value (a leaf, or one computed elsewhere) in f64; +inf where it
    holds a nan (a nan compares false)."""
    x = B.cast(buf, T.f64) if buf.dtype is not T.f64 else buf
    mag = B.alu(Op.MAX, x, B.alu(Op.NEG, x))
    mag = B.alu(Op.WHERE, B.alu(Op.CMPNE, x, x), B.const(float("inf"), T.f64, x.shape), mag)
    r = B.reduce(mag, "max", tuple(range(x.rank))) if x.rank else mag
    return B.reshape(r, ())
