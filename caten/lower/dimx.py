"""A dim expression (caten.ir.dims) written as loop-IR primitives, so that no renderer reads one:
its sums and products become index arithmetic, max/min selects, and its floor division and modulo
(an `idiv`/`mod` atom: Python's `//` and `%`, 0 for a zero divisor) are computed by the same code
as the IDIV/MOD ops (caten.lower.numerics_int). The derived dims of `where K = (/ N 2)` and the
values given by `-D` are expanded.

The decompose pass rewrites every `dim` leaf of the loop IR into `dim_leaf`: a dynamic dim stays a
bare leaf (the renderer's one spelling of a dim: the entry function's argument), any other keeps
its Dim (host-side sizes and the device grid mapping read it) with its value as its one source. A
renderer's dims outside the loop IR (an entry function's arena offsets and `where` checks, a
device kernel's launch bound) go through `dim_leaf` too.
"""

from __future__ import annotations

from collections.abc import Mapping

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Atom, Dim
from caten.loopir import X
from caten.lower import numerics_int as ints
from caten.lower import xops as O

_DIVIDES = ("idiv", "mod")


def bare(d: Dim) -> str | None:
    """The name of d when d is one symbol (coefficient 1), else None."""
    if isinstance(d, int) or len(d.terms) != 1:
        return None
    (m, c), = d.terms.items()
    return m[0].args[0] if c == 1 and len(m) == 1 and m[0].op == "sym" else None


def dim_leaf(d: Dim, defines: Mapping[str, Dim], memo: dict | None = None) -> X:
    """The loop-IR leaf of dim d: a constant, a dynamic dim's bare `dim` leaf, or a `dim` leaf
    holding d whose one source is its value in primitives (`memo`: dim_value's, shared by the
    calls of one function: an entry's arena offsets share most of their terms)."""
    if isinstance(d, int):
        return L.const(d)
    name = bare(d)
    if name is not None and name not in defines:
        return L.dim(d)
    return X.make("dim", L.IDX, (dim_value(d, defines, memo),), d)


def dim_value(d: Dim, defines: Mapping[str, Dim], memo: dict | None = None) -> X:
    """d as loop IR: sums and products of dynamic dims' leaves, the rest in primitives. `memo`
    (per call) keeps a sub-expression's value and print key: nested idiv/max atoms share their
    arguments, and re-walking them at every level costs exponential time."""
    if isinstance(d, int):
        return L.const(d)
    memo = {} if memo is None else memo
    hit = memo.get(d)
    if hit is not None:
        return hit
    total: X | None = None
    for m, c in sorted(d.terms.items(), key=lambda mc: _mono_key(mc[0], memo)):
        term = L.const(c)
        for a in m:
            term = L.imul(term, atom_value(a, defines, memo))
        total = term if total is None else L.iadd(total, term)
    memo[d] = out = total if total is not None else L.const(0)
    return out


def _mono_key(m: tuple[Atom, ...], memo: dict) -> str:
    """repr(m), each atom printed once per call."""
    parts = []
    for a in m:
        k = ("repr", a)
        r = memo.get(k)
        if r is None:
            memo[k] = r = repr(a)
        parts.append(r)
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def atom_value(a: Atom, defines: Mapping[str, Dim], memo: dict | None = None) -> X:
    """One atom of a dim expression as loop IR."""
    if a.op == "sym":
        v = defines.get(a.args[0])
        return L.dim(D.sym(a.args[0])) if v is None else dim_value(v, defines, memo)
    x, y = (dim_value(s, defines, memo) for s in a.args)
    if a.op in _DIVIDES:
        num, den = a.args
        if isinstance(den, int) and den > 0 and D.sign_of(num) == 1:  # num >= 0: truncation floors
            u = T.u64  # (unsigned: what an unsigned division by a power of two is, a shift)
            return O.cast((O.trem if a.op == "mod" else O.tdiv)(O.cast(x, u), O.cast(y, u)), L.IDX)
        return ints.divmod_(x, y, a.op == "mod")
    return O.where(O.gt(x, y) if a.op == "max" else O.lt(x, y), x, y)
