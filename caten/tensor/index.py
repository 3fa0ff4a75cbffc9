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
        ix = idx if isinstance(idx, Tensor) else Tensor(np.asarray(idx, dtype=np.int64), runtime=t.runtime)
        return apply("take", [t, ix], {"axis": 0})
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
