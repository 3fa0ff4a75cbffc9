"""What an ONNX value is in caten: the element types caten has (and their numpy types), and the
diagnostic for a construct caten cannot express. Shared by the ONNX converter and its per-op
lowerings; literals and symbols, which the torch importer writes too, are caten.frontends.text."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error

# ONNX TensorProto element types caten has (FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, UINT4 and
# INT4 too: onnx.numpy_helper unpacks a packed INT4 initializer into ml_dtypes' one-per-byte array, caten's layout)
DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 9: "bool", 10: "f16",
          11: "f64", 12: "u32", 13: "u64", 16: "bf16", 17: "f8e4m3", 18: "f8e4m3fnuz", 19: "f8e5m2", 20: "f8e5m2fnuz",
          21: "u4", 22: "i4"}
FLOAT8 = (17, 18, 19, 20)
_ML = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2": "float8_e5m2",
       "f8e5m2fnuz": "float8_e5m2fnuz", "i4": "int4", "u4": "uint4"}  # the dtypes ml_dtypes supplies
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8, "i16": np.int16, "i32": np.int32,
      "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}


class Unsupported(Error):
    """An ONNX construct caten cannot express; the message names the node and op type."""


def np_dtype(dt: str) -> Any:
    if dt in _ML:
        import ml_dtypes

        return getattr(ml_dtypes, _ML[dt])
    return NP[dt]


def caten_dtype(arr_dtype: Any) -> str | None:
    """The caten dtype name of a numpy dtype (None if caten has none)."""
    for k, v in NP.items():
        if np.dtype(arr_dtype) == np.dtype(v):
            return k
    name = np.dtype(arr_dtype).name
    return next((k for k, v in _ML.items() if v == name), None)
