"""Indexed ops against torch eager (and numpy where it has the op), in ONE run, as ratios.

    python benchmarks/bench_index.py [--reps 7] [--runtime llvm]

- sort: a stable sort of 1M f32 (`SORT` + `GATHER`: values and indices) against
  `torch.sort(stable=True)` (torch's default, unstable sort is shown too) and `np.sort(kind="stable")`;
- topk: the 16 largest of 1M f32 (caten sorts the whole line) against `torch.topk`;
- scatter_add: 1M rows of 16 f32 added into 4096 rows (`SCATTER add`) against `index_add_` and
  `np.add.at`;
- embedding backward: the gradient of a GPT-2-sized embedding lookup (50257 x 768, 2048 tokens) as
  caten differentiates it (`GATHER`'s VJP, a `SCATTER add` into zeros) against torch's backward of
  `F.embedding`.
Each system's call returns its result array (torch's `.numpy()` is free); caten's compile happens in
the warm-up; medians over alternating rounds (benchmarks/timing.py). A ratio above 1: caten is faster.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

import caten

sys.path.insert(0, os.path.dirname(__file__))
from deps import need_or_exit  # noqa: E402
from timing import rounds  # noqa: E402


def _machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        name = ""
    return f"{name or platform.processor()}, {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--runtime", default="llvm")
    a = ap.parse_args(argv)
    torch = need_or_exit("bench_index.py", "torch", "torch", "comparing with torch")

    rng = np.random.default_rng(0)
    rt = a.runtime
    rows: list[tuple[str, dict[str, float]]] = []

    x = rng.standard_normal(1 << 20).astype(np.float32)
    tx = torch.from_numpy(x)
    srt = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N] I{i64}[N])) (setf s (sort X)) "
                      "(return (nth s 0) (nth s 1)))", runtime=rt)
    top = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[16] I{i64}[16])) (setf s (topk X 16)) "
                      "(return (nth s 0) (nth s 1)))", runtime=rt)
    assert np.array_equal(srt.f(x)[1], torch.sort(tx, stable=True).indices.numpy())
    assert np.array_equal(top.f(x)[1], torch.topk(tx, 16).indices.numpy())
    rows.append(("sort 1M f32 (stable)", rounds({
        "caten": lambda: srt.f(x), "torch stable": lambda: torch.sort(tx, stable=True),
        "torch": lambda: torch.sort(tx), "numpy stable": lambda: np.sort(x, kind="stable")}, a.reps)))
    rows.append(("topk 16 of 1M f32", rounds({"caten": lambda: top.f(x), "torch": lambda: torch.topk(tx, 16)},
                                             a.reps)))

    n, d, v = 1 << 20, 16, 4096
    idx = rng.integers(0, v, n)
    src = rng.standard_normal((n, d)).astype(np.float32)
    base = np.zeros((v, d), np.float32)
    sca = caten.loads("(composite f ((X{f32}[V, D] I{i64}[N] S{f32}[N, D]) -> (Y{f32}[V, D])) "
                      "(return (SCATTER X (expand (reshape I [N 1]) [N D]) S :axis 0 :op add)))", runtime=rt)
    ti, ts, tb = torch.from_numpy(idx), torch.from_numpy(src), torch.from_numpy(base)

    def np_add_at() -> np.ndarray:
        y = base.copy()
        np.add.at(y, idx, src)
        return y

    np.testing.assert_allclose(sca.f(base, idx, src), tb.clone().index_add_(0, ti, ts).numpy(), rtol=1e-4, atol=1e-3)
    rows.append(("scatter_add 1M rows x 16 into 4096", rounds({
        "caten": lambda: sca.f(base, idx, src), "torch": lambda: tb.clone().index_add_(0, ti, ts),
        "numpy": np_add_at}, a.reps)))

    vv, dd, t = 50257, 768, 2048
    tok = rng.integers(0, vv, t)
    w = np.zeros((vv, dd), np.float32)
    g = rng.standard_normal((t, dd)).astype(np.float32)
    emb = caten.loads("(composite e ((W{f32}[V, D] T{i64}[N] G{f32}[N, D]) -> (L{f32}[])) "
                      "(return (sum (* (take W T :axis 0) G))))\n"
                      "(composite f ((W{f32}[V, D] T{i64}[N] G{f32}[N, D]) -> (DW{f32}[V, D])) "
                      "(return (grad e W T G :wrt W)))", runtime=rt)
    tw = torch.zeros((vv, dd), requires_grad=True)
    tt, tg = torch.from_numpy(tok), torch.from_numpy(g)

    def torch_emb() -> object:
        tw.grad = None
        torch.nn.functional.embedding(tt, tw).backward(tg)
        return tw.grad

    torch_emb()
    np.testing.assert_allclose(emb.f(w, tok, g), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    rows.append(("embedding backward 50257x768, 2048 tokens", rounds({
        "caten": lambda: emb.f(w, tok, g), "torch": torch_emb}, a.reps)))

    print(f"# bench_index ({rt}) on {_machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| workload | caten ms | peer | peer ms | caten speed vs peer |\n|---|---|---|---|---|")
    for name, ts in rows:
        for peer, s in ts.items():
            if peer != "caten":
                print(f"| {name} | {ts['caten'] * 1e3:.1f} | {peer} | {s * 1e3:.1f} | {s / ts['caten']:.2f}x |")


if __name__ == "__main__":
    main()
