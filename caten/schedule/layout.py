"""Contractions computed in the layout their result is read in.

A packed GEMM stores its micro-tiles along its column axis, the innermost kept axis of the
REDUCE. When the value is then read only through a permutation that moves another axis innermost
(the token-mixing MLP of an MLP-Mixer: `(transpose (linear h W2 b2))`), every later read of it
is a strided gather, or the output's store is a scatter: a transposed store cost the Mixer's
token MLP a fifth of its time. `orient` pushes such a permutation down through the elementwise
ops between it and the REDUCE, into the REDUCE's operands, so that the GEMM itself runs
transposed (C^T = B^T A^T: rows and columns swap) and writes each tile row contiguously where
the value lands. Only values with a single reader are rewritten, so nothing is computed twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import ELEMENTWISE, Op
from caten.ir.view import View, contiguous_strides
from caten.ir.walk import post_order
from caten.schedule.plan import gemm_plan


def perm_of(v: View, shape: Sequence[D.Dim]) -> list[int] | None:
    """The permutation p (view axis a reads source axis p[a]) when view `v` is a pure
    permutation of a contiguous source of `shape` (size-1 axes keep their order), else None."""
    if v.offset != 0 or v.mask is not None or len(v.shape) != len(shape):
        return None
    cs = contiguous_strides(shape)
    ones_src = [b for b, d in enumerate(shape) if d == 1]
    perm: list[int] = []
    used: set[int] = set()
    for d, s in zip(v.shape, v.strides):
        if d == 1:
            if not ones_src:
                return None
            b = ones_src.pop(0)
        else:
            hits = [b for b, (e, t) in enumerate(zip(shape, cs)) if e == d and t == s and e != 1 and b not in used]
            if len(hits) != 1:
                return None
            b = hits[0]
        used.add(b)
        perm.append(b)
    return perm if len(used) == len(shape) else None


def _permuted(n: Node, perm: Sequence[int]) -> Node:
    """n read with its axes permuted (result axis a = n's axis perm[a]): a view's own strides
    permuted, anything else read through a permuting view (computed once, where it is)."""
    shape = tuple(n.shape[p] for p in perm)
    if n.op is Op.VIEW:
        return Node.make(Op.VIEW, n.dtype, shape, n.src, n.arg.permute(perm))
    return Node.make(Op.VIEW, n.dtype, shape, (n,), View.of(n.shape).permute(perm))


def _gain(e: Node, perm: list[int], users: dict[Node, int]) -> bool:
    """Whether reading `e` through `perm` reaches, through single-reader elementwise ops and a
    reshape view, a single-reader GEMM whose column axis the permutation would change."""
    stack = [e]
    while stack:
        x = stack.pop()
        if x.op in ELEMENTWISE and all(s.shape == x.shape for s in x.src):
            if users.get(x, 0) <= 1 or x is e:
                stack.extend(s for s in x.src if users.get(s, 0) <= 1)
            continue
        if x.op is Op.VIEW and x.src[0].op is Op.REDUCE and users.get(x, 0) <= 1 \
                and _reoriented(x.arg.permute(perm), x.src[0], users):
            return True
    return False


def _reoriented(v: View, r: Node, users: dict[Node, int]) -> Node | None:
    """REDUCE r computed in the order view `v` reads it, when r is a GEMM with no other reader
    and that order gives it another column axis; else None."""
    if users.get(r, 0) > 1:
        return None
    plan = gemm_plan(r)
    if plan is None:
        return None
    inner = _reduce_perm(v, r)
    if inner is None or inner == sorted(inner):
        return None
    moved = _moved_reduce(r, inner)
    new = gemm_plan(moved)
    return moved if new is not None and inner[new.j] != plan.j else None


def _reduce_perm(v: View, r: Node) -> list[int] | None:
    """The permutation of REDUCE r's source axes that lays r out in view v's order: r's size-1
    axes (the reduced ones among them) keep their places, the others follow v. None unless v
    reads every element of r once, as a permutation that may drop or add size-1 axes."""
    if v.offset != 0 or v.mask is not None:
        return None
    cs = contiguous_strides(r.shape)
    order: list[int] = []
    for d, s in zip(v.shape, v.strides):
        if d == 1:
            continue
        hits = [b for b, (e, t) in enumerate(zip(r.shape, cs)) if e == d and t == s and e != 1]
        if len(hits) != 1 or hits[0] in order:
            return None
        order.append(hits[0])
    big = [b for b, d in enumerate(r.shape) if d != 1]
    if sorted(order) != big:
        return None
    it = iter(order)
    return [next(it) if d != 1 else b for b, d in enumerate(r.shape)]


def _moved_reduce(r: Node, perm: list[int]) -> Node:
    """REDUCE r over its source's axes permuted: the product's operands are read permuted, so the
    new source is again a product of views, as a GEMM plan needs."""
    rop, axes = r.arg
    x = r.src[0]
    src = Node.make(x.op, x.dtype, tuple(x.shape[p] for p in perm), [_permuted(o, perm) for o in x.src], x.arg)
    new_axes = tuple(sorted(perm.index(a) for a in axes))
    shape = tuple(r.shape[p] for p in perm)
    return Node.make(Op.REDUCE, r.dtype, shape, (src,), (rop, new_axes))


def _push(e: Node, perm: list[int], users: dict[Node, int]) -> Node:
    """e permuted, the permutation moved into a single-reader GEMM below it (see `_gain`): the
    single-reader elementwise ops on the way are rebuilt permuted (a tree, walked without
    recursion), everything else is read through a permuting view."""
    def inner(x: Node) -> bool:
        return x.op in ELEMENTWISE and all(s.shape == x.shape for s in x.src) and users.get(x, 0) <= 1

    out: dict[Node, Node] = {}
    for x in post_order([e], lambda x: x.src if inner(x) else ()):
        shape = tuple(x.shape[p] for p in perm)
        moved = None
        if inner(x):
            out[x] = Node.make(x.op, x.dtype, shape, [out[s] for s in x.src], x.arg)
            continue
        if x.op is Op.VIEW and x.src[0].op is Op.REDUCE and users.get(x, 0) <= 1:
            moved = _reoriented(x.arg.permute(perm), x.src[0], users)
        out[x] = _permuted(x, perm) if moved is None else \
            Node.make(Op.VIEW, x.dtype, shape, (moved,), View.of(moved.shape).reshape(shape))
    return out[e]


def orient(outputs: list[Node]) -> list[Node]:
    """`outputs` with every permuting view whose contraction can be run in its order rewritten
    so (see the module docstring); the graph is unchanged when there is none."""
    order = toposort(outputs)
    users: dict[Node, int] = {}
    for n in order:
        for s in set(n.src):
            users[s] = users.get(s, 0) + 1
    for o in outputs:
        users[o] = users.get(o, 0) + 1
    todo: dict[Node, Node] = {}
    for n in order:
        if n.op is not Op.VIEW or n.src[0].op is Op.VIEW:
            continue
        e = n.src[0]
        if e.op is Op.REDUCE:  # a view straight of the contraction (a transpose of a matmul's result)
            moved = _reoriented(n.arg, e, users)
            if moved is not None:
                todo[n] = Node.make(Op.VIEW, n.dtype, n.shape, (moved,), View.of(moved.shape).reshape(n.shape))
            continue
        perm = perm_of(n.arg, e.shape)
        if perm is None or perm == sorted(perm) or users.get(e, 0) > 1:
            continue
        if _gain(e, perm, users):
            todo[n] = _push(e, perm, users)
    return replace_nodes(outputs, todo)


def replace_nodes(outputs: list[Node], todo: dict[Node, Node]) -> list[Node]:
    """`outputs` with each node of `todo` replaced by its value there, and every node above one
    rebuilt. A replacement is built from the old nodes below it, which other replacements may
    replace: the walk leads each replaced node to its replacement, so those are rebuilt too (a
    replacement that kept an old operand kept its whole old cone alive: computed twice)."""
    if not todo:
        return outputs
    new: dict[Node, Node] = {}
    for n in toposort(outputs, lambda x: (todo[x],) if x in todo else x.src):
        if n in todo:
            new[n] = new.get(todo[n], todo[n])
        elif any(s in new for s in n.src):
            new[n] = Node.make(n.op, n.dtype, n.shape, [new.get(s, s) for s in n.src], n.arg)
    return [new.get(o, o) for o in outputs]
