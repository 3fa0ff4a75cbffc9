"""The benchmarks' one timing loop (bench_llvm, bench_train, bench_tensor)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def rounds(fns: dict[str, Callable[[], object]], reps: int, max_s: float = float("inf"), burst: int = 1,
           settle: float = 0.0, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each callable over `reps` rounds (after `warmup` calls each: compiles,
    allocations). In each round every system, in turn, gets a pause of `settle` seconds, one
    untimed call and then `burst` timed calls. Rounds spread drift on a shared machine over all
    systems; the pause lets the previous system's worker threads go idle (OpenBLAS and OpenMP
    keep theirs spinning ~0.1 s after a call, which would take the second core from whoever runs
    next); the untimed call takes the slow first call after a pause, which a VM shows for every
    system (a Mixer block: 1.5x its steady time). `max_s`: stop after this long (3 rounds at
    least)."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    ts: dict[str, list[float]] = {k: [] for k in fns}
    t_start = time.perf_counter()
    for i in range(reps):
        for k, f in fns.items():
            if settle:
                time.sleep(settle)
                f()
            for _ in range(burst):
                t0 = time.perf_counter()
                f()
                ts[k].append(time.perf_counter() - t0)
        if i >= 2 and time.perf_counter() - t_start > max_s:
            break
    return {k: statistics.median(v) for k, v in ts.items()}
