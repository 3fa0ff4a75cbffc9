"""The op registries of both importers (ONNX op types, ATen overloads) are filled the same way: a
decorator that enters its function under each name it is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def registrar(table: dict[str, Callable[..., Any]]) -> Callable[..., Callable]:
    """`@registrar(table)("A", "B")` on a function stores it in table under "A" and "B"."""
    def register(*names: str) -> Callable:
        def deco(fn: Callable) -> Callable:
            for n in names:
                table[n] = fn
            return fn
        return deco
    return register
