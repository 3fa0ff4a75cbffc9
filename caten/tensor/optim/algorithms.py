"""torch.optim's algorithms, each one parameter's update with torch's formula: SGD, Adam and
AdamW through the library's update composites, RMSprop and Adagrad from Tensor ops in torch's
order of operations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from caten.errors import Error
from caten.tensor.optim.optimizer import Optimizer
from caten.tensor.tensor import Tensor, apply

Pairs = list[tuple[Tensor, Tensor]]


class SGD(Optimizer):
    """torch.optim.SGD: momentum, nesterov and (L2) weight_decay; dampening 0."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        if dampening != 0:
            raise Error("SGD: dampening other than 0 is not supported")
        if nesterov and momentum <= 0:
            raise Error("SGD: nesterov needs a momentum > 0 (as torch's)")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> Pairs:
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

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> Pairs:
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


class RMSprop(Optimizer):
    """torch.optim.RMSprop: g += wd w; s = alpha s + (1-alpha) g^2; centered subtracts the mean
    gradient's square; w -= lr g / (sqrt(s) + eps), through a momentum buffer when momentum > 0."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered))

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> Pairs:
        alpha = g["alpha"]
        if g["weight_decay"]:
            grad = grad + p * g["weight_decay"]
        (sq,) = self._state(p, "square_avg")
        sq2 = sq * alpha + grad * grad * (1 - alpha)
        out = [(sq, sq2)]
        if g["centered"]:
            (ga,) = self._state(p, "grad_avg")
            ga2 = ga + (grad - ga) * (1 - alpha)
            avg = (sq2 - ga2 * ga2).sqrt() + g["eps"]
            out.append((ga, ga2))
        else:
            avg = sq2.sqrt() + g["eps"]
        if g["momentum"] > 0:
            (buf,) = self._state(p, "momentum_buffer")
            buf2 = buf * g["momentum"] + grad / avg
            return out + [(buf, buf2), (p, p - lr * buf2)]
        return out + [(p, p - lr * (grad / avg))]


class Adagrad(Optimizer):
    """torch.optim.Adagrad: g += wd w; sum += g^2; w -= lr / (1 + (t-1) lr_decay) * g / (sqrt(sum) + eps)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10):
        if initial_accumulator_value < 0:
            raise Error(f"Adagrad: invalid initial_accumulator_value {initial_accumulator_value!r} (must be >= 0)")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps))
        for p in self.params:  # torch creates the sum at construction
            self._state(p, "step")
            for g in self.param_groups:
                if any(q is p for q in g["params"]):
                    self._state(p, "sum", init=g["initial_accumulator_value"])

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> Pairs:
        s, t = self._state(p, "sum", "step")
        t2 = t + 1
        if g["weight_decay"]:
            grad = grad + p * g["weight_decay"]
        clr = lr if not g["lr_decay"] else lr / ((t2 - 1).cast(p.dtype) * g["lr_decay"] + 1)
        s2 = s + grad * grad
        return [(s, s2), (t, t2), (p, p - clr * (grad / (s2.sqrt() + g["eps"])))]
