"""The dtypes of LANGUAGE.md section 3, with their numpy counterparts.

bf16 has no numpy dtype of its own; `ml_dtypes` supplies one so that the reference
runtime computes bf16 the way an accelerator would (round after every op).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """One of the 13 dtypes. Each exists once, so identity is equality (and hashing is cheap:
    graph nodes are hash-consed on keys that hold a dtype)."""

    name: str
    kind: str  # "bool" | "int" | "uint" | "float"
    bits: int

    def __reduce__(self):  # unpickle to the one instance
        return (lookup, (self.name,))

    @property
    def np(self) -> np.dtype:
        return _NP[self.name]

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

ALL: tuple[DType, ...] = (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL}

_NP: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
}
_FROM_NP = {v: BY_NAME[k] for k, v in _NP.items()}


def from_numpy(dt: np.dtype) -> DType | None:
    """The caten dtype of a numpy dtype, or None if caten has no such type."""
    return _FROM_NP.get(np.dtype(dt))


def lookup(name: str) -> DType | None:
    return BY_NAME.get(name)


class DTypeError(Exception):
    """An operand dtype the op does not accept; the elaborator adds the source location."""
