"""torch.nn.init: fill a Tensor in place (and return it) from the generator `caten.manual_seed`
reseeds. The distributions and bounds are torch's; the draws are numpy's, not torch's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state as _state
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor

_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3,
          "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise Error(f"calculate_gain: unknown nonlinearity {nonlinearity!r}", hint=f"one of {sorted(_GAINS)}")
    return _GAINS[nonlinearity]


def _fill(t: Tensor, v: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise Error(f"nn.init fills a caten Tensor, got {type(t).__name__}")
    arr = np.array(np.broadcast_to(np.asarray(v), t.shape), dtype=np_dtype(t.dtype), order="C")
    arr.flags.writeable = False
    t.set_value(arr)
    return t


def _fans(t: Tensor) -> tuple[int, int]:
    if t.ndim < 2:
        raise Error(f"fan in and fan out need a tensor of rank 2 or more, got shape {list(t.shape)}")
    field = math.prod(t.shape[2:])
    return t.shape[1] * field, t.shape[0] * field


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return _fill(t, _state.np_rng().uniform(a, b, size=t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _fill(t, _state.np_rng().normal(mean, std, size=t.shape))


def trunc_normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """N(mean, std) redrawn until inside [a, b]."""
    rng = _state.np_rng()
    v = rng.normal(mean, std, size=t.shape)
    bad = (v < a) | (v > b)
    while bad.any():
        v[bad] = rng.normal(mean, std, size=int(bad.sum()))
        bad = (v < a) | (v > b)
    return _fill(t, v)


def constant_(t: Tensor, val: float) -> Tensor:
    return _fill(t, val)


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, 0)


def ones_(t: Tensor) -> Tensor:
    return _fill(t, 1)


def eye_(t: Tensor) -> Tensor:
    if t.ndim != 2:
        raise Error(f"eye_ needs a matrix, got shape {list(t.shape)}")
    return _fill(t, np.eye(*t.shape))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    fi, fo = _fans(t)
    a = gain * math.sqrt(6.0 / (fi + fo))
    return uniform_(t, -a, a)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    fi, fo = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fi + fo)))


def _kaiming_std(t: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise Error(f"kaiming init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fi, fo = _fans(t)
    return calculate_gain(nonlinearity, a) / math.sqrt(fi if mode == "fan_in" else fo)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(t, a, mode, nonlinearity)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    return normal_(t, 0.0, _kaiming_std(t, a, mode, nonlinearity))
