"""bench_models.py's real models on a GPU: caten's device runtime against torch on the same device.

    python benchmarks/bench_models_gpu.py [--runtime cuda] [--only resnet18,...] [--reps 20] [--small]
        [--json out.json] [--budget-s 400]

Each model (torchvision/transformers, random weights, eval mode, float32) is imported with
`caten.from_torch(..., runtime=R)`; its first call is checked against torch's float32 output on
the CPU (TF32 off on the device). Timed on both sides is the steady state of the device: torch's
module on tensors already on the GPU, and caten's launches replayed over the device buffers of
its first call (`DeviceExecutable.replay`: no host copies). Both are a mean over `reps` calls
between two device synchronizations, the median of 5 such groups, Python's launch overhead
included on both sides. `call` is caten's whole call from numpy arrays (copies of the inputs and
weights to the device and of the output back), what `TorchModule.__call__` costs today. `cold` is
torch.export + caten's compile + the first call, with an empty compile cache.
A model that fails to import or compile is reported with the first line of its error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import bench_models as BM
import numpy as np
from deps import need_or_exit


def mean_ms(fn: Callable[[], Any], sync: Callable[[], None], reps: int) -> float:
    """Median over 5 groups of the mean time of `reps` calls between two synchronizations."""
    fn()
    sync()
    groups = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        groups.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(groups)


def one(model: BM.Model, runtime: str, small: bool, reps: int, torch: Any) -> dict[str, Any]:
    import caten

    module, args = model.build(small)
    row: dict[str, Any] = {"model": model.name}
    with torch.no_grad():
        ref = BM._output(module(*args))
        gpu = torch.cuda.is_available()  # (without one: a smoke run on another runtime, torch on the CPU)
        dev = torch.device("cuda" if gpu else "cpu")
        gmod, gargs = module.to(dev), tuple(a.to(dev) for a in args)
        row["torch_ms"] = mean_ms(lambda: gmod(*gargs), torch.cuda.synchronize if gpu else lambda: None, reps)
        module.to("cpu")
        t0 = time.perf_counter()
        try:
            m = caten.from_torch(module, args, runtime=runtime)
            got = BM._output(m(*[a.numpy() for a in args]))
        except Exception as e:  # the report names what failed; the other models still run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            return row
        row["cold_s"] = time.perf_counter() - t0
        err = np.abs(got - ref).max()
        row["max_abs_diff"] = float(err)
        if not np.allclose(got, ref, rtol=1e-3, atol=1e-3):
            row["error"] = f"caten's output differs from torch's (max |diff| {err:.3g})"
            return row
        exe = next(iter(m._fn._variants.values()))[1]
        row["launches"] = len(exe.last)
        row["caten_ms"] = mean_ms(exe.replay, exe.adapter.sync, reps)
        np_args = [a.numpy() for a in args]
        row["call_ms"] = mean_ms(lambda: m(*np_args), exe.adapter.sync, max(2, reps // 5))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="cuda")
    ap.add_argument("--only", default=",".join(m.name for m in BM.MODELS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no model after this many seconds")
    a = ap.parse_args()
    torch = need_or_exit("bench_models_gpu.py", "torch", "torch", "the models and the device reference")
    need_or_exit("bench_models_gpu.py", "torchvision", "oracles", "the vision models")
    if a.runtime == "cuda" and not torch.cuda.is_available():
        print("bench_models_gpu: torch sees no GPU here")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("CATEN_CACHE_DIR", tempfile.mkdtemp(prefix="caten-gpu-"))
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    print(f"GPU: {name}, torch {torch.__version__}, runtime {a.runtime}", flush=True)
    start, rows = time.perf_counter(), []
    for model in [m for m in BM.MODELS if m.name in a.only.split(",")]:
        if time.perf_counter() - start > a.budget_s:
            rows.append({"model": model.name, "error": "not started: out of the time budget"})
            continue
        row = one(model, a.runtime, a.small, a.reps, torch)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| model | caten (device) | torch eager (device) | torch/caten | caten call (host copies) | cold "
          "| launches |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            t = f"{r['torch_ms']:.2f} ms" if "torch_ms" in r else "-"
            print(f"| {r['model']} | {r['error']} | {t} | - | - | - | - |")
            continue
        ratio = r["torch_ms"] / r["caten_ms"]
        print(f"| {r['model']} | {r['caten_ms']:.2f} ms | {r['torch_ms']:.2f} ms | {ratio:.2f}x "
              f"| {r['call_ms']:.1f} ms | {r['cold_s']:.1f} s | {r['launches']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
