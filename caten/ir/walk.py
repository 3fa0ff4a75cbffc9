"""Walking deep graphs without Python recursion.

A graph's depth grows with the program's length (10,000 `setf` lines chain 10,000 ops), so no
stage may recurse once per node: Python's stack is about a thousand frames. A stage whose visit
of a node needs its operands' results first (lowering a value, rendering an expression, encoding
a cache entry) is written as a generator that yields the sub-visit it needs, as a generator, and
is sent that visit's result; `drive` runs such a tree of visits on an explicit stack. The code
reads as the recursive version would, with `(yield child)` in place of `self.visit(child)`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, TypeVar

R = TypeVar("R")
N = TypeVar("N")
Visit = Generator[Any, Any, R]


def post_order(roots: Iterable[N], srcs: Callable[[N], Sequence[N]] | None = None,
               known: Callable[[N], bool] | None = None) -> list[N]:
    """Each node the roots reach, once, operands before users, on an explicit stack. For the walks
    whose visit needs only its operands' results, computed in this order (a visit that needs more
    control is a generator run by `drive`). `srcs` gives a node's edges (default: its `src`); a
    `known` node (one the caller has a result for) is neither listed nor entered."""
    edges: Callable[[Any], Sequence[N]] = srcs or (lambda n: n.src)
    order: list[N] = []
    seen: set[int] = set()
    for root in roots:
        stack: list[tuple[N, bool]] = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen or (known is not None and known(n)):
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((s, False) for s in reversed(edges(n)) if id(s) not in seen)
    return order


def drive(root: Visit[R]) -> R:
    """Run a visit and every visit it yields, depth first, each to completion before its parent
    resumes; an exception raised in a visit is raised in its parent at the `yield`, as a call's
    would be, so try/finally and except clauses in visits behave as in recursive code."""
    stack: list[Visit[Any]] = [root]
    sent: Any = None
    error: BaseException | None = None
    while stack:
        top = stack[-1]
        try:
            child = top.send(sent) if error is None else top.throw(error)
        except StopIteration as stop:
            stack.pop()
            sent, error = stop.value, None
            continue
        except BaseException as e:  # noqa: BLE001 - raised in the parent visit, as a call's would be
            stack.pop()
            if not stack:
                raise
            sent, error = None, e
            continue
        stack.append(child)
        sent, error = None, None
    return sent

