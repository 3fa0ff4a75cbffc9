"""torch's scans, searches and counts (cummax, cummin, logcumsumexp, searchsorted, bucketize, mode,
bincount, histc, repeat_interleave). In-graph where the library has the pieces (logcumsumexp as a
log-depth scan of logaddexp, searchsorted as a count of comparisons); where an index or a length
depends on the values (cummax's argmax so far, mode, bincount's length, a tensor of repeats) it is
computed on the host from the tensor's value, as sort's order is, and the values are then picked
in-graph so their gradient goes to the elements picked, as torch's does."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_reduce import ValuesIndices
from caten.tensor.torch_shape import _dim
from caten.tensor.torchnames import ArgError, torch_name

FLOATS = ("f16", "bf16", "f32", "f64")


def _host(t: Tensor, what: str) -> np.ndarray:
    """t's value, read now (refused inside caten.jit, where values cannot be read)."""
    if state.trace() is not None:
        raise Error(f"{what}() inside caten.jit: its indices or length depend on the tensor's value, which a "
                    "traced function cannot read", hint=f"call {what}() outside caten.jit")
    return np.asarray(t.numpy())


def _ints(a: np.ndarray, like: Tensor) -> Tensor:
    return Tensor(np.array(a, dtype=np.int64, order="C"), runtime=like.runtime)  # (ascontiguousarray makes 0-d 1-d)


def _running(self: Tensor, dim: int, better: Any, what: str) -> ValuesIndices:
    """torch's cummax/cummin: the index of the best so far, the latest among ties; a nan wins and
    every later nan takes its place."""
    d = _dim(self if self.ndim else self.reshape(1), dim)  # a scalar takes dim 0 or -1, as torch's
    if self.numel() == 0 or self.ndim == 0:
        return ValuesIndices(self * 1, _ints(np.zeros(self.shape, np.int64), self))
    v = np.moveaxis(_host(self, what), d, -1)
    nan = np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, bool)
    best, bi = v[..., 0], np.zeros(v.shape[:-1], np.int64)
    out = np.zeros(v.shape, np.int64)
    for k in range(1, v.shape[-1]):
        x = v[..., k]
        take = nan[..., k] | (~np.isnan(best) & better(x, best) if v.dtype.kind == "f" else better(x, best))
        best, bi = np.where(take, x, best), np.where(take, k, bi)
        out[..., k] = bi
    idx = _ints(np.moveaxis(out, -1, d), self)
    return ValuesIndices(apply("take-along-axis", [self, idx], {"axis": d}), idx)


@torch_name("cummax", "(values, indices) of the running maximum: indices from the host (the latest among ties, "
            "as torch's), values `(take-along-axis x indices)`", "reduction", example="t.cummax(dim=0)")
def cummax(self: Tensor, dim: int) -> ValuesIndices:
    return _running(self, dim, np.greater_equal, "cummax")


@torch_name("cummin", "as `cummax`, the running minimum", "reduction", example="t.cummin(dim=0)")
def cummin(self: Tensor, dim: int) -> ValuesIndices:
    return _running(self, dim, np.less_equal, "cummin")


@torch_name("logcumsumexp", "a log-depth scan `y = (logaddexp y (shift y s))`, s = 1, 2, 4...: no overflow "
            "or underflow of exp", "reduction", example="t.logcumsumexp(dim=0)")
def logcumsumexp(self: Tensor, dim: int) -> Tensor:
    if self.dtype not in FLOATS:
        raise Error(f"logcumsumexp() needs a floating-point tensor, this one is {self.dtype}",
                    hint="cast first: t.float().logcumsumexp(0)")
    if self.ndim == 0:
        return self * 1
    d = _dim(self, dim)
    half = self.dtype in ("f16", "bf16")  # torch accumulates these in f32
    n, y, s = self.shape[d], self.cast("f32") if half else self, 1
    while s < n:
        pad_shape = list(y.shape)
        pad_shape[d] = s
        pad = Tensor(np.full(pad_shape, -np.inf, np_dtype(y.dtype)), runtime=y.runtime)
        shifted = apply("concat", [pad, y.narrow(d, 0, n - s)], {"axis": d})
        y = apply("logaddexp", [y, shifted], {})
        s *= 2
    return y.cast(self.dtype) if half else y if y is not self else self * 1


@torch_name("searchsorted", "torch's binary search, unrolled: log2(n) steps of `(take-along-axis seq mid)` "
            "and `(where (not (>= m v)) ...)` (right: `>`), so nan and unsorted input land where torch's do",
            "indexing", kind="function",
            example="caten.searchsorted(seq, values, right=True)")
def searchsorted(sorted_sequence: Tensor, input: Any, *, out_int32: bool = False, right: bool = False,  # noqa: A002
                 side: Any = None, sorter: Any = None) -> Tensor:
    if side is not None:
        if side not in ("left", "right"):
            raise Error(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if side == "left" and right:
            raise Error("searchsorted: side='left' and right=True contradict each other")
        right = side == "right"
    seq = sorted_sequence
    if seq.ndim == 0:
        raise Error("searchsorted: the sorted sequence must have at least one dim")
    if sorter is not None:
        seq = apply("take-along-axis", [seq, sorter], {"axis": seq.ndim - 1})
    v = input if isinstance(input, Tensor) else Tensor(np.asarray(input, np_dtype(seq.dtype)), runtime=seq.runtime)
    if seq.ndim > 1 and list(seq.shape[:-1]) != list(v.shape[:-1]):
        raise Error(f"searchsorted: the leading dims of the sequence {list(seq.shape[:-1])} and of the values "
                    f"{list(v.shape[:-1])} differ", hint="or give a 1-D sequence")
    count = _binary_search(seq, v.reshape(1), right).squeeze(0) if v.ndim == 0 else _binary_search(seq, v, right)
    return count.cast("i32") if out_int32 else count


def _binary_search(seq: Tensor, v: Tensor, right: bool) -> Tensor:
    """torch's lower/upper bound: `start = mid + 1` where `!(seq[mid] >= v)` (`>` for right), else
    `end = mid`, for each value at once until start == end (at most bit_length(n) steps)."""
    n = seq.shape[-1]
    start = _ints(np.zeros(v.shape, np.int64), v)
    end = start + n
    if n == 0:
        return start
    flat = seq.ndim == 1
    for _ in range(n.bit_length()):
        mid = start + (end - start) // 2
        at = apply("where", [mid < n, mid, n - 1], {})
        m = (apply("take", [seq, at.reshape(-1)], {"axis": 0}).reshape(list(v.shape)) if flat
             else apply("take-along-axis", [seq, at], {"axis": seq.ndim - 1}))
        go = apply("not", [(m > v) if right else (m >= v)], {})
        active = start < end
        start = apply("where", [active & go, mid + 1, start], {})
        end = apply("where", [active & apply("not", [go], {}), mid, end], {})
    return start


@torch_name("bucketize", "`searchsorted(boundaries, x)`: boundaries[i-1] < x <= boundaries[i] (right: <=, <)",
            "indexing", example="t.bucketize(boundaries)")
def bucketize(self: Any, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    if boundaries.ndim != 1:
        raise Error(f"bucketize: boundaries must be 1-D, got rank {boundaries.ndim}")
    return searchsorted(boundaries, self, out_int32=out_int32, right=right)


@torch_name("mode", "(values, indices) of the most frequent value along dim (the smallest among equally "
            "frequent, its last index), from the host; values `(take-along-axis x indices)`", "reduction",
            example="t.mode(dim=-1)")
def mode(self: Tensor, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    d = _dim(self if self.ndim else self.reshape(1), dim)  # a scalar takes dim 0 or -1, as torch's
    if self.ndim == 0:
        return ValuesIndices(self * 1, _ints(np.zeros((), np.int64), self))
    if self.shape[d] == 0:
        raise Error("mode() of an empty dim has no value")
    v = np.moveaxis(_host(self, "mode"), d, -1)
    if v.dtype.kind == "f" and np.isnan(v).any():
        raise Error("mode() of a tensor holding nan is not supported", hint="drop or replace the nans first")
    flat = v.reshape(-1, v.shape[-1])
    idx = np.zeros(flat.shape[0], np.int64)
    for r, row in enumerate(flat):
        vals, counts = np.unique(row, return_counts=True)
        best = vals[np.argmax(counts)]  # np.unique is sorted: the smallest among the most frequent
        idx[r] = np.nonzero(row == best)[0][-1]
    it = _ints(np.expand_dims(idx.reshape(v.shape[:-1]), d), self)
    vals_t = apply("take-along-axis", [self, it], {"axis": d})
    if not keepdim:
        vals_t, it = vals_t.squeeze(d), it.squeeze(d)
    return ValuesIndices(vals_t, it)


@torch_name("bincount", "`(sum (* (= (reshape x [n 1]) (arange L)) w) :axis 0)`, L = max(x)+1 or minlength read "
            "from the host", "reduction", example="t.bincount(minlength=4)")
def bincount(self: Tensor, weights: Any = None, minlength: int = 0) -> Tensor:
    if self.ndim != 1 or self.dtype in FLOATS or self.dtype == "bool":
        raise Error(f"bincount: input must be a 1-D tensor of integers, got rank {self.ndim} {self.dtype}")
    if minlength < 0:
        raise Error(f"bincount: minlength must be non-negative, got {minlength}")
    v = _host(self, "bincount")
    if v.size and v.min() < 0:
        raise Error("bincount: input holds a negative value")
    n = max(int(v.max()) + 1 if v.size else 0, minlength)
    hit = self.reshape(-1, 1) == _ints(np.arange(n).reshape(1, -1), self)
    if weights is None:
        return apply("sum", [hit.cast("i64")], {"axis": [0], "keepdims": False})
    w = weights if isinstance(weights, Tensor) else Tensor(np.asarray(weights), runtime=self.runtime)
    if list(w.shape) != list(self.shape):
        raise Error(f"bincount: weights {list(w.shape)} and input {list(self.shape)} differ in shape")
    w = w if w.dtype in ("f32", "f64") else w.cast("f64")  # torch's: float weights keep their dtype, others f64
    zero = Tensor(np.zeros((), np_dtype(w.dtype)), runtime=self.runtime)
    return apply("sum", [apply("where", [hit, w.reshape(-1, 1), zero], {})], {"axis": [0], "keepdims": False})


@torch_name("histc", "counts in `bins` equal bins over [min, max] (the data's range when both are 0), from the "
            "host by torch's rule (the bin `trunc((x - min) * bins / (max - min))` in x's dtype, max in the last "
            "bin); no gradient, as torch's",
            "reduction", example="t.histc(bins=4, min=0, max=1)")
def histc(self: Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Tensor:  # noqa: A002
    if self.dtype not in FLOATS:
        raise Error(f"histc() needs a floating-point tensor, this one is {self.dtype}")
    if bins <= 0:
        raise Error(f"histc: bins must be positive, got {bins}")
    if min > max:
        raise Error(f"histc: max ({max}) must be larger than min ({min})")
    v = _host(self, "histc").reshape(-1)
    dt = v.dtype
    lo, hi = float(min), float(max)
    if lo == hi and v.size:
        lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise Error(f"histc: range of [{lo}, {hi}] is not finite")
    lo_t, hi_t = dt.type(lo), dt.type(hi)
    keep = v[(v >= lo_t) & (v <= hi_t)]
    # torch's histc: the bin by linear interpolation in the input's dtype, truncated; max in the last bin
    pos = np.minimum((((keep - lo_t) * dt.type(bins)) / (hi_t - lo_t)).astype(np.int64), bins - 1)
    return Tensor(np.bincount(pos, minlength=bins).astype(dt), runtime=self.runtime)


@torch_name("repeat_interleave", "int repeats: `(reshape (expand (reshape x ...)))`; a tensor of repeats: "
            "`(take x idx)` with idx from the host", "shape", example="t.repeat_interleave(2, dim=0)")
def repeat_interleave(self: Tensor, repeats: Any = None, dim: Any = None, *, output_size: Any = None) -> Tensor:
    if repeats is None:  # torch.repeat_interleave(repeats): the indices repeated
        r = _host(self, "repeat_interleave")
        if r.ndim > 1 or r.dtype.kind not in "iu" or (r < 0).any():
            raise Error("repeat_interleave(repeats): repeats must be a 0-D or 1-D tensor of non-negative ints")
        return _ints(np.repeat(np.arange(r.size), r.reshape(-1)), self)
    x = self.reshape(-1) if dim is None else self
    d = 0 if dim is None else _dim(self, dim)
    if isinstance(repeats, Tensor):
        r = _host(repeats, "repeat_interleave")
        if r.ndim > 1 or r.dtype.kind not in "iu":
            raise Error("repeat_interleave: repeats must be an int or a 0-D/1-D tensor of ints")
        if r.size == 1:
            repeats = int(r.reshape(-1)[0])
        else:
            if r.size != x.shape[d]:
                raise Error(f"repeat_interleave: {r.size} repeats for a dim of size {x.shape[d]}")
            if (r < 0).any():
                raise Error("repeat_interleave: repeats must be non-negative")
            idx = np.repeat(np.arange(r.size), r)
            out = apply("take", [x, _ints(idx, x)], {"axis": d})
            return _check_size(out, d, output_size)
    if isinstance(repeats, bool) or not hasattr(repeats, "__index__"):
        raise ArgError(f"repeat_interleave: repeats is an int or a tensor, not {type(repeats).__name__}")
    k = int(repeats)
    if k < 0:
        raise Error(f"repeat_interleave: repeats must be non-negative, got {k}")
    if x.ndim == 0:
        x = x.reshape(1)
    shape = list(x.shape)
    y = x.unsqueeze(d + 1).expand(shape[:d + 1] + [k] + shape[d + 1:])
    return _check_size(y.reshape(shape[:d] + [shape[d] * k] + shape[d + 1:]), d, output_size)


def _check_size(t: Tensor, d: int, output_size: Any) -> Tensor:
    if output_size is not None and t.shape[d] != output_size:
        raise Error(f"repeat_interleave: output_size={output_size} but the repeats make {t.shape[d]}")
    return t


__all__ = ["cummax", "cummin", "logcumsumexp", "searchsorted", "bucketize", "mode", "bincount", "histc",
           "repeat_interleave"]
