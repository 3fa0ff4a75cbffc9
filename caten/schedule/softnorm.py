"""Deferred softmax normalization: `softmax(x) @ V` sums `(e_j / l) v_j`; this pass sums
`e_j v_j` and divides the result by `l` once (the FlashAttention form), so the probabilities are
never stored: one pass over the S² exponentials fewer, and the division runs on the [S, d] output.

Sound, not only up to rounding, only where `e = exp(x - max x)` and `l = sum e` over the summed
axis: one term of each row is exp(0) = 1, so l >= 1 and e_j / l neither overflows nor divides by
zero; a row of -inf or nan makes l nan in both forms. The sum of e_j v_j can be up to l times the
original's magnitude, so narrow floats (f16's range) keep the plain form: only f32 and f64 are
rewritten. The probabilities must have no other reader (the backward reads them: no gain there).
"""

from __future__ import annotations

from caten.ir import dtypes as T
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.view import View, contiguous_strides
from caten.schedule.layout import replace_nodes

_WIDE = (T.f32, T.f64)


def defer(nodes: list[Node]) -> list[Node]:
    """`nodes` (a program's outputs) with every sum of softmax probabilities times values over the
    softmax axis taken over the exponentials, then divided by the row sums."""
    users: dict[Node, list[Node]] = {}
    for n in toposort(nodes):
        for s in n.src:
            users.setdefault(s, []).append(n)
    outs = set(nodes)
    todo: dict[Node, Node] = {}
    for p in toposort(nodes):
        if p.op is not Op.FDIV or p.dtype not in _WIDE or p in outs:
            continue
        j = _softmax_axis(p)
        if j is None:
            continue
        sums = [_sum_of(v, p, j, users) for v in users.get(p, [])]
        if not sums or any(r is None for r in sums):
            continue
        for r in sums:
            todo[r] = _deferred(r, p, j)
    return replace_nodes(nodes, todo) if todo else nodes


def _softmax_axis(p: Node) -> int | None:
    """The axis j when p = e / broadcast(sum_j e) with e = exp(x - broadcast(max_j x))."""
    e, lb = p.src
    if lb.op is not Op.VIEW or lb.src[0].op is not Op.REDUCE:
        return None
    lsum = lb.src[0]
    if lsum.arg[0] != "add" or len(lsum.arg[1]) != 1 or lsum.src[0] is not e:
        return None
    j = lsum.arg[1][0]
    if lb.arg != View(p.shape, tuple(0 if k == j else s for k, s in enumerate(contiguous_strides(lsum.shape))
                                      )) or not _max_subtracted(e, j):
        return None
    return j


def _max_subtracted(e: Node, j: int) -> bool:
    """e = exp2(c * (x - broadcast(max_j x))) with c > 0 (softmax's spelling), or exp's."""
    if e.op is not Op.EXP2:
        return False
    t = e.src[0]
    if t.op is Op.MUL:
        c = next((s for s in t.src if s.op is Op.VIEW and s.src[0].op is Op.CONST), None)
        if c is None or not isinstance(c.src[0].arg, (int, float)) or not c.src[0].arg > 0:
            return False
        t = next(s for s in t.src if s is not c)
    if t.op is not Op.ADD:
        return False
    for x, nm in (t.src, t.src[::-1]):
        if nm.op is Op.VIEW and nm.src[0].op is Op.NEG and nm.src[0].src[0].op is Op.REDUCE:
            m = nm.src[0].src[0]
            if m.arg == ("max", (j,)) and m.src[0] is x and all(s == 0 for k, s in enumerate(nm.arg.strides)
                                                                if k == j):
                return True
    return False


def _sum_of(v: Node, p: Node, j: int, users: dict[Node, list[Node]]) -> Node | None:
    """The REDUCE add over p's axis j that reads p through view v, times values: a plain
    broadcasting view of p (each axis one of p's, whole, or a broadcast) into one MUL."""
    if v.op is not Op.VIEW or v.arg.mask is not None or v.arg.offset != 0:
        return None
    cs = contiguous_strides(p.shape)
    walks = [next((k for k, c in enumerate(cs) if c == s and p.shape[k] == d and d != 1), None) if s else None
             for s, d in zip(v.arg.strides, v.arg.shape)]
    if sorted(k for k in walks if k is not None) != [k for k in range(len(p.shape)) if p.shape[k] != 1]:
        return None
    mul = users.get(v, [])
    if len(mul) != 1 or mul[0].op is not Op.MUL or len(users.get(mul[0], [])) != 1:
        return None
    r = users[mul[0]][0]
    if r.op is not Op.REDUCE or r.arg[0] != "add" or r.dtype != p.dtype:
        return None
    if [walks[a] for a in r.arg[1]] != [j]:
        return None  # (the sum must run over the softmax axis, and only over it)
    return r if mul[0].src.count(v) == 1 else None


def _deferred(r: Node, p: Node, j: int) -> Node:
    """sum_j e_j w_j / l, in r's shape: r rebuilt over e, divided by the row sums broadcast."""
    e, lb = p.src
    lsum = lb.src[0]
    mul = r.src[0]
    v = next(s for s in mul.src if s.op is Op.VIEW and s.src[0] is p)
    ve = Node.make(Op.VIEW, e.dtype, v.shape, (e,), v.arg)
    prod = Node.make(Op.MUL, mul.dtype, mul.shape, tuple(ve if s is v else s for s in mul.src), mul.arg)
    total = Node.make(Op.REDUCE, r.dtype, r.shape, (prod,), r.arg)
    cs, ls = contiguous_strides(p.shape), contiguous_strides(lsum.shape)
    strides = []
    for k, (s, d) in enumerate(zip(v.arg.strides, v.arg.shape)):
        walk = next((a for a, c in enumerate(cs) if c == s and p.shape[a] == d and d != 1), None) if s else None
        strides.append(0 if walk is None or k in r.arg[1] else ls[walk])
    lv = View(r.shape, tuple(strides))
    return Node.make(Op.FDIV, r.dtype, r.shape, (total, Node.make(Op.VIEW, lsum.dtype, r.shape, (lsum,), lv)))
