"""The program-level back cache: a warm load skips schedule, lower, decompose and render.

The compile cache keys machine code by its loop IR (`back.cache_key`), so finding cached code
used to mean scheduling and lowering the program again just to compute that key. This cache
keys, one level up, what the back end makes of a `Program`: the program's structural key and
its signature, the runtime and its toolchain, the target, the runtime's capabilities, the
options that change code, and the fingerprint of every module the back end can import (the
scheduler, the lowerer, the renderers, the runtime plugin: `back.code_fingerprint`). Its entry
holds the code's cache key (where the machine code is) and what a runtime's `load` reads of a
`Lowered` program (`Restored`): nothing is re-derived. A changed program, option, target,
toolchain or compiler module changes the key: a miss, and the full pipeline runs.

Only runtimes that declare `restores = True` (their `load` reads just `Restored`'s fields) use
it; `Options.profile` (whose executables read the schedule) never does. Entries are data
(caten.cache.codec), never pickles.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from caten.cache import codec, key_of
from caten.ir import dims as D
from caten.ir.oob import Table
from caten.ir.program import Program

FORMAT = "caten-back/1"
KIND = "back"


@dataclass
class Restored:
    """What a compiling runtime's `load` and its executable read of a lowered program: its entry
    symbol, the program, the arena's size, its kernels' names and the bounds table."""
    name: str
    program: Program
    arena_size: D.Dim
    kernel_names: list[str]
    bounds: Table | None = None
    in_place: frozenset[int] = frozenset()  # outputs computed in their input's memory (caten.run.module)
    sched = None  # (no schedule: `caten profile`, which reads one, never restores)


def capabilities_text(caps: object) -> str:
    """The runtime's capabilities as a canonical string (sets sorted: a frozenset's repr order
    varies between processes)."""
    parts = []
    for f in dataclasses.fields(caps):  # type: ignore[arg-type]
        v = getattr(caps, f.name)
        parts.append(f"{f.name}={sorted(map(repr, v)) if isinstance(v, (set, frozenset)) else repr(v)}")
    return ";".join(parts)


def back_key(code_parts: list[str], program: Program, caps: object) -> str:
    """The key of what the back end makes of `program`: `code_parts` are the compile cache's own
    (runtime, toolchain, code fingerprint, target, options); then the program's structure, and
    its names (the bounds table and the executable's messages name the program and its dims)."""
    p = program
    sig = repr((p.name, [str(t) for t in p.inputs], [str(t) for t in p.outputs], list(p.dims),
                sorted((k, str(v)) for k, v in p.derived.items()), sorted(p.defines.items()), p.invariant,
                p.aliases))
    return key_of(FORMAT, *code_parts, capabilities_text(caps), p.key(), sig)


def dumps(code_key: str, r: Restored) -> bytes:
    """An entry: the code's cache key and the `Restored` fields but the program (the caller has it)."""
    return codec.dumps({"format": FORMAT, "code": code_key, "name": r.name, "arena": r.arena_size,
                        "kernels": list(r.kernel_names), "bounds": r.bounds, "in_place": sorted(r.in_place)})


def loads(blob: bytes, program: Program) -> tuple[str, Restored] | None:
    """(the code's cache key, what `load` reads) of an entry, or None if it is not one of ours."""
    try:
        e = codec.loads(blob)
        if not isinstance(e, dict) or e.get("format") != FORMAT:
            return None
        code, name, arena, kernels, bounds = e["code"], e["name"], e["arena"], e["kernels"], e["bounds"]
        in_place = e["in_place"]
    except (codec.CodecError, KeyError):
        return None
    ok = (isinstance(code, str) and isinstance(name, str) and isinstance(kernels, list)
          and all(isinstance(k, str) for k in kernels) and (bounds is None or isinstance(bounds, Table))
          and isinstance(arena, (int, D.DimExpr)) and not isinstance(arena, bool)
          and isinstance(in_place, list) and all(type(i) is int for i in in_place))
    return (code, Restored(name, program, arena, kernels, bounds, frozenset(in_place))) if ok else None
