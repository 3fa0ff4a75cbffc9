"""What an expression evaluates to at compile time.

- `Tensor`: a graph node (strongly typed), with the library call that produced it, so
  rewrite rules can match library-level calls before they are expanded.
- `Lit`: a weakly typed scalar (a literal, a dimension value, a folded expression): it takes
  the dtype of the tensor it meets, as LANGUAGE.md section 5.1 asks.
- `Complex`: a c64/c128 value, a pair of real tensors (f32/f64) of one shape; the graph never
  sees a complex node (caten/elaborate/complex.py holds its ops, docs/fft.md says why).
- Python lists (list literals), `DType`, `CDType`, `str`, `None` (nil) and tuples (several outputs).
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


@dataclass(frozen=True)
class CDType:
    """A complex dtype of the language (c64: f32 parts, c128: f64 parts). It names no graph dtype:
    the elaborator splits every complex value into its real parts."""
    name: str
    part: DType

    kind = "complex"
    is_float = is_int = is_bool = False

    @property
    def bits(self) -> int:
        return 2 * self.part.bits

    @property
    def np(self) -> Any:
        import numpy as np

        return np.dtype(np.complex64 if self.name == "c64" else np.complex128)

    def __str__(self) -> str:
        return self.name


C64, C128 = CDType("c64", T.f32), CDType("c128", T.f64)
COMPLEX_DTYPES = {"c64": C64, "c128": C128}


def lookup_dtype(name: str | None) -> DType | CDType | None:
    """A dtype name of the language: a graph dtype, or c64/c128."""
    return T.lookup(name) if name not in COMPLEX_DTYPES else COMPLEX_DTYPES[name]  # type: ignore[arg-type]


def complex_of(dt: DType) -> CDType | None:
    """The complex dtype whose parts are `dt` (None: only f32 and f64 have one)."""
    return C64 if dt == T.f32 else C128 if dt == T.f64 else None


@dataclass(frozen=True)
class Complex:
    """A complex value: its real and imaginary parts, two real tensors of one float dtype and shape,
    or two literals (a weak complex scalar: it takes the dtype of the complex value it meets)."""
    re: Tensor | Lit
    im: Tensor | Lit

    @property
    def weak(self) -> bool:
        return isinstance(self.re, Lit)

    @property
    def dtype(self) -> CDType:
        return complex_of(self.re.dtype) if isinstance(self.re, Tensor) else C64  # type: ignore[return-value]

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.re.shape if isinstance(self.re, Tensor) else ()


def describe(v: Any) -> str:
    """A short human name of a value's kind, for messages."""
    if isinstance(v, Tensor):
        dims = ", ".join(map(str, v.shape))
        return f"a {v.dtype}[{dims}] tensor"
    if isinstance(v, Complex):
        return f"a {v.dtype}[{', '.join(map(str, v.shape))}] complex value" if not v.weak else \
            f"the complex literal ({v.re.value} {v.im.value})"  # type: ignore[union-attr]
    if isinstance(v, Lit):
        return f"the {v.kind} literal {v.value}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, (DType, CDType)):
        return f"the dtype {v}"
    if v is None:
        return "nil"
    if isinstance(v, tuple):
        return f"{len(v)} values"
    if isinstance(v, str):
        return "a string"
    return type(v).__name__
