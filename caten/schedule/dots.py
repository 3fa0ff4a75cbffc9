"""Dot products turned outward: a contraction whose innermost source axis is summed, but whose
largest operand is contiguous along a kept axis instead, is summed with that axis innermost.

`(matmul x W)` of one row x [1 K] and W [K N] is REDUCE over [1 N K] with K innermost: as dot
products each output column walks W N elements apart (a 768 x 3072 GEMV: 13.5 ms, 0.3 GF/s).
Swapping K with N makes the sum "tiled" (caten.schedule.reduce_plan): for each k, a vector of
columns accumulates x[k] * W[k, j..j+w], reading W in order. Only the loop order changes; the
REDUCE is rebuilt over the permuted operands (caten.schedule.layout's `_moved_reduce`) and
viewed back in its old shape, where a summed axis of size 1 moved (so the view is a reshape)."""

from __future__ import annotations

from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.view import View
from caten.schedule.layout import _moved_reduce, replace_nodes
from caten.schedule.plan import LOWP, gemm_plan
from caten.schedule.reduce_plan import tiled


def _strides(o: Node) -> tuple | None:
    """Element strides of operand o along its axes: its view's, or a computed value's own
    (contiguous: elementwise producers are fused and read in the same order)."""
    if o.op is Op.VIEW:
        return o.arg.strides
    return View.of(o.shape).strides


def _size(o: Node, strides: tuple) -> D.Dim:
    """Distinct elements o reads: the extents of the axes it steps along."""
    return D.prod([d for d, s in zip(o.shape, strides) if s != 0])


def swap(n: Node) -> list[int] | None:
    """The axis swap that puts a kept axis innermost in REDUCE n's source, where its largest
    operand is contiguous along that axis and not along the summed innermost one; else None."""
    if n.op is not Op.REDUCE or n.dtype.name in LOWP or n.dtype.is_bool:
        return None
    src = n.src[0]
    last = src.rank - 1
    if src.op is not Op.MUL or src.rank < 2 or last not in n.arg[1] or tiled(n) or gemm_plan(n) is not None:
        return None
    ops = [(o, _strides(o)) for o in src.src]
    if any(s is None for _, s in ops):
        return None
    sizes = [_size(o, s) for o, s in ops]
    if not all(isinstance(z, int) for z in sizes):
        return None
    big, st = ops[0] if sizes[0] >= sizes[1] else ops[1]
    if st[last] in (0, 1, -1):
        return None
    kept = [a for a in range(src.rank) if a not in n.arg[1] and st[a] == 1 and isinstance(src.shape[a], int)
            and src.shape[a] >= 8]
    if not kept:
        return None
    j = kept[-1]
    perm = list(range(src.rank))
    perm[j], perm[last] = last, j
    return perm


def outward(outputs: list[Node]) -> list[Node]:
    """`outputs` with every contraction `swap` finds summed in the better order."""
    todo: dict[Node, Node] = {}
    for n in toposort(outputs):
        perm = swap(n)
        if perm is None:
            continue
        moved = _moved_reduce(n, perm)
        if not tiled(moved):
            continue
        todo[n] = Node.make(Op.VIEW, n.dtype, n.shape, (moved,), View.of(moved.shape).permute(perm))
    return replace_nodes(outputs, todo)
