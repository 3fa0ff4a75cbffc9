"""The entry points of the per-op lowerings: `lower` one node through the registry
(`node.HANDLERS`), `supported_ops`. Importing this module imports every op family, so each
registers its handlers; a new op goes into the family module whose name says what it is."""

from __future__ import annotations

from typing import Any

from caten.frontends.onnx import (  # noqa: F401  (each family registers its handlers on import)
    controlflow,
    conv,
    creation,
    dynamic,
    elementwise,
    index,
    matmul,
    ml,
    movement,
    nbits,
    nms,
    norm,
    place,
    quant,
    recurrent,
    reduce,
    sampling,
    scatter,
    sequence,
    signal,
    sort,
    training,
)
from caten.frontends.onnx.node import HANDLERS, N
from caten.frontends.onnx.types import Unsupported


def supported_ops() -> set[str]:
    """The ONNX op types the importer lowers itself (the rest may still expand to a function body)."""
    return set(HANDLERS) | {"Constant", "Shape", "Size"}


def lower(g: Any, node: Any) -> None:
    """Emit caten for one node, binding its outputs."""
    fn = HANDLERS.get(node.op_type)
    n = N(g, node)
    if fn is None:
        raise Unsupported(f"{n.where}: ONNX op `{node.op_type}` is not supported by caten's importer",
                          hint="docs/import.md lists the supported ops")
    outs = fn(n)
    if isinstance(outs, str):
        outs = [outs]
    for name, expr in zip(node.output, outs):
        if name and expr is not None:
            g.emit(expr, name)
