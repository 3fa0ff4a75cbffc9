"""A deliberately broken runtime for the conformance tests: the numpy interpreter, except
that ADD subtracts. `caten test-runtime -r broken-add --plugin tests/plugins/broken_add.py`
must report FAIL cells and exit 1."""

from __future__ import annotations

import numpy as np

from caten.ir.interpret import evaluate
from caten.ir.ops import Op
from caten.plugin import Options, Runtime


class _BrokenAdd:
    def __init__(self, program):
        self.program = program

    def run(self, inputs, outputs, env) -> None:
        from caten.ir import ops as O

        info = O.TABLE[Op.ADD]
        broken = O.OpInfo(info.op, info.group, info.arity, info.dtypes, info.dtype_rule,
                          lambda ctx, a, b: np.subtract(a, b).astype(a.dtype, copy=False), info.doc)
        saved = O.TABLE[Op.ADD]
        O.TABLE[Op.ADD] = broken
        try:
            vals = evaluate(self.program.nodes, inputs, env)
        finally:
            O.TABLE[Op.ADD] = saved
        for dst, val in zip(outputs, vals):
            dst[...] = val


class BrokenAddRuntime(Runtime):
    name = "broken-add"
    description = "the numpy interpreter with ADD computing a - b (a conformance-test fixture)"

    def compile(self, program, options: Options):
        return _BrokenAdd(program)


RUNTIME = BrokenAddRuntime()
