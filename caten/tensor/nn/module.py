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
        raise Error(f"{type(self).__name__} has no forward", hint="define forward(self, x) in the subclass")

    def _children(self) -> Iterator[tuple[str, Any]]:
        """(name, Tensor or Module) in attribute order; lists and tuples name their items
        `attr.i` (torch's ModuleList); names starting with `_` are private, not state."""
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            if isinstance(v, (Tensor, Module)):
                yield k, v
            elif isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    if isinstance(x, (Tensor, Module)):
                        yield f"{k}.{i}", x

    def named_tensors(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """Every Tensor attribute once, parameters and buffers (a shared one under its first name)."""
        seen: set[int] = set()
        for k, v in self._named(prefix):
            if id(v) not in seen:
                seen.add(id(v))
                yield k, v

    def _named(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        """A module's own tensors, then its sub-modules' (torch's order)."""
        kids = list(self._children())
        for k, v in kids:
            if isinstance(v, Tensor):
                yield prefix + k, v
        for k, v in kids:
            if isinstance(v, Module):
                yield from v._named(prefix + k + ".")

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """The Tensors that require gradients: what an optimizer updates."""
        return ((k, v) for k, v in self.named_tensors(prefix) if v.requires_grad)

    def parameters(self) -> list[Tensor]:
        return [p for _, p in self.named_parameters()]

    def modules(self) -> Iterator[Module]:
        """This module and every sub-module once."""
        seen: set[int] = set()
        stack: list[Module] = [self]
        while stack:
            m = stack.pop(0)
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield m
            stack[:0] = [v for _, v in m._children() if isinstance(v, Module)]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; frozen ones stay in the state_dict."""
        for _, t in self.named_tensors():
            if t.dtype in ("f16", "bf16", "f32", "f64"):
                t.requires_grad = requires_grad
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every tensor's value (parameters, frozen or not, and buffers) by dotted name, copied:
        torch's names and layouts for torch's layers."""
        return {k: np.array(p.numpy()) for k, p in self.named_tensors()}

    def save(self, path: str) -> None:
        np.savez(path, **self.state_dict())

    def load_state_dict(self, sd: Any) -> None:
        """Load values from a dict of arrays (or torch tensors) or an `.npz` path. Every key and
        shape is checked before any parameter changes, so a failed load leaves the module as is."""
        if isinstance(sd, (str, bytes)) or hasattr(sd, "__fspath__"):
            sd = _read_npz(sd)
        params = dict(self.named_tensors())
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
        for _, t in self.named_tensors():
            t.runtime = runtime
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
        if isinstance(padding, str):
            padding = _same_padding(padding, (kh, kw), stride, dilation)
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


def _same_padding(mode: str, kernel: tuple[int, int], stride: Any, dilation: Any) -> Any:
    """torch's padding="valid" (none) and "same" (stride 1; symmetric, so an even extent is refused)."""
    if mode == "valid":
        return 0
    if mode != "same":
        raise Error(f"Conv2d: padding {mode!r} is not 'same', 'valid' or a number",
                    hint="padding='same' or 1 or (1, 2)")
    if _pair(stride) not in (1, [1, 1]):
        raise Error("Conv2d: padding='same' needs stride 1 (as torch's)")
    dl = _pair(dilation)
    dh, dw = (dl, dl) if isinstance(dl, int) else dl
    total = [dh * (kernel[0] - 1), dw * (kernel[1] - 1)]
    if any(t % 2 for t in total):
        raise Error("Conv2d: padding='same' with an even kernel extent would pad one side more",
                    hint="give the padding explicitly")
    return [total[0] // 2, total[1] // 2]


def _pair(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


class LayerNorm(Module):
    """Normalizes the trailing `normalized_shape` axes; weight ones, bias zeros."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.shape = eps, shape
        self.weight = Tensor(np.ones(shape, np.float32), requires_grad=True) if elementwise_affine else None
        self.bias = Tensor(np.zeros(shape, np.float32), requires_grad=True) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[x.ndim - len(self.shape):] != self.shape:
            raise Error(f"LayerNorm{list(self.shape)}: input of shape {list(x.shape)} does not end in it")
        w = self.weight if self.weight is not None else Tensor.ones(list(self.shape), x.dtype, runtime=x.runtime)
        b = self.bias if self.bias is not None else Tensor.zeros(list(self.shape), x.dtype, runtime=x.runtime)
        k = len(self.shape)
        axis = -1 if k == 1 else list(range(-k, 0))  # every normalized axis, not only the first
        return x.layernorm(w, b, axis=axis, eps=self.eps)


class Embedding(Module):
    """Rows of a [num, dim] table, initialised N(0, 1), picked by integer indices."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        v = _state.np_rng().standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        self.weight = Tensor(v, requires_grad=True)

    def forward(self, idx: Any) -> Tensor:
        if not isinstance(idx, Tensor):
            arr = np.asarray(idx)
            arr = arr if arr.size else arr.astype(np.int64)  # [] is no indices, not floats
            n = self.weight.shape[0]
            if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() >= n)):
                raise Error(f"Embedding({n}, ...): indices must be integers in [0, {n})",
                            hint=f"got {arr.dtype} values from {arr.min()} to {arr.max()}")
            idx = Tensor(arr.astype(np.int64), runtime=self.weight.runtime)
        return self.weight.take(idx, axis=0)


class Sequential(Module):
    """Layers (modules or functions of one Tensor) applied in order; indexable."""

    def __init__(self, *layers: Module | Callable[[Tensor], Tensor]):
        self.layers = list(layers)

    def __getitem__(self, i: int | slice) -> Any:
        return Sequential(*self.layers[i]) if isinstance(i, slice) else self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def _children(self) -> Iterator[tuple[str, Any]]:
        """Layers by position, torch's `0.weight`."""
        for i, x in enumerate(self.layers):
            if isinstance(x, (Tensor, Module)):
                yield str(i), x

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

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == 0:
            return x.reshape([1])
        a, b = self.start_dim % x.ndim, self.end_dim % x.ndim
        if a > b:
            raise Error(f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} for rank {x.ndim}")
        return x.reshape(list(x.shape[:a]) + [-1] + list(x.shape[b + 1:]))


class Dropout(Module):
    """Zeroes elements with probability p while training (seeds from the stream)."""

    def __init__(self, p: float = 0.5):
        if not 0 <= p <= 1:
            raise Error(f"Dropout: p must lie in [0, 1], got {p}")
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
