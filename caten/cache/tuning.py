"""Tuned GEMM shapes per program and CPU, kept in the compile cache: `caten tune` writes the
knobs its timed search chose (caten.schedule.plan.KNOBS); every later compile of the same
program (by structure: caten.ir.program.Program.key) for the same CPU reads them, so a tuned
program stays tuned in every process. A compile no tuning covers uses the model's defaults."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Iterator

from caten.cache.store import Cache, key_of
from caten.target import Target

KIND = "tune"
Knobs = tuple[tuple[str, int], ...]
_trial: contextvars.ContextVar[Knobs | None] = contextvars.ContextVar("caten_tune_trial", default=None)
_seen: dict[tuple, Knobs] = {}  # lookups of this process: a compile reads the disk once a program


def _key(t: Target, program_key: str) -> str:
    return key_of("caten-tune/1", t.cpu, t.features, str(t.vector_bits), str(t.l2_bytes), program_key)


def apply(t: Target, program_key: str, store: Cache | None) -> Target:
    """`t` with the knobs tuned for this program on this CPU (a search's trial first), if any."""
    knobs = _trial.get()
    if knobs is None and store is not None:
        knobs = lookup(store, t, program_key)
    return dataclasses.replace(t, gemm=knobs) if knobs else t


def lookup(store: Cache, t: Target, program_key: str) -> Knobs:
    memo = (str(store.root), t.key(), program_key)
    if memo not in _seen:
        raw = store.get(_key(t, program_key), KIND)
        knobs: Knobs = ()
        if raw is not None:
            try:
                knobs = tuple(sorted((str(k), int(v)) for k, v in json.loads(raw)["knobs"].items()))
            except (ValueError, KeyError, TypeError, AttributeError):
                knobs = ()  # not what `save` writes: as if never tuned
        _seen[memo] = knobs
    return _seen[memo]


def save(store: Cache, t: Target, program_key: str, knobs: dict[str, int], report: dict) -> None:
    """Keep `knobs` for this program on this CPU (`report`: the search's timings, for `cache
    info` readers)."""
    store.put(_key(t, program_key), KIND, json.dumps({"knobs": knobs, "report": report}).encode())
    _seen[(str(store.root), t.key(), program_key)] = tuple(sorted(knobs.items()))


@contextlib.contextmanager
def trial(knobs: dict[str, int]) -> Iterator[None]:
    """Compile with these knobs (a search's candidate), whatever the cache holds."""
    tok = _trial.set(tuple(sorted(knobs.items())))
    try:
        yield
    finally:
        _trial.reset(tok)
