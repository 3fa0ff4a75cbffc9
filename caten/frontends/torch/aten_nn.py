"""Lowerings of the ATen calls real models bring beyond the core arithmetic (`caten.from_torch`):
eval-mode BatchNorm, hardtanh (ReLU6), running sums, gathers by index tensors, and the metadata
assertions torch.export leaves after a cast. What caten cannot compute as torch defines it is
refused, naming the node."""

from __future__ import annotations

import math
from typing import Any

from caten.errors import Error
from caten.frontends.torch.context import Ctx, affine, aten, dtype_of, lst, meta, operand


def _rank(node: Any) -> int:
    return meta(node).dim()


def _refuse(n: Any, what: str) -> Error:
    return Error(f"torch.export node `{n.name}`: {what}", None, "docs/import.md lists the supported ATen ops")


@aten("aten._assert_tensor_metadata.default")
def _assert_metadata(c: Ctx, n: Any) -> list:
    """A check of dtype/shape that torch.export already did while tracing: nothing to compute."""
    return []


@aten("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_eval(c: Ctx, n: Any) -> list:
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias over axis 1, as torch's eval
    BatchNorm; the saved statistics (the other two outputs) are empty in eval mode."""
    x, w, b, mean, var, _momentum, eps = n.args
    r = _rank(x)
    if r < 2:
        raise _refuse(n, "batch norm needs an input of rank >= 2 (N, C, ...)")
    xv = c.arg(x)
    chan = lst([c.dim(meta(x).shape[1])] + [1] * (r - 2))

    def per_channel(t: Any) -> str:
        return f"(reshape {c.arg(t)} {chan})"

    y = f"(* (- {xv} {per_channel(mean)}) (rsqrt (+ {per_channel(var)} {float(eps)!r})))"
    return [affine(y, per_channel(w) if w is not None else None, per_channel(b) if b is not None else None), None, None]


@aten("aten.hardtanh.default")
def _hardtanh(c: Ctx, n: Any) -> str:
    x = n.args[0]
    lo = n.args[1] if len(n.args) > 1 else -1.0
    hi = n.args[2] if len(n.args) > 2 else 1.0
    return f"(min (max {c.arg(x)} {operand(c, lo, x)}) {operand(c, hi, x)})"


@aten("aten.cumsum.default")
def _cumsum(c: Ctx, n: Any) -> str:
    x, dim = n.args[0], n.args[1]
    out = dtype_of(meta(n).dtype)
    xv = c.arg(x) if dtype_of(meta(x).dtype) == out else f"(cast {c.arg(x)} {out})"
    return f"(cumsum {xv} :axis {dim % max(_rank(x), 1)})"


@aten("aten.index.Tensor")
def _index(c: Ctx, n: Any) -> str:
    """x[..., i, j, ...] with integer index tensors on consecutive axes (the axes before them taken
    whole): the indexed axes are merged into one and the broadcast indices into one flat index
    (each made non-negative first), then numpy's take along it, which places the index dims where
    torch does for consecutive indices."""
    x, indices = n.args[0], n.args[1]
    given = [(k, i) for k, i in enumerate(indices) if i is not None]
    ks = [k for k, _ in given]
    if not given or ks != list(range(ks[0], ks[0] + len(ks))):
        raise _refuse(n, "index tensors on axes that are not consecutive (torch then moves the index dims first)")
    for _, i in given:
        if dtype_of(meta(i).dtype) not in ("i32", "i64"):
            raise _refuse(n, "indexing with a bool mask gives a shape known only from the values")
    k = ks[0]
    shape = list(meta(x).shape)
    sizes = [shape[j] for j in ks]
    if len(given) == 1:
        return f"(take {c.arg(x)} {c.arg(given[0][1])} :axis {k})"
    if not all(isinstance(d, int) for d in sizes):
        raise _refuse(n, "several index tensors over axes whose sizes are symbolic")
    flat = None
    for (_, i), size in zip(given, sizes):
        iv = f"(cast {c.arg(i)} i64)"
        iv = c.emit(n.name + "_i", f"(where (< {iv} 0) (+ {iv} {size}) {iv})")
        flat = iv if flat is None else f"(+ (* {flat} {size}) {iv})"
    merged = [c.dim(d) for d in shape[:k]] + [math.prod(sizes)] + [c.dim(d) for d in shape[k + len(ks):]]
    return f"(take (reshape {c.arg(x)} {lst(merged)}) {flat} :axis {k})"


@aten("aten.gather.default")
def _gather(c: Ctx, n: Any) -> str:
    """torch.gather: out[.., j, ..] = x[.., index[.., j, ..], ..] along dim; the index must have
    x's sizes on the other axes (torch also allows smaller ones, which caten refuses)."""
    x, dim, idx = n.args[0], n.args[1], n.args[2]
    r = _rank(x)
    d = dim % max(r, 1)
    xs, ixs = list(meta(x).shape), list(meta(idx).shape)
    if len(ixs) != r or any(str(a) != str(b) for i, (a, b) in enumerate(zip(xs, ixs)) if i != d):
        raise _refuse(n, f"gather with an index of shape {ixs} for an input of shape {xs}: caten needs the "
                         "input's sizes on every axis but `dim`")
    return f"(take-along-axis {c.arg(x)} {c.arg(idx)} :axis {d})"
