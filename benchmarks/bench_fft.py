"""An FFT of 2**20 complex points and an rfft of 2**20 real ones (f64): numpy (pocketfft), torch.fft
and caten's llvm runtime (the ops/fft.lisp composites, compiled once) in one run; medians of
repeated calls and their ratios.

    python3 benchmarks/bench_fft.py [--log2n 20] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import caten


def median_time(fn, repeat: int) -> float:
    fn()  # warm
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2n", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    n = 1 << a.log2n
    src = f"""(composite f ((A{{f64}}[{n}]) (B{{f64}}[{n}]) -> (C{{f64}}[{n}]) (D{{f64}}[{n}]))
  (setf r (fft A B)) (return (nth r 0) (nth r 1)))
(composite g ((A{{f64}}[{n}]) -> (C{{f64}}[{n // 2 + 1}]) (D{{f64}}[{n // 2 + 1}]))
  (setf r (rfft A)) (return (nth r 0) (nth r 1)))"""
    rng = np.random.default_rng(0)
    re, im = rng.standard_normal(n), rng.standard_normal(n)
    z = re + 1j * im
    t0 = time.perf_counter()
    mod = caten.loads(src, runtime="llvm")
    cr, ci = mod.f(re, im)
    gr, gi = mod.g(re)
    compile_s = time.perf_counter() - t0
    ref, rref = np.fft.fft(z), np.fft.rfft(re)
    err = max(float(np.abs(cr + 1j * ci - ref).max() / np.abs(ref).max()),
              float(np.abs(gr + 1j * gi - rref).max() / np.abs(rref).max()))
    rows = {"fft": {"numpy": median_time(lambda: np.fft.fft(z), a.repeat)},
            "rfft": {"numpy": median_time(lambda: np.fft.rfft(re), a.repeat)}}
    try:
        import torch

        tz, tr = torch.from_numpy(z), torch.from_numpy(re)
        rows["fft"]["torch.fft"] = median_time(lambda: torch.fft.fft(tz), a.repeat)
        rows["rfft"]["torch.fft"] = median_time(lambda: torch.fft.rfft(tr), a.repeat)
    except ImportError:
        pass
    rows["fft"]["caten llvm"] = median_time(lambda: mod.f(re, im), a.repeat)
    rows["rfft"]["caten llvm"] = median_time(lambda: mod.g(re), a.repeat)
    print(f"2**{a.log2n} points, f64; {platform.machine()} ({os.cpu_count()} CPUs); caten llvm compile and first "
          f"calls {compile_s:.1f} s; max rel. error vs numpy {err:.1e}")
    for what, r in rows.items():
        for k, v in r.items():
            print(f"  {what:5s} {k:12s} {v * 1e3:9.2f} ms   x{v / r['numpy']:.2f} of numpy")


if __name__ == "__main__":
    main()
