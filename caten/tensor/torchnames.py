"""torch's spellings on `caten.Tensor`: one table from torch's names to caten's library calls.

A torch user reaches for `t.sum(1)`, `t.mean(dim=1, keepdim=True)`, `Tensor.zeros(2, 3)`,
`t.size(0)`. Each such name is registered here once (`@torch_name`), with the library call it
becomes; the registry installs the methods on Tensor, gives `caten.cat`-style functions, binds
arguments with one diagnostic for every bad call (`caten.Error` naming the working call), and
renders the table of docs/tensor.md, so the page cannot drift from the code. The library's own
keywords (`axis=`, `keepdims=`) stay accepted wherever torch's `dim=`/`keepdim=` are.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from caten.errors import Error, closest

SECTIONS = ("creation", "printing and reading", "shape", "reduction", "indexing", "elementwise", "autograd")
ALIASES = {"axis": "dim", "keepdims": "keepdim"}  # the library's keywords, accepted beside torch's
# torch's dtype names (caten.float32 is "f32", and torch.float32 itself is accepted where a dtype is)
DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16",
          "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "bool": "bool", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz",
          "float8_e5m2fnuz": "f8e5m2fnuz", "int4": "i4", "uint4": "u4"}
DTYPE_ALIASES = {"float": "f32", "double": "f64", "half": "f16", "short": "i16", "int": "i32", "long": "i64"}


class ArgError(Error, TypeError):
    """A call torch would refuse with a TypeError: a caten.Error, and a TypeError for torch code."""


@dataclass(frozen=True)
class Entry:
    name: str  # torch's spelling
    fn: Callable[..., Any]
    caten: str  # what it becomes in the library, for the table
    section: str
    kind: str  # "method", "static" (Tensor.zeros and caten.zeros), "property", "function" (caten.cat only)
    example: str  # a working call, shown by diagnostics
    setter: Callable[..., Any] | None = None  # a property's

    def usage(self) -> str:
        sig = inspect.signature(self.fn)
        params = list(sig.parameters.values())
        if self.kind in ("method", "property"):
            params = params[1:]
        parts: list[str] = []
        for p in params:
            if p.kind is p.KEYWORD_ONLY and not any(q.kind is q.VAR_POSITIONAL for q in params) and "*" not in parts:
                parts.append("*")
            star = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
            parts.append(star + p.name + ("" if p.default is p.empty else f"={p.default!r}"))
        text = ", ".join(parts)
        if self.kind == "property":
            return f"t.{self.name}"
        return f"{'t.' if self.kind == 'method' else 'caten.'}{self.name}({text})"


REGISTRY: dict[str, Entry] = {}


def torch_name(name: str, caten: str, section: str, kind: str = "method", example: str = "",
               setter: Callable[..., Any] | None = None) -> Callable:
    """Register `fn` as torch's `name`; its Python signature is the one calls are bound against."""
    assert section in SECTIONS, section

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        entry = Entry(name, fn, caten, section, kind, example, setter)
        REGISTRY[name] = entry
        return _bound(entry)
    return deco


def _bound(entry: Entry) -> Callable[..., Any]:
    """`entry.fn` with the library's keyword aliases and one diagnostic for a call that does not bind."""
    sig = inspect.signature(entry.fn)
    names = set(sig.parameters)
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())

    @functools.wraps(entry.fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            kwargs = {ALIASES.get(k, k) if ALIASES.get(k) in names and ALIASES[k] not in kwargs else k: v
                      for k, v in kwargs.items()}
        try:
            return entry.fn(*args, **kwargs)
        except TypeError:
            try:  # a call that does not bind gets the diagnostic; a TypeError from inside is raised as is
                sig.bind(*args, **kwargs)
            except TypeError as e:
                problem = str(e)
            else:
                raise
        bad = next((k for k in kwargs if k not in names), None)
        near = closest(bad, names) if bad and not has_var_kw else None
        what = f"unknown keyword {bad!r}" + (f" (did you mean {near}=?)" if near else "") if bad else problem
        raise ArgError(f"{entry.name}(): {what}; it takes {entry.usage()}"
                       + (f"; did you mean {entry.example}?" if entry.example else "")) from None
    return call


def install(tensor_cls: type) -> None:
    """Put every registered method, static function and property on Tensor."""
    for e in REGISTRY.values():
        fn = _bound(e)
        if e.kind == "method":
            setattr(tensor_cls, e.name, fn)
        elif e.kind == "static":
            setattr(tensor_cls, e.name, staticmethod(fn))
        elif e.kind == "property":
            setattr(tensor_cls, e.name, property(e.fn, e.setter))


def function(name: str) -> Callable[..., Any] | None:
    """`caten.NAME`: a creation or free function, or a method called as torch's `torch.sum(t, 1)`."""
    e = REGISTRY.get(name)
    return None if e is None or e.kind == "property" else _bound(e)


def functions() -> list[str]:
    return sorted(n for n, e in REGISTRY.items() if e.kind != "property")


def table() -> str:
    """The markdown table of docs/tensor.md's torch section, by section, from the registry."""
    out = ["| torch | caten.Tensor | becomes |", "|---|---|---|"]
    for sec in SECTIONS:
        for e in sorted((e for e in REGISTRY.values() if e.section == sec), key=lambda e: e.name):
            torch = f"`torch.{e.name}`" if e.kind in ("static", "function") else f"`Tensor.{e.name}`"
            out.append(f"| {torch} | `{e.usage()}` | {e.caten} |".replace("\n", " "))
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- torch table: generated -->", "<!-- end of torch table -->"


def page(text: str) -> str:
    """`text` (docs/tensor.md) with the table between its markers regenerated."""
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + "\n" + table() + END + rest.split(END, 1)[1]


def rewrite(path: str) -> None:
    """Regenerate the table of the page at `path`:
    `python -c "from caten.tensor.torchnames import rewrite; rewrite('docs/tensor.md')"` (its list of
    unsupported torch names: `python -m caten.cli.unsupported docs/tensor.md`)."""
    import caten.tensor  # noqa: F401  (registers every name)

    with open(path, encoding="utf-8") as f:
        new = page(f.read())
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
