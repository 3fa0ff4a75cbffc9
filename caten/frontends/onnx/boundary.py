"""The graph's boundary at conversion: graph inputs and outputs that are tensors, sequences
(Python lists of tensors) or optionals (None or a value). Sequences and optionals do not exist in
caten: their structure is read from the fed values (the composite is specialized on it), their
tensors become parameters and results, named `x#0`, `x#1` ... (`x#v` inside an optional)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from caten.frontends.onnx.types import DTYPES, Unsupported, caten_dtype
from caten.frontends.text import sym


def flat_feeds(model: Any, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Graph input values by the names of their tensors: a sequence `x` (a list) gives `x#0`, `x#1` ...,
    an optional `x` with a value gives `x#v` (or `x#v#0` ... for a sequence), an empty one nothing."""
    types = {vi.name: vi.type for vi in model.graph.input}
    out: dict[str, np.ndarray] = {}
    for name, v in feeds.items():
        _flatten(name, types.get(name), v, out)
    return out


def _flatten(name: str, tp: Any, v: Any, out: dict[str, np.ndarray]) -> None:
    if tp is not None and tp.HasField("optional_type"):
        if v is not None:
            _flatten(f"{name}#v", tp.optional_type.elem_type, v, out)
    elif isinstance(v, (list, tuple)) or (tp is not None and tp.HasField("sequence_type")):
        for i, e in enumerate(v or []):
            out[f"{name}#{i}"] = np.asarray(e)
    elif v is not None:
        out[name] = np.asarray(v)


UNFED = object()  # a graph input whose value the caller did not give


def declare_input(g: Any, name: str, tp: Any, value: Any) -> None:
    """Declare graph input `name`: a tensor parameter, or a sequence / optional of them whose
    structure (length, presence) is taken from the fed value: the composite is specialized on it."""
    if tp.HasField("sequence_type") or tp.HasField("optional_type"):
        if value is UNFED:
            raise Unsupported(f"graph input `{name}` is a sequence or optional: caten needs its value at conversion "
                              "(a list, a tensor or None), to know its length or presence")
        if tp.HasField("optional_type"):
            if value is None:
                g.opts[name] = None
                return
            g.opts[name] = f"{name}#v"
            declare_input(g, f"{name}#v", tp.optional_type.elem_type, value)
            return
        if not isinstance(value, (list, tuple)):
            raise Unsupported(f"graph input `{name}` is a sequence: caten needs its value (a list) at conversion, "
                              "to know its length")
        g.seqs[name] = [f"{name}#{i}" for i in range(len(value))]
        for i, v in enumerate(value):
            declare_input(g, f"{name}#{i}", tp.sequence_type.elem_type, v)
        return
    if value is not None and value is not UNFED and g.dtype(name) is None:  # in an optional: typed by its value
        v = np.asarray(value)
        g.types[name] = (caten_dtype(v.dtype), list(v.shape))
    _param(g, name)


def _param(g: Any, name: str) -> None:
    dt = g.dtype(name)
    if dt is None:
        raise Unsupported(f"graph input `{name}` has a type caten does not have (tensors, sequences and optionals "
                          f"of {', '.join(sorted(set(DTYPES.values())))} only)")
    shape = g.shape(name)
    if shape is None:
        raise Unsupported(f"graph input `{name}` has no shape (rank) in the model")
    var = sym(name.replace("#", "_"), g.taken, "x_")
    g.names[name] = var
    g.params.append((name, g.annot(var, dt, shape)))


def declare_output(g: Any, name: str, outs: list[tuple[str, str]]) -> str | int | None:
    """Append the composite results of graph output `name` to outs; its layout entry (Converted.layout)."""
    if name in g.opts:
        inner = g.opts[name]
        return None if inner is None else declare_output(g, inner, outs)
    if name in g.seqs:
        for e in g.seqs[name]:
            _result(g, e, name, outs)
        return len(g.seqs[name])
    _result(g, name, name, outs)
    return "tensor"


def _result(g: Any, name: str, label: str, outs: list[tuple[str, str]]) -> None:
    dt, shape = g.dtype(name), g.shape(name)
    if dt is None or shape is None or any(not isinstance(d, (int, str)) or d == "" for d in shape):
        raise Unsupported(f"graph output `{label}`: its dtype and shape must be known (got {dt}, {shape})")
    outs.append((g.tensor(name), g.annot(sym(label, g.taken, "y_"), dt, shape)))
