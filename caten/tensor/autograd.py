"""`Tensor.backward`: the language's `value-and-grad` (or `vjp`) over the pending graph.

The graph from the leaves that require gradients to the loss is printed as a helper composite
and differentiated by caten's autodiff transform (the VJP rules of the op table and the
library's custom gradients), not by a second implementation. Outside a trace the loss and every
gradient are computed by one program; inside one they stay lazy, so a jitted training step
is forward, backward and update in one program.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.lazy import GRAD, INPUT, NTH, Node, toposort
from caten.tensor.realize import realize
from caten.tensor.tensor import Tensor


def _cut(n: Node) -> bool:
    """Where differentiation stops: leaves, and values that need no gradient."""
    return n.op == INPUT or not n.requires_grad


def grad_node(loss: Node, cotangent: Node | None) -> tuple[Node, list[Node], list[Node]]:
    """(the gradient node, the leaves it differentiates for, one node per leaf's gradient)."""
    order = toposort([loss], _cut)
    hparams = [n for n in order if _cut(n)]
    wrt = [i for i, p in enumerate(hparams) if p.op == INPUT and p.requires_grad and p.owner is not None
           and p.owner() is not None]
    if not wrt:
        raise Error("backward: no leaf tensor that requires gradients reaches this tensor",
                    hint="create the parameters with requires_grad=True")
    leaves = [hparams[i] for i in wrt]
    outs = [(p.shape, p.dtype) for p in leaves]
    kw: dict[str, Any] = {"loss": loss, "wrt": wrt}
    srcs: tuple = tuple(hparams)
    if cotangent is None:
        g = Node(GRAD, srcs, kw, None, None, outs=[(loss.shape, loss.dtype)] + outs)
        return g, leaves, [Node(NTH, (g, i + 1), {}, s, d) for i, (s, d) in enumerate(outs)]
    kw["cotangent"] = True
    srcs += (cotangent,)
    if len(outs) == 1:  # vjp with one :wrt gives the gradient itself
        return Node(GRAD, srcs, kw, outs[0][0], outs[0][1]), leaves, []
    g = Node(GRAD, srcs, kw, None, None, outs=outs)
    return g, leaves, [Node(NTH, (g, i), {}, s, d) for i, (s, d) in enumerate(outs)]


def backward(t: Tensor, gradient: Any = None, retain_graph: Any = None, create_graph: bool = False,
             inputs: Any = None) -> None:
    """Accumulate d(t)/d(leaf) into each leaf's `.grad` (torch's Tensor.backward). The graph is
    kept whatever `retain_graph` says (it is a value); higher-order gradients are not supported."""
    if create_graph or inputs is not None:
        raise Error(f"backward({'create_graph=True' if create_graph else 'inputs=...'}) is not supported",
                    hint="higher-order gradients: the language's nested grad forms (docs/training.md)")
    if not t.requires_grad:
        raise Error("backward: this tensor does not require gradients",
                    hint="no input of its computation has requires_grad=True, it ran under no_grad, or it is "
                         "a result of a caten.jit function (those are leaves: call backward inside the function)")
    cot = None
    if gradient is not None or t.shape != ():
        if gradient is None:
            if t.numel() != 1:
                raise Error(f"backward of a non-scalar tensor (shape {list(t.shape)}) needs a gradient",
                            hint="pass gradient= shaped like the tensor, or reduce it to a scalar first")
            gradient = Tensor.ones(list(t.shape), t.dtype, runtime=t.runtime)
        g = gradient if isinstance(gradient, Tensor) else Tensor(np.asarray(gradient), dtype=t.dtype,
                                                                 runtime=t.runtime)
        if g.shape != t.shape:
            raise Error(f"backward: gradient of shape {list(g.shape)} for a tensor of shape {list(t.shape)}")
        cot = g.node
    gnode, leaves, picks = grad_node(t.node, cot)
    grads = picks if picks else [gnode]
    handles = []
    with state.no_grad():
        for leaf, gn in zip(leaves, grads):
            h = leaf.owner()
            new = Tensor(gn, runtime=t.runtime)
            h.grad = new if h.grad is None else h.grad + new
            handles.append(h)
    if state.trace() is not None:
        if cot is None:  # later uses of the loss read the value the gradient program computes
            t.node = Node(NTH, (gnode, 0), {}, t.shape, t.dtype)
        return
    value = None
    todo = [h.grad.node for h in handles]
    if cot is None and t.node.value is None:
        value = Node(NTH, (gnode, 0), {}, t.shape, t.dtype)
        todo.append(value)
    realize(todo, t.runtime)
    if value is not None:
        t.node.value = value.value
