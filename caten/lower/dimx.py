"""A dim expression (caten.ir.dims) written as loop-IR primitives, so that its floor division
and modulo (an `idiv`/`mod` atom: Python's `//` and `%`, 0 for a zero divisor) are computed by
the same code as the IDIV/MOD ops (caten.lower.numerics_int) and no renderer spells them.

The decompose pass rewrites every `dim` leaf of the loop IR that has such an atom (after the
derived dims of `where K = (/ N 2)` are expanded) into `dim_value`; a renderer's spelling of a
dim outside the loop IR (an entry function's arena offsets and `where` checks, a device kernel's
launch bound) goes through `atom_value` for the same atoms. Dims without one stay `dim` leaves:
their sums and products of symbols are plain index arithmetic, which every renderer spells.
"""

from __future__ import annotations

from collections.abc import Mapping

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Atom, Dim
from caten.lower import loopir as L
from caten.lower import numerics_int as ints
from caten.lower import xops as O
from caten.lower.loopir import X

_DIVIDES = ("idiv", "mod")


def has_division(d: Dim, defines: Mapping[str, Dim]) -> bool:
    """Whether d, with its derived dims expanded, holds a floor division or modulo."""
    if isinstance(d, int):
        return False
    for m in d.terms:
        for a in m:
            if a.op in _DIVIDES:
                return True
            if a.op == "sym":
                v = defines.get(a.args[0])
                if v is not None and has_division(v, defines):
                    return True
            elif any(has_division(s, defines) for s in a.args):
                return True
    return False


def dim_value(d: Dim, defines: Mapping[str, Dim]) -> X:
    """d as loop IR: sums and products of dim leaves, its divisions in primitives."""
    if not has_division(d, defines):
        return L.dim(d)
    total: X | None = None
    for m, c in sorted(d.terms.items(), key=lambda mc: repr(mc[0])):
        term = L.const(c)
        for a in m:
            term = L.imul(term, atom_value(a, defines))
        total = term if total is None else L.iadd(total, term)
    return total if total is not None else L.const(0)


def atom_value(a: Atom, defines: Mapping[str, Dim]) -> X:
    """One atom of a dim expression as loop IR."""
    if a.op == "sym":
        v = defines.get(a.args[0])
        return L.dim(D.sym(a.args[0])) if v is None else dim_value(v, defines)
    x, y = (dim_value(s, defines) for s in a.args)
    if a.op in _DIVIDES:
        num, den = a.args
        if isinstance(den, int) and den > 0 and D.sign_of(num) == 1:  # num >= 0: truncation floors
            u = T.u64  # (unsigned: what an unsigned division by a power of two is, a shift)
            return O.cast((O.trem if a.op == "mod" else O.tdiv)(O.cast(x, u), O.cast(y, u)), L.IDX)
        return ints.divmod_(x, y, a.op == "mod")
    return O.where(O.gt(x, y) if a.op == "max" else O.lt(x, y), x, y)
