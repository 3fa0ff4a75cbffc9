"""torch.nn.functional's convolutions and pooling over caten Tensors, with torch's keywords
(ints or tuples for stride, padding, dilation), lowered to the library's `conv2d`, `max-pool2d`
and `avg-pool2d` composites."""

from __future__ import annotations

from typing import Any

from caten.tensor.tensor import Tensor


# layers as functions --------------------------------------------------------------------------
def _list(v: Any, n: int = 2) -> list[int]:
    return list(v) if isinstance(v, (list, tuple)) else [v] * n


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    args = [input, weight] + ([bias] if bias is not None else [])
    return Tensor.conv2d(*args, stride=_list(stride), padding=_list(padding), dilation=_list(dilation), groups=groups)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return input.max_pool2d(kernel=_list(kernel_size), stride=_list(kernel_size if stride is None else stride),
                            padding=_list(padding))


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return input.avg_pool2d(kernel=_list(kernel_size), stride=_list(kernel_size if stride is None else stride),
                            padding=_list(padding))
