"""What an expression evaluates to at compile time.

- `Tensor`: a graph node (strongly typed), with the library call that produced it, so
  rewrite rules can match library-level calls before they are expanded.
- `Lit`: a weakly typed scalar (a literal, a dimension value, a folded expression): it takes
  the dtype of the tensor it meets, as LANGUAGE.md section 5.1 asks.
- Python lists (list literals), `DType`, `str`, `None` (nil) and tuples (several outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node


@dataclass(frozen=True)
class Lit:
    value: int | float | bool | D.DimExpr
    kind: str  # "int" | "float" | "bool" | "dim" (a dimension or dotimes index: i64 when it meets a tensor)

    @property
    def default_dtype(self) -> DType:
        return {"int": T.i64, "float": T.f32, "bool": T.bool_, "dim": T.i64}[self.kind]

    @property
    def concrete(self) -> bool:
        return not isinstance(self.value, D.DimExpr)


@dataclass(frozen=True)
class Origin:
    """The library or user call that produced a tensor: name, evaluated arguments, keywords."""
    name: str
    args: tuple
    kwargs: tuple


@dataclass(frozen=True)
class Tensor:
    node: Node
    origin: Origin | None = None

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.node.shape


def describe(v: Any) -> str:
    """A short human name of a value's kind, for messages."""
    if isinstance(v, Tensor):
        dims = ", ".join(map(str, v.shape))
        return f"a {v.dtype}[{dims}] tensor"
    if isinstance(v, Lit):
        return f"the {v.kind} literal {v.value}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, DType):
        return f"the dtype {v}"
    if v is None:
        return "nil"
    if isinstance(v, tuple):
        return f"{len(v)} values"
    if isinstance(v, str):
        return "a string"
    return type(v).__name__
