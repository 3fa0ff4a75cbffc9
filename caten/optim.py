"""`caten.optim` (LANGUAGE.md section 12): torch.optim's SGD, Adam and AdamW over Tensors.

Each step is the library's update composite (`sgd-update`, `momentum-update`, `adam-update`,
`adamw-update`: torch's formulas, written once in `ops/optim.lisp`) for every parameter, all
computed by one program and given to the parameters in place (`Tensor.assign`). Optimizer state
(momentum buffers, Adam's moments and its step count) are Tensors too, so the step count is
an input of the program, not a literal: stepping never recompiles, and under `caten.jit` a whole
training step is one program.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import Tensor, no_grad
from caten.tensor.tensor import apply, assign_all


class Optimizer:
    """The parameters (Tensors that require gradients) and one group of hyperparameters."""

    def __init__(self, params: Iterable[Tensor], defaults: dict[str, Any]):
        self.params = list(params)
        if not self.params:
            raise Error("the optimizer got an empty parameter list")
        for p in self.params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise Error("optimizers take Tensors created with requires_grad=True")
        self.defaults = defaults
        self.param_groups = [dict(defaults, params=self.params)]
        self.state: dict[int, dict[str, Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def _state(self, p: Tensor, *names: str) -> list[Tensor]:
        st = self.state.setdefault(id(p), {})
        for n in names:
            if n not in st:
                st[n] = Tensor(np.zeros(p.shape, dtype=p.numpy().dtype if p.node.value is not None else "f4"),
                               runtime=p.runtime) if n != "step" else \
                    Tensor(np.zeros((), np.int64), runtime=p.runtime)
        return [st[n] for n in names]

    def step(self) -> None:
        """One update of every parameter that has a gradient, as one program."""
        pairs: list[tuple[Tensor, Tensor]] = []
        g = self.param_groups[0]
        with no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                pairs += self._update(p, p.grad, g)
        assign_all(pairs)

    def _update(self, p: Tensor, grad: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        raise NotImplementedError


class SGD(Optimizer):
    """torch.optim.SGD: momentum, nesterov and (L2) weight_decay; dampening 0."""

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        if dampening != 0:
            raise Error("SGD: dampening other than 0 is not supported")
        if nesterov and momentum <= 0:
            raise Error("SGD: nesterov needs a momentum > 0 (as torch's)")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, p: Tensor, grad: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        if g["momentum"] == 0:
            return [(p, apply("sgd-update", [p, grad], {"lr": g["lr"], "weight-decay": g["weight_decay"]}))]
        (v,) = self._state(p, "momentum_buffer")
        w2, v2 = apply("momentum-update", [p, grad, v], {"lr": g["lr"], "momentum": g["momentum"],
                                                         "weight-decay": g["weight_decay"], "nesterov": g["nesterov"]})
        return [(p, w2), (v, v2)]


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight_decay added to the gradient)."""

    op = "adam-update"

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _update(self, p: Tensor, grad: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        m, v, t = self._state(p, "exp_avg", "exp_avg_sq", "step")
        t2 = t + 1
        w2, m2, v2 = apply(self.op, [p, grad, m, v, t2], {"lr": g["lr"], "beta1": g["betas"][0],
                                                           "beta2": g["betas"][1], "eps": g["eps"],
                                                           "weight-decay": g["weight_decay"]})
        return [(p, w2), (m, m2), (v, v2), (t, t2)]


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    op = "adamw-update"

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr, betas, eps, weight_decay)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
