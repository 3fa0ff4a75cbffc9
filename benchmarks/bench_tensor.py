"""caten.Tensor training speed against torch eager and tinygrad, in ONE run, as ratios.

    python benchmarks/bench_tensor.py [--reps 50] [--threads N] [--only mlp,cnn,parts,overhead]

- mlp, cnn: one Adam training step (forward, cross-entropy, backward, update) of
  examples/mnist_tensor.py's models at batch 64 on the digits: caten's step under `caten.jit`
  against the same model, weights and batch in torch eager and in tinygrad under `TinyJit`
  (when tinygrad imports and has a device; its CPU device needs `clang` on PATH). Each system's
  step ends by reading the loss, so queued work is counted. Warm-up calls (traces, compiles) are
  excluded; the systems alternate in rounds, so drift on a shared machine hits all alike; medians.
  For caten the step is also timed in layers: the compiled module's call on the step's arrays,
  and the native code alone, so the table shows where a step's time goes.
- parts: the pieces of the CNN step (its two convolutions, their gradients, max-pool's gradient),
  each compiled as its own program, against torch eager on the same piece: where the step's
  kernel time goes.
- overhead: microseconds per op of building a lazy 100-op elementwise chain (nothing runs), and
  the time to realize it again when its program is cached (printing the graph, the cache lookup
  and the call), against the program call alone and torch eager running the same 100 ops.
A ratio above 1 means caten is faster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import caten
from caten import Tensor, optim
from caten.ir import dims as D

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import mnist_tensor as mt  # noqa: E402
from timing import rounds  # noqa: E402

BATCH, LR = 64, 1e-2


def batch() -> tuple[np.ndarray, np.ndarray]:
    xtr, ytr, _, _ = mt.digits()
    return xtr[:BATCH], ytr[:BATCH]


# caten ----------------------------------------------------------------------------------------------
def caten_step(name: str, x: np.ndarray, y: np.ndarray):
    """(the jitted step, the model's initial weights, {layer: thunk}) where the layers are the
    compiled module's call on the step's inputs (caten.loads' Python call: argument checks,
    output allocation) and the native code alone (the compiled entry on the same pointers)."""
    caten.manual_seed(0)
    model = mt.MODELS[name].build()
    weights = {k: np.array(v) for k, v in model.state_dict().items()}
    step = mt.train_step(model, optim.Adam(model.parameters(), lr=LR))
    xt, yt = Tensor(x), Tensor(np.eye(mt.K, dtype=np.float32)[y])

    def run():
        return step(xt, yt)[0].item()

    run()
    from caten.run.module import check_shapes
    from caten.tensor.realize import program

    traced = next(iter(step.programs.values()))
    if isinstance(traced, list):  # later versions keep several programs per argument shapes
        traced = traced[0]
    fn = program(traced.text, traced.runtime)
    inputs = traced.inputs([xt.numpy(), yt.numpy()])  # arrays for the arguments: both versions take them
    layers = {"module call": lambda: fn(*inputs)}
    prog, exe = fn.program(fn._bind_types(inputs))
    if hasattr(exe, "fn") and hasattr(exe, "arenas"):  # the llvm runtime's executable
        env = check_shapes(prog, inputs)
        outs = [fn._output(prog, o, env) for o in prog.outputs]
        env = {**exe.program.defines, **env}
        size = exe.sched.arena_size
        arena = exe.arenas.pointer(size if isinstance(size, int) else D.evaluate(size, env))
        args = [a.ctypes.data for a in inputs + outs] + [arena] + [int(env[d]) for d in exe.program.dims]
        keep = (inputs, outs)  # the pointers stay valid while the arrays live

        def native(keep=keep):
            return exe.fn(*args)
        layers["native code"] = native
    return run, weights, layers


# torch ----------------------------------------------------------------------------------------------
def torch_step(name: str, weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    import torch

    nn = torch.nn
    if name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(128, 10))
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    xt, yt = torch.tensor(x), torch.tensor(y)

    def run():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    return run


# tinygrad -------------------------------------------------------------------------------------------
def tinygrad_available() -> str | None:
    """None when tinygrad imports and runs here, else why not."""
    try:
        from tinygrad import Tensor as TT

        (TT([1.0, 2.0]) * 2).numpy()
        return None
    except ImportError:
        return "not installed"
    except Exception as e:  # noqa: BLE001 - no usable device (its CPU device compiles with clang)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"


def tinygrad_step(name: str, weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    from tinygrad import Context, TinyJit
    from tinygrad import Tensor as TT
    from tinygrad import nn as tnn

    w = {k: TT(v) for k, v in weights.items()}
    if name == "mlp":
        l1, l2 = tnn.Linear(64, 128), tnn.Linear(128, 10)
        l1.weight, l1.bias, l2.weight, l2.bias = w["1.weight"], w["1.bias"], w["3.weight"], w["3.bias"]
        params = [l1.weight, l1.bias, l2.weight, l2.bias]

        def model(t):
            return l2(l1(t.flatten(1)).relu())
    else:
        c1, c2, lin = tnn.Conv2d(1, 16, 3, padding=1), tnn.Conv2d(16, 32, 3, padding=1), tnn.Linear(128, 10)
        c1.weight, c1.bias, c2.weight, c2.bias = w["0.weight"], w["0.bias"], w["3.weight"], w["3.bias"]
        lin.weight, lin.bias = w["7.weight"], w["7.bias"]
        params = [c1.weight, c1.bias, c2.weight, c2.bias, lin.weight, lin.bias]

        def model(t):
            t = c1(t).relu().max_pool2d((2, 2))
            t = c2(t).relu().max_pool2d((2, 2))
            return lin(t.flatten(1))
    for p in params:
        p.requires_grad = True
    opt = tnn.optim.Adam(params, lr=LR)
    xt, yt = TT(x), TT(y.astype(np.int32))

    @TinyJit
    def jstep(xb, yb):
        opt.zero_grad()
        loss = model(xb).sparse_categorical_crossentropy(yb)
        loss.backward()
        opt.step()
        return loss.realize()

    def run():
        with Context(TRAINING=1):
            return jstep(xt, yt).item()

    return run


# the benchmark ---------------------------------------------------------------------------------------
def bench_training(name: str, reps: int, tg: str | None) -> tuple[dict[str, float], list[str]]:
    x, y = batch()
    run, weights, layers = caten_step(name, x, y)
    fns = {"caten jit": run} | {f"caten {k}": f for k, f in layers.items()}
    notes: list[str] = []
    try:
        fns["torch eager"] = torch_step(name, weights, x, y)
    except ImportError:
        notes.append("torch is not installed")
    if tg is None:
        try:
            fns["tinygrad TinyJit"] = tinygrad_step(name, weights, x, y)
        except Exception as e:  # noqa: BLE001 - a tinygrad version whose API differs
            notes.append(f"tinygrad failed: {type(e).__name__}: {str(e)[:100]}")
    return rounds(fns, reps, warmup=3), notes


def bench_overhead(reps: int) -> list[tuple[str, float]]:
    """(what, microseconds) for graph building, a cached realize and torch eager on the same chain."""
    n = 100
    base = np.random.default_rng(0).random((64, 64), dtype=np.float32)

    def chain(t):
        for i in range(n // 2):
            t = t * 1.0001 + (i * 1e-3)
        return t

    x = Tensor(base)
    t0 = time.perf_counter()
    chain(x)  # the first build: each (op, argument types) is shape-checked by the elaborator once
    first = time.perf_counter() - t0
    builds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        chain(x)
        builds.append(time.perf_counter() - t0)
    chain(x).numpy()  # compiles the chain's program once
    realize = []
    for _ in range(reps):
        y = chain(x)
        t0 = time.perf_counter()
        y.realize()
        realize.append(time.perf_counter() - t0)
    from caten.tensor.emit import Printer
    from caten.tensor.realize import arrays_of, program

    text, params = Printer().program("f", [chain(x).node])
    fn, arrays = program(text, "llvm"), arrays_of(params)
    call = rounds({"call": lambda: fn(*arrays)}, reps, warmup=3)["call"]
    rows = [(f"build one op, first time ({n}-op chain)", first / n * 1e6),
            (f"build one op, shapes known ({n}-op chain)", statistics.median(builds) / n * 1e6),
            (f"realize the {n}-op chain, program cached", statistics.median(realize) * 1e6),
            ("  of which the compiled program's call", call * 1e6)]
    try:
        import torch

        xt = torch.tensor(base)
        rows.append((f"torch eager: run the same {n} ops", rounds({"t": lambda: chain(xt)}, reps, warmup=3)["t"] * 1e6))
    except ImportError:
        pass
    return rows


# the CNN step's pieces, each as its own program: (name, caten text of `f`, input shapes, torch thunk maker)
CONV2 = "(composite c ((x{f32}[64,16,4,4]) (w{f32}[32,16,3,3]) -> (y{f32}[64,32,4,4])) (conv2d x w :padding 1))\n"
PARTS = [
    ("conv1 forward 64x1x8x8 -> 16ch",
     "(composite f ((x{f32}[64,1,8,8]) (w{f32}[16,1,3,3]) -> (y{f32}[64,16,8,8])) (conv2d x w :padding 1))",
     [(64, 1, 8, 8), (16, 1, 3, 3)], lambda F, x, w: lambda: F.conv2d(x, w, padding=1)),
    ("conv2 forward 64x16x4x4 -> 32ch",
     CONV2.replace("(composite c", "(composite f"), [(64, 16, 4, 4), (32, 16, 3, 3)],
     lambda F, x, w: lambda: F.conv2d(x, w, padding=1)),
    ("conv2 input gradient (vjp)",
     CONV2 + "(composite f ((x{f32}[64,16,4,4]) (w{f32}[32,16,3,3]) (g{f32}[64,32,4,4]) -> (y{f32}[64,16,4,4]))"
     " (vjp c x w :wrt x :cotangent g))", [(64, 16, 4, 4), (32, 16, 3, 3), (64, 32, 4, 4)],
     lambda F, x, w, g: lambda: _tgrad(lambda a: F.conv2d(a, w, padding=1), x, g)),
    ("conv2 weight gradient (vjp)",
     CONV2 + "(composite f ((x{f32}[64,16,4,4]) (w{f32}[32,16,3,3]) (g{f32}[64,32,4,4]) -> (y{f32}[32,16,3,3]))"
     " (vjp c x w :wrt w :cotangent g))", [(64, 16, 4, 4), (32, 16, 3, 3), (64, 32, 4, 4)],
     lambda F, x, w, g: lambda: _tgrad(lambda a: F.conv2d(x, a, padding=1), w, g)),
    ("max-pool 2x2 backward 64x16x8x8 (vjp)",
     "(composite c ((x{f32}[64,16,8,8]) -> (y{f32}[64,16,4,4])) (max-pool2d x :kernel 2))\n"
     "(composite f ((x{f32}[64,16,8,8]) (g{f32}[64,16,4,4]) -> (y{f32}[64,16,8,8])) (vjp c x :wrt x :cotangent g))",
     [(64, 16, 8, 8), (64, 16, 4, 4)], lambda F, x, g: lambda: _tgrad(lambda a: F.max_pool2d(a, 2), x, g)),
    ("input gradient of maxpool(relu(conv2(x))) (vjp)",
     "(composite c ((x{f32}[64,16,4,4]) (w{f32}[32,16,3,3]) -> (y{f32}[64,32,2,2]))"
     " (max-pool2d (relu (conv2d x w :padding 1)) :kernel 2))\n"
     "(composite f ((x{f32}[64,16,4,4]) (w{f32}[32,16,3,3]) (g{f32}[64,32,2,2]) -> (y{f32}[64,16,4,4]))"
     " (vjp c x w :wrt x :cotangent g))", [(64, 16, 4, 4), (32, 16, 3, 3), (64, 32, 2, 2)],
     lambda F, x, w, g: lambda: _tgrad(lambda a: F.max_pool2d(F.relu(F.conv2d(a, w, padding=1)), 2), x, g)),
]


def _tgrad(f, x, g):
    import torch

    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x), x, g)[0]


def bench_cnn_parts(reps: int) -> list[tuple[str, float, float | None]]:
    """(piece, caten ms, torch eager ms) for each piece of the CNN step as its own program."""
    rng = np.random.default_rng(0)
    rows = []
    for name, text, shapes, tmake in PARTS:
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        fn = caten.loads(text).f
        fns = {"caten": lambda fn=fn, arrays=arrays: fn(*arrays)}
        try:
            import torch

            fns["torch"] = tmake(torch.nn.functional, *[torch.tensor(a) for a in arrays])
        except ImportError:
            pass
        r = rounds(fns, reps, warmup=3)
        rows.append((name, r["caten"], r.get("torch")))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--only", default="mlp,cnn,parts,overhead")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for caten's GEMMs (CATEN_NUM_THREADS) and torch (set_num_threads); "
                         "default: each its own (the usable CPUs)")
    args = ap.parse_args()
    if args.threads:
        os.environ["CATEN_NUM_THREADS"] = str(args.threads)  # read when a program is compiled
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            pass
    from caten.runtimes.llvm_rt import threads

    print(f"caten GEMMs on up to {threads()} threads")
    tg = tinygrad_available()
    if tg is not None:
        print(f"tinygrad skipped: {tg}")
    try:
        import torch

        print(f"torch {torch.__version__} on {torch.get_num_threads()} threads")
    except ImportError:
        pass
    results: dict[str, dict[str, float]] = {}
    for name in ("mlp", "cnn"):
        if name in args.only:
            results[name], notes = bench_training(name, args.reps, tg)
            for nt in notes:
                print(f"{name}: {nt}")
    if results:
        print(f"\none Adam training step, batch {BATCH} (median ms; ratio = other's time / caten jit's, "
              "> 1: caten faster)")
        print("| model | caten jit | its module call | its native code | torch eager | ratio "
              "| tinygrad TinyJit | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for name, r in results.items():
            c = r["caten jit"]
            cells = [f"{r[k] * 1e3:.3f}" if k in r else "-" for k in ("caten jit", "caten module call",
                                                                      "caten native code")]
            for other in ("torch eager", "tinygrad TinyJit"):
                cells += [f"{r[other] * 1e3:.3f}", f"{r[other] / c:.2f}x"] if other in r else ["-", "-"]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print("(module call: the compiled program's Python call on the step's arrays; native code: the "
              "compiled entry alone;\n the rest of `caten jit` is the jit's Python: reading inputs from "
              "their Tensors, giving outputs back)")
    if "parts" in args.only:
        print("\nthe CNN step's pieces, each its own program (median ms; ratio = torch's time / caten's)")
        print("| piece | caten | torch eager | ratio |\n|---|---|---|---|")
        for what, c, t in bench_cnn_parts(args.reps):
            cells = f"{t * 1e3:.3f} | {t / c:.2f}x" if t is not None else "- | -"
            print(f"| {what} | {c * 1e3:.3f} | {cells} |")
    if "overhead" in args.only:
        print("\nPython overhead of building and realizing lazy Tensors (64x64 f32, median µs)")
        print("| what | µs |\n|---|---|")
        for what, us in bench_overhead(args.reps):
            print(f"| {what} | {us:.1f} |")


if __name__ == "__main__":
    main()
