"""`caten tune FILE [NAME=PATH.npy ...]`: choose a composite's GEMM shapes on this machine by a
small timed search, and keep them in the compile cache so that every later compile of the same
program for this CPU uses them (caten.cache.tuning).

The search is coordinate descent over the knobs of caten.schedule.plan.KNOBS, starting from the
model's choices (registers, cache sizes): for each knob in turn every value is compiled and
timed beside the current choice and the model's shapes, interleaved in rounds so that drift on
a shared machine hits each alike (each row's "vs untuned" is against the model in its own race:
races seconds apart drift by more than the knobs gain), and a value is taken only if it beats
the current choice by more than the noise margin; the final choice must
beat the model again in a last race, or the model's shapes stay. Each
candidate's outputs must equal the untuned program's (to rounding): a knob may change the speed,
never the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from caten.errors import Error
from caten.options import Options

MODEL = "the host model's shapes"
MARGIN = 0.05  # a candidate must be this much faster than the current choice (timings on a shared host drift +-5%)


def tune_file(file: str, inputs: list[str], options: Options, entry: str | None, reps: int) -> dict[str, int]:
    """The knobs chosen for `entry` of `file` (also stored in the cache, and printed as a table)."""
    from caten import pipeline, target
    from caten.api import module
    from caten.cache import default_cache, tuning
    from caten.cli.profile import entry_inputs
    from caten.read.source import read_source
    from caten.schedule.plan import KNOBS, knob_choices, most_rows

    if options.runtime not in ("llvm", "c"):
        raise Error(f"caten tune times CPU kernels (llvm, c), not '{options.runtime}'", hint="use -r llvm")
    if not options.use_cache:
        raise Error("caten tune keeps its result in the compile cache", hint="drop --no-cache")
    mod = module(read_source(file), options)
    name, arrays = entry_inputs(mod, file, entry, inputs)
    comp = getattr(mod, name.replace("-", "_"))
    prog = comp.elaborate(comp._bind_types(arrays))
    t = target.resolve(options.target)
    lowered = pipeline.lower_all(mod.runtime, [prog], t)
    if not any(s.plan is not None and s.plan.gemm is not None
               for lw in lowered for k in lw.sched.kernels for s in k.stages):
        print(f"{name}: no GEMM or convolution to tune (its other kernels take no shape knobs)")
        return {}
    run = _Runner(mod.runtime, prog, options, arrays)

    def candidates(knob: str, best: dict[str, int]) -> list[dict[str, int]]:
        cands: list[dict[str, int]] = []
        for v in knob_choices(t.vector_bytes, best.get("nv", 2))[knob]:  # (rows depend on the row width)
            c = dict(best, **{knob: v})
            if "mr" in c:  # as many rows as fit: what the plan would clamp them to
                c["mr"] = min(c["mr"], most_rows(t.vector_bytes, c.get("nv", 2)))
            if c != best and c not in cands:
                cands.append(c)
        return cands

    best, rows, base, current = search(run.race, KNOBS, candidates, reps)
    report = {"untuned_ms": base * 1e3, "tuned_ms": current * 1e3, "reps": reps}
    for key in {prog.key(), *_symbolic_key(file, options, name, arrays)}:
        tuning.save(default_cache(), t, key, best, report)
    _print(name, t, rows, base, current, best)
    return best


@dataclass
class Row:
    """A line of the table: a candidate's time in its race, and the model's time in the same
    race over it (so that drift between races, which are seconds apart, cancels)."""
    knob: str
    candidate: str
    seconds: float
    speedup: float  # vs untuned: the host model's time in this race / this candidate's
    mark: str = ""


def search(race: Callable[[list[dict[str, int]], int], list[float]], knobs: Iterable[str],
           candidates: Callable[[str, dict[str, int]], list[dict[str, int]]],
           reps: int) -> tuple[dict[str, int], list[Row], float, float]:
    """Coordinate descent over `knobs` from the model's choices ({}): the knobs chosen, the
    table's rows, and the untuned and chosen seconds a call of the last race. Each knob's race
    holds the model (the reference of "vs untuned"), the current choice and the candidates; a
    candidate is taken if it beats the current choice in that race by MARGIN. In each race one
    row is marked "best so far": the choice after it."""
    best: dict[str, int] = {}
    rows: list[Row] = []
    base = current = 0.0
    for knob in knobs:
        cands = candidates(knob, best)
        if not cands:
            continue
        entries = [{}] + ([best] if best else []) + cands
        times = race(entries, reps)
        base, current, cand_times = times[0], times[len(entries) - len(cands) - 1], times[-len(cands):]
        i = min(range(len(cands)), key=cand_times.__getitem__)
        won = cand_times[i] < current * (1 - MARGIN)
        rows.append(Row(knob, f"current: {_fmt(best) or MODEL}", current, base / current, "" if won else "best so far"))
        for j, (c, secs) in enumerate(zip(cands, cand_times)):
            near = f"faster by < {MARGIN:.0%}: noise" if j == i and secs < current else ""
            rows.append(Row(knob, _fmt(c), secs, base / secs, "best so far" if won and j == i else near))
        if won:
            best, current = cands[i], cand_times[i]
    if best:  # the choice must also win a last race against the model, run anew
        base, current = race([{}, best], 2 * reps)
        kept = current < base * (1 - MARGIN)
        rows.append(Row("final", _fmt(best), current, base / current,
                        "chosen" if kept else f"not chosen: not {MARGIN:.0%} faster than the model"))
        if not kept:
            best, current = {}, base
    if not rows:  # no knob had a candidate: the model alone
        (base,) = race([{}], reps)
        current = base
        rows.append(Row("model", MODEL, base, 1.0, "best so far"))
    return best, rows, base, current


def _symbolic_key(file: str, options: Options, name: str, arrays: list[np.ndarray]) -> list[str]:
    """The key of the composite as written, its sizes symbolic (what a Python caller that passes
    arrays of any size compiles): the choice is kept for it too. Nothing where it does not
    elaborate without the -D sizes."""
    from caten.api import module
    from caten.read.source import read_source

    types_only = {k: v for k, v in options.defines.items() if not str(v).strip().lstrip("-").isdigit()}
    try:
        comp = getattr(module(read_source(file), options.but(defines=types_only)), name.replace("-", "_"))
        return [comp.elaborate(comp._bind_types(arrays)).key()]
    except Error:
        return []


class _Runner:
    """Compiles the program with given knobs and times calls on fixed inputs."""

    def __init__(self, runtime: Any, prog: Any, options: Options, arrays: list[np.ndarray]) -> None:
        from caten.run.module import check_shapes

        self.runtime, self.prog, self.options = runtime, prog, options
        self.arrays = [np.ascontiguousarray(a) for a in arrays]
        self.env = {**prog.defines, **check_shapes(prog, self.arrays)}
        self.exes: dict[tuple, Any] = {}
        self.ref: list[np.ndarray] | None = None

    def exe(self, knobs: dict[str, int]) -> Any:
        from caten import pipeline
        from caten.cache import tuning

        key = tuple(sorted(knobs.items()))
        if key not in self.exes:
            with tuning.trial(knobs):
                self.exes[key] = pipeline.compile(self.runtime, self.prog, self.options)
            got = self.call(self.exes[key])
            if self.ref is None:
                self.ref = got
            for want, have in zip(self.ref, got):
                if not np.allclose(have, want, rtol=1e-4, atol=1e-5 * (1 + float(np.abs(want).max(initial=0)))):
                    raise Error(f"knobs {_fmt(knobs)} changed the result of `{self.prog.name}`",
                                hint="a bug in caten's GEMM: please report it with this file")
        return self.exes[key]

    def call(self, exe: Any) -> list[np.ndarray]:
        from caten.ir import dims as D

        outs = [np.empty(tuple(D.evaluate(d, self.env) for d in o.shape), o.dtype.np) for o in self.prog.outputs]
        exe.run(self.arrays, outs, self.env)
        return outs

    def time(self, knobs: dict[str, int], reps: int) -> float:
        return self.race([knobs], reps)[0]

    def race(self, cands: list[dict[str, int]], reps: int) -> list[float]:
        """Seconds a call of each candidate: the fastest of `reps` rounds, the candidates timed in
        turn within a round (drift hits each alike) and a round's sample several calls long
        (>= 2 ms). The fastest, not the median: on a shared 2-core machine a short call's time
        is bimodal (the thread pool's other thread descheduled for a while doubles it)."""
        exes = [self.exe(c) for c in cands]
        t0 = time.perf_counter()
        for e in exes:
            self.call(e)  # warm: pages touched, worker threads up
        inner = max(1, int(0.002 * len(exes) / max(time.perf_counter() - t0, 1e-9)))
        times: list[list[float]] = [[] for _ in exes]
        for _ in range(max(1, reps)):
            for i, e in enumerate(exes):
                t0 = time.perf_counter()
                for _ in range(inner):
                    self.call(e)
                times[i].append((time.perf_counter() - t0) / inner)
        return [min(ts) for ts in times]


def _fmt(knobs: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


def _print(name: str, t: Any, rows: list[Row], base: float, best: float, chosen: dict[str, int]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"caten tune {name} on {t.describe()}", caption="vs untuned: the host model's shapes "
                  "timed in the same race")
    for col in ("knob", "candidate", "ms", "vs untuned", ""):
        table.add_column(col, justify="right" if col in ("ms", "vs untuned") else "left")
    for r in rows:
        table.add_row(r.knob, r.candidate, f"{r.seconds * 1e3:.3f}", f"{r.speedup:.2f}x", r.mark,
                      style="dim" if r.candidate.startswith("current") else None)
    Console(width=120).print(table)
    what = _fmt(chosen) if chosen else f"{MODEL} (no knob beat them by more than the noise margin)"
    print(f"chose {what}: {best * 1e3:.3f} ms a call against {base * 1e3:.3f} untuned ({base / best:.2f}x); "
          f"kept in the cache for {t.cpu}, used by every later compile of `{name}` here (at these sizes or any)")
