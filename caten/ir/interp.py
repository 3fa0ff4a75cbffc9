"""The reference interpreter of a principal-op graph: the oracle every runtime is checked against.

It walks the graph once in topological order and computes each node with the op table's numpy
reference, so it holds no op semantics of its own. It lives with the IR (not in a runtime) so that
the compiler's own passes (the rule checker) and the numpy runtime plugin share it without the
compiler importing a runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import TABLE, Ctx, Op


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
