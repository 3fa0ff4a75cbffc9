"""The quantized ops of the importers against their own oracles: onnx's ReferenceEvaluator and
node-test data (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv), onnxruntime on models its quantization tool wrote, and
torch on its quantized_decomposed ops."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from tests.test_quantize import data, ref_quantize, run


def test_onnx_reference_agrees_with_the_composites():
    """onnx's ReferenceEvaluator on a blocked QuantizeLinear (opset 21), checked against the same
    numpy oracle the composites are held to."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(8)
    x = data(rng, (2, 7), scale=50.0)
    s = rng.uniform(0.3, 2.0, (2, 3)).astype(np.float32)
    z = rng.integers(-20, 20, (2, 3)).astype(np.int8)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=3)
    g = helper.make_graph([node], "q", [helper.make_tensor_value_info(n, t, v.shape) for n, t, v in
                                       (("x", TensorProto.FLOAT, x), ("s", TensorProto.FLOAT, s),
                                        ("z", TensorProto.INT8, z))],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "s": s, "z": z})
    got = run("(quantize A B :zero-point C :axis 1 :block-size 3)", x, s, z, out=("i8", x.shape), runtime="numpy")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ref_quantize(x, s, z, np.int8, 1, 3))
    import caten.onnx

    np.testing.assert_array_equal(caten.onnx.load(model, runtime="llvm")(x, s, z), want)
    del onnx


def _onnx_case(opset, node, feeds, types, out_t):
    from onnx import helper

    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, types[k], v.shape) for k, v in feeds.items()],
                          [helper.make_tensor_value_info("y", out_t, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_onnx_import_matches_the_reference_on_mixed_dtypes():
    """What the node tests leave out: an f16 x with an f32 scale (the quotient in f32), opset 25's
    `precision`, a 16-bit zero point added exactly to an f16 quotient, output_dtype from an f16
    scale, int32 dequantization with a large zero point; onnx's ReferenceEvaluator is the oracle."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as TP
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    import caten.onnx

    rng = np.random.default_rng(9)
    x16 = rng.normal(0, 300, (3, 8)).astype(np.float16)
    z16 = np.array(30001, np.int16)
    q16 = rng.integers(-32768, 32767, (3, 8)).astype(np.int16)
    q32 = rng.integers(-2 ** 31, 2 ** 31 - 1, (3, 8)).astype(np.int32)
    h, f, i16 = TP.FLOAT16, TP.FLOAT, TP.INT16
    cases = [
        (23, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
         {"x": x16, "s": np.array(0.37, np.float32), "z": z16}, {"x": h, "s": f, "z": i16}, i16),
        (25, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], precision=h),
         {"x": x16.astype(np.float32), "s": np.array(0.37, np.float32), "z": z16}, {"x": f, "s": f, "z": i16}, i16),
        (21, helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
         {"x": x16, "s": np.array(0.37, np.float16), "z": z16}, {"x": h, "s": h, "z": i16}, i16),
        (23, helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], output_dtype=f),
         {"q": q16, "s": np.array(0.37, np.float16), "z": z16}, {"q": i16, "s": h, "z": i16}, f),
        (21, helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
         {"q": q32, "s": np.array(0.37, np.float32), "z": np.array(123456789, np.int32)},
         {"q": TP.INT32, "s": f, "z": TP.INT32}, f),
    ]
    for case in cases:
        model = _onnx_case(*case)
        feeds = case[2]
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        got = caten.onnx.load(model, runtime="numpy")(*feeds.values())
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=str(case[1]))


def test_onnx_integer_convolutions_match_the_reference():
    """ConvInteger in 1-D, 3-D, grouped with auto_pad and dilation, and a per-channel QLinearConv
    with bias, against onnx's ReferenceEvaluator (exact)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as TP
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    import caten.onnx

    rng = np.random.default_rng(11)
    u8, i8 = TP.UINT8, TP.INT8
    x1 = rng.integers(0, 256, (2, 3, 11)).astype(np.uint8)
    w1 = rng.integers(-128, 128, (4, 3, 3)).astype(np.int8)
    x3 = rng.integers(0, 256, (1, 2, 4, 5, 3)).astype(np.uint8)
    w3 = rng.integers(0, 256, (3, 2, 2, 2, 2)).astype(np.uint8)
    x2 = rng.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    w2 = rng.integers(-128, 128, (4, 1, 3, 3)).astype(np.int8)
    qc = {"x": x2, "xs": np.array(0.02, np.float32), "xz": np.array(100, np.uint8), "w": w2.repeat(4, axis=1),
          "ws": rng.uniform(0.001, 0.01, 4).astype(np.float32), "wz": np.zeros(4, np.int8),
          "ys": np.array(0.05, np.float32), "yz": np.array(3, np.uint8),
          "b": rng.integers(-1000, 1000, 4).astype(np.int32)}
    cases = [
        (helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 2], strides=[2]),
         {"x": x1, "w": w1, "xz": np.array(7, np.uint8)}, {"x": u8, "w": i8, "xz": u8}, TP.INT32),
        (helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"]),
         {"x": x3, "w": w3, "xz": np.array(7, np.uint8), "wz": np.array(9, np.uint8)},
         {"x": u8, "w": u8, "xz": u8, "wz": u8}, TP.INT32),
        (helper.make_node("ConvInteger", ["x", "w"], ["y"], group=4, auto_pad="SAME_UPPER", dilations=[2, 1]),
         {"x": x2, "w": w2}, {"x": u8, "w": i8}, TP.INT32),
        (helper.make_node("QLinearConv", list(qc), ["y"], pads=[1, 1, 1, 1]), qc,
         {"x": u8, "xs": TP.FLOAT, "xz": u8, "w": i8, "ws": TP.FLOAT, "wz": i8, "ys": TP.FLOAT, "yz": u8,
          "b": TP.INT32}, u8),
    ]
    for node, feeds, types, out in cases:
        model = _onnx_case(21, node, feeds, types, out)
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        got = caten.onnx.load(model, runtime="llvm")(*feeds.values())
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=str(node))


def _mlp(rng, helper):
    ws = {"W1": rng.normal(0, 0.3, (16, 32)), "b1": rng.normal(0, 0.1, 32),
          "W2": rng.normal(0, 0.3, (32, 8)), "b2": rng.normal(0, 0.1, 8)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    return nodes, ws, [4, 16]


def _cnn(rng, helper):
    ws = {"W1": rng.normal(0, 0.3, (8, 3, 3, 3)), "b1": rng.normal(0, 0.1, 8),
          "W2": rng.normal(0, 0.2, (4, 8, 3, 3)), "b2": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Conv", ["x", "W1", "b1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Conv", ["r", "W2", "b2"], ["c"], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"])]
    return nodes, ws, [2, 3, 9, 9]


@pytest.mark.parametrize("mode", ["dynamic-u8", "dynamic-s8", "qdq", "qdq-cnn-per-channel"])
def test_onnxruntime_quantized_models(tmp_path, mode):
    """An MLP and a small CNN quantized by onnxruntime.quantization (dynamic: DynamicQuantizeLinear
    + MatMulInteger; static QDQ: QuantizeLinear/DequantizeLinear around f32 MatMul/Conv) match
    onnxruntime with its graph optimizations off, the graph's own (unfused) semantics. caten runs
    the QDQ layers as integer kernels (qdq.py), which may round a value a quantum apart from the
    float graph; on these inputs none does (tests/test_qdq.py holds them to both)."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    q = pytest.importorskip("onnxruntime.quantization")
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    import caten.onnx

    rng = np.random.default_rng(10)
    nodes, ws, shape = (_cnn if "cnn" in mode else _mlp)(rng, helper)
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in ws.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src, dst = str(tmp_path / "f32.onnx"), str(tmp_path / "q.onnx")
    onnx.save(model, src)
    if mode.startswith("qdq"):
        class Reader(q.CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"x": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(4)])

            def get_next(self):
                return next(self.it, None)

        q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel="per-channel" in mode)
    else:
        wt = q.QuantType.QUInt8 if mode == "dynamic-u8" else q.QuantType.QInt8
        q.quantize_dynamic(src, dst, weight_type=wt)
    x = rng.normal(0, 1, shape).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = caten.onnx.load(dst, runtime="llvm")(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_from_torch_decomposed_quantize_ops():
    """torch's quantized_decomposed ops (what PT2E quantization leaves in an exported graph), per
    tensor (numbers or one-element tensors) and per channel (f32 and f64 scales), match torch
    exactly, ties and both saturation ends included."""
    import importlib

    torch = pytest.importorskip("torch")
    importlib.import_module("torch.ao.quantization.fx._decomposed")  # defines the ops
    importlib.import_module("caten.frontends.torch.aten_quant")  # registers the lowerings

    Q = torch.ops.quantized_decomposed

    class Quant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(1)
            self.s32 = torch.rand(5, generator=g) * 0.1 + 0.01
            self.s64 = torch.rand(5, dtype=torch.float64, generator=g) * 0.1 + 0.01
            self.z = torch.randint(-10, 10, (5,), generator=g)

        def forward(self, x, s, z):
            a = Q.quantize_per_tensor.default(x, 0.5, 3, 0, 255, torch.uint8)
            b = Q.quantize_per_tensor.tensor(x, s, z, -128, 127, torch.int8)
            c = Q.quantize_per_channel.default(x, self.s32, self.z, 1, -128, 127, torch.int8)
            d = Q.quantize_per_channel.default(x, self.s64, self.z, 1, -128, 127, torch.int8)
            return (a, Q.dequantize_per_tensor.default(a, 0.5, 3, 0, 255, torch.uint8),
                    b, Q.dequantize_per_tensor.tensor(b, s, z, -128, 127, torch.int8),
                    c, Q.dequantize_per_channel.default(c, self.s32, self.z, 1, -128, 127, torch.int8),
                    d, Q.dequantize_per_channel.default(d, self.s64, self.z, 1, -128, 127, torch.int8))

    x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(0)) * 3
    x.view(-1)[:6] = torch.tensor([0.25, 0.75, -0.25, -1.25, 300.0, -300.0])  # ties at scale 0.5, both ends
    args = (x, torch.tensor(0.05), torch.tensor(-4))
    model = Quant()
    got = caten.from_torch(model, args, runtime="llvm")(*args)
    for g, w in zip(got, model(*args), strict=True):
        assert g.dtype == w.numpy().dtype
        np.testing.assert_array_equal(g, w.numpy())


def _pt2e_layers():
    """What PT2E's convert leaves around linear and conv2d layers (quantized_decomposed ops, weights
    as int8/uint8 constants): per-channel and per-tensor weights, with and without bias and relu,
    u8 and i8 activations, a linear over [batch, length, features], and a weight quantized along its
    input axis (no integer kernel)."""
    import torch

    Q = torch.ops.quantized_decomposed

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.w1 = torch.randint(-127, 128, (16, 8), dtype=torch.int8, generator=g)
            self.s1 = torch.rand(16, generator=g) * 0.01 + 0.001
            self.z1 = torch.zeros(16, dtype=torch.int64)
            self.b1 = torch.randn(16, generator=g)
            self.w2 = torch.randint(0, 255, (10, 16), dtype=torch.uint8, generator=g)
            self.k = torch.rand(16, generator=g) * 0.01 + 0.001  # per input feature of w3
            self.w3 = torch.randint(-127, 128, (4, 16), dtype=torch.int8, generator=g)
            self.c1 = torch.randint(-127, 128, (6, 3, 3, 3), dtype=torch.int8, generator=g)
            self.cs = torch.rand(6, generator=g) * 0.02 + 0.001
            self.cz = torch.randint(-3, 3, (6,), generator=g)
            self.cb = torch.randn(6, generator=g)
            self.c2 = torch.randint(-127, 128, (4, 6, 3, 3), dtype=torch.int8, generator=g)

        def forward(self, x, img, seq):
            xd = Q.dequantize_per_tensor.default(Q.quantize_per_tensor.default(x, 0.05, 3, 0, 255, torch.uint8),
                                                 0.05, 3, 0, 255, torch.uint8)
            wd = Q.dequantize_per_channel.default(self.w1, self.s1, self.z1, 0, -127, 127, torch.int8)
            hq = Q.quantize_per_tensor.default(torch.nn.functional.linear(xd, wd, self.b1).relu(),
                                               0.1, 0, 0, 255, torch.uint8)
            hd = Q.dequantize_per_tensor.default(hq, 0.1, 0, 0, 255, torch.uint8)
            w2 = Q.dequantize_per_tensor.default(self.w2, 0.004, 128, 0, 255, torch.uint8)
            yq = Q.quantize_per_tensor.default(torch.nn.functional.linear(hd, w2), 0.07, -5, -128, 127, torch.int8)
            w3 = Q.dequantize_per_channel.default(self.w3, self.k, None, 1, -127, 127, torch.int8)
            zq = Q.quantize_per_tensor.default(torch.nn.functional.linear(hd, w3), 0.07, 0, -128, 127, torch.int8)
            sd = Q.dequantize_per_tensor.default(Q.quantize_per_tensor.default(seq, 0.05, 3, 0, 255, torch.uint8),
                                                 0.05, 3, 0, 255, torch.uint8)  # [batch, length, features]
            sq = Q.quantize_per_tensor.default(torch.nn.functional.linear(sd, wd, self.b1), 0.1, 7, 0, 255, torch.uint8)
            iq = Q.quantize_per_tensor.default(img, 0.04, -2, -128, 127, torch.int8)
            idq = Q.dequantize_per_tensor.default(iq, 0.04, -2, -128, 127, torch.int8)
            cw = Q.dequantize_per_channel.default(self.c1, self.cs, self.cz, 0, -128, 127, torch.int8)
            fq = Q.quantize_per_tensor.default(torch.nn.functional.conv2d(idq, cw, self.cb, padding=1).relu(),
                                               0.15, -128, -128, 127, torch.int8)
            fd = Q.dequantize_per_tensor.default(fq, 0.15, -128, -128, 127, torch.int8)
            c2 = Q.dequantize_per_tensor.default(self.c2, 0.01, 0, -128, 127, torch.int8)
            oq = Q.quantize_per_tensor.default(torch.nn.functional.conv2d(fd, c2, stride=2), 0.3, 10, -128, 127,
                                               torch.int8)
            return hq, yq, zq, fq, oq, sq

    return Net()


def test_from_torch_pt2e_layers_run_as_integer_kernels():
    """PT2E's quantized linear and conv2d layers run as matmul-int / conv2d-int (the weight
    quantized along the input axis stays float) and match torch's decomposed float graph within
    one quantum (here: exactly)."""
    import importlib

    torch = pytest.importorskip("torch")
    importlib.import_module("torch.ao.quantization.fx._decomposed")
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(5, 8, generator=g) * 2, torch.randn(2, 3, 9, 7, generator=g) * 2,
            torch.randn(2, 3, 8, generator=g) * 2)
    model = _pt2e_layers()
    m = caten.from_torch(model, args, runtime="numpy")
    assert m.source.count("matmul-int") == 3 and m.source.count("conv2d-int") == 2
    off_by_one = 0
    for got, want in zip(m(*args), model(*args), strict=True):
        d = np.abs(got.astype(np.int32) - want.numpy().astype(np.int32))
        assert got.dtype == want.numpy().dtype and d.max() <= 1
        off_by_one += int(np.count_nonzero(d))
    assert off_by_one == 0


NODE_MODULES = ("qlinearmatmul", "qlinearconv", "matmulinteger", "convinteger", "quantizelinear",
                "dequantizelinear", "dynamicquantizelinear")


def test_onnx_node_cases_of_quantized_ops():
    """onnx's backend node cases of the quantized ops (generated by onnx's own case modules, only
    these: collecting every op's cases takes 9 s), run through caten.onnx.backend on llvm and
    compared as onnx's runner does; integer outputs must match exactly."""
    pytest.importorskip("onnx")
    import importlib

    from onnx.backend.test.case import node
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from caten.onnx import backend

    for m in NODE_MODULES:  # importing a case module runs its exports, which record its cases
        importlib.import_module(f"onnx.backend.test.case.node.{m}")
    prefixes = tuple(f"test_{m}" for m in NODE_MODULES)
    cases = [c for c in node._NodeTestCases if c.name.startswith(prefixes)]
    if len(cases) < 45:  # the modules were imported before and their cases consumed: collect anew
        cases = [c for c in node.collect_testcases() if c.name.startswith(prefixes)]
    assert len(cases) >= 45
    for case in cases:
        rep = backend.prepare(case.model)
        for inputs, outputs in case.data_sets:
            got = rep.run([_normalize_tensor(t) for t in inputs])
            want = [_normalize_tensor(t) for t in outputs]
            Runner.assert_similar_outputs(want, got, rtol=case.rtol, atol=case.atol, model_dir=None)
            for g, w in zip(got, want, strict=True):
                if np.issubdtype(w.dtype, np.integer):
                    np.testing.assert_array_equal(g, w, err_msg=case.name)
