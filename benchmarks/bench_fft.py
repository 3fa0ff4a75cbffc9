"""An FFT of 2**20 complex points (f64): numpy (pocketfft), torch.fft and caten's llvm runtime (the
ops/fft.lisp composites, compiled once) in one run; medians of repeated calls and their ratios.

    python3 benchmarks/bench_fft.py [--log2n 20] [--repeat 7]
"""

from __future__ import annotations

import argparse
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
  (setf r (fft A B)) (return (nth r 0) (nth r 1)))"""
    rng = np.random.default_rng(0)
    re, im = rng.standard_normal(n), rng.standard_normal(n)
    z = re + 1j * im
    t0 = time.perf_counter()
    mod = caten.loads(src, runtime="llvm")
    cr, ci = mod.f(re, im)
    compile_s = time.perf_counter() - t0
    ref = np.fft.fft(z)
    err = float(np.abs(cr + 1j * ci - ref).max() / np.abs(ref).max())
    rows = {"numpy": median_time(lambda: np.fft.fft(z), a.repeat)}
    try:
        import torch

        tz = torch.from_numpy(z)
        rows["torch.fft"] = median_time(lambda: torch.fft.fft(tz), a.repeat)
    except ImportError:
        pass
    rows["caten llvm"] = median_time(lambda: mod.f(re, im), a.repeat)
    print(f"fft of 2**{a.log2n} complex128 points; {platform.processor() or platform.machine()}, "
          f"caten llvm (first call with compile {compile_s:.1f} s), max rel. error vs numpy {err:.1e}")
    for k, v in rows.items():
        print(f"  {k:12s} {v * 1e3:9.2f} ms   x{v / rows['numpy']:.2f} of numpy")


if __name__ == "__main__":
    main()
