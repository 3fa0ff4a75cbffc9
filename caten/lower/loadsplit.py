"""Index-set splitting of masked loads and index conditions: a loop whose body reads through
`masked(cond, load)` or selects by `where(cond, a, b)`, where cond bounds the loop variable by
limits free of the body's own variables (a padded window's `0 <= h*s + kh - p < H` with the
window position unrolled: a convolution's or a pooling's border; a causal mask's `j <= i`), runs
as three loops in turn: the iterations before the range where every
such bound holds, that range with those bounds taken as true, and the ones after it. The middle
loop, nearly all of a convolution's image, has no branch per element, so the renderers
vectorize it; the borders keep their masks. Loops nest: a window's rows split around its
columns' split. Iterations keep their order (a reduction's loop may be split too), so results
are bit for bit those of the one loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import reduce

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.masksplit import _clamp, _conj, _uses

BUDGET = 6000  # expression nodes of a body beyond which it is left whole (three copies of it)
_PLAIN = (L.Loop, L.Store, L.Acc, L.SetAcc)


def split_loads(stmts: list) -> list:
    """`stmts` with every such loop split, innermost first."""
    out: list = []
    for s in stmts:
        if isinstance(s, L.Loop):
            s = replace(s, body=split_loads(s.body))
            out += _split(s) if type(s) is L.Loop and s.hint != "cold" else [s]
        else:
            out.append(s)
    return out


def _split(loop: L.Loop) -> list:
    v = L.var(loop.var)
    stmts = list(_walk(loop.body))
    if not all(type(s) in _PLAIN for s in stmts):
        return [loop]
    inner = {s.var for s in stmts if isinstance(s, (L.Loop, L.Acc))}
    roots = [e for s in stmts for e in _exprs(s)]
    nodes = list(L.nodes(*roots))
    if len(nodes) > BUDGET:
        return [loop]
    terms: dict[X, tuple[str, X]] = {}
    for x in nodes:
        if x.op != "masked" and x.op is not Op.WHERE:
            continue
        for t in _conj(x.src[0]):
            b = _bound(t, v)
            if b is not None and not any(n.op == "var" and n.arg in inner for n in L.nodes(b[1])):
                terms[t] = b
    if not terms:
        return [loop]
    ext = loop.extent
    lows = [e for k, e in terms.values() if k == "lo"]
    highs = [e for k, e in terms.values() if k == "hi"]
    lo = _clamp(reduce(L.imax, lows), ext) if lows else L.const(0)
    hi = L.imax(_clamp(reduce(L.imin, highs), ext) if highs else ext, lo)
    true = L.const(True, T.bool_)
    middle = _map_body(loop.body, lambda x: true if x in terms else None)

    def part(name: str, body: list, start: X, count: X) -> L.Loop:
        names = {n: f"{n}{name}" for n in inner}
        at = L.iadd(start, L.var(f"{loop.var}{name}"))

        def swap(x: X) -> X | None:
            if x is v:
                return at
            return L.var(names[x.arg], x.dtype) if x.op == "var" and x.arg in names else None
        return L.Loop(f"{loop.var}{name}", count, _map_body(body, swap, names), loop.hint)

    return [part("_lo", loop.body, L.const(0), lo), part("_in", middle, lo, L.isub(hi, lo)),
            part("_hi", loop.body, hi, L.isub(ext, hi))]


def _walk(stmts: list):
    for s in stmts:
        yield s
        if isinstance(s, L.Loop):
            yield from _walk(s.body)


def _exprs(s) -> list[X]:
    if isinstance(s, L.Loop):
        return [s.extent]
    if isinstance(s, L.Store):
        return [s.idx, s.value]
    if isinstance(s, L.Acc):
        return [s.init]
    return [s.value]


def _map_body(stmts: list, fn: Callable[[X], X | None], names: dict[str, str] | None = None) -> list:
    """Statements with every expression node x replaced by fn(x) where that is not None
    (bottom-up, simplified: `_node`), and the variables they define renamed by `names`."""
    memo: dict[int, X] = {}
    names = names or {}

    def go(root: X) -> X:
        """(iterative: a long program's expressions nest deeper than Python's stack)"""
        stack = [root]
        while stack:
            x = stack[-1]
            if id(x) in memo:
                stack.pop()
                continue
            r = fn(x)
            if r is not None or not x.src:
                memo[id(x)] = x if r is None else r
                stack.pop()
                continue
            todo = [s for s in x.src if id(s) not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[id(x)] = _node(x, tuple(memo[id(s)] for s in x.src))
            stack.pop()
        return memo[id(root)]

    def stmt(s):
        if isinstance(s, L.Loop):
            return replace(s, var=names.get(s.var, s.var), extent=go(s.extent), body=[stmt(b) for b in s.body])
        if isinstance(s, L.Store):
            return L.Store(s.buf, go(s.idx), go(s.value))
        if isinstance(s, L.Acc):
            return L.Acc(names.get(s.var, s.var), s.dtype, go(s.init))
        return L.SetAcc(names.get(s.var, s.var), go(s.value))
    return [stmt(s) for s in stmts]


def _node(x: X, src: tuple) -> X:
    """x over new sources, with what a true condition and constant index arithmetic fold to."""
    is_true = [s.op == "const" and s.dtype == T.bool_ and s.arg is True for s in src]
    if x.op is Op.AND and x.dtype == T.bool_ and any(is_true):
        return src[1] if is_true[0] else src[0]
    if x.op == "masked" and is_true[0]:
        return src[1]
    if x.op is Op.WHERE and is_true[0]:
        return src[1]
    if x.dtype == L.IDX and x.op is Op.ADD:
        return L.iadd(*src)
    if x.dtype == L.IDX and x.op is Op.MUL:
        return L.imul(*src)
    return X.make(x.op, x.dtype, src, x.arg)


def _bound(term: X, v: X) -> tuple[str, X] | None:
    """("lo", e): term is v >= e; ("hi", e): term is v < e; None: neither, in these forms (a
    positive constant multiple of v plus a rest free of it, compared with a bound free of v)."""
    neg = term.op is Op.NOT
    t = term.src[0] if neg else term
    le = _at_most(term)
    if le is not None:  # a <= b, as a < b + 1
        neg, t = False, X.make(Op.CMPLT, T.bool_, (le[0], L.iadd(le[1], L.const(1))))
    if t.op is not Op.CMPLT or t.src[0].dtype != L.IDX:
        return None
    a, b = t.src
    fa, fb = _affine(a, v), _affine(b, v)
    if fa is not None and fb is None and not _uses(b, v):  # k*v + r < b, or >= b when negated
        k, r = fa
        return ("lo" if neg else "hi"), _ceil(L.isub(b, r), k)
    if fb is not None and fa is None and not _uses(a, v):  # a < k*v + r: k*v + r >= a + 1
        k, r = fb
        return ("hi" if neg else "lo"), _ceil(L.isub(L.iadd(a, L.const(1)), r), k)
    return None


def _at_most(term: X) -> tuple[X, X] | None:
    """(a, b) when term is a <= b of indices written as (a < b) or not (a != b), else None."""
    if term.op is not Op.OR or term.dtype != T.bool_:
        return None
    for lt, eq in (term.src, term.src[::-1]):
        if lt.op is Op.CMPLT and eq.op is Op.NOT and eq.src[0].op is Op.CMPNE and lt.src[0].dtype == L.IDX:
            a, b = lt.src
            if set(map(id, eq.src[0].src)) == {id(a), id(b)}:
                return a, b
    return None


def _ceil(n: X, k: int) -> X:
    """ceil(n / k) wherever it is positive; some value <= 0 where it is not (the bounds are
    clamped to [0, extent] after)."""
    if k == 1:
        return n
    if n.op == "const":
        return L.const(-(-n.arg // k))
    return X.make("idiv", L.IDX, (L.iadd(n, L.const(k - 1)), L.const(k)))


def _affine(e: X, v: X) -> tuple[int, X] | None:
    """(k, r) when e = k*v + r with k a positive constant and r free of v, else None."""
    if e is v:
        return 1, L.const(0)
    if e.op is Op.MUL and e.dtype == L.IDX:
        x, y = e.src
        for p, q in ((x, y), (y, x)):
            if p is v and q.op == "const" and q.arg > 0:
                return q.arg, L.const(0)
    if e.op is Op.ADD and e.dtype == L.IDX:
        x, y = e.src
        for p, q in ((x, y), (y, x)):
            f = _affine(p, v)
            if f is not None and not _uses(q, v):
                return f[0], L.iadd(f[1], q)
    return None
