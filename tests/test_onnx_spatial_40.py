"""ONNX spatial ops of #40, each node against onnx's reference evaluator on odd shapes: GridSample
(every mode and padding, align_corners, 1-D to 3-D), ... Every case on numpy; llvm and c on a
representative subset."""

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


CASES = {
    f"gridsample_{m}_{p}_{a}": _gs(m, p, a, _f(2, 3, 4, 5), _grid(2, 3, 6, 2))
    for m in ("nearest", "linear", "cubic") for p in ("zeros", "border", "reflection") for a in (0, 1)
}
CASES.update({
    "gridsample_3d_linear_reflection": _gs("linear", "reflection", 0, _f(1, 2, 3, 4, 5), _grid(1, 2, 3, 2, 3)),
    "gridsample_3d_nearest_border": _gs("nearest", "border", 1, _f(2, 1, 2, 3, 4), _grid(2, 3, 1, 2, 3)),
    "gridsample_1d_cubic_zeros": _gs("cubic", "zeros", 0, _f(2, 3, 7), _grid(2, 5, 1)),
})

SUBSET = ["gridsample_cubic_reflection_1", "gridsample_3d_linear_reflection", "gridsample_nearest_zeros_0"]

# inputs that decide output shapes: initializers, as exporters write them
CONSTS = {"s", "roi", "sz", "os"}


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


def _check(name: str, rt: str) -> None:
    node, xs = CASES[name]
    model, feeds = _model(node, xs, 22)
    want = ReferenceEvaluator(model).run(None, feeds)
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
