"""ModuleGen: the LLVM module of a set of loop-IR kernels, one function per kernel, the stages
inside a kernel's loops outlined into functions of their own."""

from __future__ import annotations

import dataclasses
import re

from caten import loopir as L
from caten.ir import dims as D
from caten.lower.dimargs import takes
from caten.render.llvm.fn import FnGen, StageCall
from caten.render.llvm.module import Module
from caten.render.llvm.threads import uses

_STAGES = (L.Loop, L.TileMM, L.MacroMM, L.DirectMM)


def stage_of(st: object) -> int:
    """The schedule stage a statement lowers (N of its loop variables' `s<N>` prefix, caten.lower),
    or -1 where that is not known."""
    m = re.match(r"s(\d+)(?!\d)", getattr(st, "var", ""))
    return int(m[1]) if m else -1


def _entered(st: object) -> bool:
    """Whether the outliner looks inside loop st rather than outlining it whole: a kernel's
    shared outer loop, or the loop its threads share after its packed-once operands."""
    return isinstance(st, L.Loop) and (type(st) is L.Loop or st.hint == "outer")


class ModuleGen(Module):
    """A Module that renders loop-IR kernels (`kernel`); `profile`: `KERNEL__sprof` holds the
    number n of the kernel's outlined stages, then each one's cycles (its calls add what they
    took), then the number of the schedule stage each lowers (caten.run.profile reads them)."""

    profile = False

    def kernel(self, k: L.Kernel, defines: dict[str, D.Dim]) -> None:
        """One function per kernel; the stages inside its shared outer loops (and inside the loop
        its threads share) are outlined into functions of their own: smaller functions are much
        faster to register-allocate, and each is a unit that compiles in parallel and is cached
        alone (caten.render.llvm.units)."""
        params = [f"ptr noalias %b_{p.name}" for p in k.params] + [f"i64 %d_{d}" for d in k.dims]
        self._stage_no = 0
        self._timed: list[int] = []
        body = self._outline(k, k.body, [], defines)
        if self._timed:  # (profile) the stages' cycle counters, then which schedule stage each lowers
            n = len(self._timed)
            init = ", ".join(f"i64 {v}" for v in [n] + [0] * n + self._timed)
            self.funcs.append(f"@{k.name}__sprof = global [{1 + 2 * n} x i64] [{init}], align 64")
            self.declare("llvm.readcyclecounter", "i64", [])
        g = FnGen(self, k.dims, defines)
        g.stmts(body)
        self.funcs.append(g.text(f"define internal void @{k.name}({', '.join(params)}) #1 {{"))
        self.root(k.name)

    def _outline(self, k: L.Kernel, body: list, outer: list[str], defines: dict[str, D.Dim]) -> list:
        """body with its stages (statements among two or more that read no variable but the
        enclosing loops' counters) as calls of functions of their own; the loops around them
        are entered (`_entered`), not outlined whole."""
        if len(body) == 1 and _entered(body[0]):
            lp = body[0]
            return [dataclasses.replace(lp, body=self._outline(k, lp.body, outer + [lp.var], defines))]
        if len(body) < 2:
            return body
        new: list = []
        pnames = {p.name for p in k.params}
        for st in body:
            free, bufs = uses([st])
            if isinstance(st, L.Loop) and st.hint == "outer":
                new += self._outline(k, [st], outer, defines)
            elif isinstance(st, _STAGES) and free <= set(outer):
                # a stage takes only the buffers it touches: passing all of a kernel's buffers
                # to each stage cost register allocation and alias analysis time per call
                name = f"{k.name}__s{self._stage_no}"
                self._stage_no += 1
                # and the dims it reads, both in its structure's order: stages of equal structure
                # over other buffers and dims (the Mixer's two MLPs) are equal units, compiled once
                sd, mine = takes([st], k.dims, bufs & pnames)
                g = FnGen(self, sd, defines)
                g.stmts([st])
                args = [f"i64 %d_{d}" for d in sd] + [f"i64 %v_{v}" for v in outer]
                ps = [f"ptr noalias %b_{b}" for b in mine] + args
                self.funcs.append(g.text(f"define internal void @{name}({', '.join(ps)}) #1 {{"))
                self.root(name)
                timer = None
                if self.profile:
                    timer = (f"{k.name}__sprof", 1 + len(self._timed))
                    self._timed.append(stage_of(st))
                new.append(StageCall(name, [f"ptr %b_{b}" for b in mine] + args, mine, sd, set(outer), timer))
            else:
                new.append(st)
        return new
