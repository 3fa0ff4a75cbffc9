"""pooling, padding and resizing modules with torch's constructors: MaxPool1d/3d, AvgPool1d/3d,
adaptive and lp pools, the padding layers, Upsample, PixelShuffle, ChannelShuffle and the
distance modules; each forward is the functional form of `pooling`, `resample` or `sampling`."""

from __future__ import annotations

from typing import Any

from caten.errors import Error
from caten.tensor.nn import pooling as P
from caten.tensor.nn import resample as R
from caten.tensor.nn import sampling as S
from caten.tensor.nn.module import Module
from caten.tensor.tensor import Tensor

__all__ = ["MaxPool1d", "MaxPool3d", "AvgPool1d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d",
           "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "Upsample",
           "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle",
           "CosineSimilarity", "PairwiseDistance"]


# pooling -----------------------------------------------------------------------------------------
class _MaxPoolNd(Module):
    nd = 1

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False):
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Any:
        return P._max_pool(f"max_pool{self.nd}d", self.nd, x, self.kernel_size, self.stride, self.padding,
                           self.dilation, self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    nd = 1


class MaxPool3d(_MaxPoolNd):
    nd = 3


class _AvgPoolNd(Module):
    nd = 1

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return P.avg_pool(f"avg_pool{self.nd}d", self.nd, x, self.kernel_size, self.stride, self.padding,
                          self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    nd = 1

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool3d(_AvgPoolNd):
    nd = 3


class _AdaptiveAvgNd(Module):
    nd = 1

    def __init__(self, output_size: Any):
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return P._adaptive_avg(f"adaptive_avg_pool{self.nd}d", self.nd, x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgNd):
    nd = 1


class AdaptiveAvgPool3d(_AdaptiveAvgNd):
    nd = 3


class _AdaptiveMaxNd(Module):
    nd = 1

    def __init__(self, output_size: Any, return_indices: bool = False):
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x: Tensor) -> Any:
        return P._adaptive_max(f"adaptive_max_pool{self.nd}d", self.nd, x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxNd):
    nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxNd):
    nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxNd):
    nd = 3


class _LPPoolNd(Module):
    nd = 1

    def __init__(self, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False):
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return P._lp_pool(f"lp_pool{self.nd}d", self.nd, x, self.norm_type, self.kernel_size, self.stride,
                          self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    nd = 1


class LPPool2d(_LPPoolNd):
    nd = 2


class LPPool3d(_LPPoolNd):
    nd = 3


# padding -----------------------------------------------------------------------------------------
class _PadNd(Module):
    nd, mode = 1, "constant"

    def __init__(self, padding: Any, value: float = 0.0):
        p = list(padding) if isinstance(padding, (list, tuple)) else [int(padding)] * (2 * self.nd)
        if len(p) != 2 * self.nd:
            raise Error(f"{type(self).__name__}: padding {p} must be an int or {2 * self.nd} ints")
        self.padding, self.value = tuple(p), value

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "constant":
            return R.pad(x, self.padding, "constant", self.value)
        return R.pad(x, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}, value={self.value}" if self.mode == "constant" else f"{self.padding}"


def _pad_class(name: str, nd: int, mode: str, zero: bool = False) -> type:
    def init(self: Any, padding: Any, value: float = 0.0) -> None:
        _PadNd.__init__(self, padding, value)

    def init_zero(self: Any, padding: Any) -> None:
        _PadNd.__init__(self, padding, 0.0)

    def init_mode(self: Any, padding: Any) -> None:
        _PadNd.__init__(self, padding)

    body = init_zero if zero else init if mode == "constant" else init_mode
    return type(name, (_PadNd,), {"nd": nd, "mode": mode, "__init__": body, "__module__": __name__,
                                  "__doc__": f"torch.nn.{name}: F.pad of the last {nd} dims, mode {mode!r}."})


ZeroPad1d = _pad_class("ZeroPad1d", 1, "constant", zero=True)
ZeroPad2d = _pad_class("ZeroPad2d", 2, "constant", zero=True)
ZeroPad3d = _pad_class("ZeroPad3d", 3, "constant", zero=True)
ConstantPad1d = _pad_class("ConstantPad1d", 1, "constant")
ConstantPad2d = _pad_class("ConstantPad2d", 2, "constant")
ConstantPad3d = _pad_class("ConstantPad3d", 3, "constant")
ReflectionPad1d = _pad_class("ReflectionPad1d", 1, "reflect")
ReflectionPad2d = _pad_class("ReflectionPad2d", 2, "reflect")
ReflectionPad3d = _pad_class("ReflectionPad3d", 3, "reflect")
ReplicationPad1d = _pad_class("ReplicationPad1d", 1, "replicate")
ReplicationPad2d = _pad_class("ReplicationPad2d", 2, "replicate")
ReplicationPad3d = _pad_class("ReplicationPad3d", 3, "replicate")
CircularPad1d = _pad_class("CircularPad1d", 1, "circular")
CircularPad2d = _pad_class("CircularPad2d", 2, "circular")
CircularPad3d = _pad_class("CircularPad3d", 3, "circular")


# resizing and rearranging ------------------------------------------------------------------------
class Upsample(Module):
    """torch.nn.Upsample: F.interpolate with the module's size or scale_factor."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return R.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return R.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return R.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    def __init__(self, groups: int):
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        return R.channel_shuffle(x, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return S.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return S.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
