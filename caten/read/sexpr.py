"""The reader's output: S-expression nodes that each carry their source span."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from caten.errors import Span


@dataclass(eq=False)
class Sym:
    name: str
    span: Span


@dataclass(eq=False)
class Num:
    value: int | float
    span: Span


@dataclass(eq=False)
class Str:
    value: str
    span: Span


@dataclass(eq=False)
class Kw:
    name: str  # without the colon
    span: Span


@dataclass(eq=False)
class Annot:
    """`NAME{DTYPE}[DIM, ...]`; dims is None for a scalar, `...` stands for any shape."""
    name: str
    dtype: str
    dims: list[Form] | None
    span: Span


@dataclass(eq=False)
class SList:
    items: list[Form] = field(default_factory=list)
    span: Span | None = None
    bracket: bool = False  # [ ... ] rather than ( ... )


Form = Union[Sym, Num, Str, Kw, Annot, SList]


def head(f: Form) -> str | None:
    """The name a parenthesised form starts with, if any."""
    if isinstance(f, SList) and not f.bracket and f.items and isinstance(f.items[0], Sym):
        return f.items[0].name
    return None


def show(f: Form) -> str:
    """Source-like text of a form, for messages."""
    if isinstance(f, Sym):
        return f.name
    if isinstance(f, Num):
        return repr(f.value)
    if isinstance(f, Str):
        return '"' + f.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(f, Kw):
        return ":" + f.name
    if isinstance(f, Annot):
        dims = "" if f.dims is None else "[" + ", ".join(show(d) for d in f.dims) + "]"
        return f"{f.name}{{{f.dtype}}}{dims}"
    o, c = ("[", "]") if f.bracket else ("(", ")")
    return o + " ".join(show(x) for x in f.items) + c
