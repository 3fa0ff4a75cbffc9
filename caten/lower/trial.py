"""The scheduler's fusion veto: a group of nodes may share outer loops only if the lowering can
lower it. The pipeline injects `check_group` into `caten.schedule.schedule`."""

from __future__ import annotations

from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.lower.kernel_lowerer import KernelLowerer
from caten.schedule.model import Unfusable
from caten.schedule.reduce_plan import max_outer, plan_reduce


class GroupCheck:
    """The scheduler's veto: can these nodes share `outer` loops? It lowers the group and
    lets Unfusable escape. Incremental: the scheduler grows a group one node at a time, so
    when `members` is the last accepted group plus one node (same `outer`), only that node's
    stage is lowered on top of the kept lowering state. `fresh()` gives the state for one
    schedule."""

    def __init__(self) -> None:
        self.last: tuple[tuple[Node, ...], int, KernelLowerer] | None = None

    def fresh(self) -> GroupCheck:
        return GroupCheck()

    def __call__(self, members: list[Node], outer: int, realized: set[Node]) -> None:
        n = members[-1]
        if n.op is Op.REDUCE and max_outer(n) < outer:
            raise Unfusable("reduce axis inside the outer loops")
        last, self.last = self.last, None
        if last is not None and last[1] == outer and last[0] == tuple(members[:-1]):
            kl = last[2]
            kl.members.append(n)
            kl.stage(n, len(members) - 1)
        else:
            for m in members[:-1]:
                if m.op is Op.REDUCE and max_outer(m) < outer:
                    raise Unfusable("reduce axis inside the outer loops")
            # the plans the scheduler will record for these stages (caten.schedule.plan)
            kl = KernelLowerer("check", list(members), outer, realized, lambda n: "b",
                               lambda n: plan_reduce(n, outer, n.src[0] not in realized or n.src[0] in members))
            for si, m in enumerate(members):
                kl.stage(m, si)
        self.last = (tuple(members), outer, kl)


check_group = GroupCheck()
