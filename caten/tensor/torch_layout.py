"""torch's names that cut, turn, grid and place tensors: tensor_split and h/v/dsplit, rot90,
atleast_Nd, meshgrid, cartesian_prod, diag_embed, diagflat, block_diag. Each is a composition of
library calls (slice, flip, permute, reshape, expand, take, where, concat)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.promote import result_type
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_linalg import _const, _seq, _zeros
from caten.tensor.torch_shape import _dim, _slice, flip, transpose
from caten.tensor.torchnames import torch_name


@torch_name("tensor_split", "`(slice x ...)` into n near-equal pieces (the first n % size one longer) or at indices",
            "shape", example="t.tensor_split(3, dim=0)")
def tensor_split(self: Tensor, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    d = _dim(self, dim)
    n = self.shape[d]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        ios = ios.numpy().tolist()
    if isinstance(ios, (list, tuple)):
        cuts = [max(0, min(n, int(i) + n if int(i) < 0 else int(i))) for i in ios]
        bounds = list(zip([0] + cuts, cuts + [n]))
    else:
        k = int(ios)
        if k <= 0:
            raise Error(f"tensor_split: the number of sections must be positive, not {k}")
        lens = [n // k + (1 if i < n % k else 0) for i in range(k)]
        starts = [sum(lens[:i]) for i in range(k)]
        bounds = [(s, s + m) for s, m in zip(starts, lens)]
    return tuple(_slice(self, d, a, max(a, b)) for a, b in bounds)


def _dsplit(name: str, t: Tensor, d: int, rank: int, sections: Any) -> tuple[Tensor, ...]:
    if t.ndim < rank:
        raise Error(f"{name} needs a tensor of rank >= {rank}, got {t.ndim}")
    if not isinstance(sections, (list, tuple, Tensor)) and (int(sections) <= 0 or t.shape[d] % int(sections)):
        raise Error(f"{name}: dim {d} of size {t.shape[d]} does not split into {sections} equal parts")
    return tensor_split(t, sections, d)


@torch_name("hsplit", "`tensor_split` along dim 1 (0 for vectors), equal parts", "shape", example="t.hsplit(2)")
def hsplit(self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    return _dsplit("hsplit", self, 1 if self.ndim > 1 else 0, 1, sections)


@torch_name("vsplit", "`tensor_split` along dim 0, equal parts", "shape", example="t.vsplit(2)")
def vsplit(self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    return _dsplit("vsplit", self, 0, 2, sections)


@torch_name("dsplit", "`tensor_split` along dim 2, equal parts", "shape", example="t.dsplit(2)")
def dsplit(self: Tensor, sections: Any) -> tuple[Tensor, ...]:
    return _dsplit("dsplit", self, 2, 3, sections)


@torch_name("rot90", "`flip` and `transpose` of dims, k quarter turns from dims[0] towards dims[1]", "shape",
            example="t.rot90(1, (0, 1))")
def rot90(self: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    if len(dims) != 2 or self.ndim < 2:
        raise Error(f"rot90 needs two dims of a tensor of rank >= 2, got dims={list(dims)}, rank {self.ndim}")
    a, b = _dim(self, dims[0]), _dim(self, dims[1])
    if a == b:
        raise Error(f"rot90: the two dims are the same ({a})")
    k %= 4
    if k == 1:
        return transpose(flip(self, b), a, b)
    if k == 2:
        return flip(self, a, b)
    if k == 3:
        return transpose(flip(self, a), a, b)
    return self * 1 if self.dtype != "bool" else self


_ATLEAST = {1: {0: [1]}, 2: {0: [1, 1], 1: [1, -1]}, 3: {0: [1, 1, 1], 1: [1, -1, 1], 2: [0, 0, 1]}}


def _atleast(rank: int, tensors: tuple) -> Any:
    """torch's atleast_Nd: one tensor gives a tensor; several, or a list, a tuple."""
    listed = len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
    ts = list(tensors[0]) if listed else list(tensors)
    out = []
    for t in ts:
        if t.ndim >= rank:
            out.append(t)
            continue
        spec = _ATLEAST[rank][t.ndim]
        out.append(t.reshape([t.shape[0] if s == -1 else t.shape[i] if s == 0 else 1 for i, s in enumerate(spec)]))
    return out[0] if len(out) == 1 and not listed else tuple(out)


@torch_name("atleast_1d", "`(reshape x [1])` of a 0-D tensor", "shape", kind="function",
            example="caten.atleast_1d(t)")
def atleast_1d(*tensors: Any) -> Any:
    return _atleast(1, tensors)


@torch_name("atleast_2d", "`(reshape x [1 n])` of a vector, [1 1] of a 0-D tensor", "shape", kind="function",
            example="caten.atleast_2d(t)")
def atleast_2d(*tensors: Any) -> Any:
    return _atleast(2, tensors)


@torch_name("atleast_3d", "a vector as [1 n 1], a matrix as [m n 1], a 0-D tensor as [1 1 1]", "shape",
            kind="function", example="caten.atleast_3d(t)")
def atleast_3d(*tensors: Any) -> Any:
    return _atleast(3, tensors)


@torch_name("diag_embed", "`(where eye (take x ...) 0)`: the last dim on the diagonal of dims dim1, dim2",
            "shape", example="t.diag_embed(offset=1)")
def diag_embed(self: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    n = self.shape[-1] if self.ndim else 1
    x = self.reshape(1) if not self.ndim else self
    m = n + abs(offset)
    r, c = np.arange(m)[:, None], np.arange(m)[None, :]
    d1, d2 = _dim(x, dim1, 1), _dim(x, dim2, 1)
    if d1 == d2:
        raise Error(f"diag_embed: dim1 and dim2 are the same dim ({dim1})")
    if n == 0:
        out = _zeros(list(x.shape[:-1]) + [m, m], x.dtype, x)
    else:
        idx = np.clip(np.broadcast_to(r if offset >= 0 else c, (m, m)), 0, n - 1).reshape(-1)
        vals = apply("take", [x, _const(idx.astype(np.int64), x)], {"axis": x.ndim - 1})
        vals = vals.reshape(list(x.shape[:-1]) + [m, m])
        out = apply("where", [_const(c - r == offset, x), vals, _zeros([], x.dtype, x)], {})
    r_ = out.ndim
    return out.movedim((r_ - 2, r_ - 1), (d1, d2))


@torch_name("diagflat", "`diag_embed` of the flattened tensor", "shape", example="t.diagflat()")
def diagflat(self: Tensor, offset: int = 0) -> Tensor:
    return diag_embed(self.reshape(-1), offset)


@torch_name("block_diag", "`(concat ...)` of each block padded with zeros", "shape", kind="function",
            example="caten.block_diag(a, b)")
def block_diag(*tensors: Tensor) -> Tensor:
    if not tensors:
        raise Error("block_diag needs at least one tensor")
    dt = result_type(list(tensors))
    mats = []
    for t in tensors:
        if t.ndim > 2:
            raise Error(f"block_diag: tensors have rank <= 2, got rank {t.ndim}")
        t = t if t.dtype == dt else t.cast(dt)
        mats.append(t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t)
    total = sum(t.shape[1] for t in mats)
    rows, left = [], 0
    for t in mats:
        parts = [_zeros([t.shape[0], left], dt, t), t, _zeros([t.shape[0], total - left - t.shape[1]], dt, t)]
        rows.append(apply("concat", parts, {"axis": 1}))
        left += t.shape[1]
    return apply("concat", rows, {"axis": 0})


@torch_name("meshgrid", "`(expand (reshape x ...) ...)` of each vector; indexing 'ij' (default) or 'xy'",
            "shape", kind="function", example="caten.meshgrid(a, b, indexing='ij')")
def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    ts = _seq(tensors)
    if indexing not in ("ij", "xy"):
        raise Error(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
        if t.ndim > 1:
            raise Error(f"meshgrid: tensors are 0-D or 1-D, got rank {t.ndim}")
    vs = [t.reshape(-1) for t in ts]
    if len({t.dtype for t in vs}) > 1:
        raise Error("meshgrid: tensors have different dtypes (torch requires one)")
    shape = [v.shape[0] for v in vs]
    if indexing == "xy" and len(vs) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, v in enumerate(vs):
        pos = (1 - i if i < 2 else i) if indexing == "xy" and len(vs) >= 2 else i
        view = [1] * len(vs)
        view[pos] = v.shape[0]
        out.append(v.reshape(view).expand(shape))
    return tuple(out)


@torch_name("cartesian_prod", "`(concat (reshape (meshgrid ...) [-1 1])... :axis 1)`", "shape", kind="function",
            example="caten.cartesian_prod(a, b)")
def cartesian_prod(*tensors: Tensor) -> Tensor:
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return apply("concat", [g.reshape(-1, 1) for g in grids], {"axis": 1})


__all__ = ["tensor_split", "hsplit", "vsplit", "dsplit", "rot90", "atleast_1d", "atleast_2d", "atleast_3d",
           "diag_embed", "diagflat", "block_diag", "meshgrid", "cartesian_prod"]


@torch_name("unfold", "`(take x windows :axis dim)`: the windows of `size` every `step` along dim, as a new last "
            "axis (torch's Tensor.unfold)", "shape", example="t.unfold(0, 2, 1)")
def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    if self.ndim == 0:
        if dimension not in (0, -1):
            raise Error(f"unfold: dimension {dimension} is out of range for a 0-d tensor")
        x, d = self.reshape(1), 0
    else:
        x, d = self, _dim(self, dimension)
    n = x.shape[d]
    if size > n:
        raise Error(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise Error(f"unfold: step is {step} but must be > 0")
    if size < 0:
        raise Error(f"unfold: size is {size} but must be >= 0")
    count = (n - size) // step + 1
    idx = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).astype(np.int64)
    out = apply("take", [x, Tensor(idx, runtime=self.runtime)], {"axis": d})  # [.. count size ..]
    out = out.movedim(d + 1, -1)
    return out.reshape([size]) if self.ndim == 0 else out
