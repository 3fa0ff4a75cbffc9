"""torch's math names that are exact compositions of existing ones: `isposinf`, `isneginf`,
`sgn`, and the aliases `moveaxis` (movedim) and `ger` (outer)."""

from __future__ import annotations

from typing import Any

from caten.tensor.tensor import FLOATS, Tensor
from caten.tensor.torch_misc import outer
from caten.tensor.torch_shape import movedim
from caten.tensor.torchnames import torch_name


@torch_name("isposinf", "`(= x inf)`; an integer or bool tensor is never infinite", "elementwise")
def isposinf(self: Tensor) -> Tensor:
    return self == float("inf") if self.dtype in FLOATS else self != self


@torch_name("isneginf", "`(= x -inf)`; an integer or bool tensor is never infinite", "elementwise")
def isneginf(self: Tensor) -> Tensor:
    return self == float("-inf") if self.dtype in FLOATS else self != self


@torch_name("sgn", "`sign` (nan gives 0, as torch's CPU sgn; caten has no complex tensors)", "elementwise")
def sgn(self: Tensor) -> Tensor:
    return self.sign()


@torch_name("moveaxis", "`movedim`", "shape", example="t.moveaxis(0, -1)")
def moveaxis(self: Tensor, source: Any, destination: Any) -> Tensor:
    return movedim(self, source, destination)


@torch_name("ger", "`outer`", "elementwise")
def ger(self: Tensor, vec2: Tensor) -> Tensor:
    return outer(self, vec2)
