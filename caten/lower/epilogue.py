"""A GEMM's epilogue fused into its blocks: the elementwise stage right after a packed GEMM
(a bias, an activation, a residual add; the Mixer's GELU and residual) that reads the GEMM's
output only at the element it computes runs over each mc x nc output block as soon as that
block's last K block is stored -- while the block is still in the cache, on the thread that
computed it -- instead of as a separate pass over the whole output (one more fork and join,
and a read of an output that has left the caches by then)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.lower import loopir as L
from caten.lower.index import Aff, Coords
from caten.lower.loopir import X
from caten.schedule import Unfusable
from caten.schedule.plan import GemmPlan

if TYPE_CHECKING:
    from caten.lower import KernelLowerer


def candidate(kl: KernelLowerer, n: Node, si: int, plan: GemmPlan) -> Node | None:
    """The stage after GEMM n that may run as its epilogue: elementwise, of n's shape without
    the summed axes (the keepdims ones), reading no register reduction's value."""
    if si + 1 >= len(kl.members) or plan.i is None or len(plan.js) != 1:
        return None
    m = kl.members[si + 1]
    red = set(plan.red)
    if m.op is Op.REDUCE or m.shape != tuple(d for a, d in enumerate(n.shape) if a not in red):
        return None
    if kl.bufname(m) is None or kl.reads_scalars(m):
        return None
    return m


def fuse(kl: KernelLowerer, n: Node, m: Node, si: int, plan: GemmPlan, coord: dict[int, Aff],
         rows: tuple[X, X], cols: tuple[X, X], last: X | None, reads: set[str]) -> list | None:
    """Stage m over the block of rows [rows[0], +rows[1]) and columns [cols[0], +cols[1]) of n's
    output (its batch axes at `coord`), run when `last` (the block's last K block) holds: the
    statements to put after the block's tiles, or None when m may not run there -- it reads n
    at another element, or writes a buffer the GEMM reads (`reads`; n's own it may overwrite
    in place: the GEMM is done with that element)."""
    bn, bm = kl.bufname(n), kl.bufname(m)
    if bm != bn and bm in reads:
        return None
    er = kl.newvar(f"s{si}er", plan.mc)
    ec = kl.newvar(f"s{si}ec", plan.nc)
    at = dict(coord)
    at[plan.i] = Aff.of(kl.at(L.iadd(rows[0], er), plan.M))
    at[plan.j] = Aff.of(kl.at(L.iadd(cols[0], ec), plan.N))
    red = set(plan.red)
    cn = Coords(n.shape, axes=[Aff() if a in red else at[a] for a in range(n.rank)])
    cm = Coords(m.shape, axes=[at[a] for a in range(n.rank) if a not in red])
    try:
        val = kl.val(m, cm, root=True)
    except Unfusable:
        return None
    own = kl.index(n, cn)
    if any(x.op == "load" and x.arg == bn and x.src[0] is not own for x in L.nodes(val)):
        return None
    kl.bufs[bm] = m.dtype
    kl.done.add(m)
    count = rows[1] if last is None else L.alu(Op.WHERE, L.IDX, last, rows[1], L.const(0))
    return [L.Loop(er.arg, count, [L.Loop(ec.arg, cols[1], [L.Store(bm, kl.index(m, cm), val)])])]


def loaded(*values: X) -> set[str]:
    """The buffers that expressions load from."""
    return {x.arg for x in L.nodes(*values) if x.op == "load"}


__all__ = ["candidate", "fuse", "loaded"]
