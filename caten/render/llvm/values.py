"""LLVM type names and constant literals of caten dtypes: the spellings every other module
of the renderer shares (f16 is stored as `half`, bf16 as raw `i16` bits, float8 as `i8` bits
(caten.render.llvm.float8), bool as `i8`, i4/u4 as LLVM's `i4` in the low nibble of an `i8`)."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

from caten.ir.dtypes import DType


def rty(dt: DType) -> str:
    if dt.is_bool:
        return "i1"
    if dt.is_int:
        return f"i{dt.bits}"
    return "double" if dt.bits == 64 else "float"


def mty(dt: DType) -> str:
    if dt.is_bool:
        return "i8"
    if dt.name == "f16":
        return "half"
    if dt.name == "bf16":
        return "i16"
    if (dt.bits == 8 and dt.is_float) or dt.bits == 4:  # float8 bits; i4/u4: one per byte, the low nibble
        return "i8"
    return rty(dt)


def fhex(v: float, ty: str) -> str:
    if ty == "float":
        v = float(np.float32(v))
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def int_str(v: int, bits: int) -> str:
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


def const_str(v, dt: DType) -> str:
    if dt.is_bool:
        return "true" if v else "false"
    if dt.is_int:
        return int_str(int(v), dt.bits)
    v = float(v)
    if dt.name == "f16":
        with np.errstate(over="ignore"):  # beyond f16's range the constant is inf, as the cast says
            v = float(np.float16(v))
    elif dt.name == "bf16":
        v = float(ml_dtypes.bfloat16(v))
    elif dt.bits == 8:  # float8: as ml_dtypes rounds a literal (past the range: nan, or inf in e5m2)
        with np.errstate(over="ignore", invalid="ignore"):
            v = float(np.array(v).astype(dt.np).astype(np.float64))
    return fhex(v, rty(dt))
