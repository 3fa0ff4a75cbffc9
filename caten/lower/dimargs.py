"""The dims and buffers a piece of kernel code takes, in the order a walk of its statements
first meets them.

The scheduler hands every kernel all of the program's dims, and the renderer used to pass a
stage the buffers in name order. Two stages of the same structure over other dims or buffers
(the Mixer's token-mixing MLP reads `T` where its channel-mixing one reads `C`) then rendered as
different code. Taking only what the code reads, ordered by its structure, makes them equal
code, which the LLVM unit cache compiles and links once (caten.render.llvm.units)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from caten.ir import dims as D
from caten.lower import loopir as L

_BUFFER_FIELDS = ("buf", "a", "b", "out", "src", "dst")  # statement fields that name a buffer


def first_uses(stmts: list) -> tuple[list[str], list[str]]:
    """(dims, buffers) that `stmts` read or write, each by first appearance: statements in
    order, each statement's fields in order, an expression's operands depth first. A statement
    that is no dataclass (a renderer's call of an outlined stage) lists its own in `dims` and
    `bufs`."""
    dims: dict[str, None] = {}
    bufs: dict[str, None] = {}
    seen: set[int] = set()

    def expr(root: L.X) -> None:
        stack = [root]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if x.op == "dim" and not x.src:  # (a bare leaf after decompose; any dim before it)
                for name in D.free_syms(x.arg):
                    dims.setdefault(name, None)
            elif x.op == "load":
                bufs.setdefault(x.arg, None)
            stack.extend(reversed(x.src))

    todo: list = list(reversed(stmts))
    while todo:
        s = todo.pop()
        if not dataclasses.is_dataclass(s):
            dims.update(dict.fromkeys(s.dims))
            bufs.update(dict.fromkeys(s.bufs))
            continue
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if isinstance(v, L.X):
                expr(v)
            elif isinstance(v, str) and f.name in _BUFFER_FIELDS:
                bufs.setdefault(v, None)
            elif isinstance(v, tuple):
                for e in v:
                    if isinstance(e, L.X):
                        expr(e)
            elif f.name == "body" and isinstance(v, list):
                todo.extend(reversed(v))
    return list(dims), list(bufs)


def used_dims(stmts: list, among: Collection[str]) -> list[str]:
    """The dims of `among` that `stmts` read, by first appearance (first_uses)."""
    return [d for d in first_uses(stmts)[0] if d in among]
