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

pytestmark = pytest.mark.filterwarnings(  # torch.ao's and the TorchScript exporter's deprecation notices
    "ignore:You are using the legacy TorchScript-based ONNX export", "ignore:The feature will be removed",
    "ignore:Converting a tensor to a Python", "ignore:`torch.jit.trace", "ignore:torch.quantize_per_tensor",
    "ignore:Please use quant_min")
_NP = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16}
_TP = {"u8": TP.UINT8, "i8": TP.INT8, "u16": TP.UINT16}


def _ort(model, feeds: dict, optimize: bool) -> list[np.ndarray]:
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _quanta(got: np.ndarray, want: np.ndarray) -> tuple[int, int]:
    """(largest difference, count of differing elements) of two quantized tensors."""
    d = np.abs(got.astype(np.int32) - want.astype(np.int32))
    return int(d.max(initial=0)), int(np.count_nonzero(d))


def _layer(rng, kind: str, act: str, wdt: str, per_channel: bool, bias: str, relu: str, conv_pads=(1, 1, 1, 1)):
    """x (f32) -> Q -> DQ -> kind (weights DQ'd per tensor or per output channel; bias none, i32 of
    scale sx*sw, a constant f32) [-> Relu] -> Q -> DQ. relu "qmin" gives the output the zero point
    quantizers give a Relu's output (its range's least value: onnxruntime then drops the Relu and
    fuses), "mid" one in the middle (onnxruntime keeps the float graph)."""
    conv = kind.startswith("Conv")
    xshape, wshape, nout = ([2, 4, 7, 6], [6, 2, 3, 3], 6) if conv else ([5, 13], [13, 9], 9)
    if kind == "GemmT":
        wshape = [9, 13]
    if kind == "MatMul3":  # a batch of sequences, as in a transformer's projections
        xshape = [2, 5, 13]
    if kind == "Conv1":
        xshape, wshape, conv_pads = [2, 4, 9], [6, 2, 3], conv_pads[:1] + conv_pads[2:3]
    if kind == "Conv3":
        xshape, wshape, conv_pads = [1, 4, 5, 4, 3], [6, 2, 3, 3, 3], (1, 0, 1, 1, 1, 0)
    sx, zx = np.float32(0.05), np.array(-3 if act == "i8" else 7, _NP[act])
    lo, hi = (-60, 61) if wdt == "i8" else (70, 190)  # i8 weights small: ORT's AVX2 u8s8 kernel is then exact
    wq = rng.integers(lo, hi, wshape).astype(_NP[wdt])
    zw = rng.integers(-4, 5, nout).astype(np.int8) if wdt == "i8" else rng.integers(120, 136, nout).astype(np.uint8)
    sw = rng.uniform(0.002, 0.02, nout).astype(np.float32)
    if not per_channel:
        zw, sw = zw[:1].reshape(()), sw[:1].reshape(())
    # qmin, clip: the least value's zero point; relu6: also a scale that makes the range [0, 6]
    zy = {"u8": 0, "i8": -128}.get(act) if relu in ("qmin", "clip", "relu6") else 5 if act == "i8" else 100
    sy, zy = np.float32({"qmin": 0.3, "clip": 0.05, "relu6": 6 / 255}.get(relu, 0.6)), np.array(zy, _NP[act])
    inits = {"sx": sx, "zx": zx, "wq": wq, "sw": sw, "zw": zw, "sy": sy, "zy": zy}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"],
                              axis=0 if conv or kind == "GemmT" else 1)]
    ins = ["xd", "wd"]
    if bias in ("i32", "i32/2"):  # i32/2: the bias's scale is not sx*sw (added in f32)
        bs = (sx * sw / (2 if bias == "i32/2" else 1)).astype(np.float32)
        inits.update(bq=rng.integers(-3000, 3000, nout).astype(np.int32), bs=bs)
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0))
    elif bias == "f32":
        inits["b"] = rng.normal(0, 2, nout).astype(np.float32)
    op = {"GemmT": "Gemm", "MatMul3": "MatMul", "Conv1": "Conv", "Conv3": "Conv"}.get(kind, kind)
    attrs = {"pads": list(conv_pads), "group": 2} if conv else {"transB": 1} if kind == "GemmT" else {}
    if bias != "none" and op != "MatMul":
        ins.append("b")
    nodes.append(helper.make_node(op, ins, ["h"], **attrs))
    last = "h"
    if bias != "none" and op == "MatMul":
        nodes.append(helper.make_node("Add", ["b", "h"], ["hb"]))
        last = "hb"
    if relu in ("clip", "relu6"):  # ReLU6 as exporters write it
        inits.update(lo=np.float32(0.0), hi=np.float32(6.0))
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["r"]))
        last = "r"
    elif relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TP.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, {"x": rng.normal(0, 3, xshape).astype(np.float32)}, float(sy)


_FUSED_OPS = {"QLinearConv", "QLinearMatMul", "QGemm"}


def _ort_fuses(model, tmp_path) -> bool:
    """Whether onnxruntime's optimized graph runs the layer as an integer kernel."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "ort-optimized.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return any(n.op_type in _FUSED_OPS for n in onnx.load(so.optimized_model_filepath).graph.node)


CASES = [  # kind, activation, weight dtype, per-channel, bias, relu, runtime, whether onnxruntime fuses it
    ("MatMul", "u8", "i8", True, "none", "qmin", "numpy", True),
    ("MatMul", "u8", "u8", False, "none", "", "c", True),
    ("MatMul", "u8", "i8", True, "i32", "qmin", "numpy", True),  # onnxruntime makes MatMul + Add a QGemm
    ("MatMul", "i8", "u8", False, "f32", "", "numpy", True),
    ("MatMul", "u8", "u8", True, "none", "mid", "llvm", False),
    ("Gemm", "u8", "i8", False, "i32", "", "numpy", True),
    ("Gemm", "u8", "i8", True, "f32", "qmin", "llvm", True),
    ("GemmT", "u8", "u8", True, "i32", "qmin", "c", True),
    ("GemmT", "i8", "i8", True, "f32", "mid", "numpy", False),
    ("Conv", "u8", "i8", True, "i32", "qmin", "numpy", True),
    ("Conv", "u8", "u8", False, "f32", "", "llvm", True),
    ("Conv", "u8", "u8", True, "i32/2", "qmin", "numpy", False),
    ("Conv", "u8", "i8", True, "none", "mid", "numpy", False),
    ("Conv", "i8", "i8", True, "none", "", "c", True),
    ("MatMul3", "u8", "i8", True, "none", "qmin", "numpy", True),
    ("Conv1", "u8", "i8", True, "i32", "qmin", "numpy", True),
    ("Conv", "u8", "i8", True, "i32", "clip", "numpy", False),  # clamps at 6 / 0.05: onnxruntime keeps it float
    ("Conv", "u8", "i8", True, "i32", "relu6", "numpy", True),
    ("Conv3", "u8", "i8", True, "i32", "qmin", "numpy", True),  # the output's range is [0, 6]: it drops the Clip
    ("GemmT", "i8", "i8", True, "f32", "clip", "llvm", False),
]


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c[:7])) for c in CASES])
def test_layer_runs_as_an_integer_kernel(case, tmp_path):
    """Each layer fuses (the integer composite is in the text, no dequantize), is within one quantum
    of onnxruntime's float graph and equal to onnxruntime's fused kernel where it fuses."""
    *args, runtime, ort_fuses = case
    rng = np.random.default_rng(CASES.index(case))
    model, feeds, sy = _layer(rng, *args)
    text = convert(model).text
    dequantized = 2 if args[4] == "i32/2" else 1  # the output, and a bias added in f32
    kernel = {"Conv": "conv2d-int", "Conv1": "(squeeze (conv2d-int (unsqueeze", "Conv3": "(- (cast"}.get(args[0],
                                                                                                 "matmul-int")
    assert kernel in text and text.count("dequantize") == dequantized
    got = caten.onnx.load(model, runtime=runtime)(feeds["x"])
    (off,) = _ort(model, feeds, optimize=False)
    assert got.dtype == off.dtype and got.shape == off.shape
    quanta = np.rint(np.abs(got - off) / sy)
    assert quanta.max() <= 1 and np.count_nonzero(quanta) <= max(1, got.size // 10), quanta
    assert _ort_fuses(model, tmp_path) == ort_fuses
    if ort_fuses:
        np.testing.assert_array_equal(got, _ort(model, feeds, optimize=True)[0])


def test_a_rounded_f32_bias_is_a_quantum_off_where_onnxruntime_is(tmp_path):
    """A constant f32 bias becomes round(b / (sx * sw)) in i32, as onnxruntime's fused kernels take
    it: on a 96x256x128 Gemm some outputs differ by one quantum from the float graph (those, and
    only those, where onnxruntime's fused result does); none differs by more."""
    rng = np.random.default_rng(7)
    m, k, n = 96, 256, 128
    sx, sw, sy = np.float32(0.05), rng.uniform(0.002, 0.02, n).astype(np.float32), np.float32(0.05)
    inits = {"sx": sx, "zx": np.array(7, np.uint8), "wq": rng.integers(-60, 61, (k, n)).astype(np.int8), "sw": sw,
             "zw": np.zeros(n, np.int8), "b": rng.normal(0, 2, n).astype(np.float32), "sy": sy,
             "zy": np.array(128, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=1),
             helper.make_node("Gemm", ["xd", "wd", "b"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TP.UINT8, None)],
                          [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    feeds = {"x": rng.normal(0, 3, (m, k)).astype(np.float32)}
    got = caten.onnx.load(model, runtime="llvm")(feeds["x"])
    (off,), (on,) = _ort(model, feeds, optimize=False), _ort(model, feeds, optimize=True)
    worst, differ = _quanta(got, off)
    assert worst == 1 and 0 < differ <= got.size // 500, (worst, differ)
    np.testing.assert_array_equal(got, on)


def test_asymmetric_conv_pads_fuse(tmp_path):
    """Pads that differ at both ends are a pad with the zero point before conv2d-int (so they read
    as 0); onnxruntime's fused kernel is the oracle."""
    rng = np.random.default_rng(3)
    model, feeds, sy = _layer(rng, "Conv", "u8", "u8", True, "i32", "qmin", conv_pads=(0, 1, 2, 1))
    text = convert(model).text
    assert "(conv2d-int (pad" in text and text.count("dequantize") == 1 and _ort_fuses(model, tmp_path)
    got = caten.onnx.load(model, runtime="numpy")(feeds["x"])
    np.testing.assert_array_equal(got, _ort(model, feeds, optimize=True)[0])
    assert np.abs(got - _ort(model, feeds, optimize=False)[0]).max() <= 1.0001 * sy


def test_unfusable_patterns_stay_float():
    """A MatMul weight quantized per channel along K (not the output channel), 16-bit activations:
    no integer kernel, the float graph runs, equal to onnxruntime's unfused result."""
    rng = np.random.default_rng(4)
    model, feeds, _ = _layer(rng, "MatMul", "u16", "i8", True, "none", "")
    assert "matmul-int" not in convert(model).text
    np.testing.assert_array_equal(caten.onnx.load(model, runtime="numpy")(feeds["x"]),
                                  _ort(model, feeds, optimize=False)[0])
    model, feeds, _ = _layer(rng, "MatMul", "u8", "i8", True, "none", "")
    wdq = next(n for n in model.graph.node if n.input[0] == "wq")
    inits = {i.name: i for i in model.graph.initializer}
    for name, n in (("sw", 13), ("zw", 13)):  # per row (axis 0) of the [13, 9] weight
        v = numpy_helper.to_array(inits[name])
        inits[name].CopyFrom(numpy_helper.from_array(np.resize(v, n).astype(v.dtype), name))
    wdq.attribute[0].i = 0
    assert "matmul-int" not in convert(model).text
    got = caten.onnx.load(model, runtime="numpy")(feeds["x"])
    np.testing.assert_array_equal(got, _ort(model, feeds, optimize=False)[0])


def test_a_value_a_subgraph_reads_is_not_fused_away():
    """The MatMul's f32 result, read also inside an If's branch, stays computed: no fusion."""
    rng = np.random.default_rng(6)
    model, feeds, _ = _layer(rng, "MatMul", "u8", "i8", True, "none", "")
    branch = helper.make_graph([helper.make_node("Neg", ["h"], ["nh"])], "then", [],
                               [helper.make_tensor_value_info("nh", TP.FLOAT, None)])
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    model.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch, else_branch=branch))
    model.graph.output.append(helper.make_tensor_value_info("z", TP.FLOAT, None))
    assert "matmul-int" not in convert(model).text
    (y, z), (want_y, want_z) = caten.onnx.load(model, runtime="numpy")(feeds["x"]), _ort(model, feeds, False)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-5)  # (f32 sums in another order)


def test_switching_fusion_off_runs_the_float_graph(monkeypatch):
    rng = np.random.default_rng(5)
    model, feeds, _ = _layer(rng, "Gemm", "u8", "i8", True, "i32", "qmin")
    monkeypatch.setattr(qdq, "FUSE", False)
    text = convert(model).text
    assert "matmul-int" not in text and "dequantize" in text
    np.testing.assert_array_equal(caten.onnx.load(model, runtime="numpy")(feeds["x"]),
                                  _ort(model, feeds, optimize=False)[0])


# ---- models: torch -> ONNX -> onnxruntime.quantization.quantize_static (QDQ) -> caten -------------


def quantized_model(net, shape: tuple, seed: int = 0, per_channel: bool = True, reduce_range: bool = True):
    """(f32 ONNX model, its QDQ model, input name): `net` exported by torch.onnx (TorchScript
    exporter), calibrated by onnxruntime.quantization.quantize_static on 4 random batches (u8
    activations, s8 weights). reduce_range (7-bit weights) keeps onnxruntime's AVX2 u8 x s8 kernel
    from saturating its i16 pair sums, so its fused result is exact and can be an oracle."""
    import io
    import tempfile

    torch = pytest.importorskip("torch")
    q = pytest.importorskip("onnxruntime.quantization")
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), (torch.zeros(shape),), buf, dynamo=False, opset_version=17, input_names=["x"])
    f32 = onnx.load_from_string(buf.getvalue())
    rng = np.random.default_rng(seed)

    class Calibration(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        onnx.save(f32, f"{d}/f32.onnx")
        q.quantize_static(f"{d}/f32.onnx", f"{d}/q.onnx", Calibration(), quant_format=q.QuantFormat.QDQ,
                          per_channel=per_channel, reduce_range=reduce_range)
        return f32, onnx.load(f"{d}/q.onnx"), "x"


def _with_quantized_outputs(model):
    """The model with every QuantizeLinear's output also a graph output (after the model's own)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name: i.data_type for i in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] not in {o.name for o in m.graph.output}:
            elem = inits.get(node.input[2], TP.UINT8)
            m.graph.output.append(helper.make_tensor_value_info(node.output[0], elem, None))
    return m


def _out_scale(model) -> float:
    """The scale of the model's last DequantizeLinear (an initializer or a Constant)."""
    from caten.frontends.onnx.fold import constant_value

    last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    made = {n.output[0]: constant_value(n) for n in model.graph.node if n.op_type == "Constant"}
    return float({**init, **made}[last.input[1]])


def _check_model(model, x: np.ndarray, runtime: str, tmp_path) -> np.ndarray:
    """Every quantized tensor within one quantum of onnxruntime's float graph, and the model's f32
    output equal to onnxruntime's fused integer kernels (which it must use: extra graph outputs
    would stop its fusion, so that run has none) and within one quantum of its float graph."""
    m = _with_quantized_outputs(model)
    assert "matmul-int" in convert(m).text
    got = caten.onnx.load(m, runtime=runtime)(x)
    off = _ort(m, {"x": x}, optimize=False)
    assert np.abs(got[0] - off[0]).max() <= 1.0001 * _out_scale(model)
    assert _ort_fuses(model, tmp_path)
    np.testing.assert_array_equal(got[0], _ort(model, {"x": x}, optimize=True)[0])
    diffs = [_quanta(g, a) for g, a in zip(got[1:], off[1:], strict=True)]
    assert max(d[0] for d in diffs) <= 1, diffs
    elements, off_by_one = sum(g.size for g in got[1:]), sum(d[1] for d in diffs)
    assert off_by_one <= elements // 100, (off_by_one, elements)
    return got[0]


def test_quantize_static_mlp_matches_onnxruntime(tmp_path):
    """An MLP quantized by onnxruntime.quantization (QDQ: MatMul + Add become QGemm in onnxruntime)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48), torch.nn.ReLU(),
                              torch.nn.Linear(48, 10))
    _, model, _ = quantized_model(net, (3, 24))
    x = np.random.default_rng(1).normal(0, 1, (3, 24)).astype(np.float32)
    _check_model(model, x, "llvm", tmp_path)


def torch_ao_model(net, shape: tuple, fuse: list | None = None):
    """(converted module, ONNX model): torch.ao eager static quantization (x86 qconfig's weights
    and 7-bit activations: prepare, calibrate on 4 random batches, convert), exported by the
    TorchScript exporter (QDQ with Cast)."""
    import io

    torch = pytest.importorskip("torch")
    tq = pytest.importorskip("torch.ao.quantization")
    net = net.eval()
    if fuse:
        tq.fuse_modules(net, fuse, inplace=True)
    x86 = tq.get_default_qconfig("x86")  # its histogram observer takes seconds: a min-max one, as reduced
    net.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True), weight=x86.weight)
    prepared = tq.prepare(net)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        prepared(torch.randn(*shape, generator=g))
    converted = tq.convert(prepared)
    buf = io.BytesIO()
    torch.onnx.export(converted, (torch.zeros(shape),), buf, dynamo=False, opset_version=17, input_names=["x"])
    return converted, onnx.load_from_string(buf.getvalue())


def _check_torch_ao(net, shape: tuple, runtime: str, tmp_path, fuse: list | None = None) -> str:
    """_check_model, and the output within one quantum of torch's quantized module (fbgemm)."""
    torch = pytest.importorskip("torch")
    converted, model = torch_ao_model(net, shape, fuse)
    x = np.random.default_rng(2).normal(0, 1, shape).astype(np.float32)
    got = _check_model(model, x, runtime, tmp_path)
    want = converted(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 1.0001 * _out_scale(model)
    return convert(model).text


def test_torch_ao_mlp_matches_onnxruntime_and_torch(tmp_path):
    torch = pytest.importorskip("torch")
    tq = pytest.importorskip("torch.ao.quantization")
    torch.manual_seed(0)
    net = torch.nn.Sequential(tq.QuantStub(), torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
                              tq.DeQuantStub())
    text = _check_torch_ao(net, (3, 24), "c", tmp_path, fuse=[["1", "2"]])
    assert text.count("matmul-int") == 2 and text.count("(dequantize") == 1


def test_torch_ao_resnet18_matches_onnxruntime_and_torch(tmp_path):
    """torchvision's quantizable ResNet-18 (random weights, 16x16 input), torch.ao static
    quantization: all 20 convolutions and the classifier run as integer kernels, equal to
    onnxruntime's fused kernels, within one quantum of torch's quantized model."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = tv.models.quantization.resnet18(quantize=False, num_classes=10).eval()
    net.fuse_model()
    text = _check_torch_ao(net, (1, 3, 16, 16), "numpy", tmp_path)
    assert text.count("conv2d-int") == 20 and text.count("matmul-int") == 1
