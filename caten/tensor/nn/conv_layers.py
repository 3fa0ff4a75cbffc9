"""convolution modules beyond Conv1d/Conv2d: Conv3d, ConvTranspose1d/2d/3d, Fold, Unfold, with
torch's parameter layouts (a torch state_dict loads as is) and default initialisations."""

from __future__ import annotations

import math
from typing import Any

from caten.errors import Error
from caten.tensor.nn import conv_functional as CF
from caten.tensor.nn.layers import Conv2d, _tuple, uniform_param
from caten.tensor.nn.module import Module
from caten.tensor.tensor import Tensor

__all__ = ["Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Fold", "Unfold"]


class Conv3d(Conv2d):
    """torch.nn.Conv3d over NCDHW, weights [out, in/groups, kd, kh, kw]."""

    nd = 3


class ConvTranspose2d(Module):
    """torch.nn.ConvTranspose2d: weights [in, out/groups, kh, kw], U(-1/sqrt(fan_in), ...) with torch's
    fan_in = out/groups * kh * kw; forward(x, output_size) picks the output_padding that gives it."""

    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros"):
        n, name = self.nd, type(self).__name__
        if padding_mode != "zeros":
            raise Error(f"{name}: only 'zeros' padding mode is supported (as torch's), got {padding_mode!r}")
        if isinstance(padding, str):
            raise Error(f"{name}: padding must be ints, not {padding!r} (as torch's)")
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise Error(f"{name}: channels {in_channels} -> {out_channels} are not divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _tuple(kernel_size, n), _tuple(stride, n), _tuple(dilation, n)
        self.padding, self.output_padding = _tuple(padding, n), _tuple(output_padding, n)
        self.padding_mode = padding_mode
        fan_in = out_channels // groups * math.prod(self.kernel_size)
        b = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = uniform_param((in_channels, out_channels // groups) + self.kernel_size, b)
        self.bias = uniform_param((out_channels,), b) if bias else None

    def _output_padding(self, x: Tensor, output_size: Any) -> list[int]:
        """torch's _output_padding: the extra rows that make the output `output_size`."""
        if output_size is None:
            return list(self.output_padding)
        n = self.nd
        size = [int(e) for e in output_size]
        if len(size) in (n + 1, n + 2):
            size = size[-n:]
        if len(size) != n:
            raise Error(f"{type(self).__name__}: output_size must have {n} or {n + 2} elements (got {len(size)})")
        out = []
        for i in range(n):
            lo = ((int(x.shape[x.ndim - n + i]) - 1) * self.stride[i] - 2 * self.padding[i]
                  + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not lo <= size[i] < lo + self.stride[i]:
                raise Error(f"{type(self).__name__}: requested an output size of {size}, but valid sizes range "
                            f"from {lo} to {lo + self.stride[i] - 1} along spatial dim {i}")
            out.append(size[i] - lo)
        return out

    def forward(self, x: Tensor, output_size: Any = None) -> Tensor:
        return CF._conv_transpose(type(self).__name__, self.nd, x, self.weight, self.bias, self.stride,
                                  self.padding, self._output_padding(x, output_size), self.groups, self.dilation)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self.nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self.nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + (", bias=False" if self.bias is None else "")


class ConvTranspose1d(ConvTranspose2d):
    """torch.nn.ConvTranspose1d: weights [in, out/groups, k]."""

    nd = 1


class ConvTranspose3d(ConvTranspose2d):
    """torch.nn.ConvTranspose3d: weights [in, out/groups, kd, kh, kw]."""

    nd = 3


class Unfold(Module):
    """torch.nn.Unfold: F.unfold (im2col) with the module's kernel_size, dilation, padding, stride."""

    def __init__(self, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1):
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return CF.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """torch.nn.Fold: F.fold (col2im) into `output_size`."""

    def __init__(self, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1):
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return CF.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")
