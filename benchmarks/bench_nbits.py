"""Weight-only 4-bit GEMV (batch-1 decode) against caten's f32 GEMV and onnxruntime's MatMulNBits:

    python benchmarks/bench_nbits.py [--reps 30] [--cold] [--shapes 768x768,4096x4096]

For each weight shape K x N (GPT-2 small's 768x768, 768x3072, 3072x768, and 4096x4096), block 32,
one row x [1 K]:

  int4      caten `(matmul-nbits x B S)` (ops/quant.lisp), llvm runtime: packed codes, scales
  int8      the same with 8-bit codes (`:bits 8`)
  f32-nk    caten `(matmul x (transpose W))`, W [N K] (row dot products)
  f32-kn    caten `(matmul x W)`, W [K N]
  ort-int4  onnxruntime's com.microsoft MatMulNBits (CPU, accuracy_level 0, as many threads as caten)

The time is the minimum over --reps alternating rounds (`timing.rounds`'s order, min instead of
median); with --cpu-time every system runs on one thread and is timed by that thread's CPU time,
which other processes' time slices do not inflate (their cache traffic still does). Ratios: the
f32 GEMVs' best time over int4's (> 1: int4 is faster, i.e. more decode tokens/s for a model of
such layers), and ort-int4 over int4. With --cold a 64 MB buffer is swept before every call, so
the weights come from DRAM as in a decode step through a model larger than the last-level cache
(GPT-2 small in f32 is 500 MB); without it the same weights stay cached between calls (the f32
ones too when they fit: a lower bound of int4's advantage). Every result is
first checked against the f64 dequantized product.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from deps import need_or_exit

SRC = """
(composite int4 ((X{f32}[1 K] B{u8}[N KB J] S{f32}[NS]) -> (Y{f32}[1 N])) (matmul-nbits X B S))
(composite int8 ((X{f32}[1 K] B{u8}[N KB J8] S{f32}[NS]) -> (Y{f32}[1 N])) (matmul-nbits X B S :bits 8))
(composite f32-nk ((X{f32}[1 K] W{f32}[N K]) -> (Y{f32}[1 N])) (matmul X (transpose W)))
(composite f32-kn ((X{f32}[1 K] W{f32}[K N]) -> (Y{f32}[1 N])) (matmul X W))
"""
SHAPES = "768x768,768x3072,3072x768,4096x4096"  # K x N
BLOCK = 32


def _ort_session(K: int, N: int, B: np.ndarray, S: np.ndarray, threads: int):
    ort = need_or_exit("bench_nbits.py", "onnxruntime", "oracles", "the onnxruntime column")
    need_or_exit("bench_nbits.py", "onnx", "onnx", "the onnxruntime column")
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=K, N=N, bits=4,
                            block_size=BLOCK, accuracy_level=0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])],
                          [numpy_helper.from_array(B, "B"), numpy_helper.from_array(S, "S")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _dequantized(B: np.ndarray, S: np.ndarray, K: int) -> np.ndarray:
    q = np.empty(B.shape[:2] + (2 * B.shape[2],), np.float64)
    q[..., 0::2], q[..., 1::2] = B & 15, B >> 4
    return ((q - 8.0) * S.reshape(B.shape[0], -1, 1)).reshape(B.shape[0], -1)[:, :K]


def _min_rounds(fns: dict[str, Callable[[], object]], reps: int, flush: Callable[[], None] | None,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Minimum seconds of each callable over `reps` rounds, the systems alternating in each."""
    for f in fns.values():
        f()
    best = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            if flush is not None:
                flush()
            t0 = clock()
            f()
            best[k] = min(best[k], clock() - t0)
    return best


def _shape(K: int, N: int, reps: int, ort: bool, threads: int, flush: Callable[[], None] | None,
           clock: Callable[[], float]) -> dict[str, float]:
    """Best seconds of each system on one K x N weight, after checking each one's result."""
    import caten

    KB = -(-K // BLOCK)
    mod = caten.loads(SRC, runtime="llvm",
                      defines={"K": K, "N": N, "KB": KB, "J": BLOCK // 2, "J8": BLOCK, "NS": N * KB})
    rng = np.random.default_rng(K * 7919 + N)
    x = rng.standard_normal((1, K)).astype(np.float32)
    B = rng.integers(0, 256, (N, KB, BLOCK // 2), dtype=np.uint8)
    S = (rng.random(N * KB) * 0.02).astype(np.float32)
    B8 = rng.integers(0, 256, (N, KB, BLOCK), dtype=np.uint8)
    W = _dequantized(B, S, K)
    W32 = W.astype(np.float32)
    fns: dict[str, Callable[[], object]] = {"int4": partial(mod.int4, x, B, S), "int8": partial(mod.int8, x, B8, S),
                                            "f32-nk": partial(mod.f32_nk, x, W32),
                                            "f32-kn": partial(mod.f32_kn, x, np.ascontiguousarray(W32.T))}
    if ort:
        sess = _ort_session(K, N, B, S, threads)
        fns["ort-int4"] = partial(sess.run, None, {"A": x})
    W8 = ((B8 - 128.0) * S.reshape(N, KB, 1)).reshape(N, -1)[:, :K]
    for k, f in fns.items():
        w = W8 if k == "int8" else W
        want = x.astype(np.float64) @ w.T
        tol = 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w).T) + 1e-30
        y = f()
        err = np.abs(np.asarray(y[0] if isinstance(y, list) else y, np.float64) - want)
        assert (err <= tol).all(), f"{k} {K}x{N}: off by {err.max()}"
    return _min_rounds(fns, reps, flush, clock)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--cold", action="store_true", help="sweep 64 MB before every call (weights from DRAM)")
    ap.add_argument("--shapes", default=SHAPES, help="K x N pairs, comma separated")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread each, timed by the thread's CPU time (steadier on a loaded machine)")
    args = ap.parse_args()
    if args.cpu_time:
        os.environ["CATEN_NUM_THREADS"] = "1"
    from caten.plugin import threads as caten_threads

    threads = caten_threads()
    scratch = np.ones(1 << 24, np.float32)  # 64 MB

    def flush() -> None:
        scratch[::16] += 1.0  # touches every 64-byte line

    mode = "cold (64 MB swept before each call)" if args.cold else "hot"
    mode += ", thread CPU time" if args.cpu_time else ""
    print(f"batch-1 GEMV, block {BLOCK}, {threads} thread(s), {mode}, min of {args.reps} rounds, microseconds")
    cols = ["int4", "int8", "f32-nk", "f32-kn"] + ([] if args.no_ort else ["ort-int4"])
    ratios = ["f32/int4"] + ([] if args.no_ort else ["ort/int4"])
    print(f"{'K x N':>11} " + " ".join(f"{c:>9}" for c in cols + ratios))
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        t = _shape(K, N, args.reps, not args.no_ort, threads, flush if args.cold else None,
                   time.thread_time if args.cpu_time else time.perf_counter)
        row = [t[c] * 1e6 for c in cols] + [min(t["f32-nk"], t["f32-kn"]) / t["int4"]]
        row += [] if args.no_ort else [t["ort-int4"] / t["int4"]]
        print(f"{shape:>11} " + " ".join(f"{v:9.1f}" for v in row[:len(cols)])
              + " " + " ".join(f"{v:9.2f}" for v in row[len(cols):]), flush=True)
    print(f"(CATEN_NUM_THREADS={os.environ.get('CATEN_NUM_THREADS', 'unset')})")


if __name__ == "__main__":
    main()
