"""Blocked accumulation of float sums in the loop IR, so every renderer (LLVM, C, OpenCL,
CUDA) sums accurately.

A sum run as one serial (or vector-of-partials) accumulator loses about n rounding steps:
f32 ones stop growing at 2^24 per partial, and 100M uniforms err by ~1e-5. numpy's pairwise
summation errs by about log2(n) steps (LANGUAGE.md 5.1 asks for no worse). Here the reduced
loops are cut into blocks of at most BLOCK elements (the schedule picks the cut:
`caten.schedule.plan.block_plan`); each block sums in its own accumulator
of the reduction's dtype (the innermost loop: the renderer vectorizes it into partials, as
before), and the block sums are added into a second-level accumulator that is f64 for f32 and
narrower floats, so its own rounding (at most n/BLOCK terms at 2^-53) stays far below one f32
step. The error is then bounded by BLOCK f32 steps on sum|x| whatever n is, and in practice
(partials of BLOCK/lanes elements, random rounding) it is close to numpy's. Summing a block
costs BLOCK adds; closing one costs a conversion and an add: no measurable loss of speed.
Block sums are added with an "acc" (reassociable) update: a device renderer may spread the
blocks over work-items and combine their wide sums in a tree (cstyle's `reduction_loop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import REDUCERS, TABLE, Op
from caten.loopir import X
from caten.lower.chunks import chunk, threads_for

if TYPE_CHECKING:
    from caten.lower.kernel_lowerer import KernelLowerer

def wide(acc_dt: DType) -> DType:
    """The second-level accumulator's dtype."""
    return T.f64 if acc_dt.is_float else acc_dt


class Blocked:
    """The reduced loops of one register reduction, cut by `block_plan`: `coords` maps each
    reduced axis to its index (the cut axis q to b*c + r, known to lie in [0, d))."""

    def __init__(self, kl: KernelLowerer, si: int, red: Sequence[int], extents: Sequence[Dim], plan: tuple[int, int],
                 part: str | None = None, ends: Sequence[Dim | X] | None = None):
        self.q, self.c = plan
        self.extents = list(extents)
        self.ends = list(ends) if ends is not None else list(extents)  # the loops' run-time ends (a causal cut's)
        self.vars = [kl.newvar(f"s{si}r{a}", d) for a, d in zip(red, extents)]
        dq = extents[self.q]
        self.nb = D.floordiv(D.add(dq, self.c - 1), self.c)
        self.b = kl.newvar(f"s{si}rb{red[self.q]}", self.nb)
        self.block: X = self.b  # the block index (a thread's start + b when split)
        self.part = part
        if part is not None:  # the blocks split over threads (caten.schedule.split.sum_split)
            self._split(kl, si, D.prod(extents))
        r = self.vars[self.q]
        kl.ranges[r] = (0, self.c - 1)
        e = L.iadd(L.imul(self.block, L.const(self.c)), r)
        kl.ranges[e] = (0, D.add(dq, -1))
        self.kl = kl
        self.coords = dict(zip(red, self.vars)) | {red[self.q]: e}

    def _split(self, kl: KernelLowerer, si: int, size: Dim) -> None:
        self.chunk = chunk(kl.newvar(f"s{si}tid", kl.threads), L.dim(self.nb), threads_for(size, kl.threads))
        self.block = L.iadd(self.chunk.start, self.b)
        kl.ranges[self.block] = (0, D.add(self.nb, -1))

    def body(self, acc: str, acc_dt: DType, init: X, upd: X) -> tuple[list, X]:
        """Statements summing `upd` (an update of `acc`) over the reduced loops, and the sum."""
        kl, q, w = self.kl, self.q, wide(acc_dt)
        outer = f"{acc}w"
        inner = kl.nest(self.vars[q + 1:], self.ends[q + 1:], [L.SetAcc(acc, upd)])
        dq, end = self.extents[q], self.ends[q]
        nb: Dim | X = self.nb
        if isinstance(end, X):  # (a cut key loop: blocks up to its end)
            ext = L.imin(L.const(self.c), L.iadd(end, L.imul(self.block, L.const(-self.c))))
            nb = X.make("idiv", L.IDX, (L.iadd(end, L.const(self.c - 1)), L.const(self.c)))
        elif isinstance(dq, int) and dq % self.c == 0:
            ext = L.const(self.c)
        else:
            ext = L.imin(L.const(self.c), L.iadd(L.dim(dq), L.imul(self.block, L.const(-self.c))))
        part = L.var(acc, acc_dt)
        wsum = outer if self.part is None else f"{acc}p"  # a thread's own partial
        block = [L.Acc(acc, acc_dt, init), L.Loop(self.vars[q].arg, ext, inner),
                 L.SetAcc(wsum, L.alu(Op.ADD, w, L.var(wsum, w), part if w == acc_dt else L.alu(Op.CAST, w, part),
                                      arg="acc"))]
        if self.part is None:
            loops = kl.nest(self.vars[:q] + [self.b], self.ends[:q] + [nb], block)
            return [L.Acc(outer, w, L.const(0.0, w))] + loops, L.var(outer, w)
        kl.bufs[self.part] = w
        t = kl.newvar(f"{acc}t", kl.threads)
        ch = self.chunk
        thread = [L.Acc(wsum, w, L.const(0.0, w)), L.Loop(self.b.arg, ch.count, block),
                  L.Store(self.part, ch.tid, L.var(wsum, w))]
        total = L.alu(Op.ADD, w, L.var(outer, w), L.load(self.part, t, w), arg="acc")
        return [L.Parallel(ch.tid.arg, ch.teff, thread, most=kl.threads), L.Acc(outer, w, L.const(0.0, w)),
                L.Loop(t.arg, ch.teff, [L.SetAcc(outer, total)])], L.var(outer, w)


def identity(op: str, dtype) -> X:
    return L.const(TABLE[REDUCERS[op]].identity(dtype), dtype)
