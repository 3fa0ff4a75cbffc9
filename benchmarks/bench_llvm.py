"""LLVM runtime vs numpy on the workloads of shared/bench/BASELINES.md (medians of one run).

    python benchmarks/bench_llvm.py [--reps 7] [--only a,b,c,d,e1]

Graphs are built with caten.ir.build directly (the language front end will replace this).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from caten.runtimes.llvm_rt import RUNTIME

from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.ir.program import Program, TensorSpec
from caten.run.runtime import CompileOptions

F32 = T.f32
LOG2E = 1.4426950408889634


def program(name, ins, outs):
    return Program(name, [TensorSpec(f"X{i}", b.dtype, b.shape) for i, b in enumerate(ins)],
                   [TensorSpec(f"Y{i}", o.dtype, o.shape) for i, o in enumerate(outs)], list(outs), [])


def c(v):
    return B.const(v, F32)


def exp(x):
    return B.alu(Op.EXP2, B.alu(Op.MUL, x, c(LOG2E)))


def w_elementwise(n=1 << 24):
    a, b, cc = (B.buffer(F32, (n,), i, k) for i, k in enumerate("abc"))
    y = B.alu(Op.MUL, exp(B.alu(Op.ADD, B.alu(Op.MUL, a, b), cc)), c(0.5))
    r = np.random.default_rng(0)
    args = [r.uniform(-1, 1, n).astype(np.float32) for _ in range(3)]
    return program("ew", [a, b, cc], [y]), args, lambda a, b, c: np.exp(a * b + c) * 0.5, None


def w_sum(n=1 << 24):
    a = B.buffer(F32, (n,), 0, "a")
    args = [np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)]
    return program("sum", [a], [B.reduce(a, "add", (0,))]), args, lambda a: a.sum(keepdims=True), None


def w_softmax(b=4096, n=4096):
    x = B.buffer(F32, (b, n), 0, "x")
    m = B.reduce(x, "max", (1,))
    e = exp(B.alu(Op.ADD, x, B.alu(Op.NEG, m)))
    y = B.alu(Op.MUL, e, B.alu(Op.RECIP, B.reduce(e, "add", (1,))))

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    args = [np.random.default_rng(0).standard_normal((b, n)).astype(np.float32)]
    return program("softmax", [x], [y]), args, ref, None


def w_layernorm(b=8192, n=1024):
    x = B.buffer(F32, (b, n), 0, "x")
    g = B.buffer(F32, (n,), 1, "g")
    bb = B.buffer(F32, (n,), 2, "b")
    mean = B.alu(Op.MUL, B.reduce(x, "add", (1,)), c(1.0 / n))
    d = B.alu(Op.ADD, x, B.alu(Op.NEG, mean))
    var = B.alu(Op.MUL, B.reduce(B.alu(Op.MUL, d, d), "add", (1,)), c(1.0 / n))
    rstd = B.alu(Op.RECIP, B.alu(Op.SQRT, B.alu(Op.ADD, var, c(1e-5))))
    y = B.alu(Op.ADD, B.alu(Op.MUL, B.alu(Op.MUL, d, rstd), g), bb)

    def ref(x, g, b):
        m = x.mean(1, keepdims=True)
        v = ((x - m) ** 2).mean(1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * g + b
    r = np.random.default_rng(0)
    args = [r.standard_normal((b, n)).astype(np.float32), r.standard_normal(n).astype(np.float32),
            r.standard_normal(n).astype(np.float32)]
    return program("layernorm", [x, g, bb], [y]), args, ref, None


def w_matmul(n=1024):
    a = B.buffer(F32, (n, n), 0, "a")
    b = B.buffer(F32, (n, n), 1, "b")
    prod = B.alu(Op.MUL, B.reshape(a, (n, n, 1)), B.reshape(b, (1, n, n)))
    y = B.reshape(B.reduce(prod, "add", (1,)), (n, n))
    r = np.random.default_rng(0)
    args = [r.standard_normal((n, n)).astype(np.float32) for _ in range(2)]
    return program("matmul", [a, b], [y]), args, lambda a, b: a @ b, 2 * n ** 3


WORKLOADS = {"a": ("exp(a*b+c)*0.5 16M", w_elementwise), "b": ("sum 16M", w_sum),
             "c": ("softmax 4096x4096", w_softmax), "d": ("layernorm 8192x1024", w_layernorm),
             "e1": ("matmul 1024^3", w_matmul)}


def paired_medians(f_numpy, f_caten, reps):
    """Alternate the two so that machine drift hits both alike; medians of each."""
    f_numpy(), f_caten()
    tn, tc = [], []
    for _ in range(reps):
        for fn, ts in ((f_numpy, tn), (f_caten, tc)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(tn), statistics.median(tc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", default="")
    opts = ap.parse_args()
    keys = [k for k in WORKLOADS if not opts.only or k in opts.only.split(",")]
    print(f"{'workload':24} {'numpy':>10} {'caten':>10} {'speedup':>8} {'compile':>9} {'max err':>9}")
    for k in keys:
        title, make = WORKLOADS[k]
        prog, args, ref, flops = make()
        t0 = time.perf_counter()
        exe = RUNTIME.compile(prog, CompileOptions())
        ct = time.perf_counter() - t0
        outs = [np.empty(tuple(o.shape), o.dtype.np) for o in prog.outputs]
        tn, tc = paired_medians(lambda: ref(*args), lambda: exe.run(args, outs, {}), opts.reps)  # noqa: B023
        want = ref(*args)
        err = float(np.max(np.abs(outs[0].reshape(want.shape) - want)) / max(1.0, float(np.max(np.abs(want)))))
        if flops:
            line = f"{title:24} {flops / tn / 1e9:8.1f}GF {flops / tc / 1e9:8.1f}GF"
        else:
            line = f"{title:24} {tn * 1e3:8.2f}ms {tc * 1e3:8.2f}ms"
        print(f"{line} {tn / tc:7.2f}x {ct * 1e3:7.0f}ms {err:9.1e}", flush=True)



if __name__ == "__main__":
    main()
