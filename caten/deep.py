"""Run a compile on a thread with a deep stack.

Graphs are DAGs whose depth grows with program length (1000 `setf` lines chain 1000 ops), and
several stages walk them recursively (hashing, lowering, rendering). Python's default limits
(1000 frames, 8 MiB of C stack on the main thread) make such programs fail with a
RecursionError or a crash. Every compile entry point runs through `deep`, which gives the stages
a stack that programs of 10,000+ ops fit in, so their depth is no longer a limit in practice.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

STACK_BYTES = 1 << 30  # reserved address space, committed only as it is used
RECURSION_LIMIT = 1_000_000
_local = threading.local()
_lock = threading.Lock()
_active = 0  # deep calls running: the raised recursion limit is restored when none is
_saved_limit = 1000


def deep(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """fn(*args, **kwargs) on a thread with a 1 GiB stack and a high recursion limit; its result or
    its exception comes back to the caller. Nested calls run directly."""
    if getattr(_local, "inside", False):
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}
    ctx = contextvars.copy_context()  # the caller's context variables (the compile target) hold there too

    def work() -> None:
        _local.inside = True
        try:
            box["value"] = ctx.run(fn, *args, **kwargs)
        except BaseException as e:  # handed back to the calling thread, re-raised there
            box["error"] = e

    global _active, _saved_limit
    with _lock:
        old_stack = threading.stack_size()
        threading.stack_size(STACK_BYTES)
        try:
            t = threading.Thread(target=work, name="caten-compile", daemon=True)
        finally:
            threading.stack_size(old_stack)
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _active += 1
    try:
        t.start()
        t.join()
    finally:
        with _lock:
            _active -= 1
            if _active == 0:  # back to the default, which the 8 MiB main-thread stack needs
                sys.setrecursionlimit(_saved_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]
