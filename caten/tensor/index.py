"""Indexing a Tensor: ints, slices with positive steps, `...`, `None`, and one integer tensor
(numpy.take along the first axis). Printed as the library's `slice` and `reshape`, so a traced
program reads as its author wrote it."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.tensor import Tensor, apply


def getitem(t: Tensor, idx: Any) -> Tensor:
    if isinstance(idx, (Tensor, np.ndarray, list)):
        return _take(t, idx)
    items = list(idx) if isinstance(idx, tuple) else [idx]
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise Error("an index can have only one `...`")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > t.ndim:
        raise Error(f"too many indices ({used}) for a tensor of rank {t.ndim}")
    # `...` stands for the axes no index names; without one they follow the last index
    k = next((j for j, i in enumerate(items) if i is Ellipsis), len(items))
    items[k:k + 1] = [slice(None)] * (t.ndim - used)
    specs: list[list[int]] = []
    final: list[int] = []
    axis = 0
    for it in items:
        if it is None:
            final.append(1)
            continue
        n = t.shape[axis]
        if isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            i = int(it)
            if not -n <= i < n:
                raise Error(f"index {i} is out of range for axis {axis} of size {n}")
            i %= n
            specs.append([i, i + 1, 1])
        elif isinstance(it, slice):
            if it.step is not None and it.step <= 0:
                raise Error("slices with a step <= 0 are not supported", hint="use .flip(axis=...) and a positive step")
            a, b, s = it.indices(n)
            specs.append([a, b, s])
            final.append(len(range(a, b, s)))
        else:
            raise Error(f"cannot index a tensor with {type(it).__name__}",
                        hint="use ints, slices, ..., None or one integer tensor")
        axis += 1
    out = t
    if any(sp != [0, t.shape[i], 1] for i, sp in enumerate(specs)):
        out = apply("slice", [t] + specs, {})
    if list(out.shape) != final:
        out = out.reshape(final)
    return out


def _take(t: Tensor, idx: Any) -> Tensor:
    """`t[idx]` for an integer array (rows, numpy.take along the first axis) or a numpy bool mask
    over the leading axes (numpy's: the selected elements in order). A mask Tensor would make the
    shape depend on values not computed yet, which a lazy graph cannot have."""
    if isinstance(idx, Tensor):
        if idx.dtype == "bool":
            raise Error("a bool Tensor cannot index a lazy tensor: the result's shape depends on its values",
                        hint="use functional.where(mask, x, 0), or index with mask.numpy()")
        return apply("take", [t, idx], {"axis": 0})
    arr = np.asarray(idx)
    if arr.size == 0 and arr.dtype.kind == "f":  # `t[[]]`: numpy reads an empty list as no rows
        arr = arr.astype(np.int64)
    if arr.dtype == np.bool_:
        k = arr.ndim
        if k == 0 or k > t.ndim or arr.shape != t.shape[:k]:
            raise Error(f"a bool mask of shape {list(arr.shape)} for a tensor of shape {list(t.shape)}",
                        hint="the mask's shape must be the tensor's leading axes")
        flat = t.reshape([-1] + list(t.shape[k:])) if k != 1 else t
        return apply("take", [flat, Tensor(np.flatnonzero(arr).astype(np.int64), runtime=t.runtime)], {"axis": 0})
    if arr.dtype.kind not in "iu":
        raise Error(f"cannot index a tensor with an array of {arr.dtype}", hint="use integers or a bool mask")
    return apply("take", [t, Tensor(arr.astype(np.int64), runtime=t.runtime)], {"axis": 0})
