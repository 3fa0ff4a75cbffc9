"""What the device mappings read off the loop IR (caten.render.cstyle.grid, .gemm): the
statements of a body at any depth, the loop and accumulator variables an expression reads, and a
loop's extent as a Dim where the host can evaluate it."""

from __future__ import annotations

from collections.abc import Iterator

from caten.ir.dims import Dim
from caten.ir.walk import Visit, drive
from caten.lower import loopir as L
from caten.lower.loopir import X


def walk(stmts: list) -> Iterator:
    for s in stmts:
        yield s
        if isinstance(s, L.Loop):
            yield from walk(s.body)


def variables(x: X, memo: dict | None = None) -> set[str]:
    """The loop and accumulator variables x reads (walked without recursion: caten.ir.walk)."""
    return drive(_vars_of(x, {} if memo is None else memo))


def _vars_of(x: X, memo: dict) -> Visit[set[str]]:
    hit = memo.get(id(x))
    if hit is not None:
        return hit
    out: set[str] = {x.arg} if x.op == "var" else set()
    for s in x.src:
        out |= yield _vars_of(s, memo)
    memo[id(x)] = out
    return out


def extent(x: X) -> Dim | None:
    """A loop extent as a Dim (a constant or a dim), else None."""
    if x.op == "const":
        return int(x.arg)
    if x.op == "dim":
        return x.arg
    return None
