"""A GEMM's epilogue fused into its blocks: the elementwise stage right after a packed GEMM
(a bias, an activation, a residual add; the Mixer's GELU and residual) that reads the GEMM's
output only at the element it computes runs over each mc x nc output block as soon as that
block's last K block is stored -- while the block is still in the cache, on the thread that
computed it -- instead of as a separate pass over the whole output (one more fork and join,
and a read of an output that has left the caches by then)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.index import Aff, Coords
from caten.lower.panels import row_runs
from caten.schedule.model import Unfusable
from caten.schedule.plan import GemmPlan

if TYPE_CHECKING:
    from caten.lower.kernel_lowerer import KernelLowerer

Split = Callable[[X, tuple[int, ...], Dim], dict[int, Aff]]  # a merged index -> its axes' coordinates


def candidate(kl: KernelLowerer, n: Node, si: int, plan: GemmPlan) -> Node | None:
    """The stage after GEMM n that may run as its epilogue: elementwise, of n's shape
    (`GemmPlan.epilogue_axes`), reading no register reduction's value."""
    if si + 1 >= len(kl.members) or plan.i is None:
        return None
    m = kl.members[si + 1]
    if m.op is Op.REDUCE or plan.epilogue_axes(n.shape, m.shape) is None:
        return None
    if kl.bufname(m) is None or kl.reads_scalars(m):
        return None
    return m


def fuse(kl: KernelLowerer, n: Node, m: Node, si: int, plan: GemmPlan, coord: dict[int, Aff],
         rows: tuple[X, X], cols: tuple[X, X], last: X | None, reads: set[str], split: Split) -> list | None:
    """Stage m over the block of rows [rows[0], +rows[1]) and columns [cols[0], +cols[1]) of n's
    output (its batch axes at `coord`; merged columns, a convolution's output rows and columns,
    as one run per output row the block touches, `split` giving the outer ones' coordinates),
    run when `last` (the block's last K block) holds: the statements to put after the block's
    tiles, or None when m may not run there -- it reads n at another element, or writes a buffer
    the GEMM reads (`reads`; n's own it may overwrite in place: the GEMM is done with that
    element)."""
    bn, bm = kl.bufname(n), kl.bufname(m)
    if bm != bn and bm in reads:
        return None
    er = kl.newvar(f"s{si}er", plan.mc)
    at = dict(coord)
    at[plan.i] = Aff.of(kl.at(L.iadd(rows[0], er), plan.M))
    c0, count = cols
    if len(plan.js) == 1:
        ec = kl.newvar(f"s{si}ec", plan.nc)
        at[plan.j] = Aff.of(kl.at(L.iadd(c0, ec), plan.N))
        loops = [(ec, count)]
    else:
        wd = n.shape[plan.j]
        wl, outer = L.dim(wd), D.prod([n.shape[a] for a in plan.js[:-1]])
        sg, t = kl.newvar(f"s{si}es", outer), kl.newvar(f"s{si}et", wd)
        row, runs, _, lo, hi = row_runs(c0, count, wl, sg)
        at |= split(row, plan.js[:-1], outer)
        at[plan.j] = Aff.of(kl.at(L.iadd(lo, t), wd))
        loops = [(sg, runs), (t, L.isub(hi, lo))]  # (no columns: one run of none)
    pairs = plan.epilogue_axes(n.shape, m.shape) or {}
    cn = Coords(n.shape, axes=[at[a] if a in pairs.values() else Aff() for a in range(n.rank)])
    cm = Coords(m.shape, axes=[at[pairs[b]] if b in pairs else Aff() for b in range(m.rank)])
    try:
        val = kl.val(m, cm, root=True)
    except Unfusable:
        return None
    own = kl.index(n, cn)
    if any(x.op == "load" and x.arg == bn and x.src[0] is not own for x in L.nodes(val)):
        return None
    kl.bufs[bm] = m.dtype
    kl.done.add(m)
    body = [L.Store(bm, kl.index(m, cm), val)]
    for v, e in reversed(loops):
        body = [L.Loop(v.arg, e, body)]
    n_rows = rows[1] if last is None else L.alu(Op.WHERE, L.IDX, last, rows[1], L.const(0))
    return [L.Loop(er.arg, n_rows, body)]


def read_by(stmts: list) -> set[str]:
    """The buffers that statements load from (or copy from: a panel copy's source)."""
    seen: set[int] = set()
    names: set[str] = set()
    for s, roots in L.walk_stmts(stmts):
        if isinstance(getattr(s, "src", None), str):
            names.add(s.src)
        names.update(x.arg for x in L.nodes(*roots, seen=seen) if x.op == "load")
    return names


def loaded(*values: X) -> set[str]:
    """The buffers that expressions load from."""
    return {x.arg for x in L.nodes(*values) if x.op == "load"}


__all__ = ["candidate", "fuse", "loaded", "read_by"]
