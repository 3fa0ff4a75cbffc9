"""Lowering once per distinct kernel of a program: a model's repeated layers schedule into
kernels that differ only in the buffers they read and write (GPT-2 small: 126 kernels, 25
distinct), and lowering each afresh cost a third of a cold compile's own CPU time.

A kernel's key is everything the lowering reads of it, with buffer names replaced by their order of
first appearance: the graph its stages compute, walked from the stages down to what it loads (a
node another kernel realized, or an input), every node's op, dtype, shape and argument (a view's
strides, a constant's value and type); each stage's kind, reduce plan, buffer, scratch buffers
and causal cut; the kernel's outer loops and thread split; and each buffer's dtype, role, shape,
locality and whether the caller reads it. The memo lives for one `lower` call: the target, the
runtime's tiles and the program's dims are the same for all its kernels. A hit is the first
kernel's loop IR with its buffer names replaced by this kernel's (`renamed`), which is what a
fresh lowering makes: the lowering names everything else from the stage number and a counter of
its own. Anything the key cannot spell (a value of a type it does not know) lowers afresh.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X


class Opaque(Exception):
    """A value the key cannot spell: the kernel is lowered afresh."""


class Key:
    """The key of one scheduled kernel (`spell`) and its buffers in order of first appearance
    (`order`: canonical position -> buffer name)."""

    def __init__(self, buffers: dict, bufname: Callable[[Node], str | None], realized: set[Node],
                 members: list[Node], spelled: dict[tuple[Any, str], Any]):
        self.buffers, self.bufname, self.realized, self.members = buffers, bufname, realized, members
        self.spelled = spelled  # (node, field) or (id, "value") -> spelled, where naming no buffer or node
        self.refs = 0  # buffer names spelled so far
        self.ids: dict[Node, int] = {}
        self.canon: dict[str, int] = {}
        self.order: list[str] = []

    def buf(self, name: str) -> int:
        if name not in self.canon:
            self.canon[name] = len(self.order)
            self.order.append(name)
        return self.canon[name]

    def graph(self, local: set[Node]) -> tuple:
        """The nodes the stages compute, breadth first from the stages: an inner node by its op,
        dtype, shape, argument and operands; a loaded one (realized by another kernel, or an
        input) by its buffer, dtype and shape."""
        members = set(self.members)
        todo = list(self.members)
        for n in todo:
            self.ids.setdefault(n, len(self.ids))
        lines = []
        i = 0
        while i < len(todo):
            n = todo[i]
            i += 1
            loaded = n.op is Op.BUFFER or (n in self.realized and n not in members)
            head = (n.dtype.name, self.shape(n), n in local)
            if loaded:
                b = self.bufname(n)
                lines.append(("load", n.op is Op.BUFFER, None if b is None else self.buf(b)) + head)
                continue
            for s in n.src:
                if s not in self.ids:
                    self.ids[s] = len(self.ids)
                    todo.append(s)
            lines.append((n.op.value, self.node_arg(n), tuple(self.ids[s] for s in n.src)) + head)
        return tuple(lines)

    def shape(self, n: Node) -> Any:
        return self._cached(n, "shape")

    def node_arg(self, n: Node) -> Any:
        return self._cached(n, "arg")

    def _cached(self, n: Node, field: str) -> Any:
        """n's argument or shape spelled, once per `lower` call where it names no buffer and no
        node (the same node is in many kernels' graphs: GPT-2's layer norms read the residual
        stream)."""
        hit = self.spelled.get((n, field), self)
        if hit is self:
            refs = self.refs
            hit = self.spell(getattr(n, field))
            if self.refs == refs:
                self.spelled[(n, field)] = hit
        return hit

    def spell(self, x: Any) -> Any:
        """x as plain data: nodes by their number in the walk, buffer names by their position."""
        t = type(x)
        if t is str and x in self.buffers:
            self.refs += 1
            return ("buf", self.buf(x))
        if x is None or t in (bool, int, float, str):
            return (t.__name__, repr(x))
        if isinstance(x, Node):
            if x not in self.ids:  # (a plan naming a node outside the kernel's graph)
                raise Opaque(str(x))
            self.refs += 1
            return ("node", self.ids[x])
        if isinstance(x, D.DimExpr):
            return ("dim", str(x))
        if isinstance(x, DType):
            return ("dtype", x.name)
        if isinstance(x, enum.Enum):
            return (t.__qualname__, x.name)
        if t in (tuple, list):
            if all(type(v) is int for v in x):  # (shapes, strides, a direct convolution's positions)
                return (t.__name__ + " of int", tuple(x))
            return (t.__name__,) + tuple(self.spell(v) for v in x)
        if t in (set, frozenset):
            return ("set",) + tuple(sorted((self.spell(v) for v in x), key=repr))
        if t is dict:
            return ("dict",) + tuple(sorted(((self.spell(k), self.spell(v)) for k, v in x.items()), key=repr))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):  # (a plan, a view, a cut)
            hit = self.spelled.get((id(x), "value"))  # (held there with its spelling: its id stays its own)
            if hit is not None and hit[0] is x:
                return hit[1]
            refs = self.refs
            out = (f"{t.__module__}.{t.__qualname__}",) + tuple(self.spell(getattr(x, f.name))
                                                                for f in dataclasses.fields(x))
            if self.refs == refs:
                self.spelled[(id(x), "value")] = (x, out)
            return out
        raise Opaque(t.__qualname__)


def kernel_key(sched: Any, k: Any, realized: set[Node], local: set[Node], outputs: frozenset[str],
               split: tuple, spelled: dict[tuple[Any, str], Any]) -> tuple[tuple, list[str]] | None:
    """(the key of scheduled kernel k, its buffers in the key's order), or None where the key cannot
    spell something the lowering reads. `split`: the thread split the lowerer is given; `spelled`:
    nodes' spelled arguments and shapes, shared by the kernels of one `lower` call."""
    key = Key(sched.buffers, lambda n: sched.node_buf.get(n), realized, [s.node for s in k.stages], spelled)
    try:
        graph = key.graph(local)
        stages = tuple((s.kind, key.spell(s.plan), key.spell(s.buffer), key.spell(s.scratch), key.spell(s.cut))
                       for s in k.stages)
        loops = (k.outer, key.spell(split), sched.threads, key.spell(list(sched.program.dims)))
        bufs = tuple((b.dtype.name, b.role, key.spell(b.shape), b.local >= 0, name in outputs)
                     for name, b in ((n, sched.buffers[n]) for n in key.order))
    except Opaque:
        return None
    return (graph, stages, loops, bufs), list(key.order)


def renamed(stmts: list, names: dict[str, str], loads: set[int]) -> list:
    """Copies of loop-IR statements with their buffer names mapped by `names` (every other string,
    a loop variable's or a hint, is left alone: no buffer name is ever one of those). `loads`: the
    ids of the expressions that read a buffer (`reading`), the only ones rebuilt."""
    xs: dict[int, X] = {}
    return [_stmt(s, names, xs, loads) for s in stmts]


def _stmt(v: Any, names: dict[str, str], xs: dict[int, X], loads: set[int]) -> Any:
    if isinstance(v, X):
        return _x(v, names, xs, loads) if id(v) in loads else v
    if type(v) is str:
        return names.get(v, v)
    if type(v) in (list, tuple):
        return type(v)(_stmt(e, names, xs, loads) for e in v)
    if type(v) is dict:
        return {_stmt(k, names, xs, loads): _stmt(e, names, xs, loads) for k, e in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        new = copy.copy(v)
        for f in dataclasses.fields(v):
            object.__setattr__(new, f.name, _stmt(getattr(v, f.name), names, xs, loads))
        return new
    return v


def _x(e: X, names: dict[str, str], xs: dict[int, X], loads: set[int]) -> X:
    """e with its loads' buffers renamed (post order without recursion: expressions can be deep)."""
    stack = [e]
    while stack:
        x = stack[-1]
        if id(x) in xs:
            stack.pop()
            continue
        todo = [s for s in x.src if id(s) in loads and id(s) not in xs]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        src = tuple(xs[id(s)] if id(s) in loads else s for s in x.src)
        xs[id(x)] = X.make(x.op, x.dtype, src, names.get(x.arg, x.arg) if x.op == "load" else x.arg)
    return xs[id(e)]


def scan(stmts: list, buffers: dict) -> tuple[set[int], set[str]]:
    """(the ids of the statements' expressions that read a buffer -- a load, or built on one --,
    the names of `buffers` they mention anywhere): what `renamed` rebuilds and must map. Walks
    the values as `_stmt` does, then the expressions as `_x` does."""
    names: set[str] = set()
    exprs: list[X] = []
    stack: list = list(stmts)
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            if v in buffers:
                names.add(v)
        elif isinstance(v, X):
            exprs.append(v)
        elif t in (list, tuple):
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            stack.extend(getattr(v, f.name) for f in dataclasses.fields(v))
    found: set[int] = set()
    done: set[int] = set()
    while exprs:
        x = exprs[-1]
        if id(x) in done:
            exprs.pop()
            continue
        todo = [s for s in x.src if id(s) not in done]
        if todo:
            exprs.extend(todo)
            continue
        exprs.pop()
        done.add(id(x))
        if x.op == "load":
            names.add(x.arg)
            found.add(id(x))
        elif any(id(s) in found for s in x.src):
            found.add(id(x))
    return found, names
