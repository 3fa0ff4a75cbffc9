"""`-r numpy`: the reference interpreter (`caten.ir.interp`) as a runtime plugin, the oracle
every other runtime is checked against. `evaluate` is importable from here too (plugins and
tests use it)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caten.ir.interp import evaluate
from caten.ir.program import Program
from caten.run.runtime import CompileOptions, Runtime

__all__ = ["RUNTIME", "NumpyRuntime", "evaluate"]


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
