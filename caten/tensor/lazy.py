"""The pending graph of `caten.Tensor`: library-level calls, each with its shape and dtype.

A node records one call of a library composite (or a principal op) by its source name, so that
realizing, tracing and differentiating all print the same caten text and compile it through the
same pipeline as a `.lisp` file. Shapes and dtypes come from the elaborator itself: each call is
evaluated once on placeholder buffers of its arguments' shapes (memoized by call text and
argument types), so a Tensor op raises the same diagnostic the language would, at the Python
line that made it, and later graph building with the same shapes costs a dict lookup.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir.literal import float_text

# the ops the graph has besides library calls (library names never contain a dot)
INPUT, NTH, DETACH, GRAD = ".input", ".nth", ".detach", ".grad"


class Node:
    """One value of the pending graph. `op` is a library name or one of INPUT, NTH, DETACH, GRAD;
    `srcs` are its positional arguments (Nodes or Python values), `kw` its keywords. Several
    outputs (adam-update, a gradient) make a node whose `outs` lists their (shape, dtype); NTH
    nodes pick one. `value` is the realized array; `owner` is the Tensor a leaf belongs to."""

    __slots__ = ("op", "srcs", "kw", "shape", "dtype", "outs", "value", "requires_grad", "owner", "__weakref__")

    def __init__(self, op: str, srcs: tuple, kw: dict, shape: tuple[int, ...] | None, dtype: str | None,
                 requires_grad: bool = False, outs: list[tuple[tuple[int, ...], str]] | None = None,
                 value: np.ndarray | None = None):
        self.op, self.srcs, self.kw = op, srcs, kw
        self.shape, self.dtype, self.outs = shape, dtype, outs
        self.value = value
        self.requires_grad = requires_grad
        self.owner: weakref.ref | None = None

    def __repr__(self) -> str:
        return f"<node {self.op} {self.dtype}{list(self.shape) if self.shape is not None else ''}>"

    @property
    def realized(self) -> bool:
        return self.value is not None

    def deps(self) -> list[Node]:
        """The nodes this one reads in the program that computes it (keyword values too: a seed)."""
        out = [s for s in self.srcs if isinstance(s, Node)]
        if self.kw and self.op != GRAD:  # a gradient's loss is computed inside its helper
            out += [v for v in self.kw.values() if isinstance(v, Node)]
        return out


def leaf(value: np.ndarray, dtype: str, requires_grad: bool = False) -> Node:
    return Node(INPUT, (), {}, tuple(int(d) for d in value.shape), dtype, requires_grad, value=value)


def placeholder(shape: tuple[int, ...], dtype: str) -> Node:
    """An input without a value: an argument of a traced function."""
    return Node(INPUT, (), {}, tuple(shape), dtype)


# text -------------------------------------------------------------------------------------------
def text(v: Any) -> str:
    """A Python value as caten source text (a literal, list, dtype or symbol)."""
    if v is None:
        return "nil"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return float_text(float(v))
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(text(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    dt = dtype_name(v)
    if dt is not None:
        return dt
    raise Error(f"a {type(v).__name__} cannot be an argument of a caten op",
                hint="pass tensors, numbers, bools, lists of numbers or dtype names")


_NP = {"f32": "float32", "f64": "float64", "f16": "float16", "i8": "int8", "i16": "int16", "i32": "int32",
       "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bool": "bool"}
_FROM_NP = {v: k for k, v in _NP.items()}
# the dtypes ml_dtypes supplies, by caten name: its names for them
_ML = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "f8e4m3fnuz": "float8_e4m3fnuz",
       "f8e5m2fnuz": "float8_e5m2fnuz", "i4": "int4", "u4": "uint4"}
_ML_NAMES = {v: k for k, v in _ML.items()}


def dtype_name(d: Any) -> str | None:
    """The caten name of a dtype given as a caten name, a numpy dtype or a numpy scalar type."""
    if isinstance(d, str) and (d in _NP or d in _ML):
        return d
    if isinstance(d, np.dtype):  # the common case (every realized array): one dict lookup
        hit = _BY_NP.get(d)
        if hit is None:
            hit = _BY_NP[d] = _np_name(d)
        return hit or None
    return _np_name(d) or None


_BY_NP: dict[np.dtype, str] = {}


def _np_name(d: Any) -> str:
    if isinstance(d, str) and d in _ML_NAMES:  # (numpy knows the name only once ml_dtypes is imported)
        return _ML_NAMES[d]
    try:
        nd = np.dtype(d)
    except TypeError:
        return ""
    if nd.name in _ML_NAMES:
        return _ML_NAMES[nd.name]
    return _FROM_NP.get(nd.name, "")


def np_dtype(d: str) -> np.dtype:
    if d in _ML:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, _ML[d]))
    return np.dtype(_NP[d])


def call_text(op: str, args: list[str], kw: dict[str, Any], name: Any = None) -> str:
    """`(op ARGS :key value ...)`; `name(node)` spells a node given as a keyword's value."""
    parts = [op] + args + [f":{k} {name(v) if isinstance(v, Node) else text(v)}" for k, v in kw.items()]
    return "(" + " ".join(parts) + ")"


# shape inference ----------------------------------------------------------------------------------
_INFER: dict[tuple, Any] = {}
_ELAB: list[Any] = []


def _elaborator() -> Any:
    if not _ELAB:
        from caten.elaborate.elaborator import Elaborator

        _ELAB.append(Elaborator({}))
    return _ELAB[0]


def infer(op: str, srcs: tuple, kw: dict) -> tuple[tuple[int, ...], str] | list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of a library call on these arguments, or one pair per output."""
    names, types = [], []

    def spell(s: Node) -> str:
        types.append((s.shape, s.dtype))
        return f"a{len(types) - 1}"

    for s in srcs:
        names.append(spell(s) if isinstance(s, Node) else text(s))
    form = call_text(op, names, kw, spell)
    key = (form, tuple(types))
    hit = _INFER.get(key)
    if hit is None:
        hit = _INFER[key] = _evaluate(op, form, types)
    return hit


def _evaluate(op: str, form: str, types: list[tuple[tuple[int, ...], str]]) -> Any:
    from caten.elaborate.values import Tensor as ETensor
    from caten.ir import build as B
    from caten.ir import dtypes as T
    from caten.read.reader import read

    el = _elaborator()
    el.reset()
    binds = {f"a{i}": B.buffer(T.lookup(dt), tuple(shape), i, f"a{i}") for i, (shape, dt) in enumerate(types)}
    try:
        v = el.evaluate(read(form, "<tensor>")[0], binds)
    except Error as e:
        raise Error(f"{op}: {e.message}", hint=e.hint) from None
    finally:
        el.reset()

    def one(x: Any) -> tuple[tuple[int, ...], str]:
        if not isinstance(x, ETensor):
            raise Error(f"{op}: gives {type(x).__name__}, not a tensor", hint="pass at least one tensor")
        return tuple(int(d) for d in x.shape), x.dtype.name

    return [one(x) for x in v] if isinstance(v, tuple) else one(v)


def toposort(roots: list[Node], stop: Any) -> list[Node]:
    """The nodes `roots` reach, sources first; `stop(n)` nodes are listed but not entered
    (the IR's iterative walk, with a node's deps as its edges)."""
    from caten.ir.graph import toposort as walk

    return walk(roots, srcs=lambda n: () if stop(n) else n.deps())
