"""Conversion-time folding of shape arithmetic: Shape, Size, Constant and integer ops over constants.

Exported models compute reshape targets as `Shape -> Gather -> Concat`; with static shapes these
are known numbers, and caten wants them as literals. Only small results are folded, and only
from true constants (initializers, Constant nodes, folded values), never from run-time inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_INT_OPS = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Neg": np.negative, "Abs": np.abs,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "Not": np.logical_not, "And": np.logical_and,
    "Or": np.logical_or, "Max": np.maximum, "Min": np.minimum, "Where": np.where,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
}


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def constant_value(node: Any) -> np.ndarray:
    """The value of a Constant node, from whichever attribute holds it."""
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.array(a.i, np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), np.int64)
    raise ValueError(f"Constant node `{node.name}` has no value caten can read (sparse or string)")


def fold_op(op: str, node: Any, xs: list[np.ndarray | None]) -> list[np.ndarray] | None:
    if op in _INT_OPS:
        vals = [x for x in xs if x is not None]
        return [np.asarray(_INT_OPS[op](*vals))]
    if op == "Identity":
        return [xs[0]]
    if op == "Mod":
        return [np.fmod(xs[0], xs[1]) if _attr(node, "fmod", 0) else np.mod(xs[0], xs[1])]
    if op in ("Sqrt", "Reciprocal", "Floor", "Ceil") and xs[0].dtype.kind == "f":
        fn = {"Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil}[op]
        return [fn(xs[0]).astype(xs[0].dtype)]
    if op == "Cast":
        from onnx import helper

        to = helper.tensor_dtype_to_np_dtype(_attr(node, "to"))
        return [xs[0].astype(to)]
    if op == "CastLike":
        return [xs[0].astype(xs[1].dtype)]
    if op == "Div":
        a, b = xs
        return [np.trunc(a / b).astype(a.dtype)] if a.dtype.kind in "iu" else [np.asarray(a / b)]
    if op == "Concat":
        return [np.concatenate(xs, axis=_attr(node, "axis", 0))]
    if op == "Gather":
        return [np.take(xs[0], xs[1], axis=_attr(node, "axis", 0))]
    if op == "Unsqueeze":
        axes = _attr(node, "axes") if len(xs) < 2 else xs[1].tolist()
        r = xs[0].ndim + len(axes)
        out = xs[0]
        for a in sorted(a % r for a in axes):
            out = np.expand_dims(out, a)
        return [out]
    if op == "Squeeze":
        axes = _attr(node, "axes") if len(xs) < 2 or xs[1] is None else xs[1].tolist()
        return [np.squeeze(xs[0], axis=None if axes is None else tuple(axes))]
    if op == "Reshape":
        shape = [d if d != 0 else xs[0].shape[i] for i, d in enumerate(xs[1].tolist())]
        return [xs[0].reshape(shape)]
    if op == "Slice" and len(xs) >= 3:
        x, starts, ends = xs[0], xs[1].tolist(), xs[2].tolist()
        axes = xs[3].tolist() if len(xs) > 3 and xs[3] is not None else list(range(len(starts)))
        steps = xs[4].tolist() if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
        idx = [slice(None)] * x.ndim
        for s, e, a, k in zip(starts, ends, axes, steps):
            idx[a] = slice(s, e, k)
        return [x[tuple(idx)]]
    if op == "ConstantOfShape":
        v = _attr(node, "value")
        from onnx import numpy_helper

        fill = numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)
        return [np.full(xs[0].tolist(), fill.flat[0], fill.dtype)]
    if op == "Range":
        return [np.arange(xs[0], xs[1], xs[2]).astype(xs[0].dtype)]
    if op == "ReduceProd" and len(xs) == 1:
        return [np.prod(xs[0], keepdims=bool(_attr(node, "keepdims", 1)))]
    return None


def try_fold(g: Any, node: Any) -> bool:
    """Fold `node` into g.consts when it is shape arithmetic on constants; True if it was."""
    op = node.op_type
    if op == "Constant":
        try:
            g.set_const(node.output[0], constant_value(node))
        except ValueError as e:
            from caten.frontends.onnx.types import Unsupported

            raise Unsupported(str(e)) from None
        return True
    if op in ("Shape", "Size"):
        shape = g.shape(node.input[0])
        if shape is None or not all(isinstance(d, int) for d in shape):
            return False
        if op == "Size":
            g.consts[node.output[0]] = np.array(int(np.prod(shape)), np.int64)
        else:
            start, end = _attr(node, "start", 0), _attr(node, "end", None)
            g.consts[node.output[0]] = np.array(shape[slice(start, end)], np.int64)
        return True
    if op in ("Cast", "CastLike") and _narrow_target(g, node):
        return False  # rounding to a narrow type is the library's (narrow.py), numpy's astype would not saturate
    present = [n for n in node.input if n]
    if not present or not all(n in g.consts for n in present):
        return False
    xs = [g.consts[n] if n else None for n in node.input]
    if any(x is not None and x.size > 4096 for x in xs):
        return False
    try:
        out = fold_op(op, node, xs)
    except Exception:  # leave anything numpy disagrees with to the caten lowering
        return False
    if out is None or any(o.dtype.kind not in "iubf" or o.size > 4096 for o in out):
        return False
    for name, v in zip(node.output, out):
        g.consts[name] = np.asarray(v)
    return True


def _narrow_target(g: Any, node: Any) -> bool:
    from caten.frontends.onnx.narrow import NARROW
    from caten.frontends.onnx.types import FLOAT8

    code = _attr(node, "to", None) if node.op_type == "Cast" else g.code(node.input[1])
    return code in NARROW or code in FLOAT8
