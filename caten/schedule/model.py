"""What a schedule is: its buffers, kernels and their stages, and the `Schedule` the lowering reads.

A module of its own so that the scheduler's helpers (split, arena) and the lowering import the data
without the scheduler. `Unfusable` is how a fusion the lowering cannot lower is refused."""

from __future__ import annotations

from dataclasses import dataclass, field

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.program import Program
from caten.schedule.reduce_plan import ReducePlan


@dataclass
class Buffer:
    name: str
    dtype: object
    shape: tuple[Dim, ...]
    role: str  # "in" | "out" | "temp"
    index: int = -1  # position among inputs or outputs
    offset: Dim = 0  # arena offset (temps)
    first: int = -1  # kernel that writes it
    last: int = -1  # last kernel that reads it
    local: int = -1  # >= 0: only read inside its kernel; holds one slice past the first `local` axes
    copies: int = 1  # local: one slice per thread of its kernel's split outer loop

    @property
    def elements(self) -> Dim:
        """Its length in elements (a local temp: its slices)."""
        if self.local < 0:
            return D.prod(self.shape)
        return D.mul(D.prod(self.shape[self.local:]), self.copies)

    @property
    def nbytes(self) -> Dim:
        return D.mul(self.elements, self.dtype.itemsize)


@dataclass
class Stage:
    node: Node
    kind: str  # "store" | "reduce" | "control" (a loop or branch: caten.schedule.control)
    buffer: str | None = None  # None: a reduction kept in a register
    plan: ReducePlan | None = None  # reduce: how it runs (caten.schedule.plan), read by the lowering
    scratch: tuple[str, ...] = ()  # tiled contraction: packed-panel buffers (A, B) in the arena
    control: object = None  # a loop's or branch's ControlPlan (caten.schedule.control), on its first stage
    cut: object = None  # a causal Cut (caten.schedule.causal): its loop over the keys stops at the block's last

    @property
    def mode(self) -> str:
        """reduce: "register" | "memory" | "tiled"."""
        return self.plan.mode if self.plan is not None else ""


@dataclass
class Kernel:
    name: str
    outer: int  # number of shared leading loops
    outer_shape: tuple[Dim, ...]
    stages: list[Stage] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    split: int = 1  # threads its loops are split over: outer loops, stages or sum blocks (caten.schedule.split)


@dataclass
class Schedule:
    program: Program
    kernels: list[Kernel]
    buffers: dict[str, Buffer]
    node_buf: dict[Node, str]
    arena_size: Dim
    peak: Dim
    outputs: list[Node]
    threads: int = 1  # GEMM stages may split their rows over this many threads (scratch is sized for it)

    def dump(self) -> str:
        p = self.program
        temps = [b for b in self.buffers.values() if b.role == "temp"]
        lines = [f"schedule {p.name}: {len(self.kernels)} kernel(s), {len(temps)} temp buffer(s), "
                 f"arena {self.arena_size} bytes, peak {self.peak} bytes"
                 + (f", GEMMs on up to {self.threads} threads" if self.threads > 1 else "")]
        for k in self.kernels:
            lines.append(f"kernel {k.name}: outer [{' '.join(map(str, k.outer_shape))}]"
                         + (f" on up to {k.split} threads" if k.split > 1 else "")
                         + f" reads {' '.join(k.reads) or '-'} writes {' '.join(k.writes) or '-'}")
            for s in k.stages:
                n = s.node
                mode, g = s.mode, s.plan.gemm if s.plan is not None else None
                if g is not None:
                    mode += f" {g.mr}x{g.nr} kc {g.kc} mc {g.mc} nc {g.nc}"
                    if g.direct is not None:
                        mode += f" direct {len(g.direct.positions())} taps"
                what = f"reduce-{n.arg[0]} axes {list(n.arg[1])} ({mode})" if s.kind == "reduce" else s.kind
                if s.scratch and s.kind != "control":
                    what += f" {'packed via' if s.mode == 'tiled' else 'thread partials in'} {' '.join(s.scratch)}"
                if s.cut is not None:
                    c = s.cut
                    end = f"{c.size + c.reach} - o{c.outer} * {c.block}" if c.down else \
                        f"(o{c.outer} + 1) * {c.block} + {c.reach}"
                    what += f" {'rows' if c.down else 'keys'} [0, min({c.size}, {end}" + \
                        (f" + {c.size} * {self.node_buf[c.unsafe]}[0]))" if c.unsafe is not None else "))")
                lines.append(f"  {what} {n.op.value} {n.dtype} [{' '.join(map(str, n.shape))}] -> "
                             f"{s.buffer or 'register'}")
                if s.control is not None:
                    lines.append(f"    {s.control.dump()}")
                    lines += ["    " + x for sub in s.control.subs.values() for x in sub.dump().splitlines()]
        lines.append("buffers:")
        for b in self.buffers.values():
            where = f"arena+{b.offset} live k{b.first}..k{b.last}" if b.role == "temp" else b.role
            if b.local >= 0:
                where += f" (kernel-local slice past axis {b.local})"
            lines.append(f"  {b.name} {b.dtype} [{' '.join(map(str, b.shape))}] {b.nbytes} bytes {where}")
        return "\n".join(lines)


class Unfusable(Exception):
    pass
