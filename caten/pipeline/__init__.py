"""The compiler, as one pass list (`PASSES`, from `passes`: read, elaborate, rewrite, schedule,
lower, bounds, decompose, render, compile, load) and the two halves that run it.

`front` runs the passes up to a `Program` (read -> elaborate -> rewrite) and keys the cache of
elaborated programs; `back` runs the rest for every runtime that generates code and keys the
compile cache; `fingerprint` hashes the code behind each key. The CLI, `caten.load`, the Tensor
library and the importers compile only through the names below, which load their half on first
use: `import caten` stays light, and a cached program never loads the elaborator.
"""

from __future__ import annotations

from typing import Any

from caten.pipeline.passes import BACK, FRONT, PASSES, Pass, Timings

__all__ = ["BACK", "FRONT", "PASSES", "Pass", "Timings"]

_FRONT_API = {"split_defines", "read", "compile_program", "program", "program_cache_key", "front_fingerprint"}
_BUILD_API = {"compile"}  # (caten.pipeline.build: a warm load never imports `back`)
_BACK_API = {"emit", "lower_program", "lower_all", "cache_key", "code_fingerprint", "Lowered", "EntryPlan",
             "entry_plan", "PLACEHOLDER"}


def __getattr__(name: str) -> Any:
    if name in _FRONT_API:
        from caten.pipeline import front

        return getattr(front, name)
    if name in _BUILD_API:
        from caten.pipeline import build

        return getattr(build, name)
    if name in _BACK_API:
        from caten.pipeline import back

        return getattr(back, name)
    raise AttributeError(f"module 'caten.pipeline' has no attribute {name!r}")
