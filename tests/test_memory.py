"""Peak memory of the MLP-Mixer block (examples/mlp_mixer.lisp) at the benchmark size of
shared/bench/peers.py (B8 T196 C512, hidden 256/2048) on the llvm runtime.

Measured in a fresh process from the kernel's own accounting: after a warm-up call at a
tiny size (compiles; every dim is symbolic, so the same code serves the big call), the
peak-RSS mark is reset (/proc/self/clear_refs "5"), the block runs once at full size, and
the new peak minus the RSS just before the call is what running it cost: the output, the
arena (packed GEMM panels, kernel-local activation slices) and anything else touched.
The inputs and weights are already resident then; the whole must stay under twice
inputs + weights + outputs. tracemalloc (numpy allocations, arena included) cross-checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys, tracemalloc
import numpy as np
sys.path.insert(0, ROOT)
import caten

def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)

def data(B, T, C, DT, DC):
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)
    return [f(B, T, C), f(C), f(C), f(T, DT), f(DT), f(DT, T), f(T), f(C), f(C), f(C, DC), f(DC), f(DC, C), f(C)]

m = caten.load(os.path.join(ROOT, "examples", "mlp_mixer.lisp"), runtime="llvm", use_cache=False)
m.mixer_block(*data(2, 5, 8, 3, 16))          # compile (symbolic dims), tiny run
args = data(8, 196, 512, 256, 2048)
for a in args:
    a += 0                                    # resident
base = rss("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                              # reset VmHWM to the current RSS
tracemalloc.start()
y = m.mixer_block(*args)
_, traced = tracemalloc.get_traced_memory()
tracemalloc.stop()
peak = rss("VmHWM")
print(json.dumps(dict(io=sum(a.nbytes for a in args) + y.nbytes, inputs=sum(a.nbytes for a in args),
                      extra=peak - base, traced=traced, out=y.nbytes)))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_mixer_peak_memory_under_twice_io():
    # two GEMM threads, as on the benchmark machine: each thread adds its own packed panels
    # (~1.1 MB for f32) to the arena, so the bound is checked at a fixed thread count
    env = dict(os.environ, CATEN_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", f"ROOT = {ROOT!r}\n" + CHILD], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    peak_total = m["inputs"] + m["extra"]     # what is resident at the peak of the call
    assert m["extra"] >= m["out"] * 0.9, m      # the measurement sees at least the output pages
    # + the threads' own packed B blocks (kc x N/2 each: the token GEMM that runs transposed, so
    # that it stores its tiles where they land, packs each image's activations per thread)
    panels = 1 << 20
    # + one image's activations for the second thread: the threads take whole images of the
    # batch (caten.schedule.split.outer_either), each holding its image's layernorm outputs, its
    # residual and the GEMMs' outputs (4 T x C, C x DT and T x DC floats; the GELU stages write
    # over their GEMM's output in place, so they add nothing)
    T, C, DT, DC = 196, 512, 256, 2048
    image = 4 * (4 * T * C + C * DT + T * DC)
    assert peak_total < 2 * m["io"] + panels + image, m
    assert m["inputs"] + m["traced"] < 2 * m["io"] + panels + image, m
