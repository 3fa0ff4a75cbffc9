"""ONNX's narrow element types that caten has no dtype for (FLOAT8E8M0, float4, int2), and
casts to the float8 formats caten has (FLOAT8E4M3FN etc.: native dtypes, `cast_float8`; INT4/UINT4
are caten's i4/u4, whose Cast is caten's `cast`: truncation and wrapping, as onnx's reference
`astype(ml_dtypes.int4)`).

Carrier rule: inside a caten program a narrow tensor is carried in a wider caten dtype that holds
every value of the format exactly -- f32 for FLOAT8E8M0/FLOAT4E2M1, i8 (signed) or u8 (unsigned)
for int2/uint2. A Cast *to* a narrow type rounds to the format with the library
composites `round-to-minifloat` / `wrap-int` (ops/narrow.lisp); a Cast *from* one is a plain
widening cast. At the boundary (caten.onnx.backend) narrow numpy arrays (ml_dtypes) become their
carrier and outputs declared narrow are converted back, which is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from caten.frontends.onnx.types import DTYPES, np_dtype
from caten.frontends.text import cast_float8  # noqa: F401 (the float8 casts, shared with the torch importer)


@dataclass(frozen=True)
class Narrow:
    """One narrow ONNX element type: its carrier and how a cast rounds to it."""

    name: str  # ml_dtypes' name of the format
    carrier: str  # caten dtype carrying its values
    minifloat: tuple | None = None  # (step, tiny, maxv, over without saturation, nan value, has -0)
    modulus: int = 0  # integer formats: values wrap modulo this
    signed: bool = True
    saturates: bool = False  # overflow always saturates (no inf, no nan in the format)
    e8m0: bool = False  # FLOAT8E8M0: a power of two, rounded by the cast's round_mode


# step = smallest subnormal, tiny = smallest normal, maxv = largest finite (OCP / ONNX spec values)
NARROW: dict[int, Narrow] = {
    # float4 has neither inf nor nan: overflow saturates and nan becomes -0 (ml_dtypes, ONNX's reference)
    23: Narrow("float4_e2m1fn", "f32", (0.5, 1.0, 6.0, "6.0", "-0.0", True), saturates=True),
    24: Narrow("float8_e8m0fnu", "f32", e8m0=True),
    25: Narrow("uint2", "u8", modulus=4, signed=False),
    26: Narrow("int2", "i8", modulus=4),
}
_BY_NAME = {f.name: code for code, f in NARROW.items()}


def _num(v: float) -> str:
    return repr(float(v))


def cast_to(x: str, src: str, fmt: Narrow, saturate: bool, round_mode: str = "up") -> str:
    """caten text casting `x` (caten dtype `src`) to narrow format `fmt`, in its carrier dtype."""
    if fmt.e8m0:  # ONNX rounds the f32 value's exponent (an f64 source is first rounded to f32)
        if round_mode not in ("up", "nearest", "down"):
            raise ValueError(f"round_mode `{round_mode}` is not one of up, nearest, down")
        xf = x if src == "f32" else f"(cast {x} f32)"
        flags = " ".join(f":{k} {'true' if v else 'false'}" for k, v in
                         (("up", round_mode == "up"), ("nearest", round_mode == "nearest"), ("saturate", saturate)))
        return f"(round-to-e8m0 {xf} {flags})"
    if fmt.minifloat is None:
        return f"(cast (wrap-int {x} :modulus {fmt.modulus} :signed {'true' if fmt.signed else 'false'}) {fmt.carrier})"
    step, tiny, maxv, over, nanval, negzero = fmt.minifloat
    if saturate or fmt.saturates:
        over = _num(maxv)
    # the rounding runs in f32 (narrower sources widen exactly); an f64 source is first rounded to f32,
    # as ONNX's reference (ml_dtypes) does, so a value just off a midpoint may round twice
    xw = x if src == "f32" else f"(cast {x} f32)"
    expr = (f"(round-to-minifloat {xw} :step {_num(step)} :tiny {_num(tiny)} :maxv {_num(maxv)} "
            f":over {over} :nanval {nanval} :negzero {'true' if negzero else 'false'})")
    return expr


def carrier_dtype(code: int) -> str | None:
    """The caten dtype of ONNX element type `code`: its own, or a narrow type's carrier."""
    return DTYPES.get(code) or (NARROW[code].carrier if code in NARROW else None)


def to_carrier(arr: np.ndarray) -> tuple[np.ndarray, int | None]:
    """A numpy array of a narrow ml_dtypes dtype as its carrier array, with the ONNX type code."""
    code = _BY_NAME.get(np.dtype(arr.dtype).name)
    if code is None:
        return arr, None
    return np.asarray(arr).astype(np_dtype(NARROW[code].carrier)), code


def from_carrier(arr: Any, code: int) -> Any:
    """A carrier array back as ONNX type `code`'s ml_dtypes array (exact: it holds format values)."""
    import ml_dtypes

    return np.asarray(arr).astype(getattr(ml_dtypes, NARROW[code].name))
