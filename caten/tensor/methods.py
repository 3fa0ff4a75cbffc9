"""Tensor methods and `caten.functional`, generated from the composite library.

Each library composite becomes one Python function (dashes become underscores, `&key`
arguments keyword arguments, the composite's doc line its docstring) and, where its first
parameter is a tensor, a Tensor method; a composite added to `ops/` appears here with no other
edit. Python's operators map to the library's arithmetic with torch's type promotion.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.autograd import backward
from caten.tensor.index import getitem
from caten.tensor.lazy import dtype_name
from caten.tensor.tensor import FLOATS, Tensor, apply

OPERATORS = {"+", "-", "*", "/", "<", "<=", ">", ">=", "=", "!="}


def pyname(name: str) -> str:
    n = name.replace("-", "_")
    return n + "_" if keyword.iskeyword(n) else n


def library() -> dict[str, list[Any]]:
    from caten.elaborate.library import composites

    return composites()


def make(name: str, defs: list[Any]) -> Callable[..., Any]:
    """The Python function of library composite `name` (every overload: the arity picks)."""
    keys = {k for d in defs for k, _, _ in d.keys}

    def fn(*args: Any, **kwargs: Any) -> Any:
        kw = {}
        for k, v in kwargs.items():
            lk = k.replace("_", "-")
            if lk not in keys:
                takes = ", ".join(sorted(x.replace("-", "_") for x in keys))
                raise TypeError(f"{pyname(name)}() got an unexpected keyword argument {k!r}"
                                + (f" (it takes {takes})" if keys else ""))
            kw[lk] = v.node if isinstance(v, Tensor) else v
        if name in CLASS_TARGETS and len(args) == 2:
            args = (args[0], _one_hot(args[0], args[1]))
        return apply(name, list(args), kw)

    fn.__name__ = fn.__qualname__ = pyname(name)
    fn.__doc__ = "\n".join(_sig(d) + ("\n    " + d.doc if d.doc else "") for d in defs)
    return fn


CLASS_TARGETS = {"cross-entropy", "nll-loss"}  # these take class indices too, as torch's do


def _one_hot(logits: Any, target: Any) -> Any:
    """Integer class indices (one rank less than the logits) as the one-hot rows the library's
    losses take; anything else as given."""
    if not isinstance(logits, Tensor) or not isinstance(target, (Tensor, np.ndarray)):
        return target
    t = target if isinstance(target, Tensor) else Tensor(target, runtime=logits.runtime)
    if t.dtype in FLOATS or t.dtype == "bool" or t.ndim != logits.ndim - 1:
        return target
    classes = Tensor.arange(logits.shape[-1], dtype=t.dtype, runtime=logits.runtime)
    return (t.reshape(list(t.shape) + [1]) == classes).cast(logits.dtype)


def _sig(d: Any) -> str:
    from caten.elaborate.signature import sig_text

    return f"({d.name} {sig_text(d)})"


def functions() -> dict[str, Callable[..., Any]]:
    """Every library composite as a function, by Python name."""
    return {pyname(n): make(n, defs) for n, defs in library().items() if n not in OPERATORS}


# operators -------------------------------------------------------------------------------------
def _promote(a: Tensor, b: Any) -> tuple[Tensor, Any]:
    """torch's promotion: two tensors meet at numpy's common type; a Python float makes an
    integer tensor f32; a Python int keeps the tensor's dtype."""
    if isinstance(b, np.ndarray):
        b = Tensor(b, runtime=a.runtime)
    if isinstance(b, Tensor):
        if a.dtype != b.dtype:
            from caten.tensor.lazy import np_dtype

            common = dtype_name(np.promote_types(np_dtype(a.dtype), np_dtype(b.dtype)))
            if common is None:
                raise Error(f"no common dtype of {a.dtype} and {b.dtype}")
            a = a if a.dtype == common else a.cast(common)
            b = b if b.dtype == common else b.cast(common)
        return a, b
    if isinstance(b, (bool, np.bool_)):
        return a, b
    if isinstance(b, (float, np.floating)) and a.dtype not in FLOATS:
        return a.cast("f32"), float(b)
    if isinstance(b, (int, np.integer)) and a.dtype == "bool":
        return a.cast("i64"), int(b)
    if isinstance(b, (int, float, np.integer, np.floating)):
        return a, b
    return a, b


def _binary(op: str, reverse: bool = False) -> Callable[[Tensor, Any], Tensor]:
    def f(self: Tensor, other: Any) -> Tensor:
        if not isinstance(other, (Tensor, np.ndarray, int, float, bool, np.generic)):
            return NotImplemented
        a, b = _promote(self, other)
        return apply(op, [b, a] if reverse else [a, b], {})
    return f


def _pow(self: Tensor, e: Any) -> Tensor:
    if isinstance(e, (int, float)) and not isinstance(e, bool) and e == 2 and self.dtype in FLOATS:
        return self * self  # exact, as torch's x ** 2
    a, b = _promote(self, e)
    return apply("pow", [a, b], {})


def _rpow(self: Tensor, base: Any) -> Tensor:
    a, b = _promote(self, base)
    return apply("pow", [b, a], {})


_OPS = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "idiv",
        "__mod__": "mod", "__matmul__": "matmul", "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=",
        "__eq__": "=", "__ne__": "!=", "__and__": "and", "__or__": "or", "__xor__": "xor"}
_ROPS = {"__radd__": "+", "__rsub__": "-", "__rmul__": "*", "__rtruediv__": "/", "__rfloordiv__": "idiv",
         "__rmod__": "mod", "__rmatmul__": "matmul", "__rand__": "and", "__ror__": "or", "__rxor__": "xor"}


def _true_div(self: Tensor, other: Any) -> Tensor:
    a = self if self.dtype in FLOATS else self.cast("f32")
    return _binary("/")(a, other)


def _rtrue_div(self: Tensor, other: Any) -> Tensor:
    a = self if self.dtype in FLOATS else self.cast("f32")
    return _binary("/", True)(a, other)


def install() -> None:
    """Attach the library's composites and Python's operators to Tensor."""
    for n, f in functions().items():
        if not hasattr(Tensor, n):
            setattr(Tensor, n, f)
    for dunder, op in _OPS.items():
        setattr(Tensor, dunder, _binary(op))
    for dunder, op in _ROPS.items():
        setattr(Tensor, dunder, _binary(op, reverse=True))
    Tensor.__truediv__ = _true_div
    Tensor.__rtruediv__ = _rtrue_div
    Tensor.__pow__ = _pow
    Tensor.__rpow__ = _rpow
    Tensor.__neg__ = lambda self: apply("neg", [self], {})
    Tensor.__invert__ = lambda self: apply("not", [self], {})
    Tensor.__abs__ = lambda self: apply("abs", [self], {})
    Tensor.__pos__ = lambda self: self
    Tensor.__getitem__ = getitem
    Tensor.backward = backward
