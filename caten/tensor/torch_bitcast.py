"""torch's `t.view(dtype)`: the bits reinterpreted. The same width is the language's `bitcast`; a
narrower dtype splits each element into its little-endian pieces along the last dim (which grows
by the ratio), a wider one joins consecutive pieces of the last dim (which must divide). Pieces
are unsigned shifts and masks, so every runtime gives the same bits. Tensors are values: a view
of a transposed tensor reinterprets its elements as if contiguous (torch requires stride 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir import dtypes as T
from caten.tensor.tensor import Tensor, _dt, apply

_NAMES = {"f16": "Half", "bf16": "BFloat16", "f32": "Float", "f64": "Double", "i8": "Char", "i16": "Short",
          "i32": "Int", "i64": "Long", "u8": "Byte", "u16": "UInt16", "u32": "UInt32", "u64": "UInt64",
          "bool": "Bool"}


def is_dtype(arg: Any) -> bool:
    """Whether view's one argument names a dtype rather than a size."""
    return isinstance(arg, (str, type, np.dtype)) or type(arg).__module__ == "torch"


def _bits(dt: str) -> int:
    return T.BY_NAME[dt].bits


def _cast_bits(x: Tensor, dt: str) -> Tensor:
    return x if x.dtype == dt else apply("bitcast", [x, dt], {})


def view_dtype(x: Tensor, dtype: Any) -> Tensor:
    dst, src = _dt(dtype), x.dtype
    sb, db = _bits(src), _bits(dst)
    if sb == db:
        return _cast_bits(x, dst) if src != dst else x.reshape(list(x.shape))
    what = f"to view {_NAMES.get(src, src)} as {_NAMES.get(dst, dst)} (different element sizes)"
    if x.ndim == 0:
        raise Error(f"self.dim() cannot be 0 {what}")
    for d in (src, dst):
        if d in ("f16", "bf16", "bool") or d.startswith("f8"):
            raise Error(f"view({dst}) of a {src} tensor: a {d} of another width is not supported",
                        hint="caten's registers may hold 16- and 8-bit floats widened, and a bool is 0 or 1")
    shape, last = list(x.shape), int(x.shape[-1])
    u = _cast_bits(x, f"u{sb}")
    if db < sb:  # each element into sb // db pieces, the least significant first
        mask = (1 << db) - 1
        parts = [((u >> (db * k)) & mask if k else u & mask).cast(f"u{db}") for k in range(sb // db)]
        y = Tensor.stack(parts, dim=-1).reshape(shape[:-1] + [last * (sb // db)])
        return _cast_bits(y, dst)
    r = db // sb
    if last % r:
        raise Error(f"self.size(-1) must be divisible by {r} {what}, but got {last}")
    w = u.cast(f"u{db}").reshape(shape[:-1] + [last // r, r])
    y = w[..., 0]
    for k in range(1, r):
        y = y | (w[..., k] << (sb * k))
    return _cast_bits(y, dst)
