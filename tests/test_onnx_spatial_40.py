"""ONNX spatial ops of #40, each node against onnx's reference evaluator (onnxruntime or torch where
the reference is wrong) on odd shapes: GridSample (every mode and padding, align_corners, 1-D to 3-D),
Conv 3-D, ConvTranspose 1-D and 3-D, MaxPool's Indices, antialiased Resize, Einsum with ellipses and
diagonals, RoiAlign, DeformConv; f16 numerics (interpolation and sums of products in f32, rounded
once) against the f64 result. Every case on numpy; llvm and c on a subset."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from caten.onnx.backend import CatenBackend  # noqa: E402

R = np.random.default_rng(40)


def _i64(*v):
    return np.array(v[0] if len(v) == 1 and isinstance(v[0], list) else v, np.int64)


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _grid(*shape):
    """Grid points in [-1.7, 1.7]: inside, on and beyond the borders."""
    return R.uniform(-1.7, 1.7, shape).astype(np.float32)


def _gs(mode: str, pad: str, align: int, x, g):
    return (helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=align),
            [x, g])


# every mode with every padding; align_corners alternating
CASES = {
    f"gridsample_{m}_{p}_{(i + j) % 2}": _gs(m, p, (i + j) % 2, _f(2, 3, 4, 5), _grid(2, 3, 6, 2))
    for i, m in enumerate(("nearest", "linear", "cubic")) for j, p in enumerate(("zeros", "border", "reflection"))
}
CASES.update({
    "gridsample_3d_linear_reflection": _gs("linear", "reflection", 0, _f(1, 2, 3, 4, 5), _grid(1, 2, 3, 2, 3)),
    "gridsample_3d_nearest_border": _gs("nearest", "border", 1, _f(2, 1, 2, 3, 4), _grid(2, 3, 1, 2, 3)),
    "gridsample_1d_cubic_zeros": _gs("cubic", "zeros", 0, _f(2, 3, 7), _grid(2, 5, 1)),
    "convtranspose_1d_strided": (
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[3], dilations=[2],
                         pads=[1, 2], output_padding=[1]), [_f(2, 4, 5), _f(4, 3, 3), _f(3)]),
    "convtranspose_3d_strided": (
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1, 3], pads=[0, 1, 1, 1, 0, 2]),
        [_f(1, 2, 3, 4, 2), _f(2, 3, 2, 3, 3)]),
    "convtranspose_3d_same_upper": (
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2, 1], auto_pad="SAME_UPPER"),
        [_f(1, 1, 2, 3, 3), _f(1, 2, 3, 2, 2)]),
    "maxpool_indices_2d_pads_ceil": (
        helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                         ceil_mode=1), [_f(2, 3, 5, 6)]),
    "maxpool_indices_2d_colmajor_ties": (
        helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3], storage_order=1, dilations=[2, 1]),
        [np.array(R.integers(-2, 2, (1, 2, 5, 4)), np.float32)]),
    "maxpool_indices_neg_inf": (
        helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3], pads=[1, 1, 1, 1]),
        [np.array([[[[-np.inf, -np.inf, 1, -np.inf, -np.inf, -np.inf], [-np.inf] * 5 + [2]]]], np.float32)]),
    "maxpool_indices_3d_i32": (
        helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2], strides=[1, 2, 1]),
        [R.integers(-3, 3, (2, 1, 3, 4, 3)).astype(np.int32)]),
    "resize_antialias_linear_scales": (
        helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1),
        [_f(1, 2, 7, 9), np.array([1, 1, 0.45, 0.6], np.float32)]),
    "resize_antialias_cubic_sizes_excl": (
        helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="cubic", antialias=1, exclude_outside=1,
                         cubic_coeff_a=-0.5), [_f(2, 1, 9, 5), _i64(2, 1, 4, 3)]),
    "resize_antialias_cubic_axes_up_down": (
        helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic", antialias=1, axes=[3, 2],
                         coordinate_transformation_mode="align_corners"),
        [_f(1, 1, 6, 5), np.array([1.5, 0.4], np.float32)]),
    "resize_antialias_linear_asym_3d": (
        helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear", antialias=1,
                         coordinate_transformation_mode="asymmetric"), [_f(1, 1, 5, 7, 4), _i64(1, 1, 2, 3, 3)]),
    "einsum_ellipsis_broadcast": (helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik"),
                                  [_f(2, 1, 3, 4), _f(3, 4, 5)]),
    "einsum_ellipsis_implicit": (helper.make_node("Einsum", ["a", "b"], ["y"], equation="b...,...c"),
                                 [_f(3, 2, 5), _f(2, 5, 4)]),
    "einsum_trace_diag": (helper.make_node("Einsum", ["a", "b"], ["y"], equation="iji,kk->j"),
                          [_f(3, 2, 3), _f(4, 4)]),
    "einsum_batch_diag_ellipsis": (helper.make_node("Einsum", ["a"], ["y"], equation="...ii->...i"), [_f(2, 3, 4, 4)]),
    "roialign_avg_half_pixel": (
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=3, output_width=2, sampling_ratio=3,
                         spatial_scale=0.5),
        [_f(2, 3, 7, 6), np.array([[0, 1, 9, 11], [-3, 2, 4, 3.5], [5, -2, 14, 16]], np.float32), _i64(1, 0, 1)]),
    "roialign_max_output_half_pixel": (
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2, output_width=3, sampling_ratio=2,
                         mode="max", coordinate_transformation_mode="output_half_pixel"),
        [_f(1, 2, 5, 6), np.array([[0.5, 1, 4, 4.5], [2, 2, 2.4, 2.2]], np.float32), _i64(0, 0)]),
    "roialign_adaptive_grid": (
        helper.make_node("RoiAlign", ["x", "croi", "bi"], ["y"], output_height=2, output_width=2),
        [_f(2, 2, 6, 7), np.array([[0, 0, 3.5, 3], [1, 2, 4, 5]], np.float32), _i64(1, 0)]),
    "deformconv_groups_mask_bias": (
        helper.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], group=2, offset_group=2, strides=[2, 1],
                         dilations=[1, 2], pads=[1, 0, 0, 1]),
        [_f(1, 4, 5, 4), _f(2, 2, 2, 2), 1.5 * _f(1, 2 * 2 * 2 * 2, 3, 3), _f(2), _f(1, 2 * 2 * 2, 3, 3)]),
    "deformconv_plain": (
        helper.make_node("DeformConv", ["x", "w", "off"], ["y"], kernel_shape=[2, 3]),
        [_f(2, 1, 3, 4), _f(3, 1, 2, 3), _f(2, 2 * 3 * 2, 2, 2)]),
    "gridsample_cubic_border_f64": _gs("cubic", "border", 0, _f(1, 2, 3, 4).astype(np.float64),
                                       _grid(1, 2, 3, 2).astype(np.float64)),
    "roialign_avg_f64": (
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2, output_width=2, sampling_ratio=2),
        [_f(1, 2, 4, 5).astype(np.float64), np.array([[0.3, 1, 3, 3.7]]), _i64(0)]),
    "deformconv_f64": (
        helper.make_node("DeformConv", ["x", "w", "off"], ["y"], pads=[1, 1, 1, 1]),
        [_f(1, 1, 3, 3).astype(np.float64), _f(2, 1, 2, 2).astype(np.float64), _f(1, 8, 4, 4).astype(np.float64)]),
    "conv_3d_groups_pads": (
        helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[1, 2, 1], dilations=[2, 1, 1],
                         pads=[1, 0, 1, 0, 1, 2]), [_f(2, 4, 5, 4, 3), _f(6, 2, 2, 3, 2), _f(6)]),
    "conv_3d_same_lower": (
        helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2, 2]),
        [_f(1, 2, 3, 4, 5), _f(3, 2, 2, 2, 3)]),
})

SUBSET = ["gridsample_linear_reflection_1", "gridsample_3d_linear_reflection", "gridsample_nearest_zeros_0",
          "convtranspose_3d_strided", "maxpool_indices_2d_colmajor_ties",
          "resize_antialias_cubic_sizes_excl", "einsum_trace_diag", "roialign_max_output_half_pixel",
          "deformconv_groups_mask_bias", "conv_3d_groups_pads"]

# inputs that decide output shapes: initializers, as exporters write them
CONSTS = {"s", "roi", "sz", "os", "croi"}


def _model(node, xs: list, opset: int):
    from onnx import numpy_helper

    names = [i for i in node.input if i]
    feeds = {nm: x for nm, x in zip(names, xs) if nm not in CONSTS}
    inits = [numpy_helper.from_array(x, nm) for nm, x in zip(names, xs) if nm in CONSTS]
    ins = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
           for nm, x in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output]
    model = helper.make_model(helper.make_graph([node], "case", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds


# onnx's reference pools padded inputs in padded coordinates (indices off by the pads): onnxruntime
BY_ORT = {"maxpool_indices_2d_pads_ceil", "maxpool_indices_neg_inf"}


def _oracle(name: str, model, feeds) -> list:
    if name in BY_ORT:
        ort = pytest.importorskip("onnxruntime")
        return ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def _check(name: str, rt: str) -> None:
    node, xs = CASES[name]
    model, feeds = _model(node, xs, 22 if name not in BY_ORT else 21)
    want = _oracle(name, model, feeds)
    for vo, w in zip(model.graph.output, want):  # declared as onnx's node tests declare them
        vo.CopyFrom(helper.make_tensor_value_info(vo.name, helper.np_dtype_to_tensor_dtype(w.dtype), w.shape))
    got = CatenBackend.prepare(model, runtime=rt).run(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_matches_reference_numpy(name):
    _check(name, "numpy")


@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("name", SUBSET)
def test_node_matches_reference_compiled(name, rt):
    _check(name, rt)


def test_convtranspose_3d_groups_matches_torch():
    """onnx's reference has no grouped ConvTranspose; torch's conv_transpose3d is the oracle."""
    torch = pytest.importorskip("torch")
    x, w, b = _f(2, 4, 3, 2, 3), _f(4, 2, 2, 3, 2), _f(4)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 1, 2],
                            dilations=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1], output_padding=[1, 0, 1])
    model, feeds = _model(node, [x, w, b], 22)
    want = torch.nn.functional.conv_transpose3d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=(2, 1, 2),
                                                padding=0, output_padding=(1, 0, 1), groups=2, dilation=(1, 2, 1))
    want = want[:, :, 1:, :, :].numpy()  # onnx's unequal pads: begin 1/0/0, end 0/1/1
    want = want[:, :, :, :want.shape[3] - 1, :want.shape[4] - 1]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, want.shape))
    got = CatenBackend.prepare(model, runtime="numpy").run(feeds)[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_roialign_adaptive_grid_of_runtime_rois_is_refused():
    from caten.frontends.onnx.types import Unsupported

    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2, output_width=2)
    model, feeds = _model(node, [_f(1, 1, 4, 4), np.array([[0, 0, 2, 2]], np.float32), _i64(0)], 22)
    from caten.frontends.onnx import convert

    with pytest.raises(Unsupported, match="sampling_ratio=0"):
        convert(model, "model")  # the backend specializes on the rois' values; a plain import cannot


@pytest.mark.parametrize("op", ["gridsample", "roialign", "deformconv"])
def test_f16_is_interpolated_in_f32_and_rounded_once(op):
    """f16 samples in f32 and rounds once: within half an f16 ulp (+ f32 noise) of the f64 reference
    (onnx's f16 reference rounds every weight and product, so it is no oracle here)."""
    name = {"gridsample": "gridsample_linear_reflection_1", "roialign": "roialign_avg_half_pixel",
            "deformconv": "deformconv_plain"}[op]
    node, xs = CASES[name]
    keep = {1} if op == "gridsample" else set()  # the reference denormalizes the grid in f32 anyway
    narrow = [x.astype(np.float16) if x.dtype == np.float32 and i not in keep else x for i, x in enumerate(xs)]
    model64, feeds64 = _model(node, [x.astype(np.float64) if x.dtype == np.float16 else x for x in narrow], 22)
    exact = ReferenceEvaluator(model64).run(None, feeds64)[0]
    model, feeds = _model(node, narrow, 22)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, exact.shape))
    got = np.asarray(CatenBackend.prepare(model, runtime="numpy").run(feeds)[0])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2 ** -11, atol=1e-6)


@pytest.mark.parametrize("mode,aa", [("linear", 0), ("cubic", 1)])
def test_resize_f16_rounds_once(mode, aa):
    """f16 resizes in f32 and rounds at the end, as the reference (f64 then one cast): within an ulp."""
    x = _f(1, 2, 9, 11).astype(np.float16)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=aa)
    model, feeds = _model(node, [x, np.array([1, 1, 0.6, 1.7], np.float32)], 22)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, want.shape))
    got = np.asarray(CatenBackend.prepare(model, runtime="numpy").run(feeds)[0])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2 ** -10, atol=1e-6)


def test_maxpool_indices_with_nans_match_torch():
    """NaN windows: caten's max propagates NaN as torch's, and the index is torch's (the last NaN);
    the reference and onnxruntime skip NaNs and disagree with each other."""
    torch = pytest.importorskip("torch")
    x = np.array([[[[1, np.nan, 3, 2], [0, 5, np.nan, 1], [2, 2, 2, 2]]], [[[np.nan] * 4, [4, 3, 4, 1], [0] * 4]]],
                 np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    model, feeds = _model(node, [x], 22)
    wv, wi = torch.nn.functional.max_pool2d(torch.tensor(x), 2, 1, return_indices=True)
    plane = x.shape[2] * x.shape[3]
    wi = wi.numpy() + (np.arange(x.shape[0] * x.shape[1]) * plane).reshape(x.shape[0], x.shape[1], 1, 1)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, wv.shape))
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("i", onnx.TensorProto.INT64, wv.shape))
    got = CatenBackend.prepare(model, runtime="numpy").run(feeds)
    np.testing.assert_array_equal(np.asarray(got[0]), wv.numpy())
    np.testing.assert_array_equal(np.asarray(got[1]), wi)


F16_SUMS = {
    "conv2d": (helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), [(1, 3, 5, 6), (4, 3, 3, 3)]),
    "conv1d": (helper.make_node("Conv", ["x", "w"], ["y"]), [(2, 3, 7), (2, 3, 3)]),
    "conv3d": (helper.make_node("Conv", ["x", "w"], ["y"]), [(1, 3, 3, 4, 5), (2, 3, 2, 2, 2)]),
    "convtranspose2d": (helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2]),
                        [(1, 3, 3, 4), (3, 2, 3, 3)]),
    "convtranspose3d": (helper.make_node("ConvTranspose", ["x", "w"], ["y"]), [(1, 3, 2, 3, 2), (3, 2, 2, 2, 2)]),
    "avgpool": (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3]), [(1, 2, 5, 6)]),
    "einsum": (helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik"), [(3, 7), (7, 2)]),
}


@pytest.mark.parametrize("name", sorted(F16_SUMS))
def test_f16_sums_of_products_round_once(name):
    """f16 convolutions, average pools and einsums sum in f32 and round once: within half an ulp
    (+ f32 noise) of the f64 result (onnx's f16 ConvTranspose is off by many ulps: no oracle)."""
    node, shapes = F16_SUMS[name]
    xs = [_f(*s).astype(np.float16) for s in shapes]
    model64, feeds64 = _model(node, [x.astype(np.float64) for x in xs], 22)
    exact = ReferenceEvaluator(model64).run(None, feeds64)[0]
    model, feeds = _model(node, xs, 22)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, exact.shape))
    got = np.asarray(CatenBackend.prepare(model, runtime="numpy").run(feeds)[0])
    assert got.dtype == np.float16
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert (np.abs(got - exact) <= 0.51 * ulp + 1e-7).all()
