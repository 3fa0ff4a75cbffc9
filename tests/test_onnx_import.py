"""ONNX import (LANGUAGE.md section 13): `caten.onnx.load`, `caten import`, `caten run --weights`,
checked against onnx's reference evaluator, plus the diagnostics for bad models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import caten  # noqa: E402
import caten.onnx  # noqa: E402

RUNTIMES = ["numpy", "llvm", "c"]


def small_cnn(batch: str | int = "N", seed: int = 0) -> onnx.ModelProto:
    """conv(3x3, pad 1) -> relu -> maxpool 2 -> flatten -> gemm: the shape of a small torch CNN export."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype("f4") * 0.3, "conv.weight")
    b = numpy_helper.from_array(rng.standard_normal(4).astype("f4"), "conv.bias")
    fw = numpy_helper.from_array(rng.standard_normal((5, 4 * 3 * 3)).astype("f4") * 0.2, "fc.weight")
    fb = numpy_helper.from_array(rng.standard_normal(5).astype("f4"), "fc.bias")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "flat_shape")
    nodes = [
        helper.make_node("Conv", ["input.1", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "flat_shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [batch, 2, 6, 6])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 5])],
                          [w, b, fw, fb, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(model: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_load_small_cnn_matches_reference_at_two_batch_sizes(rt):
    model = small_cnn()
    mod = caten.onnx.load(model, runtime=rt)
    assert "(conv2d " in mod.source and "[N, 2, 6, 6]" in mod.source  # dim_param N is a dim symbol
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 2, 6, 6)).astype("f4")
        np.testing.assert_allclose(mod(x), reference(model, **{"input.1": x})[0], rtol=1e-5, atol=1e-5)


def caten_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "caten", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_import_cli_run_with_weights_and_gpu_sources(tmp_path):
    onnx.save(small_cnn(), str(tmp_path / "cnn.onnx"))
    r = caten_cli("import", "cnn.onnx", "-o", "cnn.lisp", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "cnn.lisp").read_text()
    assert text.count("(setf ") == 5  # one setf per ONNX node
    with np.load(tmp_path / "cnn.npz") as z:
        assert sorted(z.files) == ["w_conv_bias", "w_conv_weight", "w_fc_bias", "w_fc_weight"]
    x = np.random.default_rng(1).standard_normal((2, 2, 6, 6)).astype("f4")
    np.save(tmp_path / "x.npy", x)
    r = caten_cli("run", "cnn.lisp", "x_input_1=x.npy", "--weights", "cnn.npz", "-o", "y.npy", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    want = reference(small_cnn(), **{"input.1": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-5)
    for rt, out in (("cuda", "k.cu"), ("opencl", "k.cl")):
        r = caten_cli("-r", rt, "-S", "cnn.lisp", "-o", out, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / out).stat().st_size > 0


def test_bad_inputs_are_diagnostics(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"\x00not a model\xff" * 10)
    r = caten_cli("import", "junk.onnx", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "not a readable ONNX model" in r.stderr
    r = caten_cli("import", "missing.onnx", cwd=tmp_path)
    assert r.returncode == 1 and "no such file" in r.stderr
    node = helper.make_node("NonMaxSuppression", ["b", "s"], ["y"], name="nms0")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4]),
                                        helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 3])])
    onnx.save(helper.make_model(g), str(tmp_path / "nms.onnx"))
    r = caten_cli("import", "nms.onnx", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "NonMaxSuppression" in r.stderr and "nms0" in r.stderr
    with pytest.raises(caten.Error, match="NonMaxSuppression"):
        caten.onnx.load(str(tmp_path / "nms.onnx"))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_gather_cumsum_trilu_onehot_against_reference(rt):
    """The index composites (take, cumsum, triu) through ONNX nodes, with negative indices."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=1),
             helper.make_node("CumSum", ["g", "ax"], ["c"], reverse=1),
             helper.make_node("Trilu", ["c"], ["t"], upper=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 4])],
                          [numpy_helper.from_array(np.array(1, np.int64), "ax")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((3, 5)).astype("f4")
    i = np.array([4, -1, 0, 2], np.int64)
    got = caten.onnx.load(model, runtime=rt)(x, i)
    np.testing.assert_allclose(got, reference(model, x=x, i=i)[0], rtol=1e-6, atol=1e-6)


def test_missing_onnx_names_the_extra(monkeypatch):
    from caten.frontends import deps

    monkeypatch.setitem(sys.modules, "onnx_missing_for_test", None)
    with pytest.raises(caten.Error) as e:
        deps.need("onnx_missing_for_test", "onnx")
    assert "pip install 'caten[onnx]'" in (e.value.hint or "")


def test_import_docs_tables_are_generated_from_the_code():
    from caten.frontends.import_docs import DOC, render

    text = DOC.read_text()
    assert render(text) == text, "docs/import.md is stale: python -m caten.frontends.import_docs"
    assert "`Conv`" in text and "`Gather`" in text


def test_import_of_a_torch_exported_cnn(tmp_path):
    """Acceptance 3: the CNN exported by torch.onnx (TorchScript exporter, dynamic batch) imports to a
    .lisp that `caten run --weights` runs to onnx's reference result and `-r cuda/opencl -S` accept."""
    torch = pytest.importorskip("torch")

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.lin = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Linear(36, 5)

        def forward(self, x):
            return self.lin(torch.flatten(torch.nn.functional.max_pool2d(torch.relu(self.c(x)), 2), 1))

    torch.manual_seed(0)
    torch.onnx.export(CNN().eval(), (torch.randn(2, 2, 6, 6),), str(tmp_path / "cnn.onnx"), dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    assert caten_cli("import", "cnn.onnx", "-o", "cnn.lisp", cwd=tmp_path).returncode == 0
    x = np.random.default_rng(3).standard_normal((3, 2, 6, 6)).astype("f4")
    np.save(tmp_path / "x.npy", x)
    r = caten_cli("run", "cnn.lisp", "x=x.npy", "--weights", "cnn.npz", "-o", "y.npy", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    want = reference(onnx.load(str(tmp_path / "cnn.onnx")), x=x)[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-5)
    for rt, out in (("cuda", "k.cu"), ("opencl", "k.cl")):
        r = caten_cli("-r", rt, "-S", "cnn.lisp", "-o", out, cwd=tmp_path)
        assert r.returncode == 0, r.stderr


def test_backend_interface_run_node_run_model_and_devices():
    from caten.onnx import backend

    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.array([[-1.5, 0.0, 2.0]], np.float32)
    (y,) = backend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    model = small_cnn(batch=2)
    xs = np.random.default_rng(5).standard_normal((2, 2, 6, 6)).astype("f4")
    (out,) = backend.run_model(model, [xs])
    np.testing.assert_allclose(out, reference(model, **{"input.1": xs})[0], rtol=1e-5, atol=1e-5)
