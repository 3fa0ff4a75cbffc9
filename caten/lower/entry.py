"""The entry plan: what a program's entry function does, for a renderer to spell -- check the
`where` constraints, place the temporaries in the arena, and run its steps in order: kernel
calls, and the loops and branches (caten.ir.control) around calls of their bodies' own entries.

A body is a program lowered on its own (its `EntryPlan` is nested in the step), whose entry
`BODY__impl(ins..., outs..., arena, dims...)` the step calls with pointers into the enclosing
plan's buffers: a loop's current and next state (swapped after each trip, no copy), the slices
of its scanned inputs and stacked outputs at the trip's position, its scratch arena. The
counter is the body's last dim argument. Nothing of a loop runs in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.control import Loop
from caten.ir.dtypes import DType

Call = tuple  # (kernel, buffer args, dim args)


@dataclass(frozen=True)
class LoopStep:
    """Run `body` (after `cond`, when there is one, holds) for counter values start, start+1, ...
    while below `end` (when there is one) and fewer than `trips` trips ran (when there are
    scanned or stacked tensors). `start`/`end`: a dim, or the name of a buffer holding an i64."""
    body: EntryPlan
    cond: EntryPlan | None
    index: str  # the counter: the bodies' dim of that name
    start: D.Dim | str
    end: D.Dim | str | None
    trips: D.Dim | None
    reverse: bool
    inits: tuple[str, ...]  # the carries' initial values
    state: tuple[tuple[str, str], ...]  # (current, next) per carry
    sizes: tuple[D.Dim, ...]  # bytes per carry
    finals: tuple[str | None, ...]  # where each carry's final value is copied (None: unused)
    captures: tuple[str, ...]
    xs: tuple[tuple[str, D.Dim], ...]  # scanned input, bytes per slice
    ys: tuple[tuple[str, D.Dim], ...]  # stacked output, bytes per slice
    flag: str | None  # cond's result (one bool)
    arena: str  # the bodies' scratch: the body's, then the condition's at `cond_offset`
    cond_offset: D.Dim = 0

    @property
    def first(self) -> str:
        """The dim that is 1 on the first trip (a body that packs an invariant weight once reads it)."""
        return "__f" + self.index[3:]

    def text(self, dim: Callable[[D.Dim], str]) -> list[str]:
        def b(x: D.Dim | str | None) -> str:
            return "-" if x is None else x if isinstance(x, str) else dim(x)
        head = (f"loop {self.body.name}: from {b(self.start)} below {b(self.end)}"
                + (f" at most {dim(self.trips)} trips" if self.trips is not None else "")
                + (" reversed" if self.reverse else "")
                + f" state {' '.join(f'{i}->{c}/{n}' for i, (c, n) in zip(self.inits, self.state))}"
                + f" finals {' '.join(f or '-' for f in self.finals)} captures {' '.join(self.captures) or '-'}"
                + f" xs {' '.join(x for x, _ in self.xs) or '-'} ys {' '.join(y for y, _ in self.ys) or '-'}"
                + f" arena {self.arena}" + (f" while {self.cond.name} -> {self.flag} (its arena at "
                                            f"{dim(self.cond_offset)})" if self.cond else ""))
        subs = [self.body] + ([self.cond] if self.cond else [])
        return [head] + ["  " + ln for p in subs for ln in p.text().splitlines()]


@dataclass(frozen=True)
class IfStep:
    """Run `then` if the bool in `pred` holds, else `other`; both write `outs`."""
    pred: str
    then: EntryPlan
    other: EntryPlan
    captures: tuple[str, ...]
    outs: tuple[str, ...]
    arena: str

    def text(self, dim: Callable[[D.Dim], str]) -> list[str]:
        head = (f"if {self.pred}: {self.then.name} else {self.other.name} captures "
                f"{' '.join(self.captures) or '-'} outs {' '.join(self.outs)} arena {self.arena}")
        return [head] + ["  " + ln for p in (self.then, self.other) for ln in p.text().splitlines()]


Step = Call | LoopStep | IfStep


@dataclass(frozen=True)
class EntryPlan:
    name: str
    inputs: tuple[tuple[str, DType], ...]  # buffer name, dtype, in argument order
    outputs: tuple[tuple[str, DType], ...]
    dims: tuple[str, ...]  # the dynamic dims, in argument order
    temps: tuple[tuple[str, DType, D.Dim], ...]  # buffer, dtype, byte offset in the arena
    calls: tuple[Step, ...]  # kernel calls (kernel, buffer args, dim args) and control steps
    constraints: tuple[tuple[D.Dim, D.Dim], ...]  # lhs == rhs, checked at call time
    arena_size: D.Dim

    def text(self, canon: dict[str, D.Dim] | None = None) -> str:
        def dim(d: D.Dim) -> str:
            return str(D.rename(d, canon) if canon else d)

        lines = [f"entry {self.name}({', '.join(f'{b} {t}' for b, t in self.inputs + self.outputs)}"
                 f"{''.join(', i64 ' + dim(D.sym(d)) for d in self.dims)})"]
        lines += [f"  check {dim(a)} == {dim(b)}" for a, b in self.constraints]
        lines.append(f"  arena {dim(self.arena_size)} bytes")
        lines += [f"  {b} {t} at arena + {dim(off)}" for b, t, off in self.temps]
        for c in self.calls:
            if isinstance(c, tuple):
                k, bs, ds = c
                lines.append(f"  call {k}({', '.join(list(bs) + [dim(D.sym(d)) for d in ds])})")
            else:
                lines += ["  " + ln for ln in c.text(dim)]
        return "\n".join(lines)

    def buffers_used(self) -> set[str]:
        """The buffers its steps pass on (a temporary nothing uses needs no pointer)."""
        out: set[str] = set()
        for c in self.calls:
            if isinstance(c, tuple):
                out.update(c[1])
            elif isinstance(c, LoopStep):
                out.update(c.inits + c.captures + tuple(x for p in c.state for x in p) + (c.arena,))
                out.update([x for x, _ in c.xs] + [y for y, _ in c.ys] + [f for f in c.finals if f])
                out.update(x for x in (c.start, c.end, c.flag) if isinstance(x, str))
            else:
                out.update((c.pred, c.arena) + c.captures + c.outs)
        return out


def nested(plan: EntryPlan) -> Iterator[EntryPlan]:
    """The plans of every body inside `plan`, innermost first (each rendered before its caller)."""
    for c in plan.calls:
        if isinstance(c, LoopStep):
            for p in (c.body, c.cond):
                if p is not None:
                    yield from nested(p)
                    yield p
        elif isinstance(c, IfStep):
            for p in (c.then, c.other):
                yield from nested(p)
                yield p


def _bytes(buf: object) -> D.Dim:
    return buf.nbytes  # type: ignore[attr-defined]


def _slice(buf: object) -> D.Dim:
    return D.mul(D.prod(buf.shape[1:]), buf.dtype.itemsize)  # type: ignore[attr-defined]


def entry_plan(name: str, sched, kernels: Sequence[L.Kernel], subs: dict[int, dict[str, object]]) -> EntryPlan:
    """The plan of a schedule whose kernels lowered to `kernels` (by name), its control kernels'
    bodies to `subs` (kernel index -> body role -> Lowered)."""
    prog = sched.program
    ins = tuple((f"in{i}", s.dtype) for i, s in enumerate(prog.inputs))
    outs = tuple((f"out{i}", s.dtype) for i, s in enumerate(prog.outputs))
    temps = tuple((b.name, b.dtype, b.offset) for b in sched.buffers.values() if b.role == "temp")
    by_name = {k.name: k for k in kernels}
    calls: list[Step] = []
    for gi, sk in enumerate(sched.kernels):
        cp = sk.stages[0].control
        if cp is None:
            k = by_name[sk.name]
            calls.append((k.name, tuple(p.name for p in k.params), tuple(k.dims)))
            continue
        low = subs[gi]
        spec = cp.spec
        bufs = sched.buffers
        if isinstance(spec, Loop):
            nc, ncap, nx = spec.carries, spec.captures, spec.xs
            ops = cp.operands
            rt = list(ops[nc + ncap + nx:])
            start = spec.start if spec.start is not None else rt.pop(0)
            end = spec.end if spec.end is not None else (rt.pop(0) if spec.end_operand else None)
            ys = tuple((cp.outs[k], _slice(bufs[cp.outs[k]])) for k in cp.keep[nc:])
            calls.append(LoopStep(
                low["body"].plan, low["cond"].plan if "cond" in low else None, spec.index, start, end,
                spec.trips if (nx or ys) else None, spec.reverse, ops[:nc], cp.state,
                tuple(_bytes(bufs[c]) for c, _ in cp.state), tuple(cp.outs.get(k) for k in range(nc)),
                ops[nc:nc + ncap], tuple((x, _slice(bufs[x])) for x in ops[nc + ncap:nc + ncap + nx]), ys,
                cp.flag, cp.arena, cp.cond_offset))
        else:
            calls.append(IfStep(cp.operands[0], low["then"].plan, low["else"].plan, cp.operands[1:],
                                tuple(cp.outs[k] for k in cp.keep), cp.arena))
    return EntryPlan(name, ins, outs, tuple(prog.dims), temps, tuple(calls),
                     tuple((c.lhs, c.rhs) for c in prog.constraints), sched.arena_size)
