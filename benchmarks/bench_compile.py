"""Cold compile time of the MLP-Mixer block (examples/mlp_mixer.lisp) on the llvm runtime,
in fresh processes:

    python benchmarks/bench_compile.py [--runs 5]

Each run is a new Python process that imports numpy and caten, reads the example with `caten.loads`
(elaborating, rewriting) and compiles `mixer_block` to machine code (scheduling, lowering,
LLVM). Nothing runs. Two settings:

  empty cache     a fresh CATEN_CACHE_DIR: the composite library is parsed too
  library cached  a cache dir holding only the parsed library (what every run after the
                  first finds; no compiled program or object code is reused)

Reported: median and min of the total, and of each phase, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "mlp_mixer.lisp")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy  # any caller of caten has it loaded (caten's dtypes need it too)
import caten
from caten.elaborate import library
t1 = time.perf_counter()
library.composites()
t2 = time.perf_counter()
m = caten.loads(open(sys.argv[1]).read(), runtime="llvm")
t3 = time.perf_counter()
m.mixer_block.program({})
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "library": t2 - t1, "elaborate": t3 - t2, "compile": t4 - t3,
                  "total": t4 - t0}))
"""


def run_once(cache_dir: str) -> dict:
    env = dict(os.environ, CATEN_CACHE_DIR=cache_dir)
    # cwd: started inside the checkout, `python -c` would import its caten/ folder (not a package
    # as installed: the grammar and ops live elsewhere there) instead of the installed caten
    out = subprocess.run([sys.executable, "-c", CHILD, EXAMPLE], env=env, capture_output=True, text=True,
                         check=True, cwd=cache_dir if os.path.isdir(cache_dir) else tempfile.gettempdir()).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    root = tempfile.mkdtemp(prefix="caten-bench-compile-")
    try:
        lib_only = os.path.join(root, "lib")
        run_once(lib_only)  # parse the library into it, then keep only that entry (NN/KEY.lib)
        for dirpath, _, files in os.walk(lib_only):
            for f in files:
                if not f.endswith(".lib"):
                    os.remove(os.path.join(dirpath, f))
        results: dict[str, list[dict]] = {"empty cache": [], "library cached": []}
        for i in range(opts.runs):  # alternate, so drift on this shared machine hits both alike
            results["empty cache"].append(run_once(os.path.join(root, f"empty{i}")))
            scratch = os.path.join(root, f"libcopy{i}")
            shutil.copytree(lib_only, scratch)
            results["library cached"].append(run_once(scratch))
        phases = ["import", "library", "elaborate", "compile", "total"]
        print("| setting | " + " | ".join(phases) + " |")
        print("|---" * (len(phases) + 1) + "|")
        for name, rs in results.items():
            cells = [f"{statistics.median(r[p] for r in rs):.3f} (min {min(r[p] for r in rs):.3f})" for p in phases]
            print(f"| {name} | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
