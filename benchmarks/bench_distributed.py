"""Data-parallel training on 1, 2 and 4 processes of this machine (gloo over 127.0.0.1), and the
cost model that predicts it -- and 1-64 nodes -- from bandwidth, latency and the roofline:

    python benchmarks/bench_distributed.py [--procs 1,2,4] [--steps 5] [--models mixer,gpt2] [--gpt2-layers 12]

Models (caten.nn, random weights, one jitted step each: forward, backward with the gradients
all-reduced in the step's program by caten.nn.DistributedDataParallel, SGD):
  mixer  an MLP-Mixer of 4 blocks (64 tokens, 256 channels) on a global batch of 16
  gpt2   a GPT-2-small-shaped decoder (768 wide, 12 heads, vocabulary 50257; --gpt2-layers of 12)
         on a global batch of 4 sequences of 64 tokens
The global batch is split over the ranks (the same training as one process on the whole batch).

Per process count, rank 0 reports: the step time (median), the compute alone (the same step of
the unwrapped model on this rank's shard: no collective), the collective alone (an all-reduce
of the gradients' bytes through torch.distributed, median), and the overlap achieved:
(compute + collective - step) / collective, clipped to [0, 1].

The cost model (docs/scaling.md): a ring all-reduce of n bytes over p processes takes
2(p-1) alpha + 2(p-1)/p n / beta; alpha and beta of this machine's loopback are fitted from the
2-process run's all-reduces of 4 KiB and of the gradients. Compute per step is the 1-process
compute time, times max(1, p * threads / cores) when p processes share this machine's cores. The
step is compute + (1 - overlap) * collective. For 1-64 nodes (one process per node, each node
this machine, the per-node batch fixed) the same formula runs with a network's alpha and beta
(25 and 100 Gb/s Ethernet/InfiniBand-like links, 25 us latency) and the roofline's compute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

NETWORKS = {"25 Gb/s": (25e-6, 25e9 / 8), "100 Gb/s": (25e-6, 100e9 / 8)}  # (alpha s, beta bytes/s)
NODES = (1, 2, 4, 8, 16, 32, 64)


# models ------------------------------------------------------------------------------------------

def mixer(rt: str):
    import caten.nn as nn

    class Block(nn.Module):
        def __init__(self, tokens: int, ch: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(ch), nn.LayerNorm(ch)
            self.t1, self.t2 = nn.Linear(tokens, 2 * tokens), nn.Linear(2 * tokens, tokens)
            self.c1, self.c2 = nn.Linear(ch, 4 * ch), nn.Linear(4 * ch, ch)
            self.act = nn.GELU()

        def forward(self, x):
            y = self.t2(self.act(self.t1(self.n1(x).transpose(1, 2)))).transpose(1, 2)
            x = x + y
            return x + self.c2(self.act(self.c1(self.n2(x))))

    class Mixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(16, 256)
            self.blocks = nn.ModuleList([Block(64, 256) for _ in range(4)])
            self.out = nn.Linear(256, 10)

        def forward(self, x):
            x = self.inp(x)
            for b in self.blocks:
                x = b(x)
            return self.out(x.mean(1))

    def batch(rng):
        return rng.standard_normal((16, 64, 16)).astype(np.float32), rng.integers(0, 10, 16)

    return Mixer(), batch, 10


def gpt2(rt: str, layers: int):
    import caten
    import caten.nn as nn

    W, H, V, T = 768, 12, 50257, 64

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(W), nn.LayerNorm(W)
            self.qkv, self.proj = nn.Linear(W, 3 * W), nn.Linear(W, W)
            self.fc, self.out = nn.Linear(W, 4 * W), nn.Linear(4 * W, W)
            self.act = nn.GELU()

        def forward(self, x):
            b = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(W, dim=-1)
            q, k, v = (t.reshape(b, T, H, W // H).transpose(1, 2) for t in (q, k, v))
            s = (q @ k.transpose(-1, -2)) * (1.0 / 8.0)
            mask = caten.Tensor(np.triu(np.ones((T, T), bool), 1), runtime=rt)
            a = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, T, W))
            return x + self.out(self.act(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, W), nn.Embedding(T, W)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(W)
            self.head = nn.Linear(W, V, bias=False)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(caten.Tensor(np.arange(T), runtime=rt))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x)).reshape(-1, V)

    def batch(rng):
        ids = rng.integers(0, V, (4, T))
        return ids, rng.integers(0, V, 4 * T)

    return GPT(), batch, V


# one rank ----------------------------------------------------------------------------------------

def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import caten
    import caten.distributed as cd
    import caten.functional as F

    cd.init(timeout=600)
    p, r = cd.world_size(), cd.rank()
    net, batch, _ = mixer(a.runtime) if a.model == "mixer" else gpt2(a.runtime, a.gpt2_layers)
    x, y = batch(np.random.default_rng(0))
    n = len(y) if a.model == "mixer" else x.shape[0]
    lo, hi = r * n // p, (r + 1) * n // p
    xs = x[lo:hi]
    ys = y[lo:hi] if a.model == "mixer" else y.reshape(n, -1)[lo:hi].reshape(-1)
    xt, yt = caten.Tensor(xs, runtime=a.runtime), caten.Tensor(ys, runtime=a.runtime)
    params = sum(int(np.prod(t.shape)) for t in net.parameters())

    def stepper(model):
        opt = caten.optim.SGD(model.parameters(), lr=1e-3)

        def step(a_, b_):
            opt.zero_grad()
            loss = F.cross_entropy(model(a_), b_)
            loss.backward()
            opt.step()
            return loss
        return caten.jit(step)

    def timed(run, reps: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        run(xt, yt).numpy()  # compile + first step
        first = time.perf_counter() - t0
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run(xt, yt).numpy()
            ts.append(time.perf_counter() - t0)
        return first, statistics.median(ts)

    compute_first, compute = timed(stepper(net), a.steps)  # no collective: this rank's shard alone
    dist.barrier()
    first, step = timed(stepper(cd.DistributedDataParallel(net)), a.steps)
    grads = torch.zeros(params, dtype=torch.float32)
    small = torch.zeros(1024, dtype=torch.float32)

    def allreduce(t: torch.Tensor) -> float:
        ts = []
        for _ in range(5):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    comm, comm_small = (allreduce(grads), allreduce(small)) if p > 1 else (0.0, 0.0)
    if r == 0:
        with open(a.out, "w") as f:
            json.dump({"p": p, "params": params, "step": step, "compute": compute, "comm": comm,
                       "comm_small": comm_small, "compile": first, "compute_compile": compute_first}, f)
    cd.shutdown()


def launch(model: str, p: int, a: argparse.Namespace) -> dict:
    from caten.distributed import free_port

    port = free_port()
    cores = os.cpu_count() or 2
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        procs = []
        for r in range(p):
            env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(p), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "CATEN_NUM_THREADS": str(max(1, cores // p))}
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--model", model, "--out", out,
                                           "--steps", str(a.steps), "--runtime", a.runtime,
                                           "--gpt2-layers", str(a.gpt2_layers)], env=env))
        try:
            for pr in procs:
                pr.wait(timeout=a.timeout)
        finally:
            for pr in procs:
                if pr.poll() is None:
                    pr.kill()
        if any(pr.returncode for pr in procs):
            raise SystemExit(f"{model} on {p} processes failed: exit codes {[pr.returncode for pr in procs]}")
        with open(out) as f:
            return json.load(f)


# the cost model ----------------------------------------------------------------------------------

def ring(n: float, p: int, alpha: float, beta: float) -> float:
    """Seconds of a ring all-reduce of n bytes over p processes."""
    return 0.0 if p < 2 else 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta


def fit(rows: dict[int, dict]) -> tuple[float, float] | None:
    """(alpha, beta) of this machine's loopback from the 2-process all-reduces (4 KiB and the grads)."""
    two = rows.get(2)
    if not two or two["comm"] <= two["comm_small"]:
        return None
    n = 4.0 * two["params"]
    beta = (n - 4096.0) / (two["comm"] - two["comm_small"])  # 2(p-1)/p = 1 at p = 2
    alpha = max(1e-7, (two["comm_small"] - 4096.0 / beta) / 2)
    return alpha, beta


def report(model: str, rows: dict[int, dict], flops: float | None) -> None:
    cores = os.cpu_count() or 2
    print(f"\n## {model}: {rows[min(rows)]['params'] / 1e6:.2f} M parameters, "
          f"{4 * rows[min(rows)]['params'] / 1e6:.1f} MB of gradients a step")
    ab = fit(rows)
    base = rows.get(1)
    print("| processes | step ms | compute ms | all-reduce ms | overlap | predicted step ms |")
    print("|---|---|---|---|---|---|")
    for p, r in sorted(rows.items()):
        over = 0.0 if r["comm"] <= 0 else min(1.0, max(0.0, (r["compute"] + r["comm"] - r["step"]) / r["comm"]))
        pred = "-"
        if ab and base:
            comp = base["compute"] * max(1.0, p / cores)
            pred = f"{1e3 * (comp + ring(4.0 * r['params'], p, *ab)):.1f}"
        print(f"| {p} | {1e3 * r['step']:.1f} | {1e3 * r['compute']:.1f} | {1e3 * r['comm']:.1f} | {over:.2f} | "
              f"{pred} |")
    if ab:
        print(f"loopback fit: alpha {1e6 * ab[0]:.0f} us, beta {ab[1] / 1e9:.2f} GB/s")
    if not base:
        return
    comp = base["compute"]
    if flops:
        from caten.compile.roofline import roofline

        peak = roofline().peak_gflops * 1e9
        print(f"compute a step: {1e3 * comp:.1f} ms measured, {1e3 * flops / peak:.1f} ms at the roofline's peak "
              f"({flops / comp / 1e9:.1f} of {peak / 1e9:.0f} GF/s)")
    n = 4.0 * base["params"]
    print("\nweak scaling on paper (one process per node, this machine's compute per node, no overlap):")
    print("| nodes | " + " | ".join(f"{k}: step ms, efficiency" for k in NETWORKS) + " |")
    print("|---|" + "---|" * len(NETWORKS))
    for p in NODES:
        cells = []
        for alpha, beta in NETWORKS.values():
            t = comp + ring(n, p, alpha, beta)
            cells.append(f"{1e3 * t:.1f}, {comp / t:.2f}")
        print(f"| {p} | " + " | ".join(cells) + " |")


def step_flops(model: str, params: int, layers: int) -> float:
    """Multiply-adds x 2 of forward and backward (6 per parameter per token, plus attention)."""
    if model == "gpt2":
        tokens, T, W = 4 * 64, 64, 768
        dense = params - 50257 * W - T * W  # (the embeddings' rows are gathered, not multiplied)
        return 6.0 * dense * tokens + layers * 12.0 * tokens * T * W
    return 6.0 * params * 16 * 64


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", default="1,2,4")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="mixer,gpt2")
    ap.add_argument("--gpt2-layers", type=int, default=12)
    ap.add_argument("--runtime", default="llvm")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--model", default="mixer")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    print(f"data-parallel training, {os.cpu_count()} CPUs, runtime {a.runtime} (gloo over 127.0.0.1)")
    for model in a.models.split(","):
        rows = {p: launch(model, p, a) for p in map(int, a.procs.split(","))}
        first = rows[min(rows)]
        report(model, rows, step_flops(model, first["params"], a.gpt2_layers))


if __name__ == "__main__":
    main()
