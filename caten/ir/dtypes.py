"""The dtypes of LANGUAGE.md section 3, with their numpy counterparts.

bf16 and the float8 formats have no numpy dtype of their own; `ml_dtypes` supplies them so that
the reference runtime computes them the way an accelerator would (in f32, rounded after every op).
So does it i4/u4 (`INT4`): one element per byte, the 4-bit value in the low nibble (ml_dtypes'
layout, so numpy I/O is zero-copy and no two elements share a byte), computed in i32 and wrapped
to 4 bits after every op (`wrap4`), as i8 wraps at 8.
The float8 formats' bit layouts (`MINIFLOAT`) are what the renderers' conversions and the
decompose pass's rounding are written from; `saturate` is the reference of a CAST to one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """One of the 19 dtypes. Each exists once, so identity is equality (and hashing is cheap:
    graph nodes are hash-consed on keys that hold a dtype)."""

    name: str
    kind: str  # "bool" | "int" | "uint" | "float"
    bits: int

    def __reduce__(self):  # unpickle to the one instance
        return (lookup, (self.name,))

    @property
    def np(self) -> np.dtype:
        dt = _NP.get(self.name)
        return dt if dt is not None else _ml_dtypes_np()[self.name]

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    def __repr__(self) -> str:
        return self.name


bool_ = DType("bool", "bool", 8)
i8, i16, i32, i64 = (DType(f"i{b}", "int", b) for b in (8, 16, 32, 64))
u8, u16, u32, u64 = (DType(f"u{b}", "uint", b) for b in (8, 16, 32, 64))
f16, bf16 = DType("f16", "float", 16), DType("bf16", "float", 16)
f32, f64 = DType("f32", "float", 32), DType("f64", "float", 64)
f8e4m3, f8e5m2 = DType("f8e4m3", "float", 8), DType("f8e5m2", "float", 8)
f8e4m3fnuz, f8e5m2fnuz = DType("f8e4m3fnuz", "float", 8), DType("f8e5m2fnuz", "float", 8)
FLOAT8: tuple[DType, ...] = (f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz)
i4, u4 = DType("i4", "int", 4), DType("u4", "uint", 4)
INT4: tuple[DType, ...] = (i4, u4)  # stored one per byte, computed in i32 registers
# floats stored narrower than f32, whose values live in f32 registers and are rounded after every op
NARROW: tuple[DType, ...] = (f16, bf16) + FLOAT8

ALL: tuple[DType, ...] = (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64) + FLOAT8 + INT4
BY_NAME: dict[str, DType] = {d.name: d for d in ALL}


@dataclass(frozen=True)
class Minifloat:
    """The layout of an 8-bit float: sign, `exp` exponent bits (bias `bias`), `man` mantissa bits.
    `inf`: the top exponent holds +-inf (mantissa 0) and nans (e5m2, IEEE-style); otherwise only
    S.1111.111 is nan (e4m3fn). `fnuz`: no -0 and no inf, the one nan is 0x80 (the byte of -0)."""

    exp: int
    man: int
    bias: int
    inf: bool = False
    fnuz: bool = False

    @property
    def max(self) -> float:
        """The largest finite value."""
        top = (1 << self.exp) - (2 if self.inf else 1)  # e5m2's top exponent is inf/nan
        frac = (1 << self.man) - (2 if not (self.inf or self.fnuz) else 1)  # e4m3fn: 1.111 is nan
        return 2.0 ** (top - self.bias) * (1 + frac / (1 << self.man))

    @property
    def tiny(self) -> float:
        """The smallest positive subnormal."""
        return 2.0 ** (1 - self.bias - self.man)


MINIFLOAT: dict[DType, Minifloat] = {
    f8e4m3: Minifloat(4, 3, 7), f8e5m2: Minifloat(5, 2, 15, inf=True),
    f8e4m3fnuz: Minifloat(4, 3, 8, fnuz=True), f8e5m2fnuz: Minifloat(5, 2, 16, fnuz=True),
}

_NP: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
}  # and ml_dtypes' (`_ML`), added at their first use: importing ml_dtypes is ~10 ms of a warm load
_ML = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "f8e4m3fnuz": "float8_e4m3fnuz",
       "f8e5m2fnuz": "float8_e5m2fnuz", "i4": "int4", "u4": "uint4"}
_NP_INT4: tuple[np.dtype, ...] = ()  # (i4's, u4's), with ml_dtypes'
_FROM_NP = {v: BY_NAME[k] for k, v in _NP.items()}


def _ml_dtypes_np() -> dict[str, np.dtype]:
    """_NP with ml_dtypes' dtypes in it (imported now if not yet)."""
    global _NP_INT4
    if "bf16" not in _NP:
        import ml_dtypes

        ml = {k: np.dtype(getattr(ml_dtypes, n)) for k, n in _ML.items()}
        _FROM_NP.update({v: BY_NAME[k] for k, v in ml.items()})
        _NP_INT4 = (ml["i4"], ml["u4"])
        _NP.update(ml)  # (last: "bf16" in _NP says the rest is there)
    return _NP


def _ml_known() -> None:
    """ml_dtypes' dtypes in the tables if ml_dtypes is loaded: an array of one of them can exist
    only then (its import registers them with numpy)."""
    if "bf16" not in _NP and "ml_dtypes" in sys.modules:
        _ml_dtypes_np()


def from_numpy(dt: np.dtype) -> DType | None:
    """The caten dtype of a numpy dtype, or None if caten has no such type."""
    d = np.dtype(dt)
    got = _FROM_NP.get(d)
    if got is None and "bf16" not in _NP:
        _ml_dtypes_np()
        got = _FROM_NP.get(d)
    return got


def lookup(name: str) -> DType | None:
    return BY_NAME.get(name)


class DTypeError(Exception):
    """An operand dtype the op does not accept; the elaborator adds the source location."""


def iinfo(dt: DType | np.dtype):
    """The range of an integer dtype (numpy's iinfo knows no int4: ml_dtypes' does, and numpy's too)."""
    import ml_dtypes

    return ml_dtypes.iinfo(dt.np if isinstance(dt, DType) else np.dtype(dt))


def is_np_int4(dt: np.dtype) -> bool:
    _ml_known()
    return dt in _NP_INT4


def wrap4(x: np.ndarray, dt: DType) -> np.ndarray:
    """Integer (or bool) array x wrapped to i4/u4 dt, two's complement modulo 16, as i8 wraps at 8
    bits (ml_dtypes' astype of an int4 to uint4 is missing, so the wrap is spelled here)."""
    x = np.asarray(x)
    if is_np_int4(x.dtype):
        x = x.astype(np.int8)
    low = (x.astype(np.uint64) if x.dtype.kind == "u" else x.astype(np.int64)).astype(np.int64) & 15
    return (low - 16 * (low >= 8) if dt.kind == "int" else low).astype(dt.np)


def widen4(x: np.ndarray) -> np.ndarray:
    """An i4/u4 array as int32, the dtype its values are computed in; other arrays as they are."""
    return x.astype(np.int32) if is_np_int4(np.asarray(x).dtype) else x


def int4_ref(ref: Callable[..., np.ndarray], reduce: bool) -> Callable[..., np.ndarray]:
    """An op table reference `ref(ctx, *xs)` that computes i4/u4 operands in i32 and wraps an i4/u4
    result to 4 bits (ml_dtypes' own int4 ufuncs return int8 for some ops and do not wrap).
    `reduce`: a REDUCE, whose max over nothing is the dtype's lowest value."""
    def run(ctx: Any, *xs: np.ndarray) -> np.ndarray:
        if ctx.dtype not in INT4 and not any(is_np_int4(np.asarray(x).dtype) for x in xs):
            return ref(ctx, *xs)
        out = np.asarray(ref(ctx, *(widen4(np.asarray(x)) for x in xs)))
        if reduce and ctx.arg[0] == "max" and xs[0].size == 0:
            out = np.full(out.shape, iinfo(ctx.dtype).min)
        return wrap4(out, ctx.dtype) if ctx.dtype in INT4 else out
    return run


def is_np_float(dt: np.dtype) -> bool:
    """Whether a numpy dtype is a float, numpy's own or one of ml_dtypes' (kind "V" for some)."""
    if dt.kind == "f":
        return True
    _ml_known()
    return dt in _FROM_NP and _FROM_NP[dt].is_float


def saturate(x: np.ndarray, dt: DType) -> np.ndarray:
    """x (any float dtype) as float8 dtype dt by a CAST: ONNX Cast's saturate=1. Rounding is to
    nearest, ties to even (an f64 first to f32, as the renderers do); a finite value beyond the
    format's range and +-inf become +-max; nan stays nan; fnuz formats turn -0 into 0."""
    m = MINIFLOAT[dt].max
    x = np.asarray(x).astype(np.float32)
    with np.errstate(invalid="ignore"):  # (nan compares and converts quietly)
        return np.where(x > m, np.float32(m), np.where(x < -m, np.float32(-m), x)).astype(dt.np)
