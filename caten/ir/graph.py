"""The graph IR: an immutable, hash-consed DAG of principal-op nodes.

Building a node with the same op, dtype, shape, arg and operands returns the very same
object, so common subexpressions are shared for free and `key` is a canonical structural
hash (independent of source names and formatting) that the cache can use.
"""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.view import View
from caten.ir.walk import post_order


def _arg_key(arg: Any) -> Any:
    """A key that tells apart values Python calls equal (0.0 and -0.0, True and 1, nan)."""
    if isinstance(arg, float):
        return ("f", struct.pack("<d", arg))
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, tuple):
        return tuple(_arg_key(a) for a in arg)
    return arg


class Node:
    """One principal op applied to operand nodes. Build with `Node.make`; never mutate."""

    __slots__ = ("op", "dtype", "shape", "src", "arg", "_key", "__weakref__", "_hash")
    _interned: weakref.WeakValueDictionary[tuple, Node] = weakref.WeakValueDictionary()

    op: Op
    dtype: DType
    shape: tuple[Dim, ...]
    src: tuple[Node, ...]
    arg: Any

    @classmethod
    def make(cls, op: Op, dtype: DType, shape: Sequence[Dim], src: Sequence[Node] = (), arg: Any = None) -> Node:
        shape, src = tuple(shape), tuple(src)
        key = (op, dtype, shape, tuple(id(s) for s in src), _arg_key(arg))
        hit = cls._interned.get(key)
        if hit is not None:
            return hit
        n = object.__new__(cls)
        n.op, n.dtype, n.shape, n.src, n.arg, n._key = op, dtype, shape, src, arg, key
        n._hash = hash(key)
        cls._interned[key] = n
        return n

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"<{self.op.value} {self.dtype} [{' '.join(map(str, self.shape))}]>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def view(self) -> View | None:
        return self.arg if self.op is Op.VIEW else None


def toposort(outputs: Iterable[Node], srcs: Callable[[Node], Sequence[Node]] | None = None) -> list[Node]:
    """Operands before users, iteratively (graphs can be deeper than Python's stack). `srcs`
    replaces a node's operands as its edges (autodiff reroutes a custom-gradient node's)."""
    return post_order(outputs, srcs)


def fmt_arg(n: Node) -> str:
    a = n.arg
    if n.op is Op.CONST:
        if isinstance(a, float) and (math.isinf(a) or math.isnan(a)):
            return f" {a}"
        return f" {a!r}" if isinstance(a, (int, float, bool)) else f" {D.to_str(a)}"
    if n.op is Op.BUFFER:
        return f" {a[2]}"
    if n.op is Op.REDUCE:
        return f" :op {a[0]} :axis [{' '.join(map(str, a[1]))}]"
    if n.op is Op.VIEW:
        return f" {a}"
    if n.op in (Op.INDEX, Op.RAND, Op.EXTERN):
        return f" {a[1]}"
    if n.op is Op.GATHER:
        return f" :axis {a}"
    if n.op is Op.SCATTER:
        return f" :axis {a[0]} :op {a[1]}"
    if n.op is Op.SORT:
        return f" :axis {a[0]}" + (" :descending true" if a[1] else "")
    return ""


def dump(outputs: Sequence[Node], names: Sequence[str] | None = None) -> str:
    """A readable listing: one line per node, `%k = OP dtype [shape] operands arg`."""
    order = toposort(outputs)
    ids = {id(n): i for i, n in enumerate(order)}
    lines = []
    for i, n in enumerate(order):
        ops = " ".join(f"%{ids[id(s)]}" for s in n.src)
        lines.append(f"%{i} = {n.op.value} {n.dtype} [{' '.join(map(str, n.shape))}]"
                     f"{' ' + ops if ops else ''}{fmt_arg(n)}")
    names = names or [f"out{i}" for i in range(len(outputs))]
    lines += [f"return {nm} = %{ids[id(o)]}" for nm, o in zip(names, outputs)]
    return "\n".join(lines)


def structural_hash(outputs: Sequence[Node], rename: dict[str, Dim] | None = None) -> str:
    """sha256 of the graph's canonical text: equal graphs, equal hashes, whatever the source names.

    `rename` maps dimension symbols to canonical ones, so `[N M]` and `[R C]` hash alike."""
    order = toposort(outputs)
    ids = {id(n): i for i, n in enumerate(order)}
    h = hashlib.sha256()
    dims: dict = {}  # canonical text of each distinct dim, and of each distinct argument object
    args: dict[int, str] = {}

    def dim(d: Dim) -> str:
        k = D._key(d)
        t = dims.get(k)
        if t is None:
            t = dims[k] = str(_canon(d, rename) if rename else d)
        return t

    for n in order:
        arg = n.arg[:2] if n.op is Op.BUFFER else n.arg
        a = args.get(id(n.arg))
        if a is None or n.op is Op.BUFFER:
            a = repr(_arg_key(_canon(arg, rename) if rename else arg))
            if n.op is not Op.BUFFER:
                args[id(n.arg)] = a
        h.update(repr((n.op.value, n.dtype.name, tuple(dim(d) for d in n.shape),
                       tuple(ids[id(s)] for s in n.src), a)).encode())
    h.update(repr([ids[id(o)] for o in outputs]).encode())
    return h.hexdigest()


def _canon(x: Any, rename: dict[str, Dim]) -> Any:
    if isinstance(x, D.DimExpr):
        return D.substitute(x, rename)
    if isinstance(x, tuple):
        return tuple(_canon(a, rename) for a in x)
    if isinstance(x, View):
        return View(_canon(x.shape, rename), _canon(x.strides, rename), _canon(x.offset, rename),
                    None if x.mask is None else _canon(x.mask, rename))
    return x
