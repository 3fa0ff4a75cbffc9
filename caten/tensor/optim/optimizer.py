"""torch.optim's base class over Tensors: param groups, per-parameter state, one program a step.

Each step is every parameter's update (`algorithms.py`; SGD and Adam call the library's
composites `sgd-update`, `momentum-update`, `adam-update`, `adamw-update`: torch's formulas,
written once in `ops/optim.lisp`), all computed by one program and given to the parameters in
place (`Tensor.assign`). Optimizer state (momentum buffers, moments, step counts) are Tensors
too, so the step count is an input of the program, not a literal: stepping never recompiles,
and under `caten.jit` a whole training step is one program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.nn.module import Parameter
from caten.tensor.state import enable_grad, no_grad
from caten.tensor.tensor import Tensor, assign_all
from caten.tensor.trace import guard, live

# what a scheduler writes into a group beside the optimizer's own hyperparameters
SCHEDULER_KEYS = {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"}


class Optimizer:
    """Parameters (leaf Tensors) in param groups, torch's way: `params` is an iterable of
    Tensors or of dicts, each with "params" and any hyperparameter overriding the defaults.
    A group's `lr` is read at every step (an input of the step's program, under `caten.jit`
    too); changing another hyperparameter recompiles (jit traces again). A parameter without
    a gradient (a frozen nn.Parameter, or one unused) is skipped, as torch's."""

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
        unknown = sorted(set(group) - set(self.defaults) - SCHEDULER_KEYS - {"params"})
        if unknown:
            raise Error(f"{type(self).__name__}: unknown option(s) {unknown} in a param group")
        for p in ps:
            if not isinstance(p, Tensor) or not p.is_leaf or not (p.requires_grad or isinstance(p, Parameter)):
                raise Error("optimizers take leaf Tensors created with requires_grad=True (or nn.Parameters, "
                            "frozen ones too)")
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
        clear_grads(self.params, set_to_none)

    def _state(self, p: Tensor, *names: str, init: float = 0.0) -> list[Tensor]:
        """State created at a parameter's first step (torch's), zeros or `init`; `step` is i64."""
        st = self.state.setdefault(id(p), {})
        for n in names:
            if n not in st:
                if n == "step":
                    st[n] = Tensor(np.zeros((), np.int64), runtime=p.runtime)
                else:
                    st[n] = Tensor(np.full(p.shape, init, np_dtype(p.dtype)), runtime=p.runtime)
        return [st[n] for n in names]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient, as one program; `closure`
        (torch's) recomputes the loss first and its value is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
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
        return loss

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, g: dict[str, Any]) -> list[tuple[Tensor, Tensor]]:
        """(tensor, its new value) pairs of one parameter's step: each algorithm's formula."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: {"state": {index: {name: array}}, "param_groups": [{..., "params": [index]}]},
        parameters numbered in group order."""
        index = {id(p): i for i, p in enumerate(self.params)}
        state = {index[k]: {n: np.array(t.numpy()) for n, t in st.items()} for k, st in self.state.items()}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore hyperparameters and state saved by `state_dict` (the same parameters' layout)."""
        groups = sd.get("param_groups", [])
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise Error("load_state_dict: the saved param groups do not match this optimizer's in size")
        params = self.params
        for g, saved in zip(self.param_groups, groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, st in sd.get("state", {}).items():
            p = params[int(i)]
            self.state[id(p)] = {n: Tensor(np.array(v.detach().cpu().numpy() if hasattr(v, "detach") else v),
                                           runtime=p.runtime) for n, v in st.items()}


def _check_hyper(name: str, g: dict[str, Any]) -> None:
    """torch's checks: lr, momentum, weight_decay, eps, alpha >= 0; betas in [0, 1)."""
    for k in ("lr", "momentum", "weight_decay", "eps", "alpha", "lr_decay"):
        if k in g and not g[k] >= 0:
            raise Error(f"{name}: invalid {k} {g[k]!r} (must be >= 0)")
    for b in g.get("betas", ()):
        if not 0 <= b < 1:
            raise Error(f"{name}: invalid beta {b!r} (must lie in [0, 1))")


def clear_grads(params: Iterable[Tensor], set_to_none: bool = True) -> None:
    """`zero_grad` of any optimizer over `params` (a sharded one clears every rank's parameters)."""
    for p in params:
        if set_to_none:
            p.grad = None
        elif p.grad is not None:
            p.grad = Tensor(np.zeros(p.shape, np_dtype(p.dtype)), runtime=p.runtime)
