"""Index-set splitting of masked stores. A loop whose only statement stores `masked(cond, v)`,
where cond bounds the loop variable by affine limits (the packing of a padded convolution's
input, a pad), runs as: zeros before the valid range, the plain copy, zeros after it. The copy
then has no branch per element (a `masked` value is a branch that guards its load), so the
renderers vectorize it. Conditions that do not involve the loop variable are tested once,
around the loops."""

from __future__ import annotations

from functools import reduce

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.loopir import X


def split_masks(stmts: list) -> list:
    """`stmts` with every such loop split (nested loops and parallel bodies too)."""
    out: list = []
    for s in stmts:
        if isinstance(s, L.Loop):
            s = type(s)(**{**vars(s), "body": split_masks(s.body)})
            out += _split(s) if type(s) is L.Loop else [s]
        else:
            out.append(s)
    return out


def _split(loop: L.Loop) -> list:
    if len(loop.body) != 1 or not isinstance(loop.body[0], L.Store) or loop.body[0].value.op != "masked":
        return [loop]
    st = loop.body[0]
    cond, inner = st.value.src
    v = L.var(loop.var)
    lows, highs, rest = [], [], None
    for term in _conj(cond):
        b = _bound(term, v)
        if b is None:
            if _uses(term, v):
                return [loop]
            rest = L.land(rest, term)
        else:
            (lows if b[0] == "lo" else highs).append(b[1])
    if not lows and not highs:
        return [loop]
    ext = loop.extent
    lo = _clamp(reduce(L.imax, lows), ext) if lows else L.const(0)
    hi = _clamp(reduce(L.imin, highs), ext) if highs else ext
    hi = L.imax(hi, lo)
    zero = L.const(False if inner.dtype == T.bool_ else 0 if inner.dtype.is_int else 0.0, inner.dtype)

    def part(name: str, start: X, count: X, value: X | None, hint: str) -> L.Loop:
        u = L.var(f"{loop.var}{name}")
        at = L.iadd(start, u)
        val = zero if value is None else L.subst(value, v, at)
        return L.Loop(u.arg, count, [L.Store(st.buf, L.subst(st.idx, v, at), val)], hint)

    split = [part("_lo", L.const(0), lo, None, "cold"), part("_in", lo, L.isub(hi, lo), inner, loop.hint),
             part("_hi", hi, L.isub(ext, hi), None, "cold")]
    if ext.op == "const":  # all valid (the common case): the loop keeps its constant trip count
        whole = L.alu(Op.AND, T.bool_, L.icmplt(lo, L.const(1)), L.alu(Op.NOT, T.bool_, L.icmplt(hi, ext)))
        split = [L.Loop(f"{loop.var}_all", _if(whole), [L.Loop(loop.var, ext, [L.Store(st.buf, st.idx, inner)],
                                                               loop.hint)]),
                 L.Loop(f"{loop.var}_some", _if(L.alu(Op.NOT, T.bool_, whole)), split)]
    if rest is None:
        return split
    return [L.Loop(f"{loop.var}_if", _if(rest), split),
            L.Loop(f"{loop.var}_else", _if(L.alu(Op.NOT, T.bool_, rest)), [part("_z", L.const(0), ext, None, "cold")],
                   "cold")]


def _if(c: X) -> X:
    """A loop extent that runs its body once when c holds."""
    return L.alu(Op.WHERE, L.IDX, c, L.const(1), L.const(0))


def _conj(c: X) -> list[X]:
    return _conj(c.src[0]) + _conj(c.src[1]) if c.op is Op.AND and c.dtype == T.bool_ else [c]


def _bound(term: X, v: X) -> tuple[str, X] | None:
    """("lo", e): term is v >= e; ("hi", e): term is v < e; None: neither, in these forms."""
    neg = term.op is Op.NOT
    t = term.src[0] if neg else term
    if t.op is not Op.CMPLT or t.src[0].dtype != L.IDX:
        return None
    a, b = t.src
    la, lb = _linear(a, v), _linear(b, v)
    if la is not None and lb is None and not _uses(b, v):  # a = v + r
        return ("lo", L.isub(b, la)) if neg else ("hi", L.isub(b, la))  # v + r >= b / v + r < b
    if lb is not None and la is None and not _uses(a, v):  # b = v + r
        one = L.const(1)
        return ("hi", L.iadd(L.isub(a, lb), one)) if neg else ("lo", L.iadd(L.isub(a, lb), one))
    return None


def _linear(e: X, v: X) -> X | None:
    """r when e = v + r with r free of v, else None."""
    if e is v:
        return L.const(0)
    if e.op is Op.ADD and e.dtype == L.IDX:
        x, y = e.src
        for p, q in ((x, y), (y, x)):
            r = _linear(p, v)
            if r is not None and not _uses(q, v):
                return L.iadd(r, q)
    return None


def _uses(e: X, v: X) -> bool:
    return any(x is v for x in L.nodes(e))


def _clamp(e: X, ext: X) -> X:
    """e within [0, ext]."""
    return L.imin(L.imax(e, L.const(0)), ext)
