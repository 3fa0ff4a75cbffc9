"""The backward ops of the Core ATen opset (what a graph exported from a training step calls),
each composed from `caten.Tensor` ops by torch's own formula: pooling gradients as constant
window matrices (the windows are known while importing, the gradients are not), max pooling's
as a scatter-add by its indices, group norm's by torch's closed form, and a convolution's as
the transposed convolution (input) and a convolution with batch and channels swapped (weight)."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.torch.aten_nn_core import caten_fn
from caten.frontends.torch.bridge import refuse, via
from caten.frontends.torch.context import aten


def _const(a: np.ndarray, dtype: str) -> Any:
    from caten.tensor.tensor import Tensor

    return Tensor(a).to(dtype)


def _spread(g: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
    """rows^T @ g @ cols over the last two axes: each output cell's gradient spread over its window."""
    return _const(rows.T.copy(), g.dtype).matmul(g).matmul(_const(cols, g.dtype))


def _avg_windows(out: int, size: int, k: int, s: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(0/1 window matrix [out, size], the window sizes with padding, without): avg_pool2d's rule."""
    m = np.zeros((out, size))
    with_pad, without = np.zeros(out), np.zeros(out)
    for o in range(out):
        lo = o * s - p
        hi = min(lo + k, size + p)
        with_pad[o] = hi - lo
        lo, hi = max(lo, 0), min(hi, size)
        m[o, lo:hi] = 1
        without[o] = hi - lo
    return m, with_pad, without


def _pair(v: Any) -> list[int]:
    return list(v) * 2 if len(v) == 1 else list(v)


@aten("aten.avg_pool2d_backward.default")
@via
def _avg_pool2d_backward(b: Any, n: Any) -> Any:
    g, x = b.t(n.args[0]), b.t(n.args[1])
    k, s, p, _ceil, include_pad, divisor = n.args[2:8]  # ceil_mode: the windows come from g's size
    k, p = _pair(k), _pair(p)
    s = _pair(s) if s else k
    (oh, ow), (h, w) = g.shape[-2:], x.shape[-2:]
    mh, ph, nh = _avg_windows(oh, h, k[0], s[0], p[0])
    mw, pw, nw = _avg_windows(ow, w, k[1], s[1], p[1])
    if divisor:
        return _spread(g / divisor, mh, mw)
    d = np.outer(ph, pw) if include_pad else np.outer(nh, nw)
    return _spread(g / _const(d, g.dtype), mh, mw)


def _adaptive_windows(out: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(0/1 window matrix, window sizes): adaptive pooling's floor/ceil windows."""
    m = np.zeros((out, size))
    for o in range(out):
        m[o, (o * size) // out:-(-((o + 1) * size) // out)] = 1
    return m, m.sum(1)


@aten("aten._adaptive_avg_pool2d_backward.default")
@via
def _adaptive_avg_pool2d_backward(b: Any, n: Any) -> Any:
    """torch divides by the window's height, then by its width (two roundings, kept)."""
    g, x = b.t(n.args[0]), b.t(n.args[1])
    mh, kh = _adaptive_windows(g.shape[-2], x.shape[-2])
    mw, kw = _adaptive_windows(g.shape[-1], x.shape[-1])
    g = g / _const(kh.reshape(-1, 1), g.dtype) / _const(kw, g.dtype)
    return _spread(g, mh, mw)


@aten("aten.max_pool2d_with_indices_backward.default")
@via
def _max_pool2d_backward(b: Any, n: Any) -> Any:
    """Each output's gradient added at the input position its index names (ties summed, as torch)."""
    import caten.tensor.torch_create as create

    g, x, idx = b.t(n.args[0]), b.t(n.args[1]), b.t(n.args[7])
    lead = list(x.shape[:-2])
    flat = [*lead, x.shape[-2] * x.shape[-1]]
    gf, kf = g.reshape(*lead, -1), idx.reshape(*lead, -1)
    return create.zeros(*flat, dtype=g.dtype).scatter_add(-1, kf, gf).reshape(*x.shape)


@aten("aten.native_group_norm_backward.default")
@via
def _group_norm_backward(b: Any, n: Any) -> Any:
    """torch's closed form (with the mean and rstd given, whatever they are): per (n, c) sums
    ds = sum dy*x, db = sum dy; per group c2 = (db_g*mean - ds_g)*rstd^3/m, c3 = -c2*mean -
    db_g*rstd/m; dx = rstd*gamma*dy + c2*x + c3, dgamma = sum_n (ds - db*mean)*rstd, dbeta = sum_n db."""
    dy, x, mean, rstd = (b.t(a) for a in n.args[:4])
    w = b.t(n.args[4]) if n.args[4] is not None else None
    nb, c, hw, groups, mask = n.args[5:10]
    cg = c // groups
    dy3, x3 = dy.reshape(nb, c, hw), x.reshape(nb, c, hw)
    ds, db = (dy3 * x3).sum(-1), dy3.sum(-1)  # (N, C)
    gamma = w.reshape(1, c) if w is not None else None
    dsg = (ds * gamma if gamma is not None else ds).reshape(nb, groups, cg).sum(-1)  # (N, G)
    dbg = (db * gamma if gamma is not None else db).reshape(nb, groups, cg).sum(-1)
    m = cg * hw
    c2 = (dbg * mean - dsg) * rstd * rstd * rstd / m
    c3 = -c2 * mean - dbg * rstd / m
    outs: list[Any] = [None, None, None]
    if mask[0]:
        r = rstd.reshape(nb, groups, 1, 1)
        c1 = r * gamma.reshape(1, groups, cg, 1) if gamma is not None else r
        dx = c1 * dy.reshape(nb, groups, cg, hw) + c2.reshape(nb, groups, 1, 1) * x.reshape(nb, groups, cg, hw) \
            + c3.reshape(nb, groups, 1, 1)
        outs[0] = dx.reshape(*x.shape)
    if mask[1]:
        per = (ds.reshape(nb, groups, cg) - db.reshape(nb, groups, cg) * mean.reshape(nb, groups, 1)) \
            * rstd.reshape(nb, groups, 1)
        outs[1] = per.sum(0).reshape(c)
    if mask[2]:
        outs[2] = db.sum(0)
    return outs


def _weight_grad(b: Any, n: Any, x: Any, g: Any, k: list[int], stride: list[int], padding: list[int],
                 dilation: list[int], groups: int) -> Any:
    """d(conv(x, w))/dw as a convolution: batch and channels swapped, stride and dilation swapped,
    groups kept (each group's output channels read its own batch slices), cropped to the kernel."""
    d = len(k)
    conv = caten_fn(f"conv{d}d")
    if conv is None:
        raise refuse(n, f"conv{d}d is not in caten.nn.functional yet")
    nb, cin, cout = x.shape[0], x.shape[1], g.shape[1]
    sp, osp = list(x.shape[2:]), list(g.shape[2:])
    xs = x.reshape(nb, groups, cin // groups, *sp).permute(2, 1, 0, *range(3, 3 + d)).reshape(
        cin // groups, groups * nb, *sp)
    gs = g.reshape(nb, groups, cout // groups, *osp).permute(1, 2, 0, *range(3, 3 + d)).reshape(
        cout, nb, *osp)
    gw = conv(xs, gs, None, dilation, padding, stride, groups)  # (Cin/G, Cout, k'...)
    gw = gw.transpose(0, 1)
    if list(gw.shape[2:]) != k:
        gw = gw[(slice(None), slice(None), *(slice(0, kk) for kk in k))]
    return gw


@aten("aten.convolution_backward.default")
@via
def _convolution_backward(b: Any, n: Any) -> Any:
    """(grad input, grad weight, grad bias) of aten.convolution, each only where output_mask asks."""
    g, x, w = b.t(n.args[0]), b.t(n.args[1]), b.t(n.args[2])
    stride, padding, dilation, transposed, _out_pad, groups, mask = n.args[4:11]
    d = x.ndim - 2
    stride, padding, dilation = list(stride), list(padding), list(dilation)
    k = list(w.shape[2:])
    outs: list[Any] = [None, None, None]
    if mask[0]:
        if transposed:  # the input gradient of a transposed convolution is the direct one
            conv = caten_fn(f"conv{d}d")
            if conv is None:
                raise refuse(n, f"conv{d}d is not in caten.nn.functional yet")
            outs[0] = conv(g, w, None, stride, padding, dilation, groups)
        else:
            convt = caten_fn(f"conv_transpose{d}d")
            if convt is None:
                raise refuse(n, f"conv_transpose{d}d is not in caten.nn.functional yet")
            extra = [x.shape[2 + i] - ((g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1)
                     for i in range(d)]
            outs[0] = convt(g, w, None, stride, padding, extra, groups, dilation)
    if mask[1]:  # a transposed convolution's weight is the direct one's with input and output swapped
        outs[1] = (_weight_grad(b, n, g, x, k, stride, padding, dilation, groups) if transposed
                   else _weight_grad(b, n, x, g, k, stride, padding, dilation, groups))
    if mask[2]:
        outs[2] = g.sum([0, *range(2, 2 + d)])
    return outs

