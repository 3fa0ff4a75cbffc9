"""Call-time checks for reductions that have no identity (LANGUAGE.md 5.1 "Empty tensors").

`sum`/`prod` of an empty axis give 0/1, but `max`/`min`/`argmax` have no value to give: the
call must fail, as numpy's does, rather than return -inf or a sentinel index. Each such
REDUCE adds a `where`-style constraint that every runtime (and the C ABI entry) already
checks before any kernel runs."""

from __future__ import annotations

from caten.ir import dims as D
from caten.ir.graph import toposort
from caten.ir.ops import Op
from caten.ir.program import Constraint, Program


def nonempty_constraints(prog: Program) -> list[Constraint]:
    """`1 idiv (n + 1) == 0`, i.e. n >= 1, for the reduced extent n of every non-bool max-REDUCE
    whose extent is not a positive constant (only integer division: all runtimes have it)."""
    out: list[Constraint] = []
    seen: set = set()
    for n in toposort(prog.nodes):
        if n.op is not Op.REDUCE or n.arg[0] != "max" or n.dtype.is_bool:
            continue
        extent = D.prod([n.src[0].shape[a] for a in n.arg[1]])
        if isinstance(extent, int) and extent > 0:
            continue
        key = D._key(extent)
        if key in seen:
            continue
        seen.add(key)
        text = f"max/min/argmax over {D.to_str(extent)} elements"
        out.append(Constraint(D.floordiv(1, D.add(extent, 1)), 0, text, extent))
    return out


def add_nonempty_constraints(prog: Program) -> Program:
    have = {(D._key(c.lhs), D._key(c.rhs)) for c in prog.constraints}
    for c in nonempty_constraints(prog):
        if (D._key(c.lhs), D._key(c.rhs)) not in have:
            prog.constraints.append(c)
    return prog
