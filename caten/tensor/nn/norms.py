"""torch.nn's normalisations: LayerNorm, RMSNorm, GroupNorm, BatchNorm1d/2d (weights ones,
biases zeros). BatchNorm in train mode normalises with the batch's biased variance and moves
its running statistics by `momentum` toward the batch's mean and unbiased variance (torch's);
in eval mode it uses the running statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.state import no_grad
from caten.tensor.tensor import Tensor
from caten.tensor.trace import guard

_EPS = {"f16": float(np.finfo(np.float16).eps), "f32": float(np.finfo(np.float32).eps),
        "f64": float(np.finfo(np.float64).eps), "bf16": 2.0 ** -7}


def _shape(s: Any) -> tuple[int, ...]:
    return (s,) if isinstance(s, int) else tuple(s)


class LayerNorm(Module):
    """Normalizes the trailing `normalized_shape` axes (biased variance); weight ones, bias zeros."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, *,
                 bias: bool = True):
        shape = _shape(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.weight = Parameter(np.ones(shape, np.float32)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        shape = self.normalized_shape
        if x.shape[x.ndim - len(shape):] != shape:
            raise Error(f"LayerNorm{list(shape)}: input of shape {list(x.shape)} does not end in it")
        w = self.weight if self.weight is not None else Tensor(np.ones(shape, np_dtype(x.dtype)), runtime=x.runtime)
        b = self.bias if self.bias is not None else Tensor(np.zeros(shape, np_dtype(x.dtype)), runtime=x.runtime)
        k = len(shape)
        axis = -1 if k == 1 else list(range(-k, 0))  # every normalized axis, not only the first
        return x.layernorm(w, b, axis=axis, eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing axes; eps None is the dtype's
    machine epsilon (torch's)."""

    def __init__(self, normalized_shape: Any, eps: float | None = None, elementwise_affine: bool = True):
        shape = _shape(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.weight = Parameter(np.ones(shape, np.float32)) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        shape = self.normalized_shape
        if x.shape[x.ndim - len(shape):] != shape:
            raise Error(f"RMSNorm{list(shape)}: input of shape {list(x.shape)} does not end in it")
        eps = _EPS.get(x.dtype, 0.0) if self.eps is None else self.eps
        axes = list(range(-len(shape), 0))
        y = x * ((x * x).mean(axis=axes, keepdims=True) + eps).rsqrt()
        return y * self.weight if self.weight is not None else y

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


def _per_channel(t: Tensor, ndim: int) -> Tensor:
    """A [C] vector shaped to broadcast over [N, C, ...]."""
    return t.reshape([t.shape[0]] + [1] * (ndim - 2))


class GroupNorm(Module):
    """Normalizes each of `num_groups` channel groups over its channels and positions."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, *,
                 bias: bool = True):
        if num_channels % num_groups:
            raise Error(f"GroupNorm: num_channels {num_channels} is not divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(np.ones(num_channels, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, np.float32)) if affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise Error(f"GroupNorm: input {list(x.shape)} has not {self.num_channels} channels on axis 1")
        g = x.reshape([x.shape[0], self.num_groups, -1])
        mean = g.mean(axis=-1, keepdims=True)
        d = g - mean
        y = (d * ((d * d).mean(axis=-1, keepdims=True) + self.eps).rsqrt()).reshape(list(x.shape))
        if self.weight is not None:
            y = y * _per_channel(self.weight, x.ndim)
        return y + _per_channel(self.bias, x.ndim) if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _BatchNorm(Module):
    ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, bias: bool = True):
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(np.ones(num_features, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_features, np.float32)) if affine and bias else None
        if track_running_stats:
            self.running_mean = Tensor(np.zeros(num_features, np.float32))
            self.running_var = Tensor(np.ones(num_features, np.float32))
            self.num_batches_tracked = Tensor(np.array(0, np.int64))

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if x.ndim not in self.ranks or x.shape[1] != self.num_features:
            raise Error(f"{name}({self.num_features}): input {list(x.shape)}; it takes rank "
                        f"{' or '.join(map(str, self.ranks))} with {self.num_features} channels on axis 1")
        guard(lambda: self.training)
        axes = [0] + list(range(2, x.ndim))
        batch = self.training or not self.track_running_stats
        if batch:
            n = x.numel() // x.shape[1]
            if n <= 1:
                raise Error(f"{name}: expected more than 1 value per channel when training, got input {list(x.shape)}")
            mean = x.mean(axis=axes, keepdims=True)
            d = x - mean
            var = (d * d).mean(axis=axes, keepdims=True)
            if self.training and self.track_running_stats:
                self._track(mean, var, n)
        else:
            mean = _per_channel(self.running_mean, x.ndim)
            d = x - mean
            var = _per_channel(self.running_var, x.ndim)
        y = d * (var + self.eps).rsqrt()
        if self.weight is not None:
            y = y * _per_channel(self.weight, x.ndim)
        return y + _per_channel(self.bias, x.ndim) if self.bias is not None else y

    def _track(self, mean: Tensor, var: Tensor, n: int) -> None:
        """running = (1 - m) running + m batch, with the unbiased variance; momentum None is the
        cumulative average (m = 1 / batches seen)."""
        with no_grad():
            seen = self.num_batches_tracked + 1
            # a tensor, not a Python number, so that a jitted step reads the count it is at
            m = 1.0 / seen.cast(mean.dtype) if self.momentum is None else self.momentum
            c = self.num_features
            self.running_mean.assign(self.running_mean * (1 - m) + mean.detach().reshape([c]) * m)
            unbiased = var.detach().reshape([c]) * (n / (n - 1))
            self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
            self.num_batches_tracked.assign(seen)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over [N, C] or [N, C, L]."""

    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over [N, C, H, W]."""

    ranks = (4,)
