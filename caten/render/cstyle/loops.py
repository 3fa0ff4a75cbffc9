"""What the device mappings read off the loop IR (caten.render.cstyle.grid, .gemm): the
statements of a body at any depth, the loop and accumulator variables an expression reads, and a
loop's extent as a Dim where the host can evaluate it."""

from __future__ import annotations

from collections.abc import Iterator

from caten import loopir as L
from caten.ir.dims import Dim
from caten.loopir import X


def walk(stmts: list) -> Iterator:
    for s in stmts:
        yield s
        if isinstance(s, L.Loop):
            yield from walk(s.body)


def variables(x: X) -> set[str]:
    """The loop and accumulator variables x reads."""
    return {n.arg for n in L.nodes(x) if n.op == "var"}


def extent(x: X) -> Dim | None:
    """A loop extent as a Dim (a constant or a dim), else None."""
    if x.op == "const":
        return int(x.arg)
    if x.op == "dim":
        return x.arg
    return None
