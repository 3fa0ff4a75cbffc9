"""Causal attention, batch 1, 12 heads, head dim 64, at 1k, 4k and 16k tokens: caten's plain
composite `softmax(Q Kᵀ / 8 + mask) V` against torch's `scaled_dot_product_attention(is_causal=True)`
on the CPU, forward and forward+backward, each system in a fresh process:

    python benchmarks/bench_attention.py [--tokens 1024,4096,16384] [--backward 1024,4096] [--reps 3]

Reported per length: the median call time, the growth of the process's peak resident memory
(ru_maxrss) over the calls (libraries loaded and the program compiled before), and caten's arena
(the scratch its schedule plans: linear in the tokens when the row blocks of
caten.schedule.rowblock apply). The outputs are checked against torch's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

FWD = """
(composite att ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) -> (O{f32}[H, S, 64]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf s (where (<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1])) s -inf))
  (return (matmul (softmax s :axis -1) V)))
(composite att-grad ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) (G{f32}[H, S, 64])
                     -> (dQ{f32}[H, S, 64]) (dK{f32}[H, S, 64]) (dV{f32}[H, S, 64]))
  (setf g (vjp att Q K V :wrt [Q K V] :cotangent G))
  (return (nth g 0) (nth g 1) (nth g 2)))
"""

CHILD = r"""
import json, resource, statistics, sys, time
import numpy as np
system, S, backward, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
H = 12
rng = np.random.default_rng(0)
q, k, v, g = (rng.standard_normal((H, S, 64)).astype(np.float32) for _ in range(4))
arena = None
if system == "caten":
    import caten
    from caten import pipeline
    from caten.plugin import get
    m = caten.loads(sys.argv[5], runtime="llvm", defines={"H": H, "S": S})
    comp = m.att_grad if backward else m.att
    prog = comp.elaborate({})
    text = pipeline.emit(get("llvm"), prog, "schedule")[".txt"]
    arena = int(text.split("arena ")[1].split(" bytes")[0])
    run = (lambda: comp(q, k, v, g)) if backward else (lambda: comp(q, k, v))
    comp.program({})
else:
    import torch
    torch.set_num_threads(2)
    tq, tk, tv = (torch.from_numpy(x)[None].requires_grad_(backward) for x in (q, k, v))
    tg = torch.from_numpy(g)[None]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    def run():
        o = sdpa(tq, tk, tv, is_causal=True)
        if not backward:
            return o.detach().numpy()[0]
        return [t[0].numpy() for t in torch.autograd.grad(o, (tq, tk, tv), tg)]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # (libraries loaded, the program compiled)
out = run()
ts = []
for _ in range(reps):
    t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
np.save(sys.argv[6], np.concatenate([np.ravel(x) for x in (out if isinstance(out, (list, tuple)) else [out])]))
print(json.dumps({"s": statistics.median(ts), "mem": (peak - base) * 1024, "arena": arena}))
"""


def child(system: str, S: int, backward: bool, reps: int, out: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, system, str(S), "1" if backward else "0", str(reps), FWD, out],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    import os
    import tempfile

    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1024,4096,16384")
    ap.add_argument("--backward", default="1024,4096")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print("causal attention, 12 heads x 64, batch 1 (caten llvm; torch SDPA on 2 threads)")
    print("| tokens | pass | caten | torch SDPA | torch/caten | caten memory (arena) | torch memory | max |err| |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        jobs = [(S, False) for S in map(int, a.tokens.split(","))] if a.tokens else []
        jobs += [(S, True) for S in map(int, a.backward.split(","))] if a.backward else []
        for S, bwd in jobs:
            rc, rt = child("caten", S, bwd, a.reps, os.path.join(d, "c.npy")), \
                child("torch", S, bwd, a.reps, os.path.join(d, "t.npy"))
            if "error" in rc or "error" in rt:
                what = "fwd+bwd" if bwd else "fwd"
                print(f"| {S} | {what} | {rc.get('error', '')} | {rt.get('error', '')} | | | | |")
                continue
            err = float(np.abs(np.load(os.path.join(d, "c.npy")) - np.load(os.path.join(d, "t.npy"))).max())
            print(f"| {S} | {'fwd+bwd' if bwd else 'fwd'} | {1e3 * rc['s']:.1f} ms | {1e3 * rt['s']:.1f} ms | "
                  f"{rt['s'] / rc['s']:.2f}x | {rc['mem'] / 2**20:.0f} MB ({rc['arena'] / 2**20:.0f} MB) | "
                  f"{rt['mem'] / 2**20:.0f} MB | {err:.1e} |")


if __name__ == "__main__":
    main()
