"""The dims and buffers a piece of kernel code takes, ordered by how the code uses them.

The scheduler hands every kernel all of the program's dims, and the renderer used to pass a
stage the buffers in name order. Two stages of the same structure over other dims or buffers
(the Mixer's token-mixing MLP reads `T` where its channel-mixing one reads `C`) then rendered as
different code. Taking only what the code reads, ordered by its structure, makes them equal
code, which the LLVM unit cache compiles and links once (caten.render.llvm.units)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.ops import Op

_BUFFER_FIELDS = ("buf", "a", "b", "out", "src", "dst")  # statement fields that name a buffer
_COMMUTATIVE = (Op.ADD, Op.MUL, Op.MAX, Op.AND, Op.OR, Op.XOR, Op.CMPNE)


def first_uses(stmts: list) -> tuple[list[str], list[str]]:
    """(dims, buffers) that `stmts` read or write. Buffers by first appearance: statements in
    order, each statement's fields in order, an expression's operands depth first. Dims by
    where they are used (each use: the statement's number, the field, the op reading it and
    which operand, any operand of a commutative op alike), then first appearance: a dim's
    expressions are sums and products in its symbols' name order, so first appearance alone
    would order the twins' `(* M N)` and `(* C T)` by their names. A statement that is no
    dataclass (a renderer's call of an outlined stage) lists its own in `dims` and `bufs`."""
    dims: dict[str, list] = {}
    bufs: dict[str, None] = {}
    seen: set[int] = set()
    syms: dict[int, list[str]] = {}

    def use(x: L.X, at: tuple) -> None:
        names = syms.get(id(x))
        if names is None:
            names = syms[id(x)] = D.free_syms(x.arg)
        for name in names:
            dims.setdefault(name, []).append(at)

    def expr(root: L.X, at: tuple) -> None:
        if root.op == "dim" and not root.src:  # (a bare leaf after decompose; any dim before it)
            use(root, at + ("", 0))
        stack = [root]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if x.op == "load":
                bufs.setdefault(x.arg, None)
            for i, s in enumerate(x.src):
                if s.op == "dim" and not s.src:
                    use(s, at + (str(x.op), -1 if x.op in _COMMUTATIVE else i))
            stack.extend(s for s in reversed(x.src) if s.src or s.op != "dim")

    todo: list = list(reversed(stmts))
    n = 0
    while todo:
        s = todo.pop()
        n += 1
        if not dataclasses.is_dataclass(s):
            for d in getattr(s, "dims", ()):
                dims.setdefault(d, []).append((n, "call", "", 0))
            bufs.update(dict.fromkeys(getattr(s, "bufs", ())))
            continue
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if isinstance(v, L.X):
                expr(v, (n, f.name))
            elif isinstance(v, str) and f.name in _BUFFER_FIELDS:
                bufs.setdefault(v, None)
            elif isinstance(v, tuple):
                for i, e in enumerate(v):
                    if isinstance(e, L.X):
                        expr(e, (n, f"{f.name}{i}"))
            elif f.name == "body" and isinstance(v, list):
                todo.extend(reversed(v))
    first = {d: i for i, d in enumerate(dims)}
    return sorted(dims, key=lambda d: (sorted(dims[d]), first[d])), list(bufs)


def takes(stmts: list, dims: Collection[str], bufs: Collection[str]) -> tuple[list[str], list[str]]:
    """The parameters of a function made of `stmts` (an outlined stage, a parallel loop's body):
    those of `dims` and `bufs` it uses, in first_uses' order."""
    order, seen = first_uses(stmts)
    return [d for d in order if d in dims], [b for b in seen if b in bufs] + sorted(set(bufs) - set(seen))


def used_dims(stmts: list, among: Collection[str]) -> list[str]:
    """The dims of `among` that `stmts` read, in first_uses' order."""
    return [d for d in first_uses(stmts)[0] if d in among]
