"""The compiler's passes, in order, as data, and their timings for `-v`: the one list that `-v`
and docs/architecture.md's table (tests/test_pipeline.py compares them) read."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    name: str  # what `-v` prints
    module: str  # where its code lives
    what: str  # what it makes of what the pass before made


FRONT = (
    Pass("read", "caten.read", "Lisp or YAML text -> s-expressions with source spans -> `CompositeDef`s"),
    Pass("elaborate", "caten.elaborate", "a composite and its inputs' dtypes -> a `Program`: a DAG of principal ops "
                                         "(`caten.ir`); `grad` forms through `caten.autodiff`"),
    Pass("rewrite", "caten.rewrite", "the graph after the `defoptimizer` rules (`ops/rules/*.lisp`, `--rules` files)"),
)
BACK = (
    Pass("schedule", "caten.schedule", "kernels (groups of fused stages), buffers, the arena plan"),
    Pass("lower", "caten.lower", "loop IR (`caten.loopir`): one `Kernel` per scheduled kernel, and the entry plan"),
    Pass("bounds", "caten.lower.bounds", "every load and store checked (`--check-bounds`)"),
    Pass("decompose", "caten.lower.decompose", "the hard ops a renderer lacks (exp2, log2, sin, floor division, "
                                               "NaN-max, threefry) written in primitives"),
    Pass("render", "caten.render", "LLVM IR text, C, OpenCL C or CUDA C (the runtime plugin's `render`)"),
    Pass("compile", "caten.runtimes", "an artifact from the source (the plugin's `compile_source`), through the "
                                      "compile cache"),
    Pass("load", "caten.runtimes", "an executable from the artifact (the plugin's `load`)"),
)
PASSES = FRONT + BACK

NAMES = tuple(p.name for p in PASSES)


class Timings:
    """Seconds per pass, summed over the programs of one call; `-v` prints them in one line, the
    passes named and ordered as `PASSES`."""

    def __init__(self) -> None:
        self.passes: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in NAMES:  # a pass `-v` would print under a name the pass list does not have
            raise ValueError(f"{name!r} is not a pass of caten.pipeline.PASSES")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.passes[name] = self.passes.get(name, 0.0) + time.perf_counter() - t0

    def line(self, what: str) -> str:
        parts = ", ".join(f"{k} {self.passes[k] * 1e3:.1f} ms" for k in NAMES if k in self.passes)
        return f"[pipeline] {what}: {parts}"


_gc_lock = threading.Lock()
_gc_depth = 0  # gc_paused blocks running (any thread)
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a block builds long-lived, acyclic data (a
    warm load: the cached program's graph, the loaded modules). Its passes would rescan all of it
    again and again as it grows: a GPT-2's warm load spent ~15% of its CPU time in them, and
    scanning what stays alive frees nothing. The collector runs again after the outermost block
    (as it was: a caller that disabled it keeps it disabled)."""
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()
