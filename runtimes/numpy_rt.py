"""`-r numpy`: the reference interpreter, the oracle every other runtime is checked against.

It walks the graph once in topological order and computes each node with the op table's
numpy reference, so this module holds no op semantics of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import TABLE, Ctx, Op
from caten.ir.program import Program
from caten.run.runtime import CompileOptions, Runtime


def evaluate(nodes: Sequence[Node], inputs: Sequence[np.ndarray], env: dict[str, int]) -> list[np.ndarray]:
    """Compute `nodes` given BUFFER arrays (by index) and dimension values."""
    vals: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for n in toposort(nodes):
            shape = tuple(D.evaluate(d, env) for d in n.shape)
            ctx = Ctx(n.arg, shape, n.dtype, env, inputs)
            out = np.asarray(TABLE[n.op].ref(ctx, *(vals[id(s)] for s in n.src)))
            if out.dtype != n.dtype.np:
                out = out.astype(n.dtype.np)
            if n.op is not Op.BUFFER and out.shape != shape:
                out = np.broadcast_to(out, shape)
            vals[id(n)] = out
    return [vals[id(n)] for n in nodes]


class _Interp:
    def __init__(self, program: Program):
        self.program = program

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        for dst, val in zip(outputs, evaluate(self.program.nodes, inputs, env)):
            dst[...] = val


class NumpyRuntime(Runtime):
    name = "numpy"
    checks_bounds = True  # numpy itself checks every index
    description = "reference interpreter over the principal-op table (the oracle)"

    def compile(self, program: Program, options: CompileOptions) -> _Interp:
        return _Interp(program)


RUNTIME = NumpyRuntime()
