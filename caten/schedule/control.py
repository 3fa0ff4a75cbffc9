"""Scheduling loops and branches (LOOP and IF nodes, caten.ir.control).

A loop or branch is a kernel of its own in the schedule, with no loop IR: the entry plan runs it
as a statement around calls of its bodies, each body a program scheduled (and later lowered) on
its own. The results of one loop (siblings: LOOP nodes of one spec and operands) are one such
kernel. Its operands live in memory (views and constants are copied out first); the loop's state
is double-buffered in the arena: a current and a next buffer per carry (the body reads one and
writes the other, then they swap), with one scratch area for its bodies' own temporaries (they
never run at once), all live for the loop's kernel alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.control import Branch, Loop
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.program import Program

CONTROL = (Op.LOOP, Op.IF)


@dataclass
class ControlPlan:
    """What a loop's or branch's kernel does, in the names of the enclosing schedule's buffers."""
    spec: Loop | Branch
    operands: tuple[str, ...]  # buffers of the node's operands, in src order
    keep: tuple[int, ...]  # the spec results the bodies compute (all carries; the used ys / results)
    outs: dict[int, str] = field(default_factory=dict)  # spec result k -> buffer it lands in
    subs: dict[str, object] = field(default_factory=dict)  # "body"/"cond" or "then"/"else" -> Schedule
    state: tuple[tuple[str, str], ...] = ()  # loop: (current, next) buffers per carry
    flag: str | None = None  # loop: the condition body's result (bool)
    arena: str | None = None  # the bodies' scratch
    cond_offset: D.Dim = 0  # a loop's condition's scratch starts there (its body's before it)

    def dump(self) -> str:
        kind = "loop" if isinstance(self.spec, Loop) else "branch"
        subs = ", ".join(f"{k} {s.program.name}" for k, s in self.subs.items())
        return f"{kind} over ({' '.join(self.operands)}) -> {self.outs} [{subs}]"


def _align(n: D.Dim) -> D.Dim:
    return D.mul(D.floordiv(D.add(n, 63), 64), 64)


def materialize(nodes: list[Node]) -> list[Node]:
    """`nodes` with every operand of a loop or branch that is a view or a constant copied into a
    buffer of its own (a body reads its parameters as plain contiguous memory)."""
    order = toposort(nodes)
    if not any(n.op in CONTROL for n in order):
        return nodes
    wider = _wider(order)
    memo: dict[Node, Node] = {}
    for n in order:
        src = tuple(memo[s] for s in n.src)
        arg = n.arg
        if n.op in CONTROL:
            src = tuple(Node.make(Op.COPY, s.dtype, s.shape, (s,)) if s.op in (Op.VIEW, Op.CONST) else s for s in src)
            if n.arg[0] in wider:  # the same trips as a loop that also stacks more: run that one
                arg = (wider[n.arg[0]], n.arg[1])
        memo[n] = n if src == n.src and arg is n.arg else Node.make(n.op, n.dtype, n.shape, src, arg)
    return [memo[n] for n in nodes]


def _same_trips(a: Loop, b: Loop) -> bool:
    return (a.carries, a.captures, a.xs, a.index, a.start, a.end, a.end_operand, a.trips, a.reverse) == \
        (b.carries, b.captures, b.xs, b.index, b.start, b.end, b.end_operand, b.trips, b.reverse) \
        and a.cond is None and b.cond is None and a.body.params == b.body.params


def _wider(order: list[Node]) -> dict[Loop, Loop]:
    """Loops over the same operands whose body's results begin with another's: a gradient's forward
    pass again, stacking each trip's carries besides what the loop itself gives (caten.autodiff.
    control). The narrower one's results are the wider one's first results: one loop runs."""
    by_src: dict[tuple, list[Loop]] = {}
    out: dict[Loop, Loop] = {}
    seen: dict[tuple, Loop] = {}  # equal loops built apart (each `grad` form elaborates its own forward)
    for n in order:
        spec = n.arg[0] if n.op is Op.LOOP else None
        if spec is None or spec in out or spec in by_src.get(n.src, []):
            continue
        first = seen.setdefault((repr(spec), n.src), spec)
        if first is not spec:
            out[spec] = first
            continue
        by_src.setdefault(n.src, []).append(spec)
    for specs in by_src.values():
        for a in specs:
            for b in specs:
                if b is not a and len(b.body.outputs) > len(a.body.outputs) and _same_trips(a, b) \
                        and b.body.outputs[:len(a.body.outputs)] == a.body.outputs:
                    out[a] = b
    for a, b in list(out.items()):  # (an equal loop of a narrower one: the wider one too)
        while b in out and out[b] is not a:
            b = out[b]
        out[a] = b
    return out


def sibling_key(n: Node) -> tuple:
    return (id(n.arg[0]), n.src)


def plan(members: Sequence[Node], program: Program, name: str, node_buf: dict[Node, str],
         temp: Callable[[object, tuple], str], schedule_fn: Callable[[Program], object]) -> ControlPlan:
    """Plan the kernel of one loop or branch (its result nodes `members`): its sub-schedules, the
    buffers of its state and scratch (`temp(dtype, shape)` makes one), where its results land."""
    n0 = members[0]
    spec: Loop | Branch = n0.arg[0]
    used = sorted({m.arg[1] for m in members})
    ops = tuple(node_buf[s] for s in n0.src)
    if isinstance(spec, Loop):
        keep = tuple(range(spec.carries)) + tuple(k for k in used if k >= spec.carries)
        cp = ControlPlan(spec, ops, keep)
        idx = spec.index
        cp.subs["body"] = schedule_fn(spec.body.program(f"{name}b", program, idx, keep,
                                                        range(spec.carries, spec.carries + spec.captures)))
        if spec.cond is not None:
            cp.subs["cond"] = schedule_fn(spec.cond.program(f"{name}c", program, idx))
            cp.flag = temp(T.bool_, ())
        cp.state = tuple((temp(c.dtype, tuple(c.shape)), temp(c.dtype, tuple(c.shape)))
                         for c in spec.body.params[:spec.carries])
    else:
        keep = tuple(used)
        cp = ControlPlan(spec, ops, keep)
        cp.subs["then"] = schedule_fn(spec.then.program(f"{name}t", program, None, keep))
        cp.subs["else"] = schedule_fn(spec.other.program(f"{name}e", program, None, keep))
    # one scratch area: a loop's body, then its condition's apart (a body may keep a packed weight
    # there from its first trip to its last); a branch's sides share theirs
    subs = list(cp.subs.values())
    size: D.Dim = 0
    if isinstance(spec, Loop):
        cp.cond_offset = _align(subs[0].arena_size)
        size = D.add(cp.cond_offset, subs[1].arena_size) if len(subs) > 1 else subs[0].arena_size
    else:
        for s in subs:
            size = D.dmax(size, s.arena_size)
    cp.arena = temp(T.u8, (size,))
    for m in members:
        cp.outs[m.arg[1]] = node_buf[m]
    return cp
