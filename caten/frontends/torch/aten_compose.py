"""Core ATen ops composed here from `caten.Tensor` ops, because the Tensor methods of the same
name compute eagerly from known values (sort, topk) or do not exist (cdist, pdist): each is
built from comparisons, sums and gathers, so its numbers are torch's, not an approximation."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.torch.bridge import refuse, via
from caten.frontends.torch.context import aten, dtype_of, meta


def _order(x: Any, dim: int, descending: bool) -> Any:
    """Indices that sort x along dim, stably (ties keep their order), NaN last ascending and first
    descending as torch: rank_i = #{j: x_j before x_i} + #{j < i: x_j ties x_i}, then the index
    of rank r found by a sum over the one-hot of the ranks (exact integer arithmetic)."""
    from caten.tensor.tensor import Tensor
    from caten.tensor.torch_misc import where

    k = x.shape[dim]
    xt = x.movedim(dim, -1) if dim != x.ndim - 1 else x
    a, b = xt.unsqueeze(-1), xt.unsqueeze(-2)  # a: x_i on axis -2, b: x_j on axis -1
    na, nb = a.isnan(), b.isnan()
    if descending:
        before = (b > a) | (nb & ~na)
    else:
        before = (b < a) | (~nb & na)
    ties = (b == a) | (na & nb)
    earlier = Tensor(np.tril(np.ones((k, k), bool), -1))  # j < i
    rank = before.to("i64").sum(-1) + (ties & earlier).to("i64").sum(-1)  # (..., k): rank of x_i
    pos = Tensor(np.arange(k, dtype=np.int64))
    hit = rank.unsqueeze(-1) == pos  # (..., i, r)
    idx = where(hit, pos.reshape(k, 1), Tensor(np.zeros((), np.int64))).sum(-2)  # (..., r): the i of rank r
    return idx.movedim(-1, dim) if dim != x.ndim - 1 else idx


@aten("aten.sort.default", "aten.sort.stable")
@via
def _sort(b: Any, n: Any) -> Any:
    x = b.t(n.args[0])
    if str(n.target).endswith("stable"):
        dim, desc = n.kwargs.get("dim", -1), n.kwargs.get("descending", False)
    else:
        a = list(n.args) + [-1, False][len(n.args) - 1:]
        dim, desc = a[1], a[2]
    if x.ndim == 0:
        return [x.contiguous(), x.to("i64") * 0]
    dim %= x.ndim
    idx = _order(x, dim, desc)
    return [x.gather(dim, idx), idx]


@aten("aten.topk.default")
@via
def _topk(b: Any, n: Any) -> Any:
    a = list(n.args) + [-1, True, True][len(n.args) - 2:]
    x, k, dim, largest, ordered = b.t(a[0]), a[1], a[2], a[3], a[4]
    if not ordered:
        raise refuse(n, "topk(sorted=False) leaves the order to torch's implementation")
    if x.ndim == 0:
        return [x.contiguous(), x.to("i64") * 0]
    dim %= x.ndim
    idx = _order(x, dim, largest).narrow(dim, 0, k)
    return [x.gather(dim, idx), idx]


def _p_dist(d: Any, p: float) -> Any:
    """The p-norm over the last axis of differences d, as torch's cdist/pdist define each p."""
    a = d.abs()
    if p == 0:
        return (a != 0).to(d.dtype).sum(-1)
    if p == float("inf"):
        return a.amax(-1)
    if p == 1:
        return a.sum(-1)
    if p == 2:
        return (a * a).sum(-1).sqrt()
    return (a ** p).sum(-1) ** (1.0 / p)


@aten("aten._cdist_forward.default")
@via
def _cdist(b: Any, n: Any) -> Any:
    """||x1_i - x2_j||_p from the differences themselves (torch may use a matmul expansion for
    p=2 on large inputs, which is the less exact of the two)."""
    x1, x2, p = b.t(n.args[0]), b.t(n.args[1]), n.args[2]
    return _p_dist(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


@aten("aten._pdist_forward.default")
@via
def _pdist(b: Any, n: Any) -> Any:
    """The distances of the row pairs i < j, in torch's row-major order."""
    from caten.tensor.tensor import Tensor

    x, p = b.t(n.args[0]), n.args[1] if len(n.args) > 1 else 2.0
    i, j = np.triu_indices(x.shape[0], 1)
    d = x.index_select(0, Tensor(i.astype(np.int64))) - x.index_select(0, Tensor(j.astype(np.int64)))
    return _p_dist(d, p)


@aten("aten.native_dropout.default")
@via
def _dropout(b: Any, n: Any) -> Any:
    """Dropout that keeps everything (eval mode or p = 0): x and an all-true mask; a random mask
    cannot match torch's generator, so training dropout is refused."""
    x, p, train = b.t(n.args[0]), n.args[1], n.args[2]
    if train and p != 0:
        raise refuse(n, "dropout in training mode draws torch's random numbers; export the model in eval()")
    return [x.contiguous(), (x == x) | (x != x)]


@aten("aten.empty.memory_format", "aten.empty_strided.default", "aten.new_empty.default")
def _empty(c: Any, n: Any) -> str:
    """torch leaves an empty tensor's values undefined: zeros are one valid choice."""
    val = meta(n)
    dt = dtype_of(val.dtype)
    return f"(full [{' '.join(c.dim(d) for d in val.shape)}] {'false' if dt == 'bool' else 0} :dtype {dt})"


@aten("aten.sym_numel.default")
def _numel(c: Any, n: Any) -> str:
    shape = meta(n.args[0]).shape
    return "(* " + " ".join(["1"] + [c.dim(d) for d in shape]) + ")"
