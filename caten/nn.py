"""`caten.nn` (LANGUAGE.md section 12): layers over Tensors with torch's default initialisations
and parameter layouts, so a torch `state_dict` loads as is (`load_state_dict`).

Parameters are Tensors with requires_grad; `Module.parameters()` finds them (and sub-modules)
in attribute order. `state_dict()` gives numpy arrays by dotted name; `save(path)` and
`load_state_dict(path)` use `.npz`. Initial values draw from the generator that
`caten.manual_seed` reseeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import Tensor
from caten.tensor import state as _state
from caten.tensor.lazy import np_dtype
from caten.tensor.trace import guard


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    v = _state.np_rng().uniform(-bound, bound, size=shape).astype(np.float32)
    return Tensor(v, requires_grad=True)


class Module:
    """A layer: parameters and sub-modules as attributes, `forward` called by `__call__`."""

    training = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward")

    def _children(self) -> Iterator[tuple[str, Any]]:
        for k, v in vars(self).items():
            if isinstance(v, (Tensor, Module)):
                yield k, v
            elif isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    if isinstance(x, (Tensor, Module)):
                        yield f"{k}.{i}" if k != "layers" else str(i), x

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """Each parameter once (a shared one under its first name, as torch)."""
        seen: set[int] = set()
        for k, v in self._named(prefix):
            if id(v) not in seen:
                seen.add(id(v))
                yield k, v

    def _named(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        for k, v in self._children():
            if isinstance(v, Module):
                yield from v._named(prefix + k + ".")
            elif v.requires_grad:
                yield prefix + k, v

    def parameters(self) -> list[Tensor]:
        return [p for _, p in self.named_parameters()]

    def modules(self) -> Iterator[Module]:
        yield self
        for _, v in self._children():
            if isinstance(v, Module):
                yield from v.modules()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter's value by dotted name (torch's names for torch's layers)."""
        return {k: np.array(p.numpy()) for k, p in self.named_parameters()}

    def save(self, path: str) -> None:
        np.savez(path, **self.state_dict())

    def load_state_dict(self, sd: Any) -> None:
        """Load values from a dict of arrays (or torch tensors) or an `.npz` path. Every key and
        shape is checked before any parameter changes, so a failed load leaves the module as is."""
        if isinstance(sd, (str, bytes)) or hasattr(sd, "__fspath__"):
            sd = _read_npz(sd)
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(sd))
        extra = sorted(set(sd) - set(params))
        if missing or extra:
            raise Error(f"load_state_dict: missing {missing}, unexpected {extra}",
                        hint=f"the module's keys are {sorted(params)}")
        new = {}
        for k, p in params.items():
            v = sd[k]
            v = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            if tuple(v.shape) != p.shape:
                raise Error(f"load_state_dict: `{k}` has shape {list(v.shape)}, the module's {list(p.shape)}")
            new[k] = np.array(v, dtype=np_dtype(p.dtype), order="C", copy=True)
        for k, p in params.items():
            p.set_value(new[k])

    def to(self, runtime: str) -> Module:
        """Run this module's tensors on `runtime` (values stay where they are: host arrays)."""
        for m in self.modules():
            for _, v in m._children():
                if isinstance(v, Tensor):
                    v.runtime = runtime
        return self

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)


def _read_npz(path: Any) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("it holds one array, not a state dict")
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as e:
        raise Error(f"load_state_dict: cannot read {str(path)!r}: {e}",
                    hint="give a file written by Module.save (an .npz of arrays by name)") from None


class Linear(Module):
    """y = x W^T + b, W [out, in] (torch's layout), both U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        b = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), b)
        self.bias = _uniform((out_features,), b) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


class Conv2d(Module):
    """torch.nn.Conv2d over NCHW, weights [out, in/groups, kh, kw], U(-1/sqrt(fan_in), ...)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True):
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if in_channels % groups or out_channels % groups:
            raise Error(f"Conv2d: channels {in_channels} -> {out_channels} are not divisible by groups={groups}")
        fan_in = in_channels // groups * kh * kw
        b = 1 / math.sqrt(fan_in)
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), b)
        self.bias = _uniform((out_channels,), b) if bias else None
        self.kw = {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation), "groups": groups}

    def forward(self, x: Tensor) -> Tensor:
        args = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return Tensor.conv2d(*args, **self.kw)


def _pair(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


class LayerNorm(Module):
    """Normalizes the trailing `normalized_shape` axes; weight ones, bias zeros."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.axes = eps, len(shape)
        self.weight = Tensor(np.ones(shape, np.float32), requires_grad=elementwise_affine)
        self.bias = Tensor(np.zeros(shape, np.float32), requires_grad=elementwise_affine)

    def forward(self, x: Tensor) -> Tensor:
        axis = -1 if self.axes == 1 else list(range(-self.axes, 0))  # every normalized axis, not only the first
        return x.layernorm(self.weight, self.bias, axis=axis, eps=self.eps)


class Embedding(Module):
    """Rows of a [num, dim] table, initialised N(0, 1), picked by integer indices."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        v = _state.np_rng().standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        self.weight = Tensor(v, requires_grad=True)

    def forward(self, idx: Any) -> Tensor:
        return self.weight.take(idx if isinstance(idx, Tensor) else Tensor(np.asarray(idx, np.int64)), axis=0)


class Sequential(Module):
    """Layers (modules or functions of one Tensor) applied in order; indexable."""

    def __init__(self, *layers: Module | Callable[[Tensor], Tensor]):
        self.layers = list(layers)

    def __getitem__(self, i: int | slice) -> Any:
        return Sequential(*self.layers[i]) if isinstance(i, slice) else self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def forward(self, x: Tensor) -> Tensor:
        for f in self.layers:
            x = f(x)
        return x


class _Fn(Module):
    fn: Callable[[Tensor], Tensor]

    def forward(self, x: Tensor) -> Tensor:
        return type(self).fn(x)


class ReLU(_Fn):
    fn = staticmethod(lambda x: x.relu())


class GELU(_Fn):
    fn = staticmethod(lambda x: x.gelu())


class Tanh(_Fn):
    fn = staticmethod(lambda x: x.tanh())


class Sigmoid(_Fn):
    fn = staticmethod(lambda x: x.sigmoid())


class Flatten(Module):
    """Flattens every axis from `start_dim` (1: keeps the batch axis)."""

    def __init__(self, start_dim: int = 1):
        self.start_dim = start_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim)


class Dropout(Module):
    """Zeroes elements with probability p while training (seeds from the stream)."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        guard(lambda: (self.training, self.p))  # a jitted step replays only in the mode it was traced in
        if not self.training or self.p == 0:
            return x
        from caten.tensor.tensor import _seed

        return x.dropout(self.p, seed=Tensor(_seed(None), runtime=x.runtime))


class MaxPool2d(Module):
    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0):
        self.kw = {"kernel": kernel_size, "stride": stride, "padding": padding}

    def forward(self, x: Tensor) -> Tensor:
        return x.max_pool2d(**self.kw)


class AvgPool2d(MaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return x.avg_pool2d(**self.kw)


__all__ = ["Module", "Linear", "Conv2d", "LayerNorm", "Embedding", "Sequential", "ReLU", "GELU", "Tanh",
           "Sigmoid", "Flatten", "Dropout", "MaxPool2d", "AvgPool2d"]
