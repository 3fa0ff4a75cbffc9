"""caten's LLVM runtime against numpy (and torch eager when installed) in ONE run, on the
workloads of shared/bench/peers.py (same shapes, float32).

    python benchmarks/bench_llvm.py [--reps 5] [--only a,b,c,d,e1,e2,f,g] [--runtime c]
    CATEN_NUM_THREADS=1 python benchmarks/bench_llvm.py    # caten's loops on one thread

Every workload is written in caten's language and compiled through `caten.loads` (the
Mixer block is examples/mlp_mixer.lisp). Timings alternate the systems in rounds (see
`rounds`) so that drift on this shared machine hits all of them alike; the table shows medians, the
ratio numpy/caten (> 1: caten is faster), GFLOP/s where meaningful, and caten's compile
time (caten.loads + first call, in-memory JIT, no disk cache).

Note on g: the caten block uses the exact (erf) GELU of examples/mlp_mixer.lisp, so the
numpy reference here does too (scipy.special.erf when available); peers.py's numpy
Mixer uses the tanh approximation, which is a little cheaper.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from deps import need_or_exit
from timing import rounds

HERE = os.path.dirname(os.path.abspath(__file__))
N_ELEM = 1 << 24

SOURCES = {
    "a": "(composite ew ((A{f32}[N]) (B{f32}[N]) (C{f32}[N]) -> (Y{f32}[N])) (* (exp (+ (* A B) C)) 0.5))",
    "b": "(composite total ((X{f32}[N]) -> (Y{f32}[1])) (sum X :axis 0 :keepdims true))",
    "c": "(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))",
    "d": "(composite ln ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N])) "
         "(layernorm X G B :axis -1 :eps 1e-5))",
    "e1": "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))",
    "e2": "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))",
    "f": "(composite conv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, H, W])) "
         "(conv2d X Wt :padding 1))",
}
TITLES = {"a": "a: exp(a*b+c)*0.5 16M", "b": "b: sum 16M", "c": "c: softmax 4096x4096",
          "d": "d: layernorm 8192x1024", "e1": "e1: matmul 1024^3", "e2": "e2: matmul 2048^3",
          "f": "f: conv2d 8x64x56x56 3x3",
          "g": "g: MLP-Mixer block"}
FLOPS = {"e1": 2 * 1024 ** 3, "e2": 2 * 2048 ** 3, "f": 2 * 8 * 64 * 56 * 56 * 64 * 9,
         "g": 2 * 2 * 8 * 512 * 196 * 256 + 2 * 2 * 8 * 196 * 512 * 2048}
ENTRY = {"a": "ew", "b": "total", "c": "sm", "d": "ln", "e1": "mm", "e2": "mm", "f": "conv", "g": "mixer_block"}


def make_data(wl: str) -> list[np.ndarray]:
    """The arrays of peers.py's make_data, in the order of the caten composite's inputs."""
    rng = np.random.default_rng(0)

    def r(*s):
        return rng.standard_normal(s, dtype=np.float32)

    if wl == "a":
        return [r(N_ELEM) * 0.5, r(N_ELEM) * 0.5, r(N_ELEM) * 0.5]
    if wl == "b":
        return [rng.random(N_ELEM, dtype=np.float32)]
    if wl == "c":
        return [r(4096, 4096)]
    if wl == "d":
        return [r(8192, 1024), r(1024), r(1024)]
    if wl in ("e1", "e2"):
        n = 1024 if wl == "e1" else 2048
        return [r(n, n), r(n, n)]
    if wl == "f":
        return [r(8, 64, 56, 56), r(64, 64, 3, 3) * np.float32(0.05)]
    if wl == "g":
        def s(fan_in):
            return np.float32(1.0 / fan_in ** 0.5)
        x = r(8, 196, 512)
        g1, be1, g2, be2 = 1 + 0.1 * r(512), 0.1 * r(512), 1 + 0.1 * r(512), 0.1 * r(512)
        w1, b1, w2, b2 = r(196, 256) * s(196), 0.1 * r(256), r(256, 196) * s(256), 0.1 * r(196)
        w3, b3, w4, b4 = r(512, 2048) * s(512), 0.1 * r(2048), r(2048, 512) * s(2048), 0.1 * r(512)
        # examples/mlp_mixer.lisp: X gamma1 beta1 W1 b1 W2 b2 gamma2 beta2 W3 b3 W4 b4
        return [x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4]
    raise KeyError(wl)


def _erf():
    try:
        from scipy.special import erf
        return erf
    except ImportError:  # Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7), numpy only
        def erf(x):
            s = np.sign(x)
            a = np.abs(x)
            t = 1 / (1 + np.float32(0.3275911) * a)
            y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
                     + 0.254829592) * t * np.exp(-a * a)
            return (s * y).astype(x.dtype)
        return erf


def numpy_impl(wl: str):
    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + np.float32(1e-5)) * g + b

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def conv(x, w):  # im2col + one GEMM (peers.py)
        n, c, h, wd = x.shape
        k = w.shape[0]
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.empty((n, h, wd, c, 3, 3), np.float32)
        for i in range(3):
            for j in range(3):
                cols[..., i, j] = xp[:, :, i:i + h, j:j + wd].transpose(0, 2, 3, 1)
        out = cols.reshape(n * h * wd, c * 9) @ w.reshape(k, c * 9).T
        return out.reshape(n, h, wd, k).transpose(0, 3, 1, 2)

    erf = _erf()

    def gelu(x):
        return np.float32(0.5) * x * (1 + erf(x * np.float32(0.7071067811865476)))

    def mixer(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4):
        B, T, C = x.shape
        y = ln(x, g1, be1).transpose(0, 2, 1).reshape(B * C, T)
        y = gelu(y @ w1 + b1) @ w2 + b2
        x = x + y.reshape(B, C, T).transpose(0, 2, 1)
        z = ln(x, g2, be2).reshape(B * T, C)
        z = gelu(z @ w3 + b3) @ w4 + b4
        return x + z.reshape(B, T, C)

    return {"a": lambda a, b, c: np.exp(a * b + c) * np.float32(0.5),
            "b": lambda x: x.sum(keepdims=True), "c": softmax, "d": ln, "e1": lambda a, b: a @ b,
            "e2": lambda a, b: a @ b, "f": conv, "g": mixer}[wl]


def torch_impl(wl: str):
    import torch
    import torch.nn.functional as F

    def mixer(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4):
        y = F.layer_norm(x, (x.shape[-1],), g1, be1).transpose(1, 2)
        y = F.gelu(y @ w1 + b1) @ w2 + b2
        x = x + y.transpose(1, 2)
        z = F.layer_norm(x, (x.shape[-1],), g2, be2)
        z = F.gelu(z @ w3 + b3) @ w4 + b4
        return x + z

    return {"a": lambda a, b, c: torch.exp(a * b + c) * 0.5, "b": lambda x: x.sum().reshape(1),
            "c": lambda x: torch.softmax(x, -1), "d": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
            "e1": lambda a, b: a @ b, "e2": lambda a, b: a @ b, "f": lambda x, w: F.conv2d(x, w, padding=1),
            "g": mixer}[wl]


def source(wl: str) -> str:
    if wl == "g":
        with open(os.path.join(HERE, "..", "examples", "mlp_mixer.lisp")) as f:
            return f.read()
    return SOURCES[wl]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5, help="rounds of 3 calls per system")
    ap.add_argument("--max-s", type=float, default=20.0, help="per workload, after at least 3 rounds")
    ap.add_argument("--only", default="")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-compile", action="store_true",
                    help="time torch.compile too (a column beside torch eager; its compile is not timed)")
    ap.add_argument("--runtime", default="llvm", help="caten's runtime (llvm, or c: plain C by the system cc)")
    opts = ap.parse_args()
    import caten  # the installed one (`pip install .` or -e): the checkout's folder is not the package

    torch = None
    if opts.torch_compile:  # asked for by name: not silently left out
        need_or_exit("bench_llvm.py", "torch", "torch", "--torch-compile")
    if not opts.no_torch:
        try:
            import torch
            torch.set_grad_enabled(False)
        except Exception:  # absent, or a broken install
            torch = None
    keys = [k for k in TITLES if not opts.only or k in opts.only.split(",")]
    tc = bool(torch) and opts.torch_compile
    cols = ["numpy", "caten", "np/caten"] + (["torch"] if torch else []) + (["torch.compile"] if tc else []) \
        + ["compile", "max err"]
    print(f"| workload | {' | '.join(cols)} |")
    print("|---" * (len(cols) + 1) + "|")
    for k in keys:
        args = make_data(k)
        ref = numpy_impl(k)
        t0 = time.perf_counter()
        mod = caten.loads(source(k), runtime=opts.runtime, use_cache=False)
        fn = getattr(mod, ENTRY[k])
        got = fn(*args)
        compile_s = time.perf_counter() - t0
        want = ref(*args)
        err = float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
        fns = {"numpy": lambda: ref(*args), "caten": lambda: fn(*args)}  # noqa: B023
        if torch:
            targs = [torch.from_numpy(a) for a in args]
            tf = torch_impl(k)
            fns["torch"] = lambda: tf(*targs)  # noqa: B023
            if tc:
                cf = torch.compile(tf)
                cf(*targs)  # (its compile, before the rounds)
                fns["torch.compile"] = lambda: cf(*targs)  # noqa: B023
        med = rounds(fns, opts.reps, opts.max_s, burst=3, settle=0.3)

        def cell(name, k=k, med=med):
            s = med[name]
            return f"{s * 1e3:.2f} ms ({FLOPS[k] / s / 1e9:.0f} GF/s)" if k in FLOPS else f"{s * 1e3:.2f} ms"
        row = [cell("numpy"), cell("caten"), f"{med['numpy'] / med['caten']:.2f}x"]
        if torch:
            row.append(cell("torch"))
        if tc:
            row.append(cell("torch.compile"))
        row += [f"{compile_s:.2f} s", f"{err:.1e}"]
        print(f"| {TITLES[k]} | {' | '.join(row)} |", flush=True)


if __name__ == "__main__":
    main()
