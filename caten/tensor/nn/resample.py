"""torch.nn.functional's padding modes and resizing: pad (constant, reflect, replicate, circular),
interpolate (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area), pixel_shuffle,
pixel_unshuffle, channel_shuffle.

Each resized axis is constant source indices and weights computed here, host-side, with torch's
own index arithmetic (its float32 scale for nearest, its opmath precision for the linear and cubic
source coordinates), applied by `take` along that axis: out = sum_j w_j * x[i_j], one axis after
another (the last first, as torch's separable kernels). So values match torch's formula term for
term, and the gradients (take accumulates) are torch's scatter-adds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.nn.pooling import (
    FLOATS,
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    const,
    opmath,
    take_axis,
)
from caten.tensor.nn.sampling import affine_grid, cosine_similarity, grid_sample, pairwise_distance
from caten.tensor.tensor import Tensor, apply

__all__ = ["pad", "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "pixel_shuffle",
           "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "affine_grid", "grid_sample",
           "cosine_similarity", "pairwise_distance"]

PAD_MODES = ("constant", "reflect", "replicate", "circular")


# padding -----------------------------------------------------------------------------------------
def _pad_index(mode: str, n: int, lo: int, hi: int) -> np.ndarray:
    """Source positions of an axis of size n padded by lo before and hi after (negative widths
    crop: reflect and replicate index the whole input, circular wraps around the cropped one, as torch)."""
    j = np.arange(-lo, n + hi)
    if mode == "circular":
        a, b = max(-lo, 0), n - max(-hi, 0)
        if b <= a:
            raise Error(f"pad: circular padding ({lo}, {hi}) crops away all {n} elements of a dim")
        return a + (np.arange(-max(lo, 0), b - a + max(hi, 0)) % (b - a))
    if mode == "reflect":
        j = np.abs(j)
        return np.where(j > n - 1, 2 * (n - 1) - j, j)
    return j.clip(0, n - 1)


def pad(input: Tensor, pad: Any, mode: str = "constant", value: Any = None) -> Tensor:
    """torch's F.pad: `pad` is (lo, hi) pairs from the last dim backwards; negative widths crop."""
    widths = [int(p) for p in pad]
    if len(widths) % 2 or len(widths) // 2 > input.ndim:
        raise Error(f"pad: a padding of length {len(widths)} for an input of {input.ndim} dims",
                    hint="an even number of ints, two per padded dim, at most twice the input's rank")
    if mode not in PAD_MODES:
        from caten.tensor.torch_create import Unimplemented  # torch raises NotImplementedError

        raise Unimplemented(f"pad: mode {mode!r} is not one of {PAD_MODES}")
    nd = len(widths) // 2
    pairs = [(widths[2 * i], widths[2 * i + 1]) for i in range(nd)]  # pairs[i] pads dim -1 - i
    if mode == "constant":
        return _constant_pad(input, pairs, 0 if value is None else value)
    if value is not None and value != 0:
        raise Error(f"pad: padding mode {mode!r} doesn't take in value argument")
    if nd > 3 or input.ndim not in (nd + 1, nd + 2):
        raise Error(f"pad: {mode} padding of {nd} dims takes a {nd + 1}-D or {nd + 2}-D input, got "
                    f"{list(input.shape)}", hint="torch pads the last 1, 2 or 3 dims of a (batched) input")
    x = input
    for i, (lo, hi) in enumerate(pairs):
        ax = input.ndim - 1 - i
        n = int(input.shape[ax])
        if mode == "reflect" and (lo >= n or hi >= n):
            raise Error(f"pad: reflect padding ({lo}, {hi}) must be less than the dim's size {n}")
        if mode == "circular" and (lo > n or hi > n):
            raise Error(f"pad: circular padding ({lo}, {hi}) may be at most the dim's size {n}")
        if n + lo + hi < 0 or (n == 0 and (lo or hi)):
            raise Error(f"pad: {mode} padding ({lo}, {hi}) of dim {ax} of size {n}")
        if lo or hi:
            x = take_axis(x, ax, _pad_index(mode, n, lo, hi))
    return x


def _constant_pad(x: Tensor, pairs: list[tuple[int, int]], value: Any) -> Tensor:
    crop = [slice(None)] * x.ndim
    widths = [[0, 0] for _ in range(x.ndim)]
    for i, (lo, hi) in enumerate(pairs):
        ax = x.ndim - 1 - i
        n = int(x.shape[ax])
        if n + lo + hi < 0:
            raise Error(f"pad: padding ({lo}, {hi}) leaves dim {ax} of size {n} with a negative size")
        crop[ax] = slice(max(-lo, 0), n - max(-hi, 0))
        widths[ax] = [max(lo, 0), max(hi, 0)]
    if any(s != slice(None) for s in crop):
        x = x[tuple(crop)]
    if not any(lo or hi for lo, hi in widths):
        return x
    if x.dtype not in FLOATS and x.dtype != "bool" and float(value) != int(value):
        raise Error(f"pad: value {value} for an integer tensor", hint="an integer value")
    return apply("pad", [x, widths], {"value": value})


# interpolation weights, one axis ------------------------------------------------------------------
def _scale(n_in: int, n_out: int, scale: float | None, ft: Any) -> Any:
    """torch's compute_scales_value<ft>."""
    return ft(1.0 / scale) if scale is not None and scale > 0 else ft(ft(n_in) / ft(n_out))


def _nearest(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    """torch's nearest_idx / nearest_neighbor_exact_compute_source_index, in float32 as torch."""
    o = np.arange(n_out)
    if not exact and n_out == n_in:
        return o
    if not exact and n_out == 2 * n_in:
        return o >> 1
    s = _scale(n_in, n_out, scale, np.float32)
    if exact:
        src = np.floor(((o + 0.5) * np.float64(s)).astype(np.float32))
    else:
        src = np.floor(o.astype(np.float32) * s)
    return np.minimum(src.astype(np.int64), n_in - 1)


def _source(n_in: int, n_out: int, scale: float | None, align: bool, cubic: bool, ft: Any) -> np.ndarray:
    """torch's area_pixel_compute_source_index at opmath precision ft."""
    o = np.arange(n_out).astype(ft)
    if align:
        s = ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
        return (ft(s) * o).astype(ft)
    s = _scale(n_in, n_out, scale, ft)
    src = (s * (o + ft(0.5)) - ft(0.5)).astype(ft)
    return src if cubic else np.maximum(src, ft(0))


def _linear(n_in: int, n_out: int, scale: float | None, align: bool, ft: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """torch's compute_source_index_and_lambda: (i0, l0), (i1, l1)."""
    o = np.arange(n_out)
    if n_out == n_in and not align:
        return [(o, np.ones(n_out, ft)), (o, np.zeros(n_out, ft))]
    src = _source(n_in, n_out, scale, align, False, ft)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    l1 = np.clip(src - i0.astype(ft), 0, 1).astype(ft)
    i1 = i0 + (i0 < n_in - 1)
    return [(i0, (ft(1) - l1).astype(ft)), (i1, l1)]


def _cubic(n_in: int, n_out: int, scale: float | None, align: bool, ft: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """torch's bicubic taps: 4 clamped neighbours, Keys' coefficients with A = -0.75."""
    src = _source(n_in, n_out, scale, align, True, ft)
    i = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    t = np.clip(src - i.astype(ft), 0, 1).astype(ft)
    A = ft(-0.75)

    def c1(v: np.ndarray) -> np.ndarray:
        return (((A + ft(2)) * v - (A + ft(3))) * v * v + ft(1)).astype(ft)

    def c2(v: np.ndarray) -> np.ndarray:
        return (((A * v - ft(5) * A) * v + ft(8) * A) * v - ft(4) * A).astype(ft)

    ws = [c2((t + ft(1)).astype(ft)), c1(t), c1((ft(1) - t).astype(ft)), c2((ft(2) - t).astype(ft))]
    return [((i - 1 + j).clip(0, n_in - 1), ws[j]) for j in range(4)]


def _apply_taps(x: Tensor, ax: int, taps: list[tuple[np.ndarray, np.ndarray]]) -> Tensor:
    shape = [1] * x.ndim
    shape[ax] = -1
    out = None
    for idx, w in taps:
        term = take_axis(x, ax, idx) * const(x, w.reshape(shape))
        out = term if out is None else out + term
    return out


# interpolate -----------------------------------------------------------------------------------
MODES = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "area": (1, 2, 3), "linear": (1,), "bilinear": (2,),
         "bicubic": (2,), "trilinear": (3,)}


def _out_sizes(x: Tensor, nd: int, size: Any, scale_factor: Any) -> tuple[list[int], list[float | None]]:
    """torch's _interp_output_size: the size given, or floor(in * scale) (in double precision)."""
    if (size is None) == (scale_factor is None):
        raise Error("interpolate: give either size or scale_factor, exactly one")
    ins = [int(n) for n in x.shape[2:]]
    if size is not None:
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * nd
        if len(sizes) != nd:
            raise Error(f"interpolate: size {sizes} for an input with {nd} spatial dims")
        return [int(s) for s in sizes], [None] * nd
    sc = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * nd
    if len(sc) != nd:
        raise Error(f"interpolate: scale_factor {sc} for an input with {nd} spatial dims")
    return [math.floor(float(n * float(s))) for n, s in zip(ins, sc)], [float(s) for s in sc]


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """torch's F.interpolate over a batched [N, C, d...] input."""
    if mode not in MODES:
        raise Error(f"interpolate: mode {mode!r} is not one of {sorted(MODES)}")
    nd = input.ndim - 2
    if nd not in MODES[mode]:
        raise Error(f"interpolate: mode {mode!r} takes a {[d + 2 for d in MODES[mode]]}-D input, got "
                    f"{input.ndim}-D", hint="a batched [N, C, spatial...] input")
    linear = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if align_corners is not None and not linear:
        raise Error("interpolate: align_corners option can only be set with the interpolating modes: "
                    "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise Error("interpolate: antialias=True is not supported", hint="antialias=False")
    u8 = input.dtype == "u8" and mode == "bilinear"  # torch's fixed-point uint8 kernel
    if input.dtype not in FLOATS and mode not in ("nearest", "nearest-exact") and not u8:
        raise Error(f"interpolate: mode {mode!r} is not implemented for {input.dtype}")
    align = bool(align_corners)
    outs, scales = _out_sizes(input, nd, size, scale_factor)
    if recompute_scale_factor:
        scales = [None] * nd
    if any(o <= 0 for o in outs) or any(int(n) == 0 for n in input.shape[2:]):
        raise Error(f"interpolate: input sizes {list(input.shape[2:])} and output sizes {outs} must be positive")
    if u8:
        from caten.tensor.nn.resample_u8 import bilinear_u8

        return bilinear_u8(input, outs, scales, align)
    if mode == "area":
        return (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[nd - 1](input, outs)
    ft = np.float64 if input.dtype == "f64" else np.float32
    x = input if mode in ("nearest", "nearest-exact") else opmath(input)
    for d in reversed(range(nd)):
        ax, n = 2 + d, int(input.shape[2 + d])
        if mode in ("nearest", "nearest-exact"):
            x = take_axis(x, ax, _nearest(n, outs[d], scales[d], mode == "nearest-exact"))
        elif mode == "bicubic":
            taps = _cubic(n, outs[d], scales[d], align, ft)
            if input.dtype in ("f16", "bf16"):  # torch keeps the cubic weights at the input's dtype
                taps = [(i, w.astype(np_dtype(input.dtype)).astype(ft)) for i, w in taps]
            x = _apply_taps(x, ax, taps)
        else:
            x = _apply_taps(x, ax, _linear(n, outs[d], scales[d], align, ft))
    return x.cast(input.dtype) if x.dtype != input.dtype else x


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# rearrangements ----------------------------------------------------------------------------------
def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """[..., C r^2, H, W] -> [..., C, H r, W r]."""
    r = int(upscale_factor)
    if input.ndim < 3 or r <= 0 or input.shape[-3] % (r * r):
        raise Error(f"pixel_shuffle: input {list(input.shape)} with upscale_factor {r}",
                    hint="at least 3 dims, the channel dim (-3) divisible by upscale_factor**2")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c // (r * r), r, r, h, w)
    y = y.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*b, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """[..., C, H r, W r] -> [..., C r^2, H, W]."""
    r = int(downscale_factor)
    if input.ndim < 3 or r <= 0 or input.shape[-1] % r or input.shape[-2] % r:
        raise Error(f"pixel_unshuffle: input {list(input.shape)} with downscale_factor {r}",
                    hint="at least 3 dims, the last two divisible by downscale_factor")
    *b, c, h, w = input.shape
    k = len(b)
    y = input.reshape(*b, c, h // r, r, w // r, r)
    y = y.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*b, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """[N, g k, ...] -> the channels as a [k, g] transpose of [g, k]."""
    g = int(groups)
    if input.ndim < 3 or g <= 0 or input.shape[1] % g:
        raise Error(f"channel_shuffle: input {list(input.shape)} with {g} groups",
                    hint="at least 3 dims, the channel dim divisible by groups")
    n, c, *rest = input.shape
    y = input.reshape(n, g, c // g, *rest).permute(0, 2, 1, *range(3, 3 + len(rest)))
    return y.reshape(n, c, *rest)


native_channel_shuffle = channel_shuffle
