"""ModuleGen: the LLVM module of a set of loop-IR kernels, one function per kernel, the stages
inside a kernel's shared outer loops outlined into functions of their own."""

from __future__ import annotations

from caten.ir import dims as D
from caten.lower import loopir as L
from caten.render.llvm.fn import FnGen, StageCall
from caten.render.llvm.module import Module
from caten.render.llvm.threads import uses


class ModuleGen(Module):
    """A Module that renders loop-IR kernels (`kernel`)."""

    def kernel(self, k: L.Kernel, defines: dict[str, D.Dim]) -> None:
        """One function per kernel; the stages inside its shared outer loops are outlined into
        functions of their own (smaller functions: much faster register allocation and LSR)."""
        dims = [f"i64 %d_{d}" for d in k.dims]  # parameters and arguments alike
        params = [f"ptr noalias %b_{p.name}" for p in k.params] + dims
        chain: list[L.Loop] = []
        body = k.body
        while len(body) == 1 and type(body[0]) is L.Loop:
            chain.append(body[0])
            body = body[0].body
        if len(body) >= 2:
            outer = [lp.var for lp in chain]
            new: list = []
            for i, st in enumerate(body):
                free, bufs = uses([st])
                if isinstance(st, (L.Loop, L.TileMM, L.MacroMM, L.DirectMM)) and free <= set(outer):
                    # a stage takes only the buffers it touches: passing all of a kernel's buffers
                    # to each stage cost register allocation and alias analysis time per call
                    name = f"{k.name}__s{i}"
                    g = FnGen(self, k.dims, defines)
                    g.stmts([st])
                    mine = [p.name for p in k.params if p.name in bufs]
                    ps = [f"ptr noalias %b_{b}" for b in mine] + dims + [f"i64 %v_{v}" for v in outer]
                    self.funcs.append(g.text(f"define internal void @{name}({', '.join(ps)}) #1 {{"))
                    self.root(name)
                    new.append(StageCall(name, [f"ptr %b_{b}" for b in mine] + dims
                                         + [f"i64 %v_{v}" for v in outer]))
                else:
                    new.append(st)
            for lp in reversed(chain):
                new = [L.Loop(lp.var, lp.extent, new)]
            body = new
        else:
            body = k.body
        g = FnGen(self, k.dims, defines)
        g.stmts(body)
        self.funcs.append(g.text(f"define internal void @{k.name}({', '.join(params)}) #1 {{"))
        self.root(k.name)
