"""torch's type promotion on caten's dtypes (`torch.promote_types`, `torch.result_type`): the
one rule Python's operators, `cat`, `where` and `clamp` follow."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import dtype_name, np_dtype
from caten.tensor.tensor import FLOATS, Tensor


def _category(dt: str) -> int:
    return 0 if dt == "bool" else 2 if dt in FLOATS else 1


def promote_types(a: str, b: str) -> str:
    """torch.promote_types on caten's dtypes: a float meets an integer or bool at the float;
    f16 and bf16 meet at f32; otherwise numpy's common type (integers of mixed signedness
    widen, as torch's u8 + i8 -> i16; torch has no rule for the wider unsigned types). A float8
    meets no other dtype, as in torch (which refuses to promote float8 types)."""
    if a == b:
        return a
    if a.startswith("f8") or b.startswith("f8"):
        raise Error(f"no common dtype of {a} and {b}: float8 dtypes promote with nothing",
                    hint="cast one of them first (.cast(dtype))")
    if {a, b} & {"i4", "u4"} and "bool" not in (a, b) and FLOATS.count(a) + FLOATS.count(b) == 0:
        raise Error(f"no common dtype of {a} and {b}: 4-bit integers promote with no other integer (torch has "
                    "no rule for them)", hint="cast one of them first (.cast(dtype))")
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    common = dtype_name(np.promote_types(np_dtype(a), np_dtype(b)))
    if common is None or _category(common) != ca:
        raise Error(f"no common dtype of {a} and {b}", hint="cast one of them first (.cast(dtype))")
    return common


def result_type(tensors: list[Tensor], scalar: Any = None) -> str:
    """torch.result_type of tensors and at most one Python scalar: tensors with dimensions
    decide the dtype; a 0-d tensor only where its category (bool < integer < float) is higher,
    and a Python scalar only so (a float makes an integer tensor f32, an int a bool tensor i64)."""
    dims = [t.dtype for t in tensors if t.ndim]
    zeros = [t.dtype for t in tensors if not t.ndim]
    out = None
    for group in (dims, zeros):
        if not group:
            continue
        r = group[0]
        for d in group[1:]:
            r = promote_types(r, d)
        if out is None or _category(r) > _category(out):
            out = r
    if scalar is not None and not isinstance(scalar, (bool, np.bool_)):
        sc = 2 if isinstance(scalar, (float, np.floating)) else 1
        if out is None or sc > _category(out):
            out = "f32" if sc == 2 else "i64"
    assert out is not None
    return out


def _promote(a: Tensor, b: Any) -> tuple[Tensor, Any]:
    """Both operands at torch's result dtype (`result_type`); a numpy array is a tensor."""
    if isinstance(b, np.ndarray):
        b = Tensor(b, runtime=a.runtime)
    if isinstance(b, Tensor):
        common = result_type([a, b])
        return (a if a.dtype == common else a.cast(common)), (b if b.dtype == common else b.cast(common))
    common = result_type([a], b)
    if isinstance(b, (bool, np.bool_)) and common != "bool":
        b = int(b) if common not in FLOATS else float(b)
    return (a if a.dtype == common else a.cast(common)), b
