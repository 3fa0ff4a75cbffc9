"""ATen calls as caten text: the translation state (`Ctx`), operand helpers, and the registry the
lowerings of `aten` join with `@aten`. Kept apart from the exporter, which imports the
lowerings: with the registry in the exporter, the two would import each other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caten.errors import Error
from caten.frontends.registry import registrar
from caten.frontends.text import lit, sym

_DT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16",
       "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool", "float8_e4m3fn": "f8e4m3",
       "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e5m2fnuz": "f8e5m2fnuz", "int4": "i4",
       "uint4": "u4"}
ATEN: dict[str, Callable[[Ctx, Any], Any]] = {}


aten = registrar(ATEN)  # @aten("Name", ...) registers a lowering


def dtype_of(t: Any) -> str:
    name = str(t).replace("torch.", "")
    if name not in _DT:
        raise Error(f"torch dtype {name} has no caten counterpart")
    return _DT[name]


class Ctx:
    """Translation state: caten text for each fx value, dims as caten dim expressions."""

    def __init__(self) -> None:
        self.vals: dict[str, Any] = {}
        self.lines: list[str] = []
        self.taken: set[str] = {"nil", "t", "true", "false", "inf", "nan"}
        self.bound: set[str] = set()  # the vars `emit` made
        self.consts: list[tuple[str, Any]] = []  # (parameter annotation, array): constants a lowering made

    def dim(self, d: Any) -> str:
        """An int or SymInt as caten dim text (symbols are the inputs' symbolic sizes)."""
        if isinstance(d, int):
            return str(d)
        return _sympy_text(d.node.expr)

    def arg(self, a: Any) -> Any:
        """An fx argument: a node's caten text (tensor var or dim text), or a Python value."""
        import torch.fx

        if isinstance(a, torch.fx.Node):
            if a.name in self.vals:
                return self.vals[a.name]
            val = a.meta.get("val")
            if val is not None and not hasattr(val, "shape"):
                return self.dim(val)
            raise Error(f"torch.export node `{a.name}` is used before it is computed")
        if isinstance(a, (list, tuple)):
            return [self.arg(x) for x in a]
        if hasattr(a, "node") and hasattr(a.node, "expr"):
            return self.dim(a)
        return a

    def const(self, name: str, value: Any, dtype: str) -> str:
        """A constant array as one more bound parameter (like a weight), named after `name`."""
        var = sym(name, self.taken, "k_")
        dims = ", ".join(str(d) for d in value.shape)
        self.consts.append((f"{var}{{{dtype}}}" + (f"[{dims}]" if value.ndim else ""), value))
        return var

    def emit(self, name: str, expr: str) -> str:
        var = sym(name, self.taken, "v_")
        self.lines.append(f"(setf {var} {expr})")
        self.bound.add(var)
        return var


def _sympy_text(e: Any) -> str:
    import sympy

    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return str(e)
    if isinstance(e, sympy.Add):
        return "(+ " + " ".join(_sympy_text(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(* " + " ".join(_sympy_text(a) for a in e.args) + ")"
    if type(e).__name__ == "FloorDiv":
        return f"(/ {_sympy_text(e.args[0])} {_sympy_text(e.args[1])})"
    raise Error(f"symbolic size `{e}` has no caten dim expression")


def lst(xs: Any) -> str:
    return "[" + " ".join(str(x) for x in xs) + "]"


def meta(node: Any) -> Any:
    return node.meta.get("val")


def scalar(c: Ctx, v: Any, like: Any) -> str:
    """A Python number as a literal of the dtype of the tensor node `like`."""
    return lit(v, dtype_of(meta(like).dtype))


def operand(c: Ctx, a: Any, other: Any) -> str:
    import torch.fx

    if isinstance(a, torch.fx.Node):
        return c.arg(a)
    return scalar(c, a, other)


def affine(y: str, w: str | None, b: str | None) -> str:
    """y * w + b as caten text, either factor absent (a norm layer without its affine parameters)."""
    if w is not None:
        y = f"(* {y} {w})"
    return f"(+ {y} {b})" if b is not None else y
