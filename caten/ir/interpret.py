"""The reference interpreter: a graph evaluated node by node with the op table's numpy references.

It is the oracle of the whole project (the `numpy` runtime, the rule checker, the conformance
suite, the tests), so it lives with the table it reads rather than in a runtime plugin: the
rewrite engine and the rule checker can use it without depending on the plugins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caten.ir import control
from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import TABLE, Ctx, Op


def _control(spec: object, xs: Sequence[np.ndarray], env: dict[str, int]) -> list[np.ndarray]:
    run = control.run_loop if isinstance(spec, control.Loop) else control.run_branch
    return run(spec, xs, env, evaluate)


def evaluate(nodes: Sequence[Node], inputs: Sequence[np.ndarray], env: dict[str, int]) -> list[np.ndarray]:
    """Compute `nodes` given BUFFER arrays (by index) and dimension values."""
    vals: dict[int, np.ndarray] = {}
    memo: dict = {}
    with np.errstate(all="ignore"):
        for n in toposort(nodes):
            shape = tuple(D.evaluate(d, env) for d in n.shape)
            ctx = Ctx(n.arg, shape, n.dtype, env, inputs, memo, _control)
            out = np.asarray(TABLE[n.op].ref(ctx, *(vals[id(s)] for s in n.src)))
            if out.dtype != n.dtype.np:
                out = out.astype(n.dtype.np)
            if n.op is not Op.BUFFER and out.shape != shape:
                out = np.broadcast_to(out, shape)
            vals[id(n)] = out
    return [vals[id(n)] for n in nodes]
