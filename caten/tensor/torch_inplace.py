"""torch's autograd and in-place habits on Tensor: `clone`, `.data`, `requires_grad_()`, and the
in-place `zero_`/`fill_`/`copy_`/`add_`/`sub_`/`mul_`/`div_`/`masked_fill_`/`clamp_`, `t -= u`.

An in-place method gives the tensor its new value as `assign` does (a leaf keeps being a leaf;
a computed tensor's handle moves to the new graph node, keeping its history); other tensors
never change with it, since caten has no views. As in torch, a leaf that requires gradients
takes in-place updates only under `caten.no_grad()`."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.lazy import INPUT, leaf
from caten.tensor.promote import _category
from caten.tensor.tensor import FLOATS, Tensor, apply
from caten.tensor.torch_misc import add, clamp, masked_fill, sub
from caten.tensor.torchnames import torch_name


@torch_name("clone", "`(contiguous x)`: a copy the gradient flows through", "autograd")
def clone(self: Tensor) -> Tensor:
    return apply("contiguous", [self], {})


def _data_set(self: Tensor, value: Any) -> None:
    """`t.data = v`: t becomes a leaf holding v's value (any shape and dtype, as torch allows)."""
    v = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype, runtime=self.runtime)
    arr = np.array(v.numpy())
    arr.flags.writeable = False
    self.node = leaf(arr, v.dtype, self.requires_grad and self.node.op == INPUT and v.dtype in FLOATS)
    self.node.owner = weakref.ref(self)


@torch_name("data", "`detach()`, whose in-place changes reach the tensor; setting it gives the tensor a new "
            "value without history", "autograd", kind="property", setter=_data_set)
def data(self: Tensor) -> Tensor:
    d = self.detach()
    d._base = self
    return d


class GradFn:
    """torch's `grad_fn`, as far as caten has one: the library call that made the tensor."""

    def __init__(self, op: str):
        self.op = op

    def name(self) -> str:
        return self.op

    def __repr__(self) -> str:
        return f"<{self.op}>"


@torch_name("grad_fn", "None for a leaf or a tensor without history; else the library call that made it",
            "autograd", kind="property")
def grad_fn(self: Tensor) -> Any:
    return GradFn(self.node.op) if self.requires_grad and self.node.op != INPUT else None


@torch_name("requires_grad_", "sets `requires_grad` on a leaf, returns the tensor", "autograd")
def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self


@torch_name("retain_grad", "not supported: only leaves receive .grad", "autograd")
def retain_grad(self: Tensor) -> None:
    raise Error("retain_grad() is not supported: only leaf tensors receive .grad",
                hint="make the value a leaf: y = y.detach().requires_grad_() and compute from it")


def inplace(self: Tensor, new: Tensor, what: str) -> Tensor:
    """Give `self` the value `new` (see the module docstring)."""
    if self.node.op == INPUT and self.requires_grad and state.grad_enabled() and self._base is None:
        raise Error(f"{what}: a leaf tensor that requires grad cannot be changed in place",
                    hint="do it under `with caten.no_grad():`, as torch requires")
    if new.shape != self.shape:
        new = new.expand(*self.shape)
    if new.dtype != self.dtype:
        if _category(new.dtype) > _category(self.dtype):
            raise Error(f"{what}: a {new.dtype} result cannot be stored in a {self.dtype} tensor")
        new = new.cast(self.dtype)
    _store(self, new)
    if self._base is not None:  # `w.data.zero_()` changes w, as torch's shared storage would
        _store(self._base, new.detach())
    return self


def _store(t: Tensor, new: Tensor) -> None:
    if t.node.op == INPUT:
        t.assign(new)
    else:
        t.node = new.node


@torch_name("zero_", "the tensor becomes `(zeros shape)`", "autograd", example="t.grad.zero_()")
def zero_(self: Tensor) -> Tensor:
    return inplace(self, Tensor.zeros(list(self.shape), dtype=self.dtype, runtime=self.runtime), "zero_")


@torch_name("fill_", "the tensor becomes `(full shape value)`", "autograd", example="t.fill_(1.0)")
def fill_(self: Tensor, value: Any) -> Tensor:
    return inplace(self, Tensor.full(list(self.shape), value, dtype=self.dtype, runtime=self.runtime), "fill_")


@torch_name("copy_", "the tensor becomes src (broadcast, cast)", "autograd", example="t.copy_(u)")
def copy_(self: Tensor, src: Any) -> Tensor:
    s = src if isinstance(src, Tensor) else Tensor(src, runtime=self.runtime)
    return inplace(self, s.cast(self.dtype) if s.dtype != self.dtype else s, "copy_")


def _make_inplace(name: str, fn: Any) -> None:
    def op(self: Tensor, other: Any) -> Tensor:
        return inplace(self, fn(self, other), name)
    op.__name__ = name
    torch_name(name, f"the tensor becomes `{name[:-1]}` of it", "autograd", example=f"t.{name}(u)")(op)


for _n, _f in [("mul_", lambda a, b: a * b), ("div_", lambda a, b: a / b)]:
    _make_inplace(_n, _f)


@torch_name("add_", "the tensor becomes `add` of it", "autograd", example="t.add_(u, alpha=2)")
def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return inplace(self, add(self, other, alpha=alpha), "add_")


@torch_name("sub_", "the tensor becomes `sub` of it", "autograd", example="t.sub_(u, alpha=2)")
def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return inplace(self, sub(self, other, alpha=alpha), "sub_")


@torch_name("masked_fill_", "the tensor becomes `masked_fill` of it", "autograd", example="t.masked_fill_(m, 0.0)")
def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    return inplace(self, masked_fill(self, mask, value), "masked_fill_")


@torch_name("clamp_", "the tensor becomes `clamp` of it", "autograd", example="t.clamp_(min=0.0)")
def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return inplace(self, clamp(self, min, max), "clamp_")


def _iop(op: Any, what: str) -> Any:
    def f(self: Tensor, other: Any) -> Tensor:
        return inplace(self, op(self, other), what)
    return f


class MissingAttribute(Error, AttributeError):
    """No such Tensor attribute: an AttributeError (hasattr works), and a caten.Error that says why."""


def _getattr(self: Tensor, name: str) -> Any:
    """`t.m_(...)` for any method m whose result has t's shape and dtype (`abs_`, `relu_`, `exp_`,
    ...): m, then `inplace`. Any other unknown name is a diagnostic naming what is close."""
    if name.startswith("_"):  # numpy's and Python's probes (__array_interface__, ...): plain and fast
        raise AttributeError(name)
    base = getattr(type(self), name[:-1], None) if name.endswith("_") else None
    if callable(base):
        def method(*args: Any, **kwargs: Any) -> Tensor:
            return inplace(self, base(self, *args, **kwargs), name)
        return method
    from caten.errors import closest

    near = closest(name, [n for n in dir(type(self)) if not n.startswith("_")])
    raise MissingAttribute(f"caten.Tensor has no attribute {name!r}" + (f"; did you mean {near}?" if near else ""),
                           hint="docs/tensor.md lists torch's names caten has, and those it does not and why")


def install() -> None:
    """`t -= u` and its kin change t in place, as torch's (`w -= lr * w.grad` under no_grad), and
    so does `t.m_()` for a method m (`_getattr`)."""
    Tensor.__iadd__ = _iop(lambda a, b: a + b, "+=")
    Tensor.__isub__ = _iop(lambda a, b: a - b, "-=")
    Tensor.__imul__ = _iop(lambda a, b: a * b, "*=")
    Tensor.__itruediv__ = _iop(lambda a, b: a / b, "/=")
    Tensor.__getattr__ = _getattr


@torch_name("uniform_", "the tensor becomes `(+ from (* (rand shape) (- to from)))`", "autograd",
            example="t.uniform_(-0.1, 0.1)")
def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    u = Tensor.rand(list(self.shape), dtype=self.dtype, runtime=self.runtime)
    return inplace(self, u * (b - a) + a, "uniform_")


@torch_name("normal_", "the tensor becomes `(+ mean (* (randn shape) std))`", "autograd",
            example="t.normal_(0.0, 0.02)")
def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    n = Tensor.randn(list(self.shape), dtype=self.dtype, runtime=self.runtime)
    return inplace(self, n * std + mean, "normal_")


@torch_name("detach_", "the tensor becomes its `detach()`", "autograd")
def detach_(self: Tensor) -> Tensor:
    self.node = self.detach().node
    return self
