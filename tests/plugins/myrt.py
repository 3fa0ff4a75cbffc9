"""A runtime plugin in one file, outside the package: `caten --plugin tests/plugins/myrt.py -r myrt`.

It interprets the graph with the op table's numpy references (what `-r numpy` does) and, when
CATEN_MYRT_LOG names a file, appends one line per run, so a test can see that it ran.
"""

from __future__ import annotations

import os

from caten.ir import dims as D
from caten.ir.graph import toposort
from caten.ir.ops import TABLE, Ctx, Op
from caten.plugin import Runtime


class _Exe:
    def __init__(self, program):
        self.program = program

    def run(self, inputs, outputs, env):
        import numpy as np

        vals = {}
        for n in toposort(self.program.nodes):
            shape = tuple(D.evaluate(d, env) for d in n.shape)
            out = np.asarray(TABLE[n.op].ref(Ctx(n.arg, shape, n.dtype, env, inputs), *(vals[id(s)] for s in n.src)))
            out = out.astype(n.dtype.np, copy=False)
            vals[id(n)] = out if n.op is Op.BUFFER or out.shape == shape else np.broadcast_to(out, shape)
        for dst, n in zip(outputs, self.program.nodes):
            dst[...] = vals[id(n)]
        log = os.environ.get("CATEN_MYRT_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"ran {self.program.name}\n")


class MyRuntime(Runtime):
    name = "myrt"
    description = "a one-file test plugin (numpy references)"

    def compile(self, program, options):
        return _Exe(program)


RUNTIME = MyRuntime()
