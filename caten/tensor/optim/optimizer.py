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
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import apply, assign_all
from caten.tensor.trace import guard, live


class Optimizer:
    """Parameters (Tensors that require gradients) in param groups, torch's way: `params` is an
    iterable of Tensors or of dicts, each with "params" and any hyperparameter overriding the
    defaults. A group's `lr` is read at every step (an input of the step's program, under
    `caten.jit` too); changing another hyperparameter recompiles (jit traces again)."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        self.defaults = defaults
        items = list(params)
        if not items:
            raise Error("the optimizer got an empty parameter list")
        groups = items if all(isinstance(x, dict) for x in items) else [{"params": items}]
        self.param_groups: list[dict[str, Any]] = []
        for g in groups:
            self.add_param_group(g)
        self.state: dict[int, dict[str, Tensor]] = {}

    def add_param_group(self, group: dict[str, Any]) -> None:
        if not isinstance(group, dict) or "params" not in group:
            raise Error("a param group is a dict with a \"params\" entry", hint="{'params': model.parameters(), ...}")
        ps = group["params"]
        ps = [ps] if isinstance(ps, Tensor) else list(ps)
        unknown = sorted(set(group) - set(self.defaults) - {"params"})
        if unknown:
            raise Error(f"{type(self).__name__}: unknown option(s) {unknown} in a param group")
        for p in ps:
            if not isinstance(p, Tensor) or not p.requires_grad or not p.is_leaf:
                raise Error("optimizers take leaf Tensors created with requires_grad=True")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in ps):
            raise Error("a parameter appears in more than one param group")
        g = {**self.defaults, **group, "params": ps}
        _check_hyper(type(self).__name__, g)
        self.param_groups.append(g)

    @property
    def params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient (torch's default), or with set_to_none=False make existing ones zero."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = Tensor(np.zeros(p.shape, np_dtype(p.dtype)), runtime=p.runtime)

    def _state(self, p: Tensor, *names: str) -> list[Tensor]:
        """Zero-initialised state (torch creates it at a parameter's first step); `step` is i64."""
        st = self.state.setdefault(id(p), {})
        for n in names:
            if n not in st:
                shape, dt = ((), np.int64) if n == "step" else (p.shape, np_dtype(p.dtype))
                st[n] = Tensor(np.zeros(shape, dt), runtime=p.runtime)
        return [st[n] for n in names]

    def step(self) -> None:
        """One update of every parameter that has a gradient, as one program."""
        pairs: list[tuple[Tensor, Tensor]] = []
        with no_grad():
            for g in self.param_groups:
                guard(lambda g=g: {k: v for k, v in g.items() if k not in ("params", "lr")})
                lrs: dict[tuple[str, str], Tensor] = {}
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    key = (p.dtype, p.runtime)
                    if key not in lrs:
                        lrs[key] = live(lambda g=g: g["lr"], p.dtype, p.runtime)
                    pairs += self._update(p, p.grad, lrs[key], g)
        assign_all(pairs)

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        raise NotImplementedError


def _check_hyper(name: str, g: dict[str, Any]) -> None:
    """torch's checks: lr, momentum, weight_decay, eps >= 0; betas in [0, 1)."""
    for k in ("lr", "momentum", "weight_decay", "eps"):
        if k in g and not g[k] >= 0:
            raise Error(f"{name}: invalid {k} {g[k]!r} (must be >= 0)")
    for b in g.get("betas", ()):
        if not 0 <= b < 1:
            raise Error(f"{name}: invalid beta {b!r} (must lie in [0, 1))")


class SGD(Optimizer):
    """torch.optim.SGD: momentum, nesterov and (L2) weight_decay; dampening 0."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        if dampening != 0:
            raise Error("SGD: dampening other than 0 is not supported")
        if nesterov and momentum <= 0:
            raise Error("SGD: nesterov needs a momentum > 0 (as torch's)")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        if g["momentum"] == 0:
            return [(p, apply("sgd-update", [p, grad], {"lr": lr, "weight-decay": g["weight_decay"]}))]
        (v,) = self._state(p, "momentum_buffer")
        w2, v2 = apply("momentum-update", [p, grad, v], {"lr": lr, "momentum": g["momentum"],
                                                         "weight-decay": g["weight_decay"], "nesterov": g["nesterov"]})
        return [(p, w2), (v, v2)]


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight_decay added to the gradient)."""

    op = "adam-update"

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        m, v, t = self._state(p, "exp_avg", "exp_avg_sq", "step")
        t2 = t + 1
        w2, m2, v2 = apply(self.op, [p, grad, m, v, t2], {"lr": lr, "beta1": g["betas"][0],
                                                           "beta2": g["betas"][1], "eps": g["eps"],
                                                           "weight-decay": g["weight_decay"]})
        return [(p, w2), (m, m2), (v, v2), (t, t2)]


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay (default 0.01)."""

    op = "adamw-update"

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, lr, betas, eps, weight_decay)


__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
