"""torch's order statistics: sort, argsort, topk, kthvalue, median. sort, argsort and topk are the
library's composites over the principal SORT (a stable merge sort: ties keep their original order,
as torch's `stable=True`; nan sorts above everything, as in torch), so they run inside caten.jit and
on every runtime; the values are a GATHER at that order, so the gradient goes to the elements picked,
as torch's does. kthvalue and median still take the order from the host (an error inside caten.jit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_reduce import ValuesIndices
from caten.tensor.torch_shape import _dim
from caten.tensor.torchnames import torch_name


def _order(t: Tensor, dim: int, descending: bool, what: str) -> np.ndarray:
    """The indices that sort t along dim (stable; nan last ascending, first descending)."""
    if state.trace() is not None:
        raise Error(f"{what}() inside caten.jit: caten's library has no sort, so the order is computed from "
                    "the tensor's value, which a traced function cannot read", hint="call it outside caten.jit")
    v = np.asarray(t.numpy())
    if v.ndim == 0:
        return np.zeros((), np.int64)
    if descending:
        v = np.where(np.isnan(v), -np.inf, -v) if v.dtype.kind == "f" else ~v
    return np.argsort(v, axis=dim, kind="stable").astype(np.int64)


def _pick(t: Tensor, idx: np.ndarray, dim: int) -> ValuesIndices:
    i = Tensor(idx, runtime=t.runtime)
    return ValuesIndices(apply("take-along-axis", [t, i], {"axis": dim}) if t.ndim else t, i)


@torch_name("sort", "(values, indices): `(sort x :axis d :descending b)`, a stable merge sort",
            "reduction", example="t.sort(dim=-1, descending=True)")
def sort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    d = _dim(self, dim) if self.ndim else 0
    v, i = apply("sort", [self], {"axis": d, "descending": bool(descending)})
    return ValuesIndices(v, i)


@torch_name("argsort", "the indices of `sort`: `(argsort x :axis d :descending b)`", "reduction",
            example="t.argsort(dim=-1)")
def argsort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    d = _dim(self, dim) if self.ndim else 0
    return apply("argsort", [self], {"axis": d, "descending": bool(descending)})


@torch_name("topk", "the first k of `sort` (descending unless largest=False): `(topk x k :axis d :largest b)`",
            "reduction", example="t.topk(2, dim=-1)")
def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    d = _dim(self, dim) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n:
        raise Error(f"topk: k={k} is out of range for a dim of size {n}")
    v, i = apply("topk", [self, k], {"axis": d, "largest": bool(largest)})
    return ValuesIndices(v, i)


@torch_name("kthvalue", "the k-th smallest (1-based) of `sort` along dim, as (values, indices)", "reduction",
            example="t.kthvalue(2, dim=1)")
def kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    d = _dim(self, dim) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not 1 <= k <= n:
        raise Error(f"kthvalue: k={k} is out of range for a dim of size {n}")
    return _select(self, d, k - 1, keepdim, "kthvalue")


def _select(t: Tensor, d: int, pos: int, keepdim: bool, what: str) -> ValuesIndices:
    order = _order(t, d, False, what)
    if not t.ndim:
        return ValuesIndices(t, Tensor(np.zeros((), np.int64), runtime=t.runtime))
    idx = np.take(order, [pos], axis=d)
    v = np.asarray(t.numpy())
    if v.dtype.kind == "f":  # torch's median and kthvalue give nan where the slice holds one
        nan = np.isnan(v)
        first = np.argmax(nan, axis=d)
        idx = np.where(nan.any(axis=d, keepdims=True), np.expand_dims(first, d), idx)
    vals, ids = _pick(t, idx, d)
    if not keepdim:
        vals, ids = vals.squeeze(d), ids.squeeze(d)
    return ValuesIndices(vals, ids)


@torch_name("median", "the lower median (as torch's): without dim a value, with dim (values, indices) of "
            "`sort`'s element (n-1)//2; nan where the slice holds one", "reduction", example="t.median(dim=1)")
def median(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    if self.numel() == 0:
        raise Error("median() of an empty tensor has no value")
    if dim is None:
        flat = self.reshape(-1)
        return _select(flat, 0, (flat.shape[0] - 1) // 2, False, "median").values
    d = _dim(self, dim) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    return _select(self, d, (n - 1) // 2, keepdim, "median")
