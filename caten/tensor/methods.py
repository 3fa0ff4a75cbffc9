"""Tensor methods and `caten.functional`, generated from the composite library.

Each library composite becomes one Python function (dashes become underscores, `&key`
arguments keyword arguments, the composite's doc line its docstring) and, where its first
parameter is a tensor, a Tensor method; a composite added to `ops/` appears here with no other
edit. A `:seed` not given is the next of the seed stream (`caten.manual_seed`). Python's
operators map to the library's arithmetic with torch's type promotion.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.autograd import backward
from caten.tensor.index import getitem, setitem
from caten.tensor.promote import _promote
from caten.tensor.tensor import FLOATS, Tensor, _seed, apply
from caten.tensor.torchnames import ArgError

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
                raise ArgError(f"{pyname(name)}() got an unexpected keyword argument {k!r}"
                               + (f" (it takes {takes})" if keys else ""))
            kw[lk] = v.node if isinstance(v, Tensor) else v
        if name in CLASS_TARGETS and len(args) == 2:
            args = (args[0], _one_hot(args[0], args[1]))
        if "seed" in keys and "seed" not in kw:
            # a fresh draw from the seed stream, as Tensor.rand's and torch's global generator:
            # the library's fixed default would give `x.dropout(p)` the same mask at every step
            kw["seed"] = _seed(None)
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

    text = sig_text(d)
    return text if text.startswith(f"({d.name} ") else f"({d.name} {text})"


def functions() -> dict[str, Callable[..., Any]]:
    """Every library composite as a function, by Python name."""
    return {pyname(n): make(n, defs) for n, defs in library().items() if n not in OPERATORS}


# operators -------------------------------------------------------------------------------------
def _binary(op: str, reverse: bool = False) -> Callable[[Tensor, Any], Tensor]:
    def f(self: Tensor, other: Any) -> Tensor:
        if not isinstance(other, (Tensor, np.ndarray, int, float, bool, np.generic)):
            return NotImplemented
        a, b = _promote(self, other)
        name = _BOOL_OPS.get(op, op) if a.dtype == "bool" else op
        return apply(name, [b, a] if reverse else [a, b], {})
    return f


# on bools, torch's + and * are logical or and and (the language's arithmetic takes no bools)
_BOOL_OPS = {"+": "or", "*": "and"}


def _div(reverse: bool) -> Callable[[Tensor, Any], Tensor]:
    """True division: integers and bools divide in f32, as torch's `/`."""
    def f(self: Tensor, other: Any) -> Tensor:
        if not isinstance(other, (Tensor, np.ndarray, int, float, bool, np.generic)):
            return NotImplemented
        a, b = _promote(self, other)
        if a.dtype not in FLOATS:
            a = a.cast("f32")
            b = b.cast("f32") if isinstance(b, Tensor) else float(b)
        return apply("/", [b, a] if reverse else [a, b], {})
    return f


def _pow(self: Tensor, e: Any) -> Tensor:
    if isinstance(e, (int, float)) and not isinstance(e, bool) and e == 2 and self.dtype in FLOATS:
        return self * self  # exact, as torch's x ** 2
    if isinstance(e, (int, np.integer)) and not isinstance(e, bool) and e < 0 and self.dtype not in FLOATS:
        raise Error(f"an integer tensor ({self.dtype}) to a negative integer power ({e})",
                    hint="cast the tensor to a float dtype first, as torch requires")
    a, b = _promote(self, e)
    return apply("pow", [a, b], {})


def _rpow(self: Tensor, base: Any) -> Tensor:
    a, b = _promote(self, base)
    return apply("pow", [b, a], {})


_OPS = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__floordiv__": "idiv",
        "__mod__": "remainder", "__matmul__": "matmul", "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=",
        "__eq__": "=", "__ne__": "!=", "__and__": "and", "__or__": "or", "__xor__": "xor"}
_ROPS = {"__radd__": "+", "__rsub__": "-", "__rmul__": "*", "__rtruediv__": "/", "__rfloordiv__": "idiv",
         "__rmod__": "remainder", "__rmatmul__": "matmul", "__rand__": "and", "__ror__": "or", "__rxor__": "xor"}


def install() -> None:
    """Attach the library's composites and Python's operators to Tensor."""
    for n, f in functions().items():
        if not hasattr(Tensor, n):
            setattr(Tensor, n, f)
    for dunder, op in _OPS.items():
        setattr(Tensor, dunder, _binary(op))
    for dunder, op in _ROPS.items():
        setattr(Tensor, dunder, _binary(op, reverse=True))
    Tensor.__truediv__ = _div(False)
    Tensor.__rtruediv__ = _div(True)
    Tensor.__pow__ = _pow
    Tensor.__rpow__ = _rpow
    Tensor.__neg__ = lambda self: apply("neg", [self], {})
    Tensor.__invert__ = lambda self: apply("not", [self], {})
    Tensor.__abs__ = lambda self: apply("abs", [self], {})
    Tensor.__pos__ = lambda self: self
    Tensor.__getitem__ = getitem
    Tensor.__setitem__ = setitem
    Tensor.backward = backward
