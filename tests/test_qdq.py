"""QDQ layers (DequantizeLinear -> MatMul/Gemm/Conv [+ bias] [-> Relu] -> QuantizeLinear) imported as
integer kernels (caten/frontends/onnx/qdq.py), held to onnxruntime: within one quantum of its unfused
float graph (graph optimizations off), and equal to its fused integer kernels (optimizations on)
where those are exact (u8 x u8; its u8 x s8 kernels on AVX2 saturate pairs of products in i16)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import caten.onnx  # noqa: E402
from caten.frontends.onnx import qdq  # noqa: E402
from caten.frontends.onnx.translate import convert  # noqa: E402

_NP = {"u8": np.uint8, "i8": np.int8}
_TP = {"u8": TP.UINT8, "i8": TP.INT8}


def _ort(model, feeds: dict, optimize: bool) -> list[np.ndarray]:
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _quanta(got: np.ndarray, want: np.ndarray) -> tuple[int, int]:
    """(largest difference, count of differing elements) of two quantized tensors."""
    d = np.abs(got.astype(np.int32) - want.astype(np.int32))
    return int(d.max(initial=0)), int(np.count_nonzero(d))


def _layer(rng, kind: str, act: str, wdt: str, per_channel: bool, bias: str, relu: bool, conv_pads=(1, 1, 1, 1)):
    """x (f32) -> Q -> DQ -> kind (weights DQ'd per tensor or per output channel, bias as i32 of
    scale sx*sw, f32, or none) [-> Relu] -> Q: the quantized output is the graph's output."""
    conv = kind == "Conv"
    xshape, wshape, nout = ([2, 4, 7, 6], [6, 2, 3, 3], 6) if conv else ([5, 13], [13, 9], 9)
    if kind == "GemmT":
        wshape = [9, 13]
    sx, zx = np.float32(0.05), np.array(7 if act == "u8" else -3, _NP[act])
    lo, hi = (-60, 61) if wdt == "i8" else (70, 190)  # i8 weights small: ORT's AVX2 u8s8 kernel is then exact
    wq = rng.integers(lo, hi, wshape).astype(_NP[wdt])
    zw = rng.integers(-4, 5, nout).astype(np.int8) if wdt == "i8" else rng.integers(120, 136, nout).astype(np.uint8)
    sw = rng.uniform(0.002, 0.02, nout).astype(np.float32)
    if not per_channel:
        zw, sw = zw[:1].reshape(()), sw[:1].reshape(())
    sy, zy = np.float32(0.9), np.array(100 if act == "u8" else 5, _NP[act])
    inits = {"sx": sx, "zx": zx, "wq": wq, "sw": sw, "zw": zw, "sy": sy, "zy": zy}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"],
                              axis=0 if kind in ("Conv", "GemmT") else 1)]
    ins = ["xd", "wd"]
    if bias == "i32":
        inits.update(bq=rng.integers(-3000, 3000, nout).astype(np.int32), bs=(sx * sw).astype(np.float32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0))
    elif bias == "f32":
        inits["b"] = rng.normal(0, 2, nout).astype(np.float32)
    op = {"GemmT": "Gemm"}.get(kind, kind)
    attrs = {"pads": list(conv_pads), "group": 2} if conv else {"transB": 1} if kind == "GemmT" else {}
    if bias != "none" and kind != "MatMul":
        ins.append("b")
    nodes.append(helper.make_node(op, ins, ["h"], **attrs))
    last = "h"
    if bias != "none" and kind == "MatMul":
        nodes.append(helper.make_node("Add", ["b", "h"], ["hb"]))
        last = "hb"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"]))
    g = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TP.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", _TP[act], None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, {"x": rng.normal(0, 3, xshape).astype(np.float32)}


CASES = [  # kind, activation, weight dtype, per-channel, bias, relu, runtime
    ("MatMul", "u8", "i8", True, "i32", True, "numpy"),
    ("MatMul", "i8", "u8", False, "f32", False, "numpy"),
    ("MatMul", "u8", "u8", True, "none", True, "llvm"),
    ("Gemm", "u8", "i8", False, "i32", False, "numpy"),
    ("GemmT", "u8", "u8", True, "i32", True, "c"),
    ("GemmT", "i8", "i8", True, "f32", True, "numpy"),
    ("Conv", "u8", "i8", True, "i32", True, "numpy"),
    ("Conv", "u8", "u8", False, "f32", False, "llvm"),
    ("Conv", "i8", "i8", True, "none", False, "c"),
]


@pytest.mark.parametrize("kind,act,wdt,pc,bias,relu,runtime", CASES)
def test_layer_runs_as_an_integer_kernel(kind, act, wdt, pc, bias, relu, runtime):
    """Each layer fuses (the integer composite is in the text), is within one quantum of the float
    graph and, with an i32 bias or none (what the fused kernels take), equals onnxruntime's
    fused kernel."""
    rng = np.random.default_rng(CASES.index((kind, act, wdt, pc, bias, relu, runtime)))
    model, feeds = _layer(rng, kind, act, wdt, pc, bias, relu)
    text = convert(model).text
    assert ("conv2d-int" if kind == "Conv" else "matmul-int") in text and "dequantize" not in text
    got = caten.onnx.load(model, runtime=runtime)(feeds["x"])
    (off,) = _ort(model, feeds, optimize=False)
    assert got.dtype == off.dtype and got.shape == off.shape
    worst, n = _quanta(got, off)
    assert worst <= 1 and n <= max(1, got.size // 10), (worst, n)
    if bias != "f32":
        (on,) = _ort(model, feeds, optimize=True)
        assert _quanta(got, on) == (0, 0)


def test_asymmetric_conv_pads_fuse_through_the_general_convolution():
    """Pads that differ at both ends take Conv's own lowering on the centered i32 operands (the
    padding still reads the zero point); onnxruntime's fused kernel is the oracle."""
    rng = np.random.default_rng(3)
    model, feeds = _layer(rng, "Conv", "u8", "u8", True, "i32", True, conv_pads=(0, 1, 2, 1))
    text = convert(model).text
    assert "conv2d-int" not in text and "dequantize" not in text
    got = caten.onnx.load(model, runtime="numpy")(feeds["x"])
    assert _quanta(got, _ort(model, feeds, optimize=True)[0]) == (0, 0)
    assert _quanta(got, _ort(model, feeds, optimize=False)[0])[0] <= 1


def test_unfusable_patterns_stay_float():
    """A MatMul weight quantized per channel along K (not the output channel) is no integer kernel:
    the float graph runs, equal to onnxruntime's unfused result."""
    rng = np.random.default_rng(4)
    model, feeds = _layer(rng, "MatMul", "u8", "i8", True, "none", False)
    wdq = next(n for n in model.graph.node if n.input[0] == "wq")
    inits = {i.name: i for i in model.graph.initializer}
    for name, n in (("sw", 13), ("zw", 13)):  # per row (axis 0) of the [13, 9] weight
        v = numpy_helper.to_array(inits[name])
        inits[name].CopyFrom(numpy_helper.from_array(np.resize(v, n).astype(v.dtype), name))
    wdq.attribute[0].i = 0
    assert "matmul-int" not in convert(model).text
    got = caten.onnx.load(model, runtime="numpy")(feeds["x"])
    np.testing.assert_array_equal(got, _ort(model, feeds, optimize=False)[0])


def test_switching_fusion_off_runs_the_float_graph(monkeypatch):
    rng = np.random.default_rng(5)
    model, feeds = _layer(rng, "Gemm", "u8", "i8", True, "i32", True)
    monkeypatch.setattr(qdq, "FUSE", False)
    text = convert(model).text
    assert "matmul-int" not in text and "dequantize" in text
    np.testing.assert_array_equal(caten.onnx.load(model, runtime="numpy")(feeds["x"]),
                                  _ort(model, feeds, optimize=False)[0])
