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

    def dump(self) -> str:
        kind = "loop" if isinstance(self.spec, Loop) else "branch"
        subs = ", ".join(f"{k} {s.program.name}" for k, s in self.subs.items())
        return f"{kind} over ({' '.join(self.operands)}) -> {self.outs} [{subs}]"


def materialize(nodes: list[Node]) -> list[Node]:
    """`nodes` with every operand of a loop or branch that is a view or a constant copied into a
    buffer of its own (a body reads its parameters as plain contiguous memory)."""
    order = toposort(nodes)
    if not any(n.op in CONTROL for n in order):
        return nodes
    memo: dict[Node, Node] = {}
    for n in order:
        src = tuple(memo[s] for s in n.src)
        if n.op in CONTROL:
            src = tuple(Node.make(Op.COPY, s.dtype, s.shape, (s,)) if s.op in (Op.VIEW, Op.CONST) else s for s in src)
        memo[n] = n if src == n.src else Node.make(n.op, n.dtype, n.shape, src, n.arg)
    return [memo[n] for n in nodes]


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
        cp.subs["body"] = schedule_fn(spec.body.program(f"{name}b", program, idx, keep))
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
    size: D.Dim = 0
    for s in cp.subs.values():
        size = D.dmax(size, s.arena_size)
    cp.arena = temp(T.u8, (size,))
    for m in members:
        cp.outs[m.arg[1]] = node_buf[m]
    return cp
