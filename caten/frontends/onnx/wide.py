"""Lowerings that sum products (convolutions, average pooling, einsum) of f16 / bf16 operands run
in f32 and round once at the end, as onnx's reference and torch's CPU kernels: summing in the narrow
type is off by many ulps."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from caten.frontends.onnx.node import N

NARROW = ("f16", "bf16")


class _Wide(N):
    """n with its f16 / bf16 inputs seen as f32."""

    def __init__(self, n: N):
        super().__init__(n.g, n.node)
        self._n = n
        self._xs: dict[int, str] = {}

    def x(self, i: int) -> str:
        if i not in self._xs:
            v = self._n.x(i)
            self._xs[i] = self._n.let(f"(cast {v} f32)") if self._n.dt(i) in NARROW else v
        return self._xs[i]

    def dt(self, i: int = 0) -> str:
        d = self._n.dt(i)
        return "f32" if d in NARROW else d

    def shape(self, i: int = 0) -> list:
        return self._n.shape(i)

    def a(self, name: str, default: Any = None) -> Any:
        return self._n.a(name, default)


def in_f32(fn: Callable[[N], Any]) -> Callable[[N], Any]:
    """The lowering fn computed in f32 when input 0 is f16 / bf16, its result cast back."""

    @wraps(fn)
    def run(n: N) -> Any:
        if n.dt() not in NARROW:
            return fn(n)
        out = fn(_Wide(n))
        if isinstance(out, list):
            return [f"(cast {y} {n.dt()})" for y in out]
        return f"(cast {out} {n.dt()})"

    return run
