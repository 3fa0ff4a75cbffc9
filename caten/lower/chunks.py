"""A loop's iterations in contiguous chunks, one per thread: the one place that spells the
arithmetic of `Parallel` splits (outer loops, a stage's first loop, a sum's blocks, packing)."""

from __future__ import annotations

from dataclasses import dataclass

from caten import loopir as L
from caten.ir.dims import Dim
from caten.ir.ops import Op
from caten.loopir import X
from caten.schedule.plan import on_gpu
from caten.schedule.split import SPLIT_MIN


def threads_for(work: Dim, most: int) -> X:
    """How many threads a split loop runs on: `most`, or 1 below SPLIT_MIN elements of work; on a
    GPU always `most` (its work-groups, the launch's grid: a size the host knows from the dims)."""
    if on_gpu():
        return L.const(most)
    return L.alu(Op.WHERE, L.IDX, L.icmplt(L.dim(work), L.const(SPLIT_MIN)), L.const(1), L.const(most))


@dataclass(frozen=True)
class Chunk:
    """Thread `tid` of `teff` runs iterations start .. start + count - 1 of [0, extent)."""
    tid: X
    teff: X
    start: X
    count: X

    def wrap(self, u: X, body: list, most: int) -> list:
        """`for u in 0..count: body` on every thread (body reads its iteration as start + u)."""
        return [L.Parallel(self.tid.arg, self.teff, [L.Loop(u.arg, self.count, body)], most=most)]


def chunk(tid: X, extent: X, teff: X) -> Chunk:
    size = X.make("idiv", L.IDX, (L.iadd(extent, L.iadd(teff, L.const(-1))), teff))
    start = L.imul(tid, size)
    return Chunk(tid, teff, start, L.imax(L.imin(size, L.isub(extent, start)), L.const(0)))
