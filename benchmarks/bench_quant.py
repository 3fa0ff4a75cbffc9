"""Quantized models: caten's integer path against caten f32, onnxruntime (QDQ) and torch, in ONE run.

    python benchmarks/bench_quant.py [--only mlp,resnet18] [--reps 10] [--quantizer torch-ao|ort]
    python benchmarks/bench_quant.py --small       # small shapes: a smoke run in seconds

Each model (an MLP, batch 32; torchvision's quantizable ResNet-18 at 224x224, batch 1; random
weights) is quantized statically (calibrated on 4 random batches): by torch.ao eager mode (x86
qconfig: u8 activations, s8 weights per channel) and exported by torch.onnx's TorchScript exporter,
or (--quantizer ort) exported in f32 and quantized by onnxruntime.quantization.quantize_static in
QDQ format. caten imports the QDQ model with `caten.onnx.load`, which runs each quantized layer as
an integer kernel (caten/frontends/onnx/qdq.py). Systems, timed in alternating rounds in one
process (`timing.rounds`, medians):

  caten-int    the QDQ model in caten (llvm)          caten-f32    the f32 model in caten (llvm)
  ort-qdq      the QDQ model in onnxruntime (graph optimizations on: its fused integer kernels)
  torch-f32    the f32 module in torch eager          torch-int8   torch.ao's quantized module (fbgemm)

Ratios are system / caten-int (> 1: caten-int is faster). Before timing, caten-int's output is
compared with onnxruntime's unfused float graph (optimizations off) and its fused one, in quanta
of the output's scale (the largest difference; in a deep net one layer's different rounding
passes on, so fused and unfused results may be quanta apart). onnxruntime's AVX2 u8 x s8 kernels
saturate pairs of products in i16: with --quantizer ort and no --reduce-range (7-bit weights) its
fused result may be off by several quanta on machines without VNNI (torch.ao's x86 qconfig
reduces the activations' range instead); caten's integer path is exact (i32 sums).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from deps import need_or_exit
from timing import rounds


def _mlp(small: bool) -> tuple[Any, tuple[int, ...]]:
    import torch
    from torch.ao import quantization as tq

    d, h, b = (64, 128, 4) if small else (512, 1024, 32)
    net = torch.nn.Sequential(tq.QuantStub(), torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                              torch.nn.ReLU(), torch.nn.Linear(h, 10), tq.DeQuantStub())
    return net, (b, d)


def _resnet18(small: bool) -> tuple[Any, tuple[int, ...]]:
    import torchvision

    return torchvision.models.quantization.resnet18(quantize=False), (1, 3, 32, 32) if small else (1, 3, 224, 224)


MODELS: dict[str, Callable[[bool], tuple[Any, tuple[int, ...]]]] = {"mlp": _mlp, "resnet18": _resnet18}
_FUSE = {"mlp": [["1", "2"], ["3", "4"]]}  # Linear + ReLU pairs (ResNet-18 has its own fuse_model)


def _export(net: Any, shape: tuple[int, ...]) -> Any:
    import onnx
    import torch

    buf = io.BytesIO()
    torch.onnx.export(net, (torch.zeros(shape),), buf, dynamo=False, opset_version=17, input_names=["x"])
    return onnx.load_from_string(buf.getvalue())


def _batches(shape: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(0, 1, shape).astype(np.float32) for _ in range(4)]


def quantize_torch_ao(name: str, net: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """(torch's quantized module, its QDQ ONNX export): torch.ao eager static quantization with the
    x86 qconfig (prepare, calibrate, convert), exported by torch's TorchScript exporter."""
    import torch
    from torch.ao import quantization as tq

    net = net.eval()
    if name in _FUSE:
        tq.fuse_modules(net, _FUSE[name], inplace=True)
    else:
        net.fuse_model()
    net.qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(net)
    for b in _batches(shape):
        prepared(torch.from_numpy(b))
    converted = tq.convert(prepared)
    return converted, _export(converted, shape)


def quantize_ort(f32: Any, shape: tuple[int, ...], reduce_range: bool) -> Any:
    """The QDQ model onnxruntime.quantization.quantize_static makes of an f32 ONNX model."""
    import onnx
    from onnxruntime import quantization as q

    class Calibration(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"x": b} for b in _batches(shape)])

        def get_next(self) -> dict | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        onnx.save(f32, f"{d}/f32.onnx")
        q.quantize_static(f"{d}/f32.onnx", f"{d}/q.onnx", Calibration(), quant_format=q.QuantFormat.QDQ,
                          per_channel=True, reduce_range=reduce_range)
        return onnx.load(f"{d}/q.onnx")


def _out_scale(model: Any) -> float:
    """The scale of the model's last DequantizeLinear (an initializer or a Constant)."""
    from onnx import numpy_helper

    from caten.frontends.onnx.fold import constant_value

    last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    made = {n.output[0]: constant_value(n) for n in model.graph.node if n.op_type == "Constant"}
    return float({**init, **made}[last.input[1]])


def bench(name: str, small: bool, reps: int, quantizer: str, reduce_range: bool) -> dict[str, Any]:
    import copy

    import onnxruntime as ort
    import torch

    import caten.onnx

    torch.manual_seed(0)
    net, shape = MODELS[name](small)
    net = net.eval()
    f32 = _export(copy.deepcopy(net), shape)  # (QuantStub and DeQuantStub are identities before convert)
    qnet = None
    if quantizer == "torch-ao":
        qnet, qdq = quantize_torch_ao(name, copy.deepcopy(net), shape)
    else:
        qdq = quantize_ort(f32, shape, reduce_range)
    x = np.random.default_rng(1).normal(0, 1, shape).astype(np.float32)
    xt = torch.from_numpy(x)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    plain = ort.InferenceSession(qdq.SerializeToString(), off, providers=["CPUExecutionProvider"])
    unfused = plain.run(None, {"x": x})[0]
    cint, cf32 = caten.onnx.load(qdq, runtime="llvm"), caten.onnx.load(f32, runtime="llvm")
    scale = _out_scale(qdq)
    got, fused = cint(x), sess.run(None, {"x": x})[0]
    row: dict[str, Any] = {"model": name, "shape": "x".join(map(str, shape)),
                           "caten-vs-unfused": int(np.rint(np.abs(got - unfused) / scale).max()),
                           "caten-vs-fused": int(np.rint(np.abs(got - fused) / scale).max()),
                           "ort-fused-vs-unfused": int(np.rint(np.abs(fused - unfused) / scale).max())}
    with torch.no_grad():
        ref = net(xt).numpy()
    if not np.allclose(cf32(x), ref, rtol=1e-3, atol=1e-3):
        row["error"] = "caten-f32 differs from torch"
        return row
    if min(row["caten-vs-unfused"], row["caten-vs-fused"]) > 1:  # (a deep net's layers pass on their roundings)
        row["error"] = "caten-int is more than a quantum from onnxruntime's fused and unfused results"
        return row
    with torch.no_grad():
        fns = {"caten-int": lambda: cint(x), "caten-f32": lambda: cf32(x),
               "ort-qdq": lambda: sess.run(None, {"x": x}), "torch-f32": lambda: net(xt)}
        if qnet is not None:
            fns["torch-int8"] = lambda: qnet(xt)
        row.update(rounds(fns, reps, max_s=60.0, settle=0.05))
    return row


SYSTEMS = ["caten-int", "caten-f32", "ort-qdq", "torch-f32", "torch-int8"]


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| model | input | caten-int | " + " | ".join(f"{s} (x)" for s in SYSTEMS[1:])
           + " | caten-int vs ORT unfused, fused | ORT fused vs unfused |", "|" + "---|" * 9]
    for r in rows:
        agree = (f"{r.get('caten-vs-unfused', '-')}, {r.get('caten-vs-fused', '-')} | "
                 f"{r.get('ort-fused-vs-unfused', '-')}")
        if "error" in r:
            out.append(f"| {r['model']} | {r.get('shape', '-')} | {r['error']} | | | | | {agree} |")
            continue
        cells = [f"{r[s] * 1e3:.2f} ms ({r[s] / r['caten-int']:.2f}x)" if s in r else "-" for s in SYSTEMS[1:]]
        out.append(f"| {r['model']} | {r['shape']} | {r['caten-int'] * 1e3:.2f} ms | " + " | ".join(cells)
                   + f" | {agree} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model names: " + ",".join(MODELS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--small", action="store_true", help="small shapes: a smoke run")
    ap.add_argument("--quantizer", choices=["torch-ao", "ort"], default="torch-ao",
                    help="torch.ao eager static quantization exported to ONNX, or onnxruntime's quantize_static")
    ap.add_argument("--reduce-range", action="store_true", help="ort: 7-bit weights (its AVX2 kernels exact)")
    a = ap.parse_args()
    for mod, extra in (("torch", "torch"), ("torchvision", "oracles"), ("onnx", "onnx"), ("onnxruntime", "oracles")):
        need_or_exit("bench_quant.py", mod, extra, "building and quantizing the models")
    warnings.filterwarnings("ignore")  # torch.ao's and the TorchScript exporter's deprecation notices
    os.environ.setdefault("CATEN_CACHE_DIR", os.path.join(tempfile.mkdtemp(prefix="bench-quant-"), "caten"))
    rows = []
    for name in [m for m in MODELS if not a.only or m in a.only.split(",")]:
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench(name, a.small, a.reps, a.quantizer, a.reduce_range))
        except Exception as e:  # one model's failure must not hide the others' numbers
            rows.append({"model": name, "error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"})
    print(table(rows))


if __name__ == "__main__":
    main()
