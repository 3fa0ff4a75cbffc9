"""torch's indexed stores: `scatter`, `scatter_add`, `scatter_reduce`, `index_add`, `index_copy`,
`index_fill`, `index_reduce`, `index_put`, `put`, `masked_scatter` and their in-place `_` forms.

Each is the library's `scatter*` composites (ops/index.lisp: the principal SCATTER, one bounds-safe
read-modify-write per index, in the index's row-major order) with torch's checks: index dtype and
shapes, and, in eager code where the index's values are known, an out-of-range index raises as in
torch (inside `caten.jit` an index outside [-n, n) sends nothing)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.tensor import FLOATS, Tensor, apply
from caten.tensor.torch_inplace import inplace
from caten.tensor.torchnames import torch_name

_REDUCE = {"sum": "scatter-add", "prod": "scatter-mul", "amax": "scatter-max", "amin": "scatter-min"}


def _tensor(self: Tensor, v: Any, dtype: str | None = None) -> Tensor:
    if isinstance(v, Tensor):
        return v
    return Tensor(np.asarray(v), dtype=dtype, runtime=self.runtime)


def _dim(self: Tensor, dim: int, what: str) -> int:
    r = max(self.ndim, 1)
    if not -r <= dim < r:
        raise Error(f"{what}: dim {dim} is out of range for a tensor of rank {self.ndim}",
                    hint=f"dim lies in [-{r}, {r})")
    return dim % r


def _index(self: Tensor, index: Any, what: str) -> Tensor:
    idx = index if isinstance(index, Tensor) else Tensor(np.asarray(index, dtype=np.int64), runtime=self.runtime)
    if idx.dtype not in ("i64", "i32", "i16", "i8", "u8"):
        raise Error(f"{what}: the index must be an integer tensor, not {idx.dtype}", hint="cast it: index.long()")
    return idx


def _bounds(idx: Tensor, n: int, what: str, dim: int, negative: bool = False) -> None:
    """torch's range check, where the values are known (eager code)."""
    if state.trace() is not None or idx.numel() == 0:
        return
    v = idx.numpy()
    lo = -n if negative else 0
    bad = v[(v < lo) | (v >= n)]
    if bad.size:
        raise Error(f"{what}: index {int(bad.reshape(-1)[0])} is out of bounds for dimension {dim} with size {n}",
                    hint=f"indices along dim {dim} lie in [{lo}, {n})")


def _along(self: Tensor, dim: int, index: Any, src: Any, what: str) -> tuple[int, Tensor, Tensor]:
    """torch.scatter's operands checked: the index has the tensor's rank, is no larger than the source,
    nor than the tensor off `dim`; the source is cut to the index's shape."""
    x = self
    d = _dim(x, dim, what)
    idx = _index(x, index, what)
    s = _tensor(x, src, x.dtype if not isinstance(src, Tensor) else None)
    if s.ndim == 0 and not isinstance(src, Tensor):
        s = s.expand(*idx.shape) if idx.ndim else s
    if s.dtype != x.dtype:
        raise Error(f"{what}: expected the source's dtype {x.dtype}, got {s.dtype}", hint="cast the source")
    if idx.ndim != x.ndim or s.ndim != x.ndim:
        raise Error(f"{what}: index (rank {idx.ndim}), source (rank {s.ndim}) and tensor (rank {x.ndim}) "
                    "must have the same rank")
    if any(i > m for i, m in zip(idx.shape, s.shape)) or \
            any(i > m for j, (i, m) in enumerate(zip(idx.shape, x.shape)) if j != d):
        raise Error(f"{what}: an index of shape {list(idx.shape)} for a source of shape {list(s.shape)} "
                    f"and a tensor of shape {list(x.shape)}",
                    hint=f"the index is no larger than the source, nor than the tensor off dim {d}")
    _bounds(idx, x.shape[d] if x.ndim else 1, what, d)
    if list(s.shape) != list(idx.shape):
        s = apply("slice", [s] + [[0, i, 1] for i in idx.shape], {})
    return d, idx, s


def _scatter(op: str, x: Tensor, d: int, idx: Tensor, s: Tensor, **kw: Any) -> Tensor:
    if idx.numel() == 0 or x.numel() == 0:
        return x.clone()
    if x.ndim == 0:  # a scalar is a one-element axis
        return _scatter(op, x.reshape(1), 0, idx.reshape(1), s.reshape(1), **kw).reshape([])
    return apply(op, [x, idx, s], {"axis": d, **kw})


@torch_name("scatter", "`(scatter x index src :axis dim)` (`scatter-add`/`scatter-mul` for reduce='add'/"
            "'multiply'); of repeated indices the last wins", "indexing", example="t.scatter(0, idx, src)")
def scatter(self: Tensor, dim: int, index: Any, src: Any = None, value: Any = None, *, reduce: Any = None) -> Tensor:
    if (src is None) == (value is None):
        raise Error("scatter: give exactly one of src and value")
    s = value if src is None else src
    if reduce is not None and reduce not in ("add", "multiply"):
        raise Error(f"scatter: reduce must be 'add' or 'multiply', not {reduce!r}")
    d, idx, s = _along(self, dim, index, s, "scatter")
    op = {None: "scatter", "add": "scatter-add", "multiply": "scatter-mul"}[reduce]
    return _scatter(op, self, d, idx, s)


@torch_name("scatter_add", "`(scatter-add x index src :axis dim)`", "indexing", example="t.scatter_add(0, idx, src)")
def scatter_add(self: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    d, idx, s = _along(self, dim, index, src, "scatter_add")
    return _scatter("scatter-add", self, d, idx, s)


def _count(self: Tensor, d: int, idx: Tensor) -> Tensor:
    return apply("scatter-count", [self, idx], {"axis": d})


@torch_name("scatter_reduce", "`scatter-add`, `scatter-mul`, `scatter-max`, `scatter-min` (:include-self); "
            "'mean' is the sum over the count (floor division for integers)", "indexing",
            example="t.scatter_reduce(0, idx, src, 'amax')")
def scatter_reduce(self: Tensor, dim: int, index: Any, src: Any, reduce: str, *, include_self: bool = True) -> Tensor:
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise Error(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', not {reduce!r}")
    if self.dtype == "bool":
        raise Error("scatter_reduce does not take bool tensors (as torch)", hint="cast to an integer dtype")
    d, idx, s = _along(self, dim, index, src, "scatter_reduce")
    if idx.numel() == 0 or self.numel() == 0:
        return _scatter("scatter-add", self, d, idx, s)
    if self.ndim == 0:
        return scatter_reduce(self.reshape(1), 0, idx.reshape(1), s.reshape(1), reduce,
                              include_self=include_self).reshape([])
    if reduce == "mean":
        base = self if include_self else self * 0
        total = apply("scatter-add", [base, idx, s], {"axis": d})
        n = _count(self, d, idx) + (1 if include_self else 0)
        n = Tensor.where(n == 0, 1, n).cast(self.dtype)
        q = total / n if self.dtype in FLOATS else total.div(n, rounding_mode="floor")
        return q if include_self else Tensor.where(_count(self, d, idx) > 0, q, self)
    if reduce == "sum" and not include_self:
        return apply("scatter-add", [Tensor.where(_count(self, d, idx) > 0, 0, self), idx, s], {"axis": d})
    kw = {} if reduce == "sum" else {"include-self": bool(include_self)}
    return apply(_REDUCE[reduce], [self, idx, s], {"axis": d, **kw})


def _spread(self: Tensor, d: int, index: Any, source: Any, what: str) -> tuple[Tensor, Tensor]:
    """index_add's operands as scatter's: the vector index stood along `dim` of the source's shape."""
    idx = _index(self, index, what)
    if idx.ndim > 1:
        raise Error(f"{what}: the index must be a vector, not of rank {idx.ndim}")
    idx = idx.reshape(-1)
    s = _tensor(self, source, self.dtype)
    if s.ndim == 0 and self.ndim == 0:
        s = s.reshape(1)
    want = list(self.shape) if self.ndim else [1]
    want[d] = idx.shape[0]
    if list(s.shape) != want:
        raise Error(f"{what}: a source of shape {list(s.shape)} for {idx.shape[0]} indices into a tensor of "
                    f"shape {list(self.shape)} along dim {d}", hint=f"the source's shape is {want}")
    if s.dtype != self.dtype:
        raise Error(f"{what}: expected the source's dtype {self.dtype}, got {s.dtype}", hint="cast the source")
    _bounds(idx, self.shape[d] if self.ndim else 1, what, d)
    shape = [1] * len(want)
    shape[d] = idx.shape[0]
    return idx.reshape(shape).expand(*want), s


@torch_name("index_add", "`(scatter-add x index src :axis dim)` with the vector index along dim; alpha scales the "
            "source", "indexing", example="t.index_add(0, idx, src)")
def index_add(self: Tensor, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
    d = _dim(self, dim, "index_add")
    idx, s = _spread(self, d, index, source, "index_add")
    s = s if alpha == 1 else s * alpha
    x = self if self.ndim else self.reshape(1)
    out = _scatter("scatter-add", x, d, idx, s)
    return out if self.ndim else out.reshape([])


@torch_name("index_copy", "`(scatter x index src :axis dim)` with the vector index along dim", "indexing",
            example="t.index_copy(0, idx, src)")
def index_copy(self: Tensor, dim: int, index: Any, source: Any) -> Tensor:
    d = _dim(self, dim, "index_copy")
    idx, s = _spread(self, d, index, source, "index_copy")
    x = self if self.ndim else self.reshape(1)
    out = _scatter("scatter", x, d, idx, s)
    return out if self.ndim else out.reshape([])


@torch_name("index_reduce", "`scatter_reduce` with the vector index along dim ('prod', 'mean', 'amax', 'amin')",
            "indexing", example="t.index_reduce(0, idx, src, 'amax')")
def index_reduce(self: Tensor, dim: int, index: Any, source: Any, reduce: str, *, include_self: bool = True) -> Tensor:
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise Error(f"index_reduce: reduce must be 'prod', 'mean', 'amax' or 'amin', not {reduce!r}")
    d = _dim(self, dim, "index_reduce")
    idx, s = _spread(self, d, index, source, "index_reduce")
    x = self if self.ndim else self.reshape(1)
    out = scatter_reduce(x, d, idx, s, reduce, include_self=include_self)
    return out if self.ndim else out.reshape([])


@torch_name("index_fill", "`(where (scatter-count ...) value x)`: the slices at the index along dim take the value",
            "indexing", example="t.index_fill(1, idx, 0.0)")
def index_fill(self: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    d = _dim(self, dim, "index_fill")
    idx = _index(self, index, "index_fill").reshape(-1)
    n = self.shape[d] if self.ndim else 1
    _bounds(idx, n, "index_fill", d, negative=True)
    if idx.numel() == 0:
        return self.clone()
    hit = apply("scatter-count", [Tensor(np.zeros(n, np.bool_), runtime=self.runtime), idx], {"axis": 0}) > 0
    shape = [1] * self.ndim
    if self.ndim:
        shape[d] = n
    v = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype, runtime=self.runtime)
    return Tensor.where(hit.reshape(shape), v.cast(self.dtype), self)


def _linear(self: Tensor, indices: Any, what: str) -> tuple[Tensor, list[int], int]:
    """index_put's tuple of index tensors over the leading axes as one flat index over them (negative
    indices count from the end; bool masks become their positions): (flat index, the broadcast
    index shape, how many axes it covers)."""
    items = list(indices) if isinstance(indices, (tuple, list)) else [indices]
    ix: list[Tensor] = []
    for t in items:
        t = t if isinstance(t, Tensor) else Tensor(np.asarray(t), runtime=self.runtime)
        if t.dtype == "bool":
            if state.trace() is not None:
                raise Error(f"{what}: a bool mask inside caten.jit (the positions depend on its values)",
                            hint="use caten.where(mask, v, x)")
            ix += [Tensor(p.astype(np.int64), runtime=self.runtime) for p in np.nonzero(t.numpy())]
        else:
            ix.append(_index(self, t, what))
    if len(ix) > self.ndim:
        raise Error(f"{what}: {len(ix)} indices for a tensor of rank {self.ndim}")
    shape = list(np.broadcast_shapes(*[tuple(t.shape) for t in ix]))
    flat = None
    for a, t in enumerate(ix):
        n = self.shape[a]
        _bounds(t, n, what, a, negative=True)
        t = t.cast("i64")
        t = Tensor.where(t < 0, t + n, t)
        flat = t if flat is None else flat * n + t
    return flat.expand(*shape) if list(flat.shape) != shape else flat, shape, len(ix)


@torch_name("index_put", "`scatter` (`scatter-add` with accumulate) over the flattened indexed axes", "indexing",
            example="t.index_put((i, j), v)")
def index_put(self: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    flat, shape, k = _linear(self, indices, "index_put")
    rest = list(self.shape[k:])
    lead = int(np.prod(self.shape[:k]))
    v = _tensor(self, values, self.dtype)
    if v.dtype != self.dtype:
        v = v.cast(self.dtype) if not (v.dtype in FLOATS and self.dtype not in FLOATS) else v
        if v.dtype != self.dtype:
            raise Error(f"index_put: values of dtype {v.dtype} for a tensor of dtype {self.dtype}")
    try:
        v = v.expand(*(shape + rest)) if list(v.shape) != shape + rest else v
    except Error:
        raise Error(f"index_put: values of shape {list(v.shape)} do not broadcast to {shape + rest}") from None
    if flat.numel() == 0 or self.numel() == 0:
        return self.clone()
    x = self.reshape([lead] + rest)
    fi = flat.reshape([-1] + [1] * len(rest)).expand(*([flat.numel()] + rest))
    vv = v.reshape([-1] + rest)
    out = apply("scatter-add" if accumulate else "scatter", [x, fi, vv], {"axis": 0})
    return out.reshape(list(self.shape))


@torch_name("put", "`index_put` on the flattened tensor", "indexing", example="t.put(idx, src)")
def put(self: Tensor, index: Any, source: Any, accumulate: bool = False) -> Tensor:
    idx = _index(self, index, "put")
    s = _tensor(self, source, self.dtype)
    if s.numel() != idx.numel():
        raise Error(f"put: {idx.numel()} indices and {s.numel()} source elements")
    return index_put(self.reshape(-1), (idx.reshape(-1),), s.reshape(-1), accumulate).reshape(list(self.shape))


@torch_name("masked_scatter", "the positions where the mask holds take the source's elements in order (the mask "
            "computed first: which source element lands where depends on it)", "indexing",
            example="t.masked_scatter(m, src)")
def masked_scatter(self: Tensor, mask: Any, source: Any) -> Tensor:
    m = _tensor(self, mask)
    if m.dtype != "bool":
        raise Error(f"masked_scatter: the mask must be bool, not {m.dtype}")
    if state.trace() is not None:
        raise Error("masked_scatter inside caten.jit: where each source element lands depends on the mask's values",
                    hint="compute it outside the traced function")
    shape = list(np.broadcast_shapes(tuple(self.shape), tuple(m.shape)))
    mv = np.broadcast_to(m.numpy(), shape)
    pos = np.flatnonzero(mv)
    s = _tensor(self, source, self.dtype).reshape(-1)
    if s.numel() < pos.size:
        raise Error(f"masked_scatter: the mask selects {pos.size} elements but the source has {s.numel()}")
    x = self.expand(*shape) if list(self.shape) != shape else self
    if pos.size == 0:
        return x.clone()
    src = s[:pos.size] if s.numel() != pos.size else s
    return index_put(x.reshape(-1), (Tensor(pos.astype(np.int64), runtime=self.runtime),), src).reshape(shape)


def _inplace(name: str, fn: Any) -> None:
    def f(self: Tensor, *args: Any, **kw: Any) -> Tensor:
        return inplace(self, fn(self, *args, **kw), name)
    f.__name__ = name
    f.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    torch_name(name, f"the tensor becomes `{fn.__name__}` of it", "indexing")(f)


for _fn in (scatter, scatter_add, scatter_reduce, index_add, index_copy, index_reduce, index_fill, index_put, put,
            masked_scatter):
    _inplace(_fn.__name__ + "_", _fn)
