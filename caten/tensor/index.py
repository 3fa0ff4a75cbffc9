"""Indexing a Tensor as torch does: ints, slices (a negative step as numpy's, which torch itself
refuses), `...`, `None`, integer tensors or lists (one: numpy.take along its axis, `x[idx]`,
`x[:, [0, 2]]`; several, and bool masks anywhere: one take of their linear index). Printed as the
library's `slice`, `reshape` and `take`, so a traced program reads as its author wrote it. `x[i] = v`
gives x a new value: `(where mask v x)` over the positions the index selects
(`torch_inplace.inplace`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_inplace import inplace


def _advanced(i: Any) -> bool:
    return isinstance(i, (Tensor, np.ndarray, list))


def _checked(t: Tensor, ix: Any, axis: int) -> Any:
    """An integer index as torch checks it: a float index is an error, and in eager code (the
    index's values known) an out-of-range one raises instead of reading a wrong element."""
    dt = str(ix.dtype)
    if dt.startswith(("f", "bf", "c")):  # caten's f32/bf16 and numpy's float64/complex128
        raise Error(f"tensors used as indices must be long, int, byte or bool, not {dt}",
                    hint="cast the index: idx.long()")
    if isinstance(ix, Tensor) and state.trace() is not None:
        return ix
    vals = ix.numpy() if isinstance(ix, Tensor) else np.asarray(ix)
    n = t.shape[axis]
    bad = vals[(vals < -n) | (vals >= n)] if vals.size else vals
    if bad.size:
        raise Error(f"index {int(bad.reshape(-1)[0])} is out of bounds for axis {axis} with size {n}",
                    hint=f"indices along axis {axis} must lie in [-{n}, {n})")
    return ix


def getitem(t: Tensor, idx: Any) -> Tensor:
    if _advanced(idx):
        return _take(t, idx)
    items = list(idx) if isinstance(idx, tuple) else [idx]
    items = [list(i) if isinstance(i, tuple) else i for i in items]  # a tuple inside the index is a list (torch)
    adv = [j for j, i in enumerate(items) if _advanced(i)]
    if adv:
        return _take_at(t, items, adv)
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
    flips: list[int] = []
    axis = 0
    for it in items:
        if it is None:
            final.append(1)
            continue
        n = t.shape[axis]
        if isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            i = int(it)
            if not -n <= i < n:
                raise Error(f"index {i} is out of bounds for dimension {axis} with size {n}")
            i %= n
            specs.append([i, i + 1, 1])
        elif isinstance(it, slice):
            if it.step == 0:
                raise Error("slice step cannot be zero")
            a, b, s = it.indices(n)
            if s < 0:  # numpy's reversed slice: the same elements as a forward slice of the flipped axis
                flips.append(axis)
                a, b, s = n - 1 - a, n - 1 - b, -s
            specs.append([a, b, s])
            final.append(len(range(a, b, s)))
        else:
            raise Error(f"cannot index a tensor with {type(it).__name__}",
                        hint="use ints, slices, ..., None or one integer tensor")
        axis += 1
    out = apply("flip", [t], {"axis": flips}) if flips else t
    if any(sp != [0, t.shape[i], 1] for i, sp in enumerate(specs)):
        out = apply("slice", [out] + specs, {})
    if list(out.shape) != final:
        out = out.reshape(final)
    return out


def _take_at(t: Tensor, items: list, adv: list[int]) -> Tensor:
    """`t[..., idx, ...]` with one integer index beside slices, `None`, `...` and ints: the basic
    part first, then numpy.take along the axis the index lands on. As torch (unlike numpy, which
    moves the index's dims first when a slice parts it from an int), ints select before."""
    ints = [n for n, i in enumerate(items) if isinstance(i, (int, np.integer))]
    if any(i is Ellipsis for i in items):  # spell the `...` out, so positions count axes
        k = items.index(Ellipsis)
        used = sum(_width(i) for i in items if i is not None and i is not Ellipsis)
        items = items[:k] + [slice(None)] * (t.ndim - used) + items[k + 1:]
    if len(adv) > 1 or (ints and any(i is None for i in items)) or any(_is_mask(items[j]) for j in adv):
        return _take_many(t, items)
    j = next(n for n, i in enumerate(items) if _advanced(i))
    pos = sum(1 for i in items[:j] if not isinstance(i, (int, np.integer)))  # the axis it lands on
    basic = getitem(t, tuple(items[:j] + [slice(None)] + items[j + 1:]))
    arr = items[j] if isinstance(items[j], Tensor) else np.asarray(items[j])
    if arr.dtype == "bool" or (isinstance(arr, np.ndarray) and arr.dtype.kind not in "iu" and arr.size):
        raise Error("only the first index may be a bool mask; later ones must be integers",
                    hint="index with the integer positions: np.flatnonzero(mask)")
    _checked(basic, arr, pos)
    ix = arr if isinstance(arr, Tensor) else Tensor(arr.astype(np.int64), runtime=t.runtime)
    return apply("take", [basic, ix], {"axis": pos})


def _is_mask(i: Any) -> bool:
    return _advanced(i) and str(i.dtype if isinstance(i, (Tensor, np.ndarray)) else np.asarray(i).dtype) == "bool"


def _width(i: Any) -> int:
    """How many axes of the tensor an index item consumes (a bool mask: its rank)."""
    if _is_mask(i):
        return max(np.ndim(i) if not isinstance(i, Tensor) else i.ndim, 1)
    return 1


def _take_many(t: Tensor, items: list) -> Tensor:
    """numpy/torch advanced indexing with several index arrays (bool masks as their nonzero
    positions): the basic part first (ints select before, as torch), then the indexed axes moved
    first and flattened, one `take` of their linear index, and the broadcast index dims put where
    torch puts them (in place of the indexed axes when those are adjacent, else first)."""
    basic_items: list = []
    comps: list[tuple[int, Any]] = []  # (axis of the basic result, integer index)
    axis = 0
    for it in items:
        if it is None:
            basic_items.append(None)
            axis += 1
        elif isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            basic_items.append(it)
        elif _is_mask(it):
            if isinstance(it, Tensor) and state.trace() is not None:
                raise Error("a bool Tensor cannot index a tensor inside caten.jit: the result's shape depends on "
                            "its values", hint="use caten.where(mask, x, 0)")
            m = it.numpy() if isinstance(it, Tensor) else np.asarray(it)
            m = m.reshape(1) if m.ndim == 0 else m
            for k, p in enumerate(np.nonzero(m)):
                comps.append((axis + k, p.astype(np.int64)))
            basic_items += [slice(None)] * m.ndim
            axis += m.ndim
        elif _advanced(it):
            comps.append((axis, it))
            basic_items.append(slice(None))
            axis += 1
        else:
            basic_items.append(it)
            axis += 1
    basic = getitem(t, tuple(basic_items))
    axes = [a for a, _ in comps]
    rest = [a for a in range(basic.ndim) if a not in axes]
    sizes = [basic.shape[a] for a in axes]
    x = basic.permute(*(axes + rest)) if axes + rest != list(range(basic.ndim)) else basic
    x = x.reshape([int(np.prod(sizes))] + [basic.shape[a] for a in rest])
    flat = None
    ok = None
    for (a, ix), n in zip(comps, sizes):
        ix = _checked(basic, ix if isinstance(ix, Tensor) else np.asarray(ix), a)
        ix = ix if isinstance(ix, Tensor) else Tensor(np.asarray(ix).astype(np.int64), runtime=t.runtime)
        ix = ix.cast("i64")
        inside = (ix >= -n) & (ix < n)
        ok = inside if ok is None else ok & inside
        ix = Tensor.where(ix < 0, ix + n, ix)
        flat = ix if flat is None else flat * n + ix
    flat = Tensor.where(ok, flat, int(np.prod(sizes)))  # inside caten.jit an index out of range reads 0
    out = apply("take", [x, flat], {"axis": 0})
    b = flat.ndim
    if axes == list(range(axes[0], axes[0] + len(axes))) and axes[0] > 0:
        order = list(range(b, b + axes[0])) + list(range(b)) + list(range(b + axes[0], out.ndim))
        out = out.permute(*order)
    return out


def _take(t: Tensor, idx: Any) -> Tensor:
    """`t[idx]` for an integer array (rows, numpy.take along the first axis) or a bool mask over
    the leading axes (numpy's: the selected elements in order). A bool Tensor is computed first:
    the result's shape depends on its values (so not inside caten.jit, whose shapes are static)."""
    if isinstance(idx, Tensor):
        if idx.dtype != "bool":
            return apply("take", [t, _checked(t, idx, 0)], {"axis": 0})
        if state.trace() is not None:
            raise Error("a bool Tensor cannot index a tensor inside caten.jit: the result's shape depends on "
                        "its values", hint="use caten.where(mask, x, 0)")
        idx = idx.numpy()  # computed now, as .item() is: the shape depends on it
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
        raise Error(f"tensors used as indices must be long, int, byte or bool, not {arr.dtype}",
                    hint="use integers or a bool mask")
    _checked(t, arr, 0)
    return apply("take", [t, Tensor(arr.astype(np.int64), runtime=t.runtime)], {"axis": 0})


def setitem(t: Tensor, idx: Any, value: Any) -> None:
    """`t[idx] = value` as torch: the positions numpy's indexing selects take the value (broadcast
    and cast to t's dtype); t gets the new value in place (`torch_inplace.inplace`)."""
    def host(i: Any) -> Any:
        return i.numpy() if isinstance(i, Tensor) else i
    items = tuple(host(i) for i in idx) if isinstance(idx, tuple) else host(idx)
    try:  # the positions torch's indexing selects (caten's getitem: torch's order of the index dims)
        sel = getitem(Tensor(np.arange(t.numel(), dtype=np.int64).reshape(t.shape), runtime="numpy"), items).numpy()
    except (IndexError, TypeError, ValueError) as e:
        raise Error(f"cannot assign to t[{idx!r}] of a tensor of shape {list(t.shape)}: {e}") from None
    sel = np.asarray(sel)
    flat = sel.reshape(-1)
    mask = np.zeros(t.numel(), dtype=np.bool_)
    mask[flat] = True
    m = Tensor(mask.reshape(t.shape), runtime=t.runtime)
    if isinstance(value, (Tensor, np.ndarray, list)):
        v = value if isinstance(value, Tensor) else Tensor(value, runtime=t.runtime)
        v = v.cast(t.dtype) if v.dtype != t.dtype else v
        if v.shape != sel.shape:
            v = v.expand(*sel.shape)
        inv = np.zeros(t.numel(), dtype=np.int64)
        inv[flat] = np.arange(flat.size)
        src = apply("take", [v.reshape(-1), Tensor(inv, runtime=t.runtime)], {"axis": 0}).reshape(t.shape)
        new = apply("where", [m, src, t], {})
    else:
        new = apply("where", [m, Tensor(value, dtype=t.dtype, runtime=t.runtime), t], {})
    inplace(t, new, "t[...] = v")
