"""ONNX import fixes and new ops of #39, each node against onnx's reference evaluator on odd shapes:
BitShift past the width, SpaceToDepth CRD, LpNormalization of a zero slice, Resize align_corners
(scales) and tf_crop_and_resize, empty-set reductions, TopK (ties, NaN), GatherND, ScatterND,
ScatterElements, ReverseSequence. Every case on numpy; llvm and c on a representative subset."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from caten.onnx.backend import CatenBackend  # noqa: E402

R = np.random.default_rng(39)


def _i64(*v):
    """An int64 array of the values, or of the one nested list given."""
    return np.array(v[0] if len(v) == 1 and isinstance(v[0], list) else v, np.int64)


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


CASES = {
    "bitshift_right_i8": (helper.make_node("BitShift", ["x", "y"], ["z"], direction="RIGHT"),
                          [np.array([-128, -7, 5, 127, -1, 9], np.int8), np.array([9, 8, 7, -1, 3, 1], np.int8)]),
    "bitshift_right_i32": (helper.make_node("BitShift", ["x", "y"], ["z"], direction="RIGHT"),
                           [np.array([-100, 100, -1, 7], np.int32), np.array([32, 33, -4, 2], np.int32)]),
    "bitshift_left_u8": (helper.make_node("BitShift", ["x", "y"], ["z"], direction="LEFT"),
                         [np.array([255, 3, 7], np.uint8), np.array([1, 8, 9], np.uint8)]),
    # a function-bodied op in a model of another opset than its body's (the inliner converts it)
    "centercroppad_opset21": (helper.make_node("CenterCropPad", ["x", "crop"], ["y"]), [_f(5, 7), _i64(3, 9)]),
    "spacetodepth_crd": (helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2, mode="CRD"), [_f(2, 3, 4, 6)]),
    "depthtospace_crd": (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"), [_f(1, 8, 3, 5)]),
    "lpnorm_zero_slice": (helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=2),
                          [np.array([[0, 3, 1], [0, -4, 2]], np.float32)]),
    "lpnorm_l1_zero": (helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1),
                       [np.array([[0, 0, 0], [1, 2, 5]], np.float32)]),  # the reference sums x, not |x|
    "resize_linear_align_scales": (
        helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                         coordinate_transformation_mode="align_corners"),
        [_f(1, 1, 3, 5), np.array([1, 1, 0.6, 0.6], np.float32)]),
    "resize_cubic_align_scales": (
        helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic",
                         coordinate_transformation_mode="align_corners"),
        [_f(1, 2, 5, 4), np.array([1, 1, 0.7, 1.3], np.float32)]),
    "resize_tf_crop_linear": (
        helper.make_node("Resize", ["x", "roi", "", "sz"], ["y"], mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5),
        [_f(1, 1, 4, 5), np.array([0, 0, -0.2, 0.3, 1, 1, 0.7, 1.4], np.float32), _i64(1, 1, 3, 4)]),
    "resize_tf_crop_nearest_axes": (
        helper.make_node("Resize", ["x", "roi", "", "sz"], ["y"], mode="nearest", axes=[3, 2],
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0),
        [_f(1, 2, 4, 3), np.array([0.1, -0.3, 1.2, 0.8], np.float32), _i64(5, 3)]),
    "reduce_max_empty": (helper.make_node("ReduceMax", ["x", "a"], ["y"], keepdims=1),
                         [np.zeros((3, 0, 2), np.float32), _i64(1)]),
    "reduce_min_empty_i32": (helper.make_node("ReduceMin", ["x", "a"], ["y"], keepdims=0),
                             [np.zeros((3, 0, 2), np.int32), _i64(1)]),
    "reduce_logsumexp_empty": (helper.make_node("ReduceLogSumExp", ["x", "a"], ["y"], keepdims=1),
                               [np.zeros((2, 0, 3), np.float32), _i64(1)]),
    "topk_ties": (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
                  [np.array([[3, 1, 3, 2, 3], [0, 0, 1, 1, 0], [5, 4, 3, 2, 1]], np.float32), _i64(3)]),
    "topk_smallest_nan": (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0),
                          [np.array([[np.nan, 1], [2, np.nan], [-1, 0], [2, 5]], np.float32), _i64(4)]),
    "topk_largest_nan_i": (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
                           [np.array([[np.nan, 1, 7, np.nan, -3]], np.float32), _i64(3)]),
    "topk_int": (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1), [R.integers(-3, 3, (2, 3, 7)), _i64(4)]),
    "gathernd": (helper.make_node("GatherND", ["x", "i"], ["y"]),
                 [_f(3, 4, 5), _i64([[2, -1], [0, 3]], [[1, 1], [2, 0]])]),
    "gathernd_batch": (helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1),
                       [_f(2, 3, 5), np.array([[[1], [2], [0]], [[0], [0], [-1]]], np.int32)]),
    "scatternd": (helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
                  [_f(4, 3, 2), _i64([[1], [3]]), _f(2, 3, 2)]),
    "scatternd_add_dup": (helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add"),
                          [_f(3, 5), _i64([[0, 1], [2, 4], [0, 1]]), _f(3)]),
    "scatternd_max": (helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="max"),
                      [_f(3, 5), _i64([[1], [1]]), _f(2, 5)]),
    "scatternd_mul": (helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="mul"),
                      [_f(2, 3, 2), _i64([[[1, -1]]]), _f(1, 1, 2)]),
    "scatter_elements": (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
                         [_f(3, 5), _i64([[4, 0], [-1, 2], [1, 3]]), _f(3, 2)]),
    "scatter_elements_min": (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction="min"),
                             [_f(3, 4), _i64([[0, 2, 2, 1], [0, 0, 2, 1]]), _f(2, 4)]),
    "scatter_elements_add_i32": (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction="add"),
                                 [R.integers(-5, 5, (3, 2)).astype(np.int32), _i64([[1, 1], [1, 0]]),
                                  R.integers(-5, 5, (2, 2)).astype(np.int32)]),
    "reversesequence_time": (helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=0, batch_axis=1),
                             [_f(5, 3, 2), _i64(5, 2, 0)]),
    "reversesequence_batch": (helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=1, batch_axis=0),
                              [_f(3, 4), _i64(1, 4, 3)]),
    "hann_periodic": (helper.make_node("HannWindow", ["sz"], ["y"]), [np.array(7, np.int32)]),
    "hamming_symmetric_f64": (helper.make_node("HammingWindow", ["sz"], ["y"], periodic=0, output_datatype=11),
                              [np.array(6, np.int64)]),
    "blackman_symmetric": (helper.make_node("BlackmanWindow", ["sz"], ["y"], periodic=0), [np.array(5, np.int32)]),
    "maxpool3d_pads_ceil": (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                             pads=[1, 0, 1, 0, 1, 0], ceil_mode=1), [_f(1, 2, 5, 4, 5)]),
    "maxpool3d_dilated": (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2], dilations=[2, 1, 2]),
                          [_f(2, 1, 5, 3, 6)]),
    "maxpool2d_i8": (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 2]),
                     [R.integers(-128, 127, (1, 2, 3, 5)).astype(np.int8)]),
    "avgpool3d_count_pad": (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2, 2],
                                             pads=[1, 1, 0, 1, 0, 1], count_include_pad=1), [_f(1, 2, 4, 5, 3)]),
    "avgpool3d_exclude_pad_ceil": (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 3],
                                                    strides=[2, 2, 2], pads=[0, 1, 1, 0, 1, 1], ceil_mode=1),
                                   [_f(1, 1, 5, 4, 6)]),
    "lppool3d": (helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2, 2], p=3), [_f(1, 2, 3, 4, 3)]),
    "compress_axis": (helper.make_node("Compress", ["x", "c"], ["y"], axis=-1),
                      [_f(2, 3, 5), np.array([1, 0, 1, 1], bool)]),
    "compress_flat": (helper.make_node("Compress", ["x", "c"], ["y"]), [_f(3, 2), np.array([0, 1, 0, 0, 1, 1], bool)]),
    "nonzero": (helper.make_node("NonZero", ["x"], ["y"]), [np.array([[0, 2.5, 0], [1, 0, -1]], np.float32)]),
    "unique_sorted_axis": (helper.make_node("Unique", ["x"], ["y", "i", "v", "c"], axis=1),
                           [np.array([[1, 0, 1, 2], [3, 4, 3, 0]], np.float32)]),
    "unique_unsorted": (helper.make_node("Unique", ["x"], ["y", "i", "v", "c"], sorted=0),
                        [np.array([4, 1, 4, -2, 1, 7], np.int64)]),
    "col2im_strided_dilated": (
        helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 1]),
        [_f(2, 3 * 2 * 2, 6), _i64(5, 3), _i64(2, 2)]),
    "col2im_3d": (helper.make_node("Col2Im", ["x", "img", "blk"], ["y"]),
                  [_f(1, 2 * 8, 2 * 1 * 2), _i64(3, 2, 3), _i64(2, 2, 2)]),
    "maxunpool_shape": (helper.make_node("MaxUnpool", ["x", "i", "os"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
                        [_f(1, 2, 2, 2), _i64([[[[0, 3], [9, 14]], [[16, 18], [29, 31]]]]), _i64(1, 2, 5, 5)]),
    "affine_grid_2d": (helper.make_node("AffineGrid", ["t", "size"], ["y"]), [_f(2, 2, 3), _i64(2, 3, 4, 5)]),
    "affine_grid_3d_align": (helper.make_node("AffineGrid", ["t", "size"], ["y"], align_corners=1),
                             [_f(1, 3, 4), _i64(1, 1, 3, 2, 4)]),
}

SUBSET = ["bitshift_right_i8", "spacetodepth_crd", "lpnorm_zero_slice", "resize_tf_crop_linear", "reduce_max_empty",
          "topk_smallest_nan", "gathernd_batch", "scatternd_add_dup", "scatter_elements_min", "reversesequence_time",
          "maxpool3d_pads_ceil", "avgpool3d_exclude_pad_ceil", "maxpool2d_i8", "hann_periodic", "compress_axis",
          "col2im_strided_dilated", "maxunpool_shape", "affine_grid_3d_align"]


# inputs that decide output shapes: initializers, as exporters write them
CONSTS = {"k", "a", "s", "roi", "sz", "img", "blk", "os", "size", "crop"}


def _model(node, xs: list, opset: int, infer: bool = True):
    from onnx import numpy_helper

    names = [i for i in node.input if i]
    feeds = {nm: x for nm, x in zip(names, xs) if nm not in CONSTS}
    inits = [numpy_helper.from_array(x, nm) for nm, x in zip(names, xs) if nm in CONSTS]
    ins = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
           for nm, x in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in node.output]
    model = helper.make_model(helper.make_graph([node], "case", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return (onnx.shape_inference.infer_shapes(model) if infer else model), feeds


def _check(name: str, rt: str) -> None:
    node, xs = CASES[name]
    opset = 18 if node.op_type in ("ScatterND", "ScatterElements") else 21
    model, feeds = _model(node, xs, opset, infer=False)
    want = ReferenceEvaluator(model).run(None, feeds)
    for vo, w in zip(model.graph.output, want):  # declared as onnx's node tests declare them
        vo.CopyFrom(helper.make_tensor_value_info(vo.name, helper.np_dtype_to_tensor_dtype(w.dtype), w.shape))
    got = CatenBackend.prepare(model, runtime=rt).run(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_matches_reference_numpy(name):
    _check(name, "numpy")


@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("name", SUBSET)
def test_node_matches_reference_compiled(name, rt):
    _check(name, rt)


def test_topk_unsorted_is_refused():
    from caten.frontends.onnx.types import Unsupported

    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0)
    with pytest.raises(Unsupported, match="sorted=0"):
        model, feeds = _model(node, [_f(2, 3), _i64(2)], 21)
        CatenBackend.prepare(model, runtime="numpy").run(feeds)


def _lrn_oracle(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's definition, element by element in float64 (onnx's reference LRN loops over the
    batch where it means the channels, so it is no oracle)."""
    sq = np.zeros(x.shape)
    c = x.shape[1]
    for j in range(c):
        lo, hi = max(0, j - (size - 1) // 2), min(c, j + size // 2 + 1)
        sq[:, j] = (x[:, lo:hi].astype(np.float64) ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("size,shape", [(3, (2, 5, 3, 4)), (4, (1, 6, 2)), (1, (3, 2, 2, 1, 2))])
def test_lrn_matches_definition(rt, size, shape):
    x = _f(*shape)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.6, bias=1.5)
    model, feeds = _model(node, [x], 13)
    got = CatenBackend.prepare(model, runtime=rt).run(feeds)[0]
    np.testing.assert_allclose(got, _lrn_oracle(x, size, 0.3, 0.6, 1.5), rtol=2e-5, atol=1e-6)
    if size % 2:
        torch = pytest.importorskip("torch")
        want = torch.nn.functional.local_response_norm(torch.from_numpy(x), size, 0.3, 0.6, 1.5).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_integer_maxpool_pads_with_the_lowest_value(rt):
    """The reference pads integers with NaN (and fails): numpy's windows over the input padded with
    the dtype's minimum are the oracle."""
    x = R.integers(-128, 127, (2, 1, 4, 3, 5)).astype(np.int16) * 200
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3, 2], pads=[1, 1, 0, 0, 1, 1])
    model, feeds = _model(node, [x], 13)
    got = CatenBackend.prepare(model, runtime=rt).run(feeds)[0]
    xp = np.pad(x, [(0, 0), (0, 0), (1, 0), (1, 1), (0, 1)], constant_values=np.iinfo(np.int16).min)
    want = np.lib.stride_tricks.sliding_window_view(xp, (2, 3, 2), axis=(2, 3, 4)).max(axis=(5, 6, 7))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)


def test_value_dependent_shapes_need_known_values():
    """NonZero of a run-time input (caten.onnx.load, nothing specialized) is refused, not guessed."""
    import caten.onnx
    from caten.frontends.onnx.types import Unsupported

    node = helper.make_node("NonZero", ["x"], ["y"])
    g = helper.make_graph([node], "nz", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2, None])])
    with pytest.raises(Unsupported, match="must be a constant"):
        caten.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), runtime="numpy")


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("shape,dt", [((3, 3), np.float32), ((2, 3, 3, 3), np.float64), ((4, 2, 2), np.float32),
                                      ((0, 3, 3), np.float32), ((1, 1), np.float64)])
def test_det_matches_numpy(rt, shape, dt):
    x = R.standard_normal(shape).astype(dt)
    node = helper.make_node("Det", ["x"], ["y"])
    model, feeds = _model(node, [x], 13)
    got = CatenBackend.prepare(model, runtime=rt).run(feeds)[0]
    want = np.linalg.det(x) if x.size else np.zeros(shape[:-2], dt)
    assert got.dtype == dt and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-6)


def test_det_of_a_large_matrix_is_refused():
    from caten.frontends.onnx.types import Unsupported

    model, feeds = _model(helper.make_node("Det", ["x"], ["y"]), [_f(4, 4)], 13)
    with pytest.raises(Unsupported, match="4x4"):
        CatenBackend.prepare(model, runtime="numpy").run(feeds)
