"""Running the pending graph: print it, compile the text once, call it on the realized arrays.

Programs are cached in memory by their text and runtime (a loop that builds the same graph
each step prints the same text, so it compiles once) and on disk by the pipeline's own cache.
`stats()` counts the programs built and run, so tests and users can see what compiled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.emit import Printer
from caten.tensor.lazy import INPUT, Node

_PROGRAMS: OrderedDict[tuple[str, str], Any] = OrderedDict()
_LIMIT = 512
STATS = {"programs": 0, "runs": 0}


def stats() -> dict[str, int]:
    """`programs`: distinct programs compiled by realizing or jit so far; `runs`: programs run."""
    return dict(STATS)


def program(text: str, runtime: str) -> Any:
    """The compiled composite `f` of `text` on `runtime` (compiled on its first call)."""
    key = (text, runtime)
    fn = _PROGRAMS.get(key)
    if fn is None:
        from caten.api import loads

        fn = loads(text, runtime=runtime).f
        STATS["programs"] += 1
        _PROGRAMS[key] = fn
        if len(_PROGRAMS) > _LIMIT:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return fn


def arrays_of(params: Sequence[Node]) -> list[np.ndarray]:
    out = []
    for p in params:
        if p.value is None:
            raise Error("a traced argument has no value outside its trace",
                        hint="read tensors of a traced function only after caten.jit runs it")
        out.append(p.value)
    return out


def realize(nodes: Sequence[Node], runtime: str) -> None:
    """Compute every node of `nodes` that has no value yet, in one program."""
    todo: list[Node] = []
    seen: set[int] = set()
    for n in nodes:
        if n.value is None and n.op != INPUT and id(n) not in seen:
            seen.add(id(n))
            todo.append(n)
    if not todo:
        return
    text, params = Printer().program("f", todo)
    fn = program(text, runtime)
    outs = fn(*arrays_of(params))
    STATS["runs"] += 1
    outs = outs if isinstance(outs, tuple) else (outs,)
    for n, v in zip(todo, outs):
        n.value = v
        if not n.requires_grad:  # nothing differentiates through it: let its history go
            n.srcs, n.kw = (), {}
