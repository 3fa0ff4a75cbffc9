"""Cold vs warm start of caten, in fresh processes (issue: compile cache and warm start).

    python benchmarks/bench_cache.py [--repeat 5]

Measures, each as the median of several fresh processes:
  - `caten run examples/mlp_mixer.lisp` cold (empty cache) vs warm;
  - `caten run examples/softmax.lisp` warm, end to end;
  - in-process `caten.load` of an already-cached program (+ first call);
  - `caten --help`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MIXER_ARGS = {"X": (8, 196, 512), "g1": (512,), "b1": (512,), "Wt1": (196, 256), "bt1": (256,), "Wt2": (256, 196),
              "bt2": (196,), "g2": (512,), "b2": (512,), "Wc1": (512, 2048), "bc1": (2048,), "Wc2": (2048, 512),
              "bc2": (512,)}


def timed(cmd: list[str], env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return dt


def mixer_inputs(work: Path) -> list[str]:
    """NAME=PATH arguments for the Mixer block, read off its signature."""
    import caten

    mod = caten.load(str(REPO / "examples" / "mlp_mixer.lisp"), runtime="numpy")
    cdef = mod.source.entry(mod.source.names[-1])
    rng = np.random.default_rng(0)
    sizes = {"B": 8, "T": 196, "C": 512, "DT": 256, "DC": 2048, "D": 512, "H": 256}
    args = []
    for p in cdef.params:
        shape = []
        for d in p.dims or []:
            name = getattr(d, "name", None)
            shape.append(sizes.get(name, 16) if name else int(d.value))
        np.save(work / f"{p.name}.npy", (rng.standard_normal(shape) * 0.05).astype(np.float32))
        args.append(f"{p.name}={p.name}.npy")
    return args


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="caten-bench-"))
    cache = work / "cache"
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache)}
    caten = [sys.executable, "-m", "caten"]
    margs = mixer_inputs(work)
    mixer = caten + ["run", str(REPO / "examples" / "mlp_mixer.lisp"), *margs, "-o", "y.npy"]
    cold = []
    for _ in range(max(2, a.repeat // 2)):
        shutil.rmtree(cache, ignore_errors=True)
        cold.append(timed(mixer, env, work))
    warm = [timed(mixer, env, work) for _ in range(a.repeat)]
    np.save(work / "x.npy", np.random.rand(64, 128).astype(np.float32))
    soft = caten + ["run", str(REPO / "examples" / "softmax.lisp"), "X=x.npy", "-o", "y.npy"]
    timed(soft, env, work)
    soft_warm = [timed(soft, env, work) for _ in range(a.repeat)]
    # a process that already runs caten (imports done, JIT up) loads another cached program
    load_code = ("import time, numpy as np, caten; "
                 f"caten.load({str(REPO / 'examples' / 'axpy.lisp')!r}).axpy(np.float32(1), np.ones(3, np.float32), "
                 "np.ones(3, np.float32)); t=time.perf_counter(); "
                 f"m = caten.load({str(REPO / 'examples' / 'softmax.lisp')!r}); "
                 "y = m.softmax_rows(np.ones((4, 8), np.float32)); print(time.perf_counter()-t)")
    loads = []
    for _ in range(a.repeat):
        r = subprocess.run([sys.executable, "-c", load_code], env=env, capture_output=True, text=True, check=True)
        loads.append(float(r.stdout.strip()))
    helps = [timed(caten + ["--help"], env, work) for _ in range(a.repeat)]
    med = statistics.median
    print(f"{'measure':<44} {'median':>10}")
    print(f"{'Mixer block, cold caten run':<44} {med(cold) * 1e3:>8.0f} ms")
    print(f"{'Mixer block, warm caten run':<44} {med(warm) * 1e3:>8.0f} ms   ({med(cold) / med(warm):.1f}x faster)")
    print(f"{'softmax, warm caten run (end to end)':<44} {med(soft_warm) * 1e3:>8.0f} ms")
    print(f"{'in-process caten.load of a cached program':<44} {med(loads) * 1e3:>8.1f} ms")
    print(f"{'caten --help':<44} {med(helps) * 1e3:>8.0f} ms")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
