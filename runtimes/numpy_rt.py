"""`-r numpy`: the reference interpreter, the oracle every other runtime is checked against.

The interpreter itself is `caten.ir.interpret` (it walks the graph once in topological order and
computes each node with the op table's numpy reference); this plugin only wraps it, so it holds
no op semantics of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caten.ir.interpret import evaluate
from caten.ir.program import Program
from caten.plugin import Options, Runtime


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

    def compile(self, program: Program, options: Options) -> _Interp:
        return _Interp(program)


RUNTIME = NumpyRuntime()
