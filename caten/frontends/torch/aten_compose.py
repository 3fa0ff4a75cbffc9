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


@aten("aten.sym_stride.int", "aten.sym_storage_offset.default")
def _layout_int(c: Any, n: Any) -> str:
    """A stride or storage offset torch.export recorded as a number (symbolic ones are size
    arithmetic, handled before lowering)."""
    return c.dim(meta(n))


@aten("aten.as_strided.default")
@via
def _as_strided(b: Any, n: Any) -> Any:
    """out[i] = storage[offset + sum(i_k * stride_k)], a take at constant flat positions. caten's
    tensors are contiguous, so only an input torch also holds contiguously from the start of its
    storage has that storage."""
    from caten.tensor.tensor import Tensor

    src = meta(n.args[0])
    if not src.is_contiguous() or src.storage_offset() != 0:
        raise refuse(n, "as_strided of a tensor torch does not hold contiguously (its storage is not caten's)")
    x, size, stride = b.t(n.args[0]), list(n.args[1]), list(n.args[2])
    off = n.args[3] if len(n.args) > 3 and n.args[3] is not None else 0
    pos = np.full(size, off, np.int64)
    for k, (s, st) in enumerate(zip(size, stride)):
        pos += (np.arange(s, dtype=np.int64) * st).reshape([s if j == k else 1 for j in range(len(size))])
    if pos.size and (pos.min() < 0 or pos.max() >= max(x.numel(), 1)):
        raise refuse(n, "as_strided reaching outside the tensor's elements")
    return x.reshape(-1).index_select(0, Tensor(pos.reshape(-1))).reshape(*size)


def _used_outputs(n: Any) -> set[int]:
    """Which outputs of a multi-output node the graph reads (through operator.getitem)."""
    return {u.args[1] for u in n.users if u.users}


@aten("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
@via
def _embedding_bag(b: Any, n: Any) -> Any:
    """F.embedding_bag's output: per bag [offsets[b], next offset) a sum, mean or max of the
    gathered rows, padding_idx entries left out, empty bags 0 (torch's convention). The bags
    come from comparisons with the offsets, so their values need not be known while importing;
    the bookkeeping outputs (offset2bag, bag sizes, argmax) are refused when read."""
    from caten.tensor.tensor import Tensor
    from caten.tensor.torch_misc import where

    a = list(n.args) + [False, 0, False, None, False, -1][len(n.args) - 3:]
    w, ind, offs = b.t(a[0]), b.t(a[1]), b.t(a[2])
    mode, psw, last, pad = a[4], a[6], a[7], a[8]
    if _used_outputs(n) - {0}:
        raise refuse(n, "embedding_bag's offset2bag/bag_size/max_indices outputs")
    if ind.ndim != 1:
        raise refuse(n, "embedding_bag with 2-d indices at the ATen level")
    count = ind.shape[0]
    nxt = offs.narrow(0, 1, offs.shape[0] - 1)
    if last:
        starts, ends = offs.narrow(0, 0, offs.shape[0] - 1), nxt
    else:
        from caten.tensor.torch_shape import cat

        starts, ends = offs, cat([nxt, Tensor(np.array([count], np.int64)).to(offs.dtype)], 0)
    pos = Tensor(np.arange(count, dtype=np.int64)).to(offs.dtype)
    mask = (pos >= starts.unsqueeze(1)) & (pos < ends.unsqueeze(1))  # (bags, N)
    if pad is not None and pad >= 0:
        mask = mask & (ind != pad)
    rows = w.index_select(0, ind)  # (N, D)
    if psw is not None:
        rows = rows * b.t(psw).unsqueeze(1)
    m3 = mask.unsqueeze(2)
    zero = Tensor(np.zeros((), np.float64)).to(w.dtype)
    if mode == 2:
        big = where(m3, rows.unsqueeze(0), Tensor(np.array(-np.inf)).to(w.dtype)).amax(1)
        out = where(mask.any(1, keepdim=True), big, zero)
    else:
        out = where(m3, rows.unsqueeze(0), zero).sum(1)
        if mode == 1:
            out = out / mask.to(w.dtype).sum(1, keepdim=True).clamp(1, None)
    return [out, None, None, None]


@aten("aten.embedding_dense_backward.default")
@via
def _embedding_backward(b: Any, n: Any) -> Any:
    """The embedding weight's gradient: each grad row added at its index (index_add), the
    padding_idx row zero, as torch."""
    from caten.tensor.tensor import Tensor

    grad, ind, num, pad, freq = (b.t(a) for a in n.args[:5])
    if freq:
        raise refuse(n, "embedding backward with scale_grad_by_freq")
    d = grad.shape[-1]
    flat = ind.reshape(-1)
    out = Tensor(np.zeros((num, d), np.float64)).to(grad.dtype).index_add(0, flat, grad.reshape(-1, d))
    if pad is not None and 0 <= pad < num:
        keep = np.ones((num, 1), bool)
        keep[pad] = False
        out = out * Tensor(keep).to(grad.dtype)
    return out


@aten("aten.native_layer_norm_backward.default")
@via
def _layer_norm_backward(b: Any, n: Any) -> Any:
    """(grad_input, grad_weight, grad_bias) of layer norm from the saved mean and rstd:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w over the normalized axes."""
    dy, x, shape, mean, rstd, w, bias, mask = n.args
    dy, x, mean, rstd = b.t(dy), b.t(x), b.t(mean), b.t(rstd)
    w, bias = b.t(w), b.t(bias)
    k = len(shape)
    axes = list(range(x.ndim - k, x.ndim))
    lead = list(range(x.ndim - k))
    xhat = (x - mean) * rstd
    g = dy * w if w is not None else dy
    dx = (g - g.mean(axes, keepdim=True) - xhat * (g * xhat).mean(axes, keepdim=True)) * rstd
    def over_lead(t: Any) -> Any:  # sum over the leading axes (torch's sum(dim=[]) would sum all)
        return t.sum(lead) if lead else t.contiguous()

    dw = over_lead(dy * xhat) if (w is not None and mask[1]) else None
    db = over_lead(dy) if (bias is not None and mask[2]) else None
    return [dx if mask[0] else None, dw, db]
