"""caten's OpenCL runtime (PoCL on the CPU here) against numpy in ONE run, on workloads a, c
and d of shared/bench/peers.py (same shapes, float32); optionally the C runtime too.

    python benchmarks/bench_opencl.py [--reps 7] [--only a,c,d] [--with c,llvm]

Every workload is written in caten's language and built through `caten.loads`. Calls
alternate between the systems so drift on a shared machine hits all alike; the table shows
medians and the ratio numpy/caten (> 1: caten is faster). Times include the host<->device
traffic of each call (zero-copy on a CPU device) — what a user of `mod.f(x)` waits for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
from bench_llvm import ENTRY, SOURCES, TITLES, make_data  # the same workloads, shapes and data


def numpy_fn(wl: str):
    if wl == "a":
        def f(a, b, c, out=None):
            t = np.multiply(a, b)
            np.add(t, c, out=t)
            np.exp(t, out=t)
            return np.multiply(t, np.float32(0.5), out=t)
        return f
    if wl == "c":
        def f(x):
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return f

    def f(x, g, b):
        m = x.mean(axis=1, keepdims=True)
        v = ((x - m) ** 2).mean(axis=1, keepdims=True)
        return (x - m) / np.sqrt(v + np.float32(1e-5)) * g + b
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", default="a,c,d")
    ap.add_argument("--with", dest="others", default="", help="more caten runtimes to time, e.g. c,llvm")
    args = ap.parse_args()

    import caten
    from caten import plugin as R

    rts = ["opencl"] + [r for r in args.others.split(",") if r]
    ok, dev = R.get("opencl").available()
    if not ok:
        sys.exit(f"bench_opencl.py: the opencl runtime cannot run here: {dev}")  # (the runtime's hint)
    print(f"OpenCL device: {dev}; CATEN_OPENCL_LOCAL={os.environ.get('CATEN_OPENCL_LOCAL', '(default)')}")
    head = f"| workload | numpy ms | {' | '.join(f'caten {r} ms | numpy/{r}' for r in rts)} | opencl build s |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for wl in args.only.split(","):
        data = make_data(wl)
        fns = {"numpy": numpy_fn(wl)}
        build = 0.0
        for rt in rts:
            t0 = time.perf_counter()
            mod = caten.loads(SOURCES[wl], runtime=rt)
            fn = getattr(mod, ENTRY[wl])
            y = fn(*data)
            if rt == "opencl":
                build = time.perf_counter() - t0
            ref = fns["numpy"](*data)
            np.testing.assert_allclose(y, ref, rtol=2e-4, atol=2e-5)
            fns[rt] = fn
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.reps):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f(*data)
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        cells = " | ".join(f"{med[r]:.1f} | {med['numpy'] / med[r]:.2f}" for r in rts)
        print(f"| {TITLES[wl]} | {med['numpy']:.1f} | {cells} | {build:.2f} |", flush=True)


if __name__ == "__main__":
    main()
