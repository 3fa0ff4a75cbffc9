"""An ONNX node as its lowering sees it (`N`), and the registry that lowerings join with `@handler`.

Kept apart from the handlers: the op-family modules (conv, norm, ...) import only this module, and
`handlers` imports them all to register every handler. With the registry beside the handlers,
each handler module and the registry would import each other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from caten.frontends.onnx.types import Unsupported
from caten.frontends.registry import registrar
from caten.frontends.text import lit

HANDLERS: dict[str, Callable[[N], Any]] = {}


handler = registrar(HANDLERS)  # @handler("Name", ...) registers a lowering


class N:
    """One ONNX node during lowering: its inputs as caten text, constants, attributes, types."""

    def __init__(self, g: Any, node: Any):
        self.g, self.node, self.op = g, node, node.op_type

    @property
    def where(self) -> str:
        return f"{self.op} node `{self.node.name or self.node.output[0]}`"

    def fail(self, why: str) -> Unsupported:
        return Unsupported(f"{self.where}: {why}")

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    @property
    def nin(self) -> int:
        return len(self.node.input)

    def x(self, i: int) -> str:
        if not self.has(i):
            raise self.fail(f"input {i} is missing")
        return self.g.tensor(self.node.input[i])

    def c(self, i: int, what: str = "operand") -> np.ndarray:
        return self.g.const(self.node.input[i], what, self.node)

    def ints(self, i: int, attr: str, default: Any = None) -> list[int] | None:
        """An int list given as input i (newer opsets) or as attribute `attr` (older ones)."""
        if self.has(i):
            return [int(v) for v in np.asarray(self.c(i, attr)).reshape(-1)]
        v = self.a(attr, default)
        return None if v is None else list(v)

    def a(self, name: str, default: Any = None) -> Any:
        from onnx import helper

        for at in self.node.attribute:
            if at.name == name:
                v = helper.get_attribute_value(at)
                return v.decode() if isinstance(v, bytes) else v
        return default

    def dt(self, i: int = 0) -> str:
        d = self.g.dtype(self.node.input[i])
        if d is None:
            raise self.fail(f"input {i} has a dtype caten does not have")
        return d

    def out_dt(self, k: int = 0) -> str | None:
        return self.g.dtype(self.node.output[k])

    def shape(self, i: int = 0) -> list:
        s = self.g.shape(self.node.input[i])
        if s is None:
            raise self.fail(f"the rank of input {i} is unknown")
        return s

    def d(self, i: int, k: int) -> str:
        """Dim k of input i as caten text: a number, a dim symbol, or `(dim x k)` when unknown here."""
        s = self.shape(i)
        v = s[k]
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return self.g.dim_text(v)
        return f"(dim {self.x(i)} {k})"

    def dims_of(self, i: int) -> list[str]:
        return [self.d(i, k) for k in range(self.rank(i))]

    def rank(self, i: int = 0) -> int:
        return len(self.shape(i))

    def int_shape(self, i: int = 0) -> list[int]:
        s = self.shape(i)
        if not all(isinstance(d, int) for d in s):
            raise self.fail(f"needs input {i}'s static shape, got {s}")
        return s

    def let(self, expr: str) -> str:
        return self.g.emit(expr)

    def lit(self, v: Any, i: int = 0) -> str:
        return lit(v, self.dt(i))

    def opset_lt(self, v: int) -> bool:
        """Whether the model's opset predates version v (where an op's signature changed)."""
        return self.g.opset < v

    def is_float(self, i: int = 0) -> bool:
        return self.dt(i) in ("f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz")


def ax_list(axes: list[int]) -> str:
    return "[" + " ".join(str(a) for a in axes) + "]"


def dims(shape: list) -> str:
    return "[" + " ".join(str(d) for d in shape) + "]"


def const_tensor(n: N, v: np.ndarray) -> str:
    """A constant array computed at convert time, passed to the program as a weight."""
    name = f"__const_{len(n.g.consts)}"
    n.g.consts[name] = v
    return n.g.tensor(name)
