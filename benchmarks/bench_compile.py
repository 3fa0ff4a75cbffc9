"""Cold compile time of the MLP-Mixer block (examples/mlp_mixer.lisp) on the llvm runtime,
in fresh processes:

    python benchmarks/bench_compile.py [--runs 5]

Each run is a new Python process that imports numpy and caten, reads the example with `caten.loads`
(elaborating, rewriting) and compiles `mixer_block` to machine code (scheduling, lowering,
LLVM). Nothing runs. Two settings:

  empty cache     a fresh CATEN_CACHE_DIR: the composite library is parsed too
  library cached  a cache dir holding only the parsed library and the fingerprints of caten's
                  code (what every run after the first finds; no parsed source, compiled
                  program or object code is reused)
  one layer edited  the block with one layernorm's eps changed, in a cache dir where the
                  original block was compiled: only the units that changed compile, the
                  others' objects come from the cache (caten.compile.jobs)

Reported: median and min of the total, and of each phase, in seconds. The installed caten's
bytecode is written first, as an installed package has it.

    python benchmarks/bench_compile.py --models [--runs 3]

times real models instead (torchvision ResNet-18 at 224x224, a GPT-2-small-shaped model of 12
layers on 512 tokens, random weights): each is captured once by torch.export here (that time,
torch's own, is reported apart), and its caten text is compiled in fresh processes with the
library cached: cold (no parsed text, compiled program or unit in the cache) and warm (a second
process with that cache filled: what loading a compiled model costs; caten.pipeline.restore).
The machine may be shared: `cpu` is the process's CPU time for read+elaborate+compile, `cpu
total` with the imports too (what `total` measures: a warm load's wall clock on an idle machine)
and `workers` the LLVM worker processes' (caten.compile.jobs; Linux: read from /proc), steadier
numbers than the wall clock under load: cpu + workers is all the work of a cold compile, and on
an idle machine of two cores its wall clock is at least the larger of cpu and half that sum.

    python benchmarks/bench_compile.py --chain [--runs 3]

times the residual chain `y = y + gelu(layernorm(y))` of 4, 8, 12 and 16 blocks on a 4096x1024
input instead: for each length, the cold compile (fresh process, library cached, as above), the
generated code's size (LLVM IR lines) and one call's time against numpy's (scipy's erf). Both
should grow linearly with the number of blocks, and each call be faster than numpy's.
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


CHAIN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import caten
from caten.elaborate import library
library.composites()
t1 = time.perf_counter()
m = caten.loads(open(sys.argv[1]).read(), runtime="llvm")
prog = m.f.program({})
t2 = time.perf_counter()
rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 1024)).astype(np.float32)
g = (1 + 0.1 * rng.standard_normal(1024)).astype(np.float32)
b = (0.1 * rng.standard_normal(1024)).astype(np.float32)
sys.path.insert(0, sys.argv[3])
from timing import rounds
from bench_compile import chain_numpy
n = int(sys.argv[2])
y = m.f(x, g, b)
ref = chain_numpy(x, g, b, n)
err = float(np.abs(y - ref).max() / (np.abs(ref).max() + 1e-30))
ts = rounds({"caten": lambda: m.f(x, g, b), "numpy": lambda: chain_numpy(x, g, b, n)}, reps=5, max_s=20)
print(json.dumps({"compile": t2 - t1, "call": ts["caten"], "numpy": ts["numpy"], "err": err}))
"""


MODEL_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
c0 = time.process_time()
import numpy
import caten
t1 = time.perf_counter()
c1 = time.process_time()
m = caten.loads(open(sys.argv[1]).read(), runtime="llvm")
t2 = time.perf_counter()
m.forward.program({})
t3 = time.perf_counter()
workers = 0.0
try:
    from caten.compile import jobs
    for w in jobs._workers:  # (alive until this process exits)
        with open(f"/proc/{w.proc.pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        workers += (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
except (OSError, ImportError, ValueError, IndexError):
    pass
print(json.dumps({"import": t1 - t0, "read+elaborate": t2 - t1, "compile": t3 - t2, "total": t3 - t0,
                  "cpu": time.process_time() - c1, "cpu total": time.process_time() - c0, "workers": workers}))
"""


def _export(name: str, root: str) -> tuple[str, float]:
    """The model's caten text (written under root) and torch.export's time for it."""
    import time

    import torch

    from caten.frontends.torch.export import convert_exported, decompose

    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision

        mod, args = torchvision.models.resnet18(weights=None).eval(), (torch.randn(1, 3, 224, 224),)
    else:
        from transformers import GPT2Config, GPT2Model

        inner = GPT2Model(GPT2Config(use_cache=False)).eval()

        class Last(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, ids):
                return self.inner(input_ids=ids).last_hidden_state

        mod, args = Last().eval(), (torch.randint(0, 50257, (1, 512)),)
    t0 = time.perf_counter()
    with torch.no_grad():
        text = convert_exported(decompose(torch.export.export(mod, args)))[0]
    took = time.perf_counter() - t0
    path = os.path.join(root, f"{name}.lisp")
    with open(path, "w") as f:
        f.write(text)
    return path, took


def run_models(root: str, lib_only: str, runs: int) -> None:
    """Cold and warm compile of real models (see the module docstring)."""
    phases = ["import", "read+elaborate", "compile", "total", "cpu", "cpu total", "workers"]
    print("| model | torch.export | setting | " + " | ".join(phases) + " |")
    print("|---" * (len(phases) + 3) + "|")
    for name in ("resnet18", "gpt2_small"):
        src, export_s = _export(name, root)
        rows: dict[str, list[dict]] = {"cold": [], "warm": []}
        for i in range(runs):
            scratch = os.path.join(root, f"{name}-{i}")
            shutil.copytree(lib_only, scratch)
            for setting in ("cold", "warm"):  # the second process finds the first one's program
                env = dict(os.environ, CATEN_CACHE_DIR=scratch)
                out = subprocess.run([sys.executable, "-c", MODEL_CHILD, src], env=env, capture_output=True,
                                     text=True, check=True, cwd=scratch).stdout
                rows[setting].append(json.loads(out.strip().splitlines()[-1]))
        for setting, rs in rows.items():
            cells = [f"{statistics.median(r[p] for r in rs):.2f} (min {min(r[p] for r in rs):.2f})" for p in phases]
            print(f"| {name} | {export_s:.2f} | {setting} | " + " | ".join(cells) + " |")


def chain_source(n: int) -> str:
    """n residual blocks y = y + gelu(layernorm(y)) over the last axis of an [N, D] input."""
    body = "\n".join("  (setf y (+ y (gelu (layernorm y G B))))" for _ in range(n))
    head = "(composite f ((X{f32}[N, D]) (G{f32}[D]) (B{f32}[D]) -> (Y{f32}[N, D]))"
    return f"{head}\n  (setf y X)\n{body}\n  y)\n"


def chain_numpy(x, g, b, n: int):
    """The chain in numpy (exact erf GELU, as caten's gelu)."""
    import numpy as np
    from scipy.special import erf

    y = x
    for _ in range(n):
        mu = y.mean(-1, keepdims=True)
        var = ((y - mu) ** 2).mean(-1, keepdims=True)
        h = (y - mu) / np.sqrt(var + np.float32(1e-5)) * g + b
        y = y + np.float32(0.5) * h * (1 + erf(h * np.float32(0.7071067811865476)))
    return y


def run_chain(root: str, lib_only: str, runs: int) -> None:
    """The residual-chain table (see the module docstring)."""
    print("| blocks | compile s (median, min) | LLVM IR lines | call ms | numpy ms | vs numpy | max rel. err |")
    print("|---|---|---|---|---|---|---|")
    for n in (4, 8, 12, 16):
        src = os.path.join(root, f"chain{n}.lisp")
        with open(src, "w") as f:
            f.write(chain_source(n))
        ll = os.path.join(root, f"chain{n}.ll")
        subprocess.run([sys.executable, "-m", "caten", "-r", "llvm", "--emit", "source", src, "-o", ll],
                       check=True, capture_output=True, cwd=root)
        with open(ll) as f:
            lines = sum(1 for _ in f)
        rs = []
        for i in range(runs):
            scratch = os.path.join(root, f"chain{n}-{i}")
            shutil.copytree(lib_only, scratch)
            env = dict(os.environ, CATEN_CACHE_DIR=scratch)
            out = subprocess.run([sys.executable, "-c", CHAIN_CHILD, src, str(n), HERE], env=env,
                                 capture_output=True, text=True, check=True, cwd=scratch).stdout
            rs.append(json.loads(out.strip().splitlines()[-1]))
        comp = [r["compile"] for r in rs]
        call, ref = min(r["call"] for r in rs), min(r["numpy"] for r in rs)
        print(f"| {n} | {statistics.median(comp):.2f} ({min(comp):.2f}) | {lines} | {call * 1e3:.1f} | "
              f"{ref * 1e3:.1f} | {ref / call:.1f}x | {max(r['err'] for r in rs):.1e} |")


def run_once(cache_dir: str, example: str = EXAMPLE) -> dict:
    env = dict(os.environ, CATEN_CACHE_DIR=cache_dir)
    # cwd: started inside the checkout, `python -c` would import its caten/ folder (not a package
    # as installed: the grammar and ops live elsewhere there) instead of the installed caten
    out = subprocess.run([sys.executable, "-c", CHILD, example], env=env, capture_output=True, text=True,
                         check=True, cwd=cache_dir if os.path.isdir(cache_dir) else tempfile.gettempdir()).stdout
    return json.loads(out.strip().splitlines()[-1])


def _bytecode() -> None:
    """Write the installed caten's bytecode first, as `pip install` does: with
    PYTHONDONTWRITEBYTECODE set (some sandboxes set it), every module edited since the last
    write would otherwise be compiled from source in each timed process (40 ms of "elaborate")."""
    import compileall

    import caten.runtimes  # (binds caten too)

    for d in {os.path.dirname(os.path.abspath(caten.__file__)), *caten.runtimes.__path__}:
        compileall.compile_dir(d, quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--chain", action="store_true", help="time the residual layernorm+gelu chain instead")
    ap.add_argument("--models", action="store_true", help="time ResNet-18 and GPT-2 small instead")
    opts = ap.parse_args()
    _bytecode()
    root = tempfile.mkdtemp(prefix="caten-bench-compile-")
    try:
        lib_only = os.path.join(root, "lib")
        # parse the library into it, then keep only what any program's first compile leaves for
        # the next (NN/KEY.lib; NN/KEY.fp, the fingerprints of caten's own code: caten.cache.fingerprint)
        run_once(lib_only)
        for dirpath, _, files in os.walk(lib_only):
            for f in files:
                if not f.endswith((".lib", ".fp")):
                    os.remove(os.path.join(dirpath, f))
        if opts.chain:
            run_chain(root, lib_only, opts.runs)
            return
        if opts.models:
            run_models(root, lib_only, opts.runs)
            return
        # one layer edited: the block with its second layernorm's eps changed, compiled where the
        # original block was compiled before (its units' objects cached, not the program's)
        edited = os.path.join(root, "mixer_edited.lisp")
        with open(EXAMPLE) as f:
            text = f.read()
        at = text.rindex(":eps 1e-5")
        with open(edited, "w") as f:
            f.write(text[:at] + ":eps 1e-6" + text[at + len(":eps 1e-5"):])
        warm = os.path.join(root, "warm")
        shutil.copytree(lib_only, warm)
        run_once(warm)
        results: dict[str, list[dict]] = {"empty cache": [], "library cached": [], "one layer edited": []}
        for i in range(opts.runs):  # alternate, so drift on this shared machine hits all alike
            results["empty cache"].append(run_once(os.path.join(root, f"empty{i}")))
            scratch = os.path.join(root, f"libcopy{i}")
            shutil.copytree(lib_only, scratch)
            results["library cached"].append(run_once(scratch))
            scratch = os.path.join(root, f"warmcopy{i}")
            shutil.copytree(warm, scratch)
            results["one layer edited"].append(run_once(scratch, edited))
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
