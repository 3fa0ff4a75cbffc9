"""Runtime control flow (issue #40): caten's LLVM runtime against torch in ONE run, as ratios.

    python benchmarks/bench_control.py [--reps 5] [--only loop,lstm,charlstm] [--threads N]

- loop: the cost of one trip of a compiled `fori` (10^6 trips of a trivial body, the count a
  run-time scalar), against a Python loop of torch eager adds; and the compile time of a 10-trip
  and a 10^6-trip loop (the count a dim), which should be the same code.
- lstm: inference of one LSTM layer (input 256, hidden 256, length 512) at batch 1 and 32, the time
  loop one `scan` with the recurrent GEMM in its body, against torch eager's torch.nn.LSTM (and
  torch.compile, when it compiles within the run).
- charlstm: one training step of examples/char_lstm.lisp (forward scan, reverse-mode gradient and
  Adam, one program) against the same model and optimizer in torch eager, and the sampling of 200
  characters (one program) against torch's Python loop.
torch runs on caten's thread count (torch.set_num_threads). Medians in ms (benchmarks/timing.py's
rounds: systems alternate so drift on a shared machine hits all alike).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from deps import need_or_exit
from timing import rounds

import caten

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

LOOP = """
(composite count ((A{f32}[N]) (K{i64}[]) -> (Y{f32}[N])) (fori (i 0 K) ((acc A)) (next (+ acc 1.0))))
(composite count-dim ((A{f32}[N]) (S{f32}[M]) -> (Y{f32}[N])) (fori (i 0 M) ((acc A)) (next (+ acc 1.0))))
"""

LSTM = """
(composite lstm ((X{f32}[T, B, I]) (Wih{f32}[G, I]) (Whh{f32}[G, H]) (Bias{f32}[G]) (H0{f32}[B, H]) (C0{f32}[B, H])
                 -> (Y{f32}[T, B, H]) (HN{f32}[B, H]) (CN{f32}[B, H]) where G = (* 4 H))
  (setf xw (+ (matmul X (permute Wih [1 0])) Bias))
  (setf wt (permute Whh [1 0]))
  (setf r (scan (lambda (c x)
                  (let ((g (+ x (matmul (nth c 0) wt)))
                        (i (sigmoid (slice g [0 B 1] [0 H 1])))
                        (f (sigmoid (slice g [0 B 1] [H (* 2 H) 1])))
                        (gg (tanh (slice g [0 B 1] [(* 2 H) (* 3 H) 1])))
                        (o (sigmoid (slice g [0 B 1] [(* 3 H) (* 4 H) 1])))
                        (cn (+ (* f (nth c 1)) (* i gg))))
                    (next (list (* o (tanh cn)) cn) (* o (tanh cn)))))
                [H0 C0] X))
  (return (nth r 1) (nth (nth r 0) 0) (nth (nth r 0) 1)))
""".replace("[H0 C0] X))", "[H0 C0] xw))")


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        name = ""
    return f"{name or platform.processor()}, {os.cpu_count()} CPUs"


def bench_loop(reps: int, torch) -> list[tuple[str, str, float]]:
    """Per-trip µs of a 10^6-trip fori (run-time count) and of torch eager's Python loop; compile
    seconds of a 10-trip and a 10^6-trip loop (the count a dim, no cache)."""
    mod = caten.loads(LOOP, runtime="llvm")
    a, n = np.zeros(1, np.float32), 10 ** 6
    assert float(mod.count(a, np.int64(n))[0]) == n
    fns = {"caten fori": lambda: mod.count(a, np.int64(n))}
    per = {"caten fori": n}
    if torch is not None:
        x, nt = torch.zeros(1), 10 ** 5

        def eager():
            y = x
            for _ in range(nt):
                y = y + 1.0
            return y
        fns["torch eager Python loop"], per["torch eager Python loop"] = eager, nt
    med = rounds(fns, max(3, reps // 2))
    rows = [("loop trip (µs)", k, v / per[k] * 1e6) for k, v in med.items()]
    for m in (10, 10 ** 6):
        t0 = time.perf_counter()
        c = caten.loads(LOOP, runtime="llvm", defines={"M": m}, use_cache=False)
        assert float(c.count_dim(a, np.zeros(m, np.float32))[0]) == m
        rows.append((f"compile (no cache) + first call, {m}-trip loop (s)", "caten", time.perf_counter() - t0))
    return rows


def bench_lstm(reps: int, torch) -> list[tuple[str, str, float]]:
    mod = caten.loads(LSTM, runtime="llvm")
    return [row for b in (1, 32) for row in _lstm_case(mod, b, reps, torch)]


def _lstm_case(mod, b: int, reps: int, torch) -> list[tuple[str, str, float]]:
    """One layer, input 256, hidden 256, length 512, batch b: caten's scan vs torch.nn.LSTM."""
    h = i = 256
    t = 512
    rng = np.random.default_rng(0)
    x = rng.standard_normal((t, b, i)).astype(np.float32)
    s = 1 / np.sqrt(h)
    wih, whh = (rng.uniform(-s, s, (4 * h, n)).astype(np.float32) for n in (i, h))
    bias = rng.uniform(-2 * s, 2 * s, 4 * h).astype(np.float32)
    z = np.zeros((b, h), np.float32)
    t0 = time.perf_counter()
    y = mod.lstm(x, wih, whh, bias, z, z)[0]
    rows = [(f"load + first call (cache as found), LSTM B{b} (s)", "caten", time.perf_counter() - t0)]
    fixed = caten.loads(LSTM, runtime="llvm", defines={"T": t, "B": b, "I": i, "H": h})
    fixed.lstm(x, wih, whh, bias, z, z)
    # (symbolic dims: one program for every shape; bound ones: the body's loops have constant
    # extents, which LLVM unrolls and vectorizes -- as torch.compile specializes on shapes)
    fns = {"caten": lambda: mod.lstm(x, wih, whh, bias, z, z),
           "caten, shapes bound (-D)": lambda: fixed.lstm(x, wih, whh, bias, z, z)}
    if torch is not None:
        lstm = torch.nn.LSTM(i, h)
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(torch.tensor(wih))
            lstm.weight_hh_l0.copy_(torch.tensor(whh))
            lstm.bias_ih_l0.copy_(torch.tensor(bias))
            lstm.bias_hh_l0.zero_()
            xt = torch.tensor(x)
            err = float(np.abs(lstm(xt)[0].numpy() - y).max())
        print(f"LSTM B{b}: caten vs torch max abs error {err:.2e}")

        def eager():
            with torch.no_grad():
                return lstm(xt)
        fns["torch eager"] = eager
        try:
            t0 = time.perf_counter()
            cl = torch.compile(lstm)
            with torch.no_grad():
                cl(xt)
            print(f"torch.compile LSTM B{b}: compiled in {time.perf_counter() - t0:.1f} s")

            def compiled():
                with torch.no_grad():
                    return cl(xt)
            fns["torch.compile"] = compiled
        except Exception as e:  # noqa: BLE001 - torch.compile needs a C compiler and may fail here
            print(f"torch.compile unavailable: {type(e).__name__}: {str(e)[:120]}")
    med = rounds(fns, reps, burst=2, settle=0.2)
    return rows + [(f"LSTM inference B{b} (ms)", k, v * 1e3) for k, v in med.items()]


def bench_charlstm(reps: int, torch) -> list[tuple[str, str, float]]:
    import char_lstm as ex

    ids, chars = ex.encode(ex.corpus())
    v, h, t, b, n = len(chars), 128, 32, 16, 200
    theta = ex.init(v, h)
    x, y = ex.batch(ids, t, b, np.random.default_rng(1))
    t0 = time.perf_counter()
    cm = ex.CatenModel(theta, v, h, "llvm")
    loss = cm.step(x, y)
    wl = f"load + first call (cache as found), char-LSTM step V{v} H{h} T{t} B{b} (s)"
    rows = [(wl, "caten", time.perf_counter() - t0)]
    prime = ids[:8]
    fns_step = {"caten": lambda: cm.step(x, y)}
    fns_smp = {"caten": lambda: cm.sample(prime, n)}
    if torch is not None:
        tm = ex.TorchModel(theta, v, h)
        np.testing.assert_allclose(loss, tm.step(x, y), rtol=1e-4)
        fns_step["torch eager"] = lambda: tm.step(x, y)
        fns_smp["torch eager Python loop"] = lambda: tm.sample(prime, n)
    med = rounds(fns_step, reps, burst=3, settle=0.2)
    rows += [(f"char-LSTM training step V{v} H{h} T{t} B{b} (ms)", k, s * 1e3) for k, s in med.items()]
    med = rounds(fns_smp, reps, burst=2, settle=0.2)
    rows += [(f"char-LSTM sampling {n} chars, H{h} (ms)", k, s * 1e3) for k, s in med.items()]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="loop,lstm,charlstm")
    ap.add_argument("--threads", type=int, default=None, help="CATEN_NUM_THREADS and torch.set_num_threads")
    args = ap.parse_args()
    if args.threads:
        os.environ["CATEN_NUM_THREADS"] = str(args.threads)  # read when a program is compiled
    from caten.plugin import threads

    torch = None
    try:
        torch = need_or_exit("bench_control.py", "torch", "torch", "the comparison")
        torch.set_num_threads(threads())
    except SystemExit as e:
        print(e)
    print(f"# bench_control (llvm) on {machine()}; caten and torch on {threads()} threads"
          + (f", torch {torch.__version__}" if torch is not None else ", torch not installed") + "\n")
    rows = []
    for name in args.only.split(","):
        rows += {"loop": bench_loop, "lstm": bench_lstm, "charlstm": bench_charlstm}[name](args.reps, torch)
    print("\n| workload | system | value |\n|---|---|---|")
    for wl, k, v in rows:
        print(f"| {wl} | {k} | {v:.3g} |")
    base = {wl: v for wl, k, v in rows if k == "caten" or k == "caten fori"}
    print()
    for wl, k, v in rows:
        if not k.startswith("caten") and wl in base:
            print(f"{wl}: caten is {v / base[wl]:.2f}x {k}'s speed")


if __name__ == "__main__":
    main()
