"""ONNX lowerings of shape and creation ops: ConstantOfShape, EyeLike, Range, Shape, Size."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler
from caten.frontends.onnx.types import DTYPES
from caten.frontends.text import lit


@handler("ConstantOfShape")
def _const_of_shape(n: N) -> str:
    shape = n.ints(0, "input")
    v = n.a("value")
    from onnx import numpy_helper

    arr = numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)
    dt = DTYPES.get(v.data_type if v is not None else 1)
    if dt is None:
        raise n.fail("the fill value's dtype is not one caten has")
    return f"(full {dims(shape)} {lit(arr.reshape(-1)[0], dt)} :dtype {dt})"


@handler("EyeLike")
def _eyelike(n: N) -> str:
    s = n.int_shape()
    k = n.a("k", 0)
    dt = DTYPES.get(n.a("dtype")) if n.a("dtype") is not None else n.dt()
    return f"(cast (= (+ (reshape (arange {s[0]}) [{s[0]} 1]) {k}) (reshape (arange {s[1]}) [1 {s[1]}])) {dt})"


@handler("Range")
def _range(n: N) -> str:
    s, e, d = (np.asarray(n.c(i, "bound")).reshape(-1)[0] for i in range(3))
    cnt = max(int(np.ceil((e - s) / d)), 0)
    dt = n.dt()
    return f"(+ (* (cast (arange {cnt}) {dt}) {lit(d, dt)}) {lit(s, dt)})"


@handler("Shape")
def _shape(n: N) -> str:
    s = n.shape()
    start, end = n.a("start", 0), n.a("end", None)
    part = s[slice(start, end)]
    if not part:
        return "(full [0] 0 :dtype i64)"
    return f"(concat {' '.join(f'(full [1] {d} :dtype i64)' for d in part)} :axis 0)"


@handler("Size")
def _size(n: N) -> str:
    s = n.shape()
    expr = " ".join(str(d) for d in s)
    return f"(full [] (* 1 {expr}) :dtype i64)" if s else "(full [] 1 :dtype i64)"
