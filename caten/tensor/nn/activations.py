"""torch.nn's activation modules: each calls its function in `functional.py` with the
arguments it was built with, and prints them as torch's `repr` does."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.nn import functional as F
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor


class _Act(Module):
    """An activation without arguments (`inplace` is accepted and has no effect: caten's
    tensors are values)."""

    def __init__(self, inplace: bool = False):
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if getattr(self, "inplace", False) else ""


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any):
        """torch's Identity ignores its arguments."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class ReLU(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class ReLU6(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu6(x)


class SiLU(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Hardswish(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.hardswish(x)


class Hardsigmoid(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.hardsigmoid(x)


class Mish(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class SELU(_Act):
    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x)


class LogSigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.logsigmoid(x)


class Softsign(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.softsign(x)


class Tanhshrink(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanhshrink(x)


class Hardshrink(_Act):
    def __init__(self, lambd: float = 0.5):
        self.lambd = lambd

    def forward(self, x: Tensor) -> Tensor:
        return F.hardshrink(x, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(_Act):
    def __init__(self, lambd: float = 0.5):
        self.lambd = lambd

    def forward(self, x: Tensor) -> Tensor:
        return F.softshrink(x, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class PReLU(Module):
    """x where positive, else a learned slope (one, or one a channel), initialised to `init`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full(num_parameters, init, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        return F.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    def __init__(self, dim: int = -1):
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Hardtanh(_Act):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        if max_val <= min_val:
            raise Error(f"Hardtanh: max_val {max_val} must exceed min_val {min_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class LeakyReLU(_Act):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(_Act):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise Error(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, getattr(self, "approximate", "none"))

    def extra_repr(self) -> str:
        return f"approximate={getattr(self, 'approximate', 'none')!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self.dim)


class Softmin(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return F.softmin(x, self.dim)
