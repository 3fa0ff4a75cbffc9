"""Core ATen layer ops lowered through `caten.Tensor` and `caten.nn.functional` (see `bridge`):
activations, group norm, training-mode batch norm, adaptive average pooling, constant padding,
and the pooling/resampling/padding-mode ops the functional library provides under torch's
names. A functional op caten does not have yet leaves its ATen op unsupported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from caten.frontends.torch.bridge import refuse, via
from caten.frontends.torch.context import aten, meta


def _F() -> Any:
    import caten.tensor.nn.functional as F

    return F


_HOMES = ("caten.tensor.nn.functional", "caten.tensor.nn.conv_functional", "caten.tensor.nn.pooling",
          "caten.tensor.nn.resample", "caten.tensor.nn.sampling")


def caten_fn(name: str) -> Any:
    """caten's function `name` under torch's name: caten.nn.functional first, then the modules
    that define the functional ops (an op may be there before F re-exports it); None if absent."""
    import importlib

    for home in _HOMES:
        try:
            f = getattr(importlib.import_module(home), name, None)
        except ImportError:  # a home another part of caten has not created
            continue
        if f is not None:
            return f
    return None


def _has(name: str) -> Callable[[], bool]:
    return lambda: caten_fn(name) is not None


def functional(target: str, name: str, build: Callable[[Any, Any, Any], Any]) -> None:
    """Lower `target` with `build(b, n, F.name)`, available once caten.nn.functional has `name`."""
    lower = via(lambda b, n: build(b, n, caten_fn(name)))
    lower.available = _has(name)  # type: ignore[attr-defined]
    aten(target)(lower)


def _args(n: Any, k: int, defaults: list[Any]) -> list[Any]:
    """The first k arguments of n, positional or by torch's defaults."""
    a = list(n.args)
    return a + defaults[len(a) - (k - len(defaults)):] if len(a) < k else a[:k]


@aten("aten.elu.default")
@via
def _elu(b: Any, n: Any) -> Any:
    """torch's elu: scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))."""
    from caten.tensor.torch_misc import where

    x, alpha, scale, in_scale = _args(n, 4, [1.0, 1.0, 1.0])
    x = b.t(x)
    neg = _F().elu(x * in_scale if in_scale != 1 else x, alpha)
    if scale == 1 and in_scale == 1:
        return neg
    return where(x > 0, x * scale, neg * scale)


@aten("aten.leaky_relu.default")
@via
def _leaky_relu(b: Any, n: Any) -> Any:
    x, slope = _args(n, 2, [0.01])
    return _F().leaky_relu(b.t(x), slope)


def _per_channel(t: Any, c: int, rank: int) -> Any:
    return t.reshape(1, c, *([1] * (rank - 2)))


def _affine(y: Any, w: Any, bias: Any, c: int) -> Any:
    if w is not None:
        y = y * _per_channel(w, c, y.ndim)
    return y + _per_channel(bias, c, y.ndim) if bias is not None else y


@aten("aten.native_group_norm.default")
@via
def _group_norm(b: Any, n: Any) -> Any:
    """(y, mean, rstd) with mean/rstd of shape (N, group): torch's biased variance per group."""
    x, w, bias, N, C, _hw, g, eps = (b.t(a) for a in n.args)
    xr = x.reshape(N, g, -1)
    mu = xr.mean(-1, keepdim=True)
    d = xr - mu
    rstd = ((d * d).mean(-1, keepdim=True) + eps).rsqrt()
    y = _affine((d * rstd).reshape(*x.shape), w, bias, C)
    return [y, mu.reshape(N, g), rstd.reshape(N, g)]


def _batch_norm_stats(b: Any, x: Any, w: Any, bias: Any, eps: float) -> list[Any]:
    """Training-mode batch norm: (y, mean, rstd, biased var) of this batch over every axis but 1."""
    axes = [0] + list(range(2, x.ndim))
    c = x.shape[1]
    mu = x.mean(axes, keepdim=True)
    d = x - mu
    var = (d * d).mean(axes, keepdim=True)
    rstd = (var + eps).rsqrt()
    return [_affine(d * rstd, w, bias, c), mu.reshape(c), rstd.reshape(c), var.reshape(c)]


def _batch_norm(b: Any, n: Any) -> Any:
    x, w, bias, rmean, rvar, training, _momentum, eps = n.args
    x, w, bias = b.t(x), b.t(w), b.t(bias)
    if not training:
        y = (x - _per_channel(b.t(rmean), x.shape[1], x.ndim)) * (_per_channel(b.t(rvar), x.shape[1], x.ndim)
                                                                   + eps).rsqrt()
        return [_affine(y, w, bias, x.shape[1]), None, None]
    return _batch_norm_stats(b, x, w, bias, eps)[:3]


aten("aten._native_batch_norm_legit.default")(via(_batch_norm))


@aten("aten._native_batch_norm_legit_functional.default")
@via
def _batch_norm_functional(b: Any, n: Any) -> Any:
    """Training batch norm with the updated running statistics torch returns (momentum blend,
    the running variance unbiased); the importer returns the module's outputs only."""
    x, w, bias, rmean, rvar, training, momentum, eps = n.args
    if not training:
        return _batch_norm(b, n)[:3] + [b.t(rmean), b.t(rvar)]
    x = b.t(x)
    y, mu, rstd, var = _batch_norm_stats(b, x, b.t(w), b.t(bias), eps)
    cnt = x.numel() // x.shape[1]
    var = var * (cnt / max(cnt - 1, 1))
    return [y, mu, rstd, b.t(rmean) * (1 - momentum) + mu * momentum, b.t(rvar) * (1 - momentum) + var * momentum]


@aten("aten._native_batch_norm_legit.no_stats")
@via
def _batch_norm_no_stats(b: Any, n: Any) -> Any:
    x, w, bias, training, _momentum, eps = n.args
    if not training:
        raise refuse(n, "batch norm in eval mode without running statistics")
    return _batch_norm_stats(b, b.t(x), b.t(w), b.t(bias), eps)[:3]


def _mean_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) rows averaging torch's adaptive windows [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), np.float64)
    for i in range(out):
        lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def _adaptive_avg(b: Any, n: Any) -> Any:
    """Mean over torch's adaptive windows of the last len(output_size) axes, one matmul with an
    averaging matrix per axis, which also covers windows that overlap or differ in size."""
    from caten.tensor.tensor import Tensor

    x, size = b.t(n.args[0]), list(n.args[1])
    if x.dtype not in ("f32", "f64", "f16", "bf16"):
        raise refuse(n, "adaptive average pooling of an integer tensor")
    np_dt = np.float64 if x.dtype == "f64" else np.float32
    for k, out in enumerate(size):
        ax = x.ndim - len(size) + k
        m = Tensor(_mean_matrix(x.shape[ax], out).T.astype(np_dt)).to(x.dtype)  # (in, out)
        x = x.movedim(ax, -1).matmul(m).movedim(-1, ax)
    return x


aten("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default",
     "aten.adaptive_avg_pool1d.default")(via(_adaptive_avg))


@aten("aten.constant_pad_nd.default")
@via
def _constant_pad(b: Any, n: Any) -> Any:
    """torch's pad list (last axis first, lo/hi pairs) as caten's per-axis widths; negative widths
    crop, which caten does by slicing after padding the positive ones."""
    x, pad = b.t(n.args[0]), list(n.args[1])
    value = n.args[2] if len(n.args) > 2 else n.kwargs.get("value", 0)
    r = x.ndim
    widths = [[0, 0] for _ in range(r)]
    for i in range(len(pad) // 2):
        widths[r - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    from caten.tensor.tensor import apply

    y = apply("pad", [x, [[max(lo, 0), max(hi, 0)] for lo, hi in widths]], {"value": value})
    crop = tuple(slice(-min(lo, 0), y.shape[k] + min(hi, 0)) for k, (lo, hi) in enumerate(widths))
    return y[crop] if any(lo < 0 or hi < 0 for lo, hi in widths) else y


# ops the functional library provides under torch's names (as other parts of caten add them)
functional("aten.avg_pool3d.default", "avg_pool3d",
           lambda b, n, f: f(b.t(n.args[0]), *_args(n, 7, [None, 0, False, True, None])[1:]))
functional("aten.avg_pool1d.default", "avg_pool1d",
           lambda b, n, f: f(b.t(n.args[0]), *_args(n, 6, [None, 0, False, True])[1:]))
functional("aten.max_pool3d_with_indices.default", "max_pool3d",
           lambda b, n, f: list(f(b.t(n.args[0]), *_args(n, 6, [None, 0, 1, False])[1:], return_indices=True)))
functional("aten.reflection_pad1d.default", "pad", lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="reflect"))
functional("aten.reflection_pad2d.default", "pad", lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="reflect"))
functional("aten.reflection_pad3d.default", "pad", lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="reflect"))
functional("aten.replication_pad1d.default", "pad",
           lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="replicate"))
functional("aten.replication_pad2d.default", "pad",
           lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="replicate"))
functional("aten.replication_pad3d.default", "pad",
           lambda b, n, f: f(b.t(n.args[0]), list(n.args[1]), mode="replicate"))
functional("aten.col2im.default", "fold",
           lambda b, n, f: f(b.t(n.args[0]), *[list(a) for a in n.args[1:6]]))


def _resample(mode: str) -> Callable[[Any, Any, Any], Any]:
    """upsample_*.vec(x, output_size, [align_corners,] scale_factors) as F.interpolate: the output
    size torch.export recorded is passed, so caten's size matches torch's exactly."""

    def build(b: Any, n: Any, f: Any) -> Any:
        x = b.t(n.args[0])
        size = list(meta(n).shape[2:])
        kw = {"align_corners": n.args[2]} if mode != "nearest" else {}
        scales = n.args[-1]
        if scales is not None and any(float(s) * i != o for s, i, o in zip(scales, x.shape[2:], size)):
            raise refuse(n, "a scale factor that is not output/input size (torch then maps with the scale)")
        return f(x, size=size, mode=mode, **kw)
    return build


functional("aten.upsample_nearest2d.vec", "interpolate", _resample("nearest"))
functional("aten.upsample_bilinear2d.vec", "interpolate", _resample("bilinear"))
functional("aten.upsample_bicubic2d.vec", "interpolate", _resample("bicubic"))
functional("aten.grid_sampler_2d.default", "grid_sample",
           lambda b, n, f: f(b.t(n.args[0]), b.t(n.args[1]), mode=("bilinear", "nearest", "bicubic")[n.args[2]],
                             padding_mode=("zeros", "border", "reflection")[n.args[3]], align_corners=n.args[4]))


def _conv(b: Any, n: Any) -> Any:
    """A 1-d/3-d or transposed convolution as caten.nn.functional's conv1d/conv3d/conv_transpose*d
    (the 2-d direct one has its own lowering); refused where that function is missing."""
    x, w, bias, stride, padding, dilation, transposed, out_pad, groups = n.args
    d = meta(x).dim() - 2
    name = f"conv_transpose{d}d" if transposed else f"conv{d}d"
    f = caten_fn(name)
    if f is None:
        raise refuse(n, f"{name} is not in caten.nn.functional yet")
    kw = {"output_padding": list(out_pad)} if transposed else {}
    args = (b.t(x), b.t(w), b.t(bias), list(stride), list(padding))
    if transposed:  # torch's order: ..., output_padding, groups, dilation
        return f(*args, groups=groups, dilation=list(dilation), **kw)
    return f(*args, list(dilation), groups)


convolution = via(_conv)


def _with(name: str, build: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """A lowering through F.name, refused naming the node where caten.nn.functional lacks it."""
    def fn(b: Any, n: Any) -> Any:
        f = caten_fn(name)
        if f is None:
            raise refuse(n, f"{name} is not in caten.nn.functional yet")
        return build(b, n, f)
    return via(fn)


# the 2-d pooling keywords the direct lowerings of `aten` leave to caten.nn.functional
max_pool2d = _with("max_pool2d", lambda b, n, f: list(
    f(b.t(n.args[0]), *_args(n, 6, [None, 0, 1, False])[1:], return_indices=True)))
avg_pool2d = _with("avg_pool2d", lambda b, n, f: f(b.t(n.args[0]), *_args(n, 7, [None, 0, False, True, None])[1:]))
