"""torch.nn.utils' gradient clipping: scales or clamps the `.grad` of parameters in place
(lazily: the new gradients are Tensors the optimizer's step reads)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.state import no_grad
from caten.tensor.tensor import Tensor


def _grads(parameters: Any) -> list[Tensor]:
    ps = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in ps if p.grad is not None]


def clip_grad_norm_(parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total norm + 1e-6)), torch's; returns the total
    norm (the norm of the per-parameter norms)."""
    ps = _grads(parameters)
    if not ps:
        return Tensor(np.float32(0.0))
    with no_grad():
        if norm_type == math.inf:
            norms = [p.grad.abs().max() for p in ps]
            total = norms[0]
            for n in norms[1:]:
                total = total.max(n)
        else:
            per = [(p.grad.abs() ** norm_type).sum() ** (1.0 / norm_type) for p in ps]
            total = sum((n ** norm_type for n in per[1:]), per[0] ** norm_type) ** (1.0 / norm_type)
        total = total.realize()
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise Error(f"clip_grad_norm_: the total norm of order {norm_type} is non-finite",
                        hint="pass error_if_nonfinite=False to clip anyway")
        one = Tensor(np.asarray(1.0, np_dtype(total.dtype)), runtime=total.runtime)
        coef = (max_norm / (total + 1e-6)).min(one)
        for p in ps:
            p.grad = p.grad * coef.cast(p.grad.dtype)
    return total


def clip_grad_value_(parameters: Iterable[Tensor] | Tensor, clip_value: float) -> None:
    """Clamp every gradient element to [-clip_value, clip_value]."""
    with no_grad():
        for p in _grads(parameters):
            g = p.grad
            p.grad = Tensor.where(g > clip_value, clip_value, Tensor.where(g < -clip_value, -clip_value, g))
