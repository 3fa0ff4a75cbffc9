"""caten's CUDA runtime on a GPU against torch (its own kernels and cuBLAS) in one run.

    python benchmarks/bench_cuda.py [--reps 50] [--only ew,softmax,matmul] [--json out.json]
        [--gemm 128,128,8,8,8 --gemm 128,64,8,8,4 ...]   # GEMM tile shapes to try (CATEN_GPU_GEMM)

Device work alone is timed on both sides: caten's kernels are launched again over the device
buffers of a first call (`DeviceExecutable.replay`), torch's ops run on tensors already on the
GPU; both between CUDA events on the default stream, after warm-up, the mean of `reps`
launches (median of 5 such groups). Every buffer is larger than the L2, except the GEMM's
operands (compute-bound). Each result is checked against a float64 reference before it is
timed. Ceilings: the device-to-device copy bandwidth (bytes read + written) and cuBLAS's
float32 GEMM (TF32 off: the precision caten computes in).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import bench_llvm as CPU
import numpy as np
from deps import need_or_exit

SOURCES = {
    "ew": "(composite ew ((A{f32}[N]) (B{f32}[N]) (C{f32}[N]) -> (Y{f32}[N])) (* (exp (+ (* A B) C)) 0.5))",
    "sum": "(composite total ((X{f32}[N]) -> (Y{f32}[1])) (sum X :axis 0 :keepdims true))",
    "softmax": "(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))",
    "softmax8k": "(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))",
    "layernorm": "(composite ln ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N])) "
                 "(layernorm X G B :axis -1 :eps 1e-5))",
    "matmul": "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))",
    "conv": CPU.source("f"),  # bench_llvm's workloads f and g, at its sizes
    "mixer": CPU.source("g"),
}
ENTRY = {"ew": "ew", "sum": "total", "softmax": "sm", "softmax8k": "sm", "layernorm": "ln", "matmul": "mm",
         "conv": "conv", "mixer": "mixer_block"}
CPU_NAME = {"conv": "f", "mixer": "g"}


def make(wl: str, rng) -> list[np.ndarray]:
    if wl in CPU_NAME:
        return CPU.make_data(CPU_NAME[wl])

    def r(*s):
        return rng.standard_normal(s, dtype=np.float32)

    n = 1 << 26
    return {"ew": lambda: [r(n) * 0.5, r(n) * 0.5, r(n) * 0.5], "sum": lambda: [rng.random(n, dtype=np.float32)],
            "softmax": lambda: [r(4096, 4096)], "softmax8k": lambda: [r(8192, 8192)],
            "layernorm": lambda: [r(8192, 1024), r(1024), r(1024)],
            "matmul": lambda: [r(4096, 4096), r(4096, 4096)]}[wl]()


def torch_fn(wl: str, torch):
    if wl in CPU_NAME:
        return CPU.torch_impl(CPU_NAME[wl])
    F = torch.nn.functional
    return {"ew": lambda a, b, c: torch.exp(a * b + c) * 0.5, "sum": lambda x: x.sum(0, keepdim=True),
            "softmax": lambda x: torch.softmax(x, -1), "softmax8k": lambda x: torch.softmax(x, -1),
            "layernorm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-5),
            "matmul": lambda a, b: a @ b}[wl]


def work(wl: str, arrays: list[np.ndarray], out: np.ndarray) -> tuple[str, float]:
    """("GB/s", bytes) for the memory-bound ones, ("TF/s", flops) for the GEMM."""
    if wl == "matmul":
        return "TF/s", 2.0 * arrays[0].shape[0] * arrays[0].shape[1] * arrays[1].shape[1]
    if wl in CPU_NAME:
        return "TF/s", float(CPU.FLOPS[CPU_NAME[wl]])
    return "GB/s", float(sum(a.nbytes for a in arrays) + out.nbytes)


def event_ms(launch, sync, events, reps: int, hold) -> float:
    """Median over 5 groups of the mean time of `reps` launches between two events (ms). `hold`
    keeps the GPU busy while the host enqueues them (caten's launches go through Python: its
    launch cost must not pace the GPU)."""
    for _ in range(3):
        launch()
    sync()
    groups = []
    for _ in range(5):
        start, end = events()
        hold()
        start()
        for _ in range(reps):
            launch()
        groups.append(end() / reps)
    return statistics.median(groups)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--only", default=",".join(SOURCES))
    ap.add_argument("--gemm", action="append", default=[], help="BM,BN,BK,TM,TN tile shapes of the GEMM to try")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch = need_or_exit("bench_cuda.py", "torch", "torch", "timing torch's kernels on the same GPU")
    from caten.runtimes import cuda_rt

    import caten

    ok, why = cuda_rt.RUNTIME.available()
    if not ok or not torch.cuda.is_available():
        print(f"bench_cuda: no GPU here ({why}; torch sees one: {torch.cuda.is_available()})")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cu = cuda_rt._driver()
    ok_ = cuda_rt._ok
    print(f"GPU: {why} ({torch.cuda.get_device_name()}), torch {torch.__version__}, NVRTC {cuda_rt.nvrtc_version()}, "
          f"arch {cuda_rt._code_arch()[0]}", flush=True)

    def cu_events():
        a, b = ok_(cu.cuEventCreate(0)), ok_(cu.cuEventCreate(0))

        def start():
            ok_(cu.cuEventRecord(a, cu.CUstream(0)))

        def end():
            ok_(cu.cuEventRecord(b, cu.CUstream(0)))
            ok_(cu.cuEventSynchronize(b))
            return ok_(cu.cuEventElapsedTime(a, b))
        return start, end

    def torch_events():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def end():
            b.record()
            b.synchronize()
            return a.elapsed_time(b)
        return a.record, end

    # ceilings
    def hold():
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU cycles

    src = torch.empty(1 << 28, device="cuda").normal_()
    dst = torch.empty_like(src)
    copy_ms = event_ms(lambda: dst.copy_(src), torch.cuda.synchronize, torch_events, 20, hold)
    copy_bw = 2 * src.numel() * 4 / copy_ms / 1e6
    src = dst = None
    print(f"ceiling: device-to-device copy {copy_bw:.0f} GB/s (bytes read + written)", flush=True)
    rows = []
    results = {"gpu": why, "copy_GBps": copy_bw, "workloads": {}}
    rng = np.random.default_rng(0)
    for wl in [w for w in args.only.split(",") if w]:
        arrays = make(wl, rng)
        tf = torch_fn(wl, torch)
        targs = [torch.from_numpy(a).cuda() for a in arrays]
        ref = tf(*[t.double() for t in targs]).cpu().numpy()
        t_ms = event_ms(lambda f=tf, a=targs: f(*a), torch.cuda.synchronize, torch_events, args.reps, hold)
        given = os.environ.get("CATEN_GPU_GEMM", "")
        variants = args.gemm if wl == "matmul" and args.gemm else [given]
        for spec in variants:
            os.environ["CATEN_GPU_GEMM"] = spec
            comp = getattr(caten.loads(SOURCES[wl], runtime="cuda", use_cache=False), ENTRY[wl])
            got = comp(*arrays)
            err = float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))
            exe = next(iter(comp._variants.values()))[1]
            c_ms = event_ms(exe.replay, lambda: ok_(cu.cuCtxSynchronize()), cu_events, args.reps, hold)
            unit, amount = work(wl, arrays, got)
            rate_c, rate_t = amount / c_ms / 1e6, amount / t_ms / 1e6
            if unit == "TF/s":
                rate_c, rate_t = rate_c / 1e3, rate_t / 1e3
            name = wl + (f" [{spec}]" if spec else "")
            of = rate_c / copy_bw if unit == "GB/s" else rate_c / rate_t  # (TF/s: of torch's)
            rows.append((name, c_ms, rate_c, unit, of, t_ms, rate_t, t_ms / c_ms, err, len(exe.last)))
            results["workloads"][name] = {"caten_ms": c_ms, "torch_ms": t_ms, "unit": unit,
                                          "caten_rate": rate_c, "torch_rate": rate_t, "rel_err": err,
                                          "launches": len(exe.last)}
            print(f"{name}: caten {c_ms:.4f} ms ({rate_c:.2f} {unit}), torch {t_ms:.4f} ms, err {err:.1e}", flush=True)
            if err > 1e-4 or not np.isfinite(err):
                print(f"  WRONG: {name} differs from the float64 reference by {err:.2e}")
        os.environ["CATEN_GPU_GEMM"] = given
    print("\n| workload | caten ms | caten rate | of ceiling | torch ms | torch rate | torch/caten | rel err "
          "| launches |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, c_ms, rc, unit, of, t_ms, rt, ratio, err, nl in rows:
        ceil = "copy bw" if unit == "GB/s" else "torch (cuBLAS)"
        print(f"| {name} | {c_ms:.4f} | {rc:.1f} {unit} | {of * 100:.0f}% of {ceil} | {t_ms:.4f} | {rt:.1f} {unit} "
              f"| {ratio:.2f}x | {err:.1e} | {nl} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
