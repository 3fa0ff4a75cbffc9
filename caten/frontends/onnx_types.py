"""What an ONNX value is in caten text: the element types caten has, literals, symbols, and the
diagnostic for a construct caten cannot express. Shared by the ONNX converter, its per-op
lowerings and the torch importer, so that none of them imports another's converter."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from caten.errors import Error

# ONNX TensorProto element types caten has
DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 9: "bool", 10: "f16",
          11: "f64", 12: "u32", 13: "u64", 16: "bf16"}
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8, "i16": np.int16, "i32": np.int32,
      "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}
_SYM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Unsupported(Error):
    """An ONNX construct caten cannot express; the message names the node and op type."""


def np_dtype(dt: str) -> Any:
    if dt == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return NP[dt]


def caten_dtype(arr_dtype: Any) -> str | None:
    """The caten dtype name of a numpy dtype (None if caten has none)."""
    for k, v in NP.items():
        if np.dtype(arr_dtype) == np.dtype(v):
            return k
    return "bf16" if np.dtype(arr_dtype).name == "bfloat16" else None


def lit(v: Any, dt: str) -> str:
    """A literal of dtype `dt` as caten text (ints for integer tensors, true/false for bool)."""
    if dt == "bool":
        return "true" if bool(v) else "false"
    if dt.startswith(("i", "u")):
        return str(int(v))
    f = float(v)
    if f != f:
        return "nan"
    if f in (float("inf"), float("-inf")):
        return "inf" if f > 0 else "-inf"
    s = repr(f)
    return s if ("." in s or "e" in s) else s + ".0"


def sym(name: str, taken: set[str], prefix: str = "v_") -> str:
    """A caten symbol for an ONNX name, unique within `taken`."""
    s = name if _SYM.match(name) else prefix + re.sub(r"[^A-Za-z0-9_]", "_", name)
    base, i = s, 1
    while s in taken:
        s, i = f"{base}_{i}", i + 1
    taken.add(s)
    return s
