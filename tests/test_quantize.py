"""Linear quantization and integer matmul/convolution (ops/quant.lisp) against numpy.

The oracle is ONNX's definition written in numpy: y = saturate(rint(x / scale) + zero_point)
with the quotient in x's dtype and the sum and clip in int64 (so it cannot overflow), scales and
zero points per tensor, per axis, or repeated over blocks; (q - zero_point) * scale for
dequantize; integer products summed in int64 for matmul-int/conv2d-int. onnx's own node tests
of the ops run through caten.onnx.backend at the end."""

from __future__ import annotations

import numpy as np
import pytest

import caten

RANGE = {np.uint8: (0, 255), np.int8: (-128, 127), np.uint16: (0, 65535), np.int16: (-32768, 32767)}
NAME = {np.uint8: "u8", np.int8: "i8", np.uint16: "u16", np.int16: "i16", np.int32: "i32",
        np.float16: "f16", np.float32: "f32", np.float64: "f64"}


def param(p: np.ndarray, shape: tuple, axis: int, block: int) -> np.ndarray:
    """A scale or zero point broadcast to the data's shape, as ONNX defines it."""
    if p.size == 1:
        return p.reshape(())
    axis %= len(shape)
    if block:
        return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)
    dims = [1] * len(shape)
    dims[axis] = p.size
    return p.reshape(dims)


def ref_quantize(x, s, z, dtype, axis=1, block=0):
    with np.errstate(over="ignore"):  # an f16 quotient may overflow to inf: it saturates
        q = np.rint(x / param(s, x.shape, axis, block).astype(x.dtype)).astype(np.float64)
    zz = 0 if z is None else param(z, x.shape, axis, block).astype(np.int64)
    lo, hi = RANGE[dtype]
    return np.clip(q + zz, lo, hi).astype(dtype)


def ref_dequantize(q, s, z, axis=1, block=0):
    d = q.astype(np.float64) - (0 if z is None else param(z, q.shape, axis, block).astype(np.float64))
    return (d * param(s, q.shape, axis, block).astype(np.float64)).astype(s.dtype)


def ann(name: str, a: np.ndarray) -> str:
    return f"{name}{{{NAME[a.dtype.type]}}}[{', '.join(map(str, a.shape))}]"


def run(body: str, *args: np.ndarray, out: tuple[str, tuple], runtime: str):
    """One composite computing `body` over inputs A, B, C, D (the args, in order)."""
    ins = " ".join(ann("ABCD"[i], a) for i, a in enumerate(args))
    res = f"Y{{{out[0]}}}[{', '.join(map(str, out[1]))}]"
    mod = caten.loads(f"(composite f (({ins}) -> ({res})) {body})", runtime=runtime)
    return mod.f(*args)


def data(rng, shape, dtype=np.float32, scale=300.0):
    """Values over the whole range, with exact ties (k + 1/2) * 0.5 and saturating extremes."""
    x = (rng.normal(0, scale, shape)).astype(dtype)
    flat = x.reshape(-1)
    if flat.size >= 8:
        big = 6e4 if dtype == np.float16 else 1e6
        flat[:6] = np.array([0.25, 0.75, -0.25, -1.25, big, -big], dtype)  # ties at scale 0.5, both ends
    return x


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("out", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_every_dtype(runtime, out):
    rng = np.random.default_rng(1)
    lo, hi = RANGE[out]
    x = data(rng, (3, 5, 7), scale=0.2 * hi + 5)
    s = np.array(0.5, np.float32)
    z = np.array(min(hi, 3) if lo == 0 else -2, out)
    got = run("(quantize A B :zero-point C)", x, s, z, out=(NAME[out], x.shape), runtime=runtime)
    np.testing.assert_array_equal(got, ref_quantize(x, s, z, out))
    assert got.reshape(-1)[4] == hi and got.reshape(-1)[5] == lo  # saturated at both ends
    # ties go to even: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, -2.5 -> -2 (plus the zero point)
    np.testing.assert_array_equal(got.reshape(-1)[:4].astype(np.int64) - int(z), [0, 2, 0, -2])


@pytest.mark.parametrize("xdt", [np.float16, np.float64])
def test_quantize_other_float_inputs(xdt):
    rng = np.random.default_rng(2)
    x = data(rng, (4, 9), xdt, scale=2000.0)
    s = np.array(0.75, xdt)
    for out in (np.int16, np.uint8):
        got = run(f"(quantize A B :dtype {NAME[out]})", x, s, out=(NAME[out], x.shape), runtime="numpy")
        np.testing.assert_array_equal(got, ref_quantize(x, s, None, out))


def test_quantize_f16_sixteen_bit_zero_point_is_exact():
    """The zero point is added in integers: in f16, 1001 + 30000 would round to 31008."""
    x = np.array([500.5, 1001.0, -3.0], np.float16)
    s, z = np.array(1.0, np.float16), np.array(30000, np.int16)
    got = run("(quantize A B :zero-point C)", x, s, z, out=("i16", (3,)), runtime="numpy")
    np.testing.assert_array_equal(got, [30500, 31001, 29997])


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_quantize_per_axis(runtime):
    rng = np.random.default_rng(3)
    x = data(rng, (3, 5, 7), scale=100.0)
    for axis in (0, 1, -1):
        n = x.shape[axis]
        s = rng.uniform(0.3, 2.0, n).astype(np.float32)
        z = rng.integers(-20, 20, n).astype(np.int8)
        got = run(f"(quantize A B :zero-point C :axis {axis})", x, s, z, out=("i8", x.shape), runtime=runtime)
        np.testing.assert_array_equal(got, ref_quantize(x, s, z, np.int8, axis))
        q = got
        back = run(f"(dequantize A B :zero-point C :axis {axis})", q, s, z, out=("f32", x.shape), runtime=runtime)
        np.testing.assert_array_equal(back, ref_dequantize(q, s, z, axis))


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_quantize_blocked(runtime):
    rng = np.random.default_rng(4)
    x = data(rng, (4, 7, 3), scale=100.0)
    for axis, block in ((1, 3), (0, 2), (-1, 1), (1, 7)):
        shape = list(x.shape)
        shape[axis] = -(-shape[axis] // block)  # ceil: 7 in blocks of 3 leaves a last block of 1
        s = rng.uniform(0.3, 2.0, shape).astype(np.float32)
        z = rng.integers(0, 40, shape).astype(np.uint8)
        keys = f":axis {axis} :block-size {block}"
        got = run(f"(quantize A B :zero-point C {keys})", x, s, z, out=("u8", x.shape), runtime=runtime)
        np.testing.assert_array_equal(got, ref_quantize(x, s, z, np.uint8, axis, block))
        back = run(f"(dequantize A B :zero-point C {keys})", got, s, z, out=("f32", x.shape), runtime=runtime)
        np.testing.assert_array_equal(back, ref_dequantize(got, s, z, axis, block))


def test_quantize_empty_dim_and_narrow_range():
    x = np.zeros((0, 5), np.float32)
    s = np.ones(5, np.float32)
    z = np.zeros(5, np.uint8)
    assert run("(quantize A B :zero-point C :axis 1)", x, s, z, out=("u8", (0, 5)), runtime="numpy").shape == (0, 5)
    # int4 carried in i8: :qmin/:qmax saturate to [-8, 7]
    x = np.array([-100.0, -8.4, -2.5, 3.5, 6.6, 7.5, 100.0], np.float32)
    got = run("(quantize A B :dtype i8 :qmin -8 :qmax 7)", x, np.array(1.0, np.float32),
              out=("i8", (7,)), runtime="numpy")
    np.testing.assert_array_equal(got, np.clip(np.rint(x), -8, 7))


@pytest.mark.parametrize("qdt", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
@pytest.mark.parametrize("sdt", [np.float32, np.float16, np.float64])
def test_dequantize_every_dtype(qdt, sdt):
    rng = np.random.default_rng(5)
    info = np.iinfo(qdt)
    q = rng.integers(info.min, int(info.max) + 1, (5, 3), dtype=np.int64).astype(qdt)
    s = rng.uniform(0.01, 3.0, 3).astype(sdt)
    z = rng.integers(info.min, int(info.max) + 1, 3, dtype=np.int64).astype(qdt)
    got = run("(dequantize A B :zero-point C :axis 1)", q, s, z, out=(NAME[sdt], q.shape), runtime="numpy")
    # the reference: (q - z) in f32 (f64 for int32), the product in f32 (f64 for an f64 scale)
    wide = sdt == np.float64 or qdt == np.int32
    if qdt == np.int32:
        d = q.astype(np.float32).astype(np.float64) - z
    else:
        d = q.astype(np.float32) - z.astype(np.float32)
    want = (d.astype(np.float64) * s.astype(np.float64)) if wide else d * s.astype(np.float32)
    with np.errstate(over="ignore"):  # an f16 scale times 65535 may overflow, in the reference too
        np.testing.assert_array_equal(got, want.astype(sdt))
    if qdt != np.int32 and sdt != np.float16:  # then exact before one rounding to the scale's dtype
        np.testing.assert_array_equal(got, ref_dequantize(q, s, z, 1))


def test_quantize_diagnostics():
    """Refused with a caten diagnostic: an output dtype other than the 8/16-bit integers, a scale
    of the wrong size, a blocked scale over a symbolic size."""
    x = np.ones(3, np.float32)
    with pytest.raises(caten.Error, match="u8, i8, u16 or i16"):
        run("(quantize A B :zero-point C)", x, np.array(1.0, np.float32), np.array(0, np.int32),
            out=("i32", (3,)), runtime="numpy")
    with pytest.raises(caten.Error, match="per-axis scale or zero point of 4 entries"):
        run("(quantize A B :axis 0)", x, np.ones(4, np.float32), out=("u8", (3,)), runtime="numpy")
    with pytest.raises(caten.Error, match="blocked quantization needs static sizes"):
        caten.loads("(composite f ((X{f32}[N, C] S{f32}[N, B]) -> (Y{u8}[N, C])) "
                    "(quantize X S :axis 1 :block-size 3))", runtime="numpy")


def np_conv_int(x, w, stride, pad, groups):
    """int64 direct convolution (NCHW, OIHW), the oracle of conv2d-int."""
    x = np.pad(x.astype(np.int64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                y[:, oc, i, j] = (patch * w[oc].astype(np.int64)).sum(axis=(1, 2, 3))
    return y


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_matmul_int_is_exact_in_i32(runtime):
    """u8 x u8 sums beyond 2**24 (a float accumulator would round them), batched i8 with zero
    points, and empty dims, against numpy's int64 product."""
    rng = np.random.default_rng(6)
    a = rng.integers(200, 256, (3, 1031)).astype(np.uint8)
    b = rng.integers(200, 256, (1031, 5)).astype(np.uint8)
    got = run("(matmul-int A B)", a, b, out=("i32", (3, 5)), runtime=runtime)
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert want.max() > 2 ** 24 + 1
    np.testing.assert_array_equal(got, want)
    a = rng.integers(-128, 128, (2, 3, 7)).astype(np.int8)
    b = rng.integers(-128, 128, (7, 4)).astype(np.int8)
    az, bz = np.array(-5, np.int8), rng.integers(-128, 128, 4).astype(np.int8)
    got = run("(matmul-int A B :a-zero-point C :b-zero-point D)", a, b, az, bz, out=("i32", (2, 3, 4)), runtime=runtime)
    np.testing.assert_array_equal(got, (a.astype(np.int64) - az) @ (b.astype(np.int64) - bz))
    e = run("(matmul-int A B)", np.zeros((3, 0), np.uint8), np.zeros((0, 2), np.int8), out=("i32", (3, 2)),
            runtime=runtime)
    np.testing.assert_array_equal(e, np.zeros((3, 2), np.int32))


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_conv2d_int(runtime):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (2, 3, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 2)).astype(np.int8)
    xz, wz = np.array(131, np.uint8), rng.integers(-128, 128, 4).astype(np.int8)
    got = run("(conv2d-int A B :x-zero-point C :w-zero-point D :stride 2 :padding 1)", x, w, xz, wz,
              out=("i32", (2, 4, 4, 4)), runtime=runtime)
    want = np_conv_int(x.astype(np.int64) - 131, w.astype(np.int64) - wz.reshape(4, 1, 1, 1), 2, 1, 1)
    np.testing.assert_array_equal(got, want)
    x = rng.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    got = run("(conv2d-int A B :groups 2)", x, w, out=("i32", (1, 6, 3, 3)), runtime=runtime)
    np.testing.assert_array_equal(got, np_conv_int(x, w, 1, 0, 2))


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
    onnxruntime with its graph optimizations off (which would fuse QDQ into integer kernels that
    round differently, by up to a quantum: the graph's own semantics are the unfused ones)."""
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


def test_tensor_methods():
    """Every library composite is a caten.Tensor method and a caten.functional function."""
    import caten.functional as F

    x = np.array([0.25, 0.75, -3.0, 1000.0, -1000.0], np.float32)
    t = caten.Tensor(x, runtime="numpy")
    s, z = np.array(0.5, np.float32), np.array(-3, np.int8)
    q = t.quantize(caten.Tensor(s, runtime="numpy"), zero_point=caten.Tensor(z, runtime="numpy"))
    assert q.dtype == "i8"
    np.testing.assert_array_equal(q.numpy(), ref_quantize(x, s, z, np.int8))
    back = q.dequantize(caten.Tensor(s, runtime="numpy"), zero_point=caten.Tensor(z, runtime="numpy"))
    np.testing.assert_array_equal(back.numpy(), ref_dequantize(q.numpy(), s, z))
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    b = np.arange(6, dtype=np.int8).reshape(3, 2)
    got = F.matmul_int(caten.Tensor(a, runtime="numpy"), caten.Tensor(b, runtime="numpy"),
                       b_zero_point=caten.Tensor(np.array(2, np.int8), runtime="numpy"))
    np.testing.assert_array_equal(got.numpy(), a.astype(np.int64) @ (b.astype(np.int64) - 2))


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
