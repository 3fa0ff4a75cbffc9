"""torch.nn's layers with torch's default initialisations and parameter layouts (so a torch
state_dict loads as is): Linear, Conv1d, Conv2d, Embedding, Flatten, Unflatten, Dropout, pools.
Initial values draw from the generator that `caten.manual_seed` reseeds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state as _state
from caten.tensor.nn import conv_functional as CF
from caten.tensor.nn import functional as F
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor
from caten.tensor.trace import guard


def uniform_param(shape: tuple[int, ...], bound: float) -> Parameter:
    """U(-bound, bound): torch's default for weights (kaiming_uniform_ with a=sqrt(5)) and biases."""
    return Parameter(_state.np_rng().uniform(-bound, bound, size=shape).astype(np.float32))


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, (list, tuple)) else (v,) * n


class Linear(Module):
    """y = x W^T + b, W [out, in] (torch's layout), both U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        self.in_features, self.out_features = in_features, out_features
        b = 1 / math.sqrt(in_features) if in_features else 0.0
        self.weight = uniform_param((out_features, in_features), b)
        self.bias = uniform_param((out_features,), b) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """torch.nn.Conv2d over NCHW, weights [out, in/groups, kh, kw], U(-1/sqrt(fan_in), ...);
    padding_mode 'reflect', 'replicate' and 'circular' pad with F.pad first, as torch's."""

    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros"):
        n, name = self.nd, type(self).__name__
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise Error(f"{name}: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', "
                        f"got {padding_mode!r}")
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise Error(f"{name}: channels {in_channels} -> {out_channels} are not divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _tuple(kernel_size, n), _tuple(stride, n), _tuple(dilation, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.padding_mode = padding_mode
        self._pairs = CF._padding(name, self.padding, n, list(self.kernel_size), list(self.stride),
                                  list(self.dilation))
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        b = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = uniform_param((out_channels, in_channels // groups) + self.kernel_size, b)
        self.bias = uniform_param((out_channels,), b) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        name, pad = type(self).__name__, self.padding
        if self.padding_mode != "zeros":
            from caten.tensor.nn.resample import pad as fpad
            flat = [e for lo, hi in reversed(self._pairs) for e in (lo, hi)]
            x, pad = fpad(x, flat, mode=self.padding_mode), 0
        return CF._conv(name, self.nd, x, self.weight, self.bias, self.stride, pad, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.nd:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self.nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s + (f", padding_mode={self.padding_mode}" if self.padding_mode != "zeros" else "")


class Conv1d(Conv2d):
    """torch.nn.Conv1d over NCL, weights [out, in/groups, k]."""

    nd = 1


class Embedding(Module):
    """Rows of a [num, dim] table, initialised N(0, 1), picked by integer indices; the row
    `padding_idx` starts at zero and gets no gradient (torch's)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, **kwargs: Any):
        if max_norm is not None or any(kwargs.values()):
            raise Error("Embedding: max_norm, scale_grad_by_freq and sparse are not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise Error(f"Embedding: padding_idx {padding_idx} is outside [-{num_embeddings}, {num_embeddings})")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        v = _state.np_rng().standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        if padding_idx is not None:
            v[padding_idx] = 0
        self.weight = Parameter(v)

    def forward(self, idx: Any) -> Tensor:
        n = self.weight.shape[0]
        if not isinstance(idx, Tensor):
            arr = np.asarray(idx)
            arr = arr if arr.size else arr.astype(np.int64)  # [] is no indices, not floats
            if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() >= n)):
                raise Error(f"Embedding({n}, ...): indices must be integers in [0, {n})",
                            hint=f"got {arr.dtype} values from {arr.min()} to {arr.max()}")
            idx = Tensor(arr.astype(np.int64), runtime=self.weight.runtime)
        w = self.weight
        if self.padding_idx is not None:
            row = Tensor(np.arange(n).reshape(n, 1) != self.padding_idx, runtime=w.runtime)
            w = Tensor.where(row, w, w.detach())
        return F.embedding(idx, w)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class Flatten(Module):
    """Flattens every axis from `start_dim` to `end_dim` (1 and -1: keeps the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0:
            return x.reshape([1])
        a, b = self.start_dim % x.ndim, self.end_dim % x.ndim
        if a > b:
            raise Error(f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} for rank {x.ndim}")
        return x.reshape(list(x.shape[:a]) + [-1] + list(x.shape[b + 1:]))

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits axis `dim` into `unflattened_size` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size: Any):
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim
        return x.reshape(list(x.shape[:d]) + list(self.unflattened_size) + list(x.shape[d + 1:]))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Dropout(Module):
    """Zeroes elements with probability p while training, scaling the rest by 1/(1-p)
    (seeds from the stream); the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        if not 0 <= p <= 1:
            raise Error(f"Dropout: p must lie in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        guard(lambda: (self.training, self.p))  # a jitted step replays only in the mode it was traced in
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={getattr(self, 'inplace', False)}"


class MaxPool2d(Module):
    """torch.nn.MaxPool2d (stride defaults to the kernel) with dilation, ceil_mode and return_indices."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False):
        self.kernel_size, self.stride, self.padding = kernel_size, kernel_size if stride is None else stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Any:
        return CF.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                             self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """torch.nn.AvgPool2d with ceil_mode, count_include_pad and divisor_override."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        self.kernel_size, self.stride, self.padding = kernel_size, kernel_size if stride is None else stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return CF.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                             self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Means over torch's adaptive windows: output cell i covers [floor(i H / oh), ceil((i+1) H / oh))."""

    def __init__(self, output_size: Any):
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise Error(f"AdaptiveAvgPool2d: input of rank {x.ndim}; it takes [N, C, H, W] or [C, H, W]")
        h, w = x.shape[-2:]
        oh, ow = _tuple(self.output_size, 2)
        oh, ow = h if oh is None else oh, w if ow is None else ow
        if h % oh == 0 and w % ow == 0:
            lead = list(x.shape[:-2])
            return x.reshape(lead + [oh, h // oh, ow, w // ow]).mean(axis=[-3, -1])
        rows = [_window_mean(x, -2, i, h, oh) for i in range(oh)]
        rows = F.concat(rows, x.ndim - 2)
        return F.concat([_window_mean(rows, -1, j, w, ow) for j in range(ow)], x.ndim - 1)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


def _window_mean(x: Tensor, axis: int, i: int, n: int, out: int) -> Tensor:
    a, b = (i * n) // out, -(-((i + 1) * n) // out)
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(a, b)
    return x[tuple(idx)].mean(axis=axis, keepdims=True)
