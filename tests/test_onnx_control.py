"""ONNX control flow imported as caten's run-time forms (issue #40): recurrent layers as one `scan`
(both directions) over a symbolic sequence length (one program for lengths 1, 7 and 50), a Loop with a
run-time trip count and condition as a `while`, an If on a run-time condition as `(if ...)`, Scan
(opsets 9 and 8) as `scan`; against onnxruntime. The imported text holds a loop form and does not
grow with the sequence length."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import caten.onnx  # noqa: E402
from caten.errors import Error  # noqa: E402
from caten.frontends.onnx import convert  # noqa: E402

RUNTIMES = ["numpy", "llvm", "c"]
R = np.random.default_rng(4040)
F = TP.FLOAT


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, ins, outs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", ins, outs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _close(mod, model, feeds, rtol=1e-4, atol=1e-5):
    got = mod(*[feeds[n] for n in mod.converted.inputs])
    got = got if isinstance(got, tuple) else (got,)
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol)


def _forms(text: str) -> list[str]:
    return re.findall(r"\((scan|while|if|fori) ", text)


# ---- RNN, GRU, LSTM over a symbolic sequence length ----------------------------------------------
def _recurrent(op, direction="bidirectional", seq_lens=True, T="seq", H=3, n_in=2, **attrs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    d = 2 if direction == "bidirectional" else 1
    w = {"W": _f(d, gates * H, n_in) * 0.6, "R": _f(d, gates * H, H) * 0.6, "B": _f(d, 2 * gates * H) * 0.3}
    names = ["X", "W", "R", "B", "L" if seq_lens else "", "h0"]
    ins = [_vi("X", F, [T, "N", n_in])] + ([_vi("L", TP.INT32, ["N"])] if seq_lens else [])
    ins.append(_vi("h0", F, [d, "N", H]))
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction, **attrs)
    return _model([node], ins, [_vi(o, F, None) for o in outs], [numpy_helper.from_array(v, k) for k, v in w.items()],
                  opset=14)


def _feeds(model, T, B=3):
    n_in = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    d, H = (model.graph.input[-1].type.tensor_type.shape.dim[k].dim_value for k in (0, 2))
    feeds = {"X": _f(T, B, n_in), "h0": _f(d, B, H)}
    if any(i.name == "L" for i in model.graph.input):
        feeds["L"] = R.integers(1, T + 1, B).astype(np.int32)
        feeds["L"][0] = T  # one full-length sequence
    return feeds


CASES = {
    "lstm_bidir": ("LSTM", {}),
    "gru_bidir_lbr": ("GRU", {"linear_before_reset": 1}),
    "rnn_reverse_relu_clip": ("RNN", {"direction": "reverse", "activations": ["Relu"], "clip": 1.5}),
    "lstm_forward_nolens": ("LSTM", {"direction": "forward", "seq_lens": False}),
}


@pytest.mark.parametrize("case,runtime", [(c, "numpy") for c in CASES]
                         + [(c, r) for c in ("lstm_bidir", "gru_bidir_lbr") for r in ("llvm", "c")])
def test_recurrent_symbolic_sequence_one_program(case, runtime):
    """Imported once with a `seq` dim: one scan per direction serves lengths 1, 7 and 50 (numpy on
    every case, llvm and c on a representative pair)."""
    op, attrs = CASES[case]
    m = _recurrent(op, **attrs)
    mod = caten.onnx.load(m, runtime=runtime)
    assert _forms(mod.source) == ["scan"]  # both directions in one
    for T in (1, 7, 50):
        _close(mod, m, _feeds(m, T))


def test_recurrent_text_does_not_grow_with_the_sequence_length():
    """With a static length, 2 and 60 steps give the same text but for the length itself."""
    texts = [convert(_recurrent("GRU", T=T)).text for T in (5, 60)]
    assert texts[0].replace("[5,", "[60,").replace("(arange 5)", "(arange 60)") == texts[1]
    assert len(texts[0]) < 4000 and _forms(texts[0]) == ["scan"]


def _gru_bidir(layout):
    H, n_in = 4, 3
    w = {"W": _f(2, 3 * H, n_in) * 0.5, "R": _f(2, 3 * H, H) * 0.5, "B": _f(2, 6 * H) * 0.3}
    node = helper.make_node("GRU", ["X", "W", "R", "B", "L"], ["Y", "Y_h"], hidden_size=H,
                            direction="bidirectional", layout=layout)
    x = ["N", "seq", n_in] if layout else ["seq", "N", n_in]
    return _model([node], [_vi("X", F, x), _vi("L", TP.INT32, ["N"])], [_vi(o, F, None) for o in ("Y", "Y_h")],
                  [numpy_helper.from_array(v, k) for k, v in w.items()], opset=14)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_bidirectional_gru_sequence_lens(runtime):
    """sequence_lens per batch element: outputs past a length are 0, Y_h is the state at its own
    last step, the reverse direction starts at its own last step."""
    m = _gru_bidir(0)
    mod = caten.onnx.load(m, runtime=runtime)
    lens = np.array([6, 1, 3, 5], np.int32)
    x = _f(6, 4, 3)
    _close(mod, m, {"X": x, "L": lens})
    y = mod(x, lens)[0]
    assert not np.any(y[1:, :, 1]) and np.all(y[0, :, 1] != 0)  # nothing past a sequence's length


def test_gru_batch_first_layout_with_sequence_lens():
    """layout 1 (onnxruntime has no batch-first kernel): the same weights in layout 0 through
    onnxruntime, inputs and outputs transposed, are the oracle."""
    m1 = _gru_bidir(1)
    m0 = _gru_bidir(0)
    for a, b in zip(m0.graph.initializer, m1.graph.initializer):
        a.CopyFrom(b)
    mod = caten.onnx.load(m1, runtime="numpy")
    assert _forms(mod.source) == ["scan"]
    for T in (1, 5):
        x, lens = _f(3, T, 3), R.integers(1, T + 1, 3).astype(np.int32)
        y, yh = mod(x, lens)
        wy, wyh = _ort(m0, {"X": x.transpose(1, 0, 2), "L": lens})
        np.testing.assert_allclose(y, wy.transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(yh, wyh.transpose(1, 0, 2), rtol=1e-4, atol=1e-5)


# ---- Loop ---------------------------------------------------------------------------------
def _loop_model(with_trip=True, with_cond=True):
    """y <- y * 0.5 + x * i until the trip count M (run time) or until sum(y) >= limit (run time)."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Mul", ["y_in", "half"], ["yh"]), helper.make_node("Add", ["yh", "xi"], ["y_out"]),
             helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
             helper.make_node("Less", ["s", "limit"], ["c_out"])]
    body = helper.make_graph(nodes, "body", [_vi("i", TP.INT64, []), _vi("c_in", TP.BOOL, []), _vi("y_in", F, [2, 3])],
                             [_vi("c_out", TP.BOOL, []), _vi("y_out", F, [2, 3])],
                             [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    ins = [_vi("x", F, [2, 3]), _vi("y0", F, [2, 3]), _vi("limit", F, [])]
    if with_trip:
        ins.append(_vi("M", TP.INT64, []))
    if with_cond:
        ins.append(_vi("c", TP.BOOL, []))
    loop = helper.make_node("Loop", ["M" if with_trip else "", "c" if with_cond else "", "y0"], ["y"], body=body)
    return _model([loop], ins, [_vi("y", F, [2, 3])])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_loop_runtime_trip_count_and_condition(runtime):
    m = _loop_model()
    mod = caten.onnx.load(m, runtime=runtime)
    assert _forms(mod.source) == ["while"]
    x = np.abs(_f(2, 3))
    for M, c, limit in ((0, True, 100.0), (3, True, 1e9), (50, True, 20.0), (7, False, 1e9), (1000, True, 5.0)):
        _close(mod, m, {"x": x, "y0": _f(2, 3), "limit": np.array(limit, np.float32), "M": np.array(M, np.int64),
                        "c": np.array(c)}, rtol=1e-5)


def test_loop_condition_only_and_trip_count_only():
    """A condition alone: a while (onnxruntime as the oracle). A trip count alone: the body's
    condition output is ignored, as the operator's definition says ("for (int i=0; i <
    trip_count; ++i) { cond = ...; // ignored }"): onnxruntime stops when it turns false, so the
    oracle there is the definition's loop, on data whose condition does turn false (it did not, in
    the test's first form, where the two readings agreed)."""
    m = _loop_model(False, True)
    mod = caten.onnx.load(m, runtime="numpy")
    assert _forms(mod.source) == ["while"]
    feeds = {"x": np.abs(_f(2, 3)), "y0": _f(2, 3), "limit": np.array(30.0, np.float32), "c": np.array(True)}
    _close(mod, m, feeds, rtol=1e-5)
    m = _loop_model(True, False)
    mod = caten.onnx.load(m, runtime="numpy")
    assert _forms(mod.source) == ["while"]
    x, y0 = np.full((2, 3), 2.0, np.float32), np.ones((2, 3), np.float32)
    got = mod(*[{"x": x, "y0": y0, "limit": np.array(30.0, np.float32), "M": np.array(6, np.int64)}[n]
                for n in mod.converted.inputs])
    want = y0
    for i in range(6):  # sum(y) passes 30 at i = 2: the ignored condition turned false there
        want = want * np.float32(0.5) + x * np.float32(i)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _gather_body():
    """acc += x[i]; each step's acc is a scan output (a run-time index into x)."""
    nodes = [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Gather", ["x", "i"], ["xi"]),
             helper.make_node("Add", ["a_in", "xi"], ["a_out"]), helper.make_node("Sqrt", ["a_out"], ["ys"])]
    return helper.make_graph(nodes, "body", [_vi("i", TP.INT64, []), _vi("c_in", TP.BOOL, []), _vi("a_in", F, [4])],
                             [_vi("c_out", TP.BOOL, []), _vi("a_out", F, [4]), _vi("ys", F, [4])])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_loop_scan_outputs_constant_trip_count(runtime):
    """Scan outputs with a constant trip count: one scan over the iteration numbers."""
    node = helper.make_node("Loop", ["M", "", "a0"], ["a", "ys"], body=_gather_body())
    m = _model([node], [_vi("x", F, [9, 4]), _vi("a0", F, [4])], [_vi("a", F, [4]), _vi("ys", F, [6, 4])],
               [numpy_helper.from_array(np.array(6, np.int64), "M")])
    mod = caten.onnx.load(m, runtime=runtime)
    assert _forms(mod.source) == ["scan"]
    _close(mod, m, {"x": np.abs(_f(9, 4)), "a0": np.abs(_f(4))}, rtol=1e-5)


def test_loop_scan_outputs_trip_count_from_a_symbolic_shape():
    """The trip count read off a dim symbol (Shape, Gather): one scan serves every length; a
    constant 0 gives empty scan outputs."""
    node = helper.make_node("Loop", ["M", "", "a0"], ["a", "ys"], body=_gather_body())
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Gather", ["sx", "k0"], ["M"]), node]
    m = _model(nodes, [_vi("x", F, ["T", 4]), _vi("a0", F, [4])], [_vi("a", F, [4]), _vi("ys", F, ["T", 4])],
               [numpy_helper.from_array(np.array(0, np.int64), "k0")])
    mod = caten.onnx.load(m, runtime="numpy")
    assert _forms(mod.source) == ["scan"]
    for T in (1, 5):
        _close(mod, m, {"x": np.abs(_f(T, 4)), "a0": np.abs(_f(4))}, rtol=1e-5)
    zero = _model([node], [_vi("x", F, [3, 4]), _vi("a0", F, [4])], [_vi("a", F, [4]), _vi("ys", F, [0, 4])],
                  [numpy_helper.from_array(np.array(0, np.int64), "M")])
    _close(caten.onnx.load(zero, runtime="numpy"), zero, {"x": _f(3, 4), "a0": _f(4)})


def test_loop_scan_outputs_of_a_runtime_length_are_refused():
    node = helper.make_node("Loop", ["M", "", "a0"], ["a", "ys"], body=_gather_body())
    m = _model([node], [_vi("x", F, [9, 4]), _vi("a0", F, [4]), _vi("M", TP.INT64, [])],
               [_vi("a", F, [4]), _vi("ys", F, None)])
    with pytest.raises(Error, match="data-dependent output length"):
        caten.onnx.load(m, runtime="numpy")


# ---- If -----------------------------------------------------------------------------------
def _branch(name, nodes, out, shape):
    return helper.make_graph(nodes, name, [], [_vi(out, F, shape)])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_if_runtime_condition_runs_the_taken_branch(runtime):
    """The condition is computed from the data; the else branch reads a value the then branch
    cannot (log of a negative), which the taken-branch semantics keeps out of the result."""
    then_b = _branch("t", [helper.make_node("Log", ["x"], ["t_y"])], "t_y", [3, 4])
    else_b = _branch("e", [helper.make_node("Neg", ["x"], ["e_n"]), helper.make_node("Exp", ["e_n"], ["e_y"])],
                     "e_y", [3, 4])
    nodes = [helper.make_node("ReduceMin", ["x"], ["mn"], keepdims=0),
             helper.make_node("Greater", ["mn", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)]
    m = _model(nodes, [_vi("x", F, [3, 4])], [_vi("y", F, [3, 4])],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    mod = caten.onnx.load(m, runtime=runtime)
    assert _forms(mod.source) == ["if"]
    for x in (np.abs(_f(3, 4)) + 0.1, _f(3, 4)):
        _close(mod, m, {"x": x}, rtol=1e-5)


def test_if_inside_a_runtime_loop():
    """An If on the iteration number inside a Loop whose trip count is a run-time input."""
    then_b = _branch("t", [helper.make_node("Add", ["y_in", "x"], ["t_y"])], "t_y", [2, 3])
    else_b = _branch("e", [helper.make_node("Mul", ["y_in", "x"], ["e_y"])], "e_y", [2, 3])
    nodes = [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Mod", ["i", "two"], ["r"]),
             helper.make_node("Equal", ["r", "zero"], ["even"]),
             helper.make_node("If", ["even"], ["y_out"], then_branch=then_b, else_branch=else_b)]
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("y_in", F, [2, 3])],
                             [_vi("co", TP.BOOL, []), _vi("y_out", F, [2, 3])])
    consts = {"two": np.array(2, np.int64), "zero": np.array(0, np.int64)}
    m = _model([helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)],
               [_vi("x", F, [2, 3]), _vi("y0", F, [2, 3]), _vi("M", TP.INT64, [])], [_vi("y", F, [2, 3])],
               [numpy_helper.from_array(v, k) for k, v in consts.items()])
    mod = caten.onnx.load(m, runtime="numpy")
    assert sorted(_forms(mod.source)) == ["if", "while"]
    for M in (0, 1, 5):
        _close(mod, m, {"x": _f(2, 3), "y0": _f(2, 3), "M": np.array(M, np.int64)}, rtol=1e-5)


# ---- Scan ---------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_scan_symbolic_length_axes_and_directions(runtime):
    """Opset 9+: scan inputs along axis 1 and reversed, outputs on axis 1 and reversed, the
    scanned length a dim symbol."""
    nodes = [helper.make_node("Add", ["s_in", "a"], ["s_out"]), helper.make_node("Mul", ["s_out", "b"], ["o1"]),
             helper.make_node("Sub", ["a", "b"], ["o2"])]
    body = helper.make_graph(nodes, "b", [_vi("s_in", F, [3]), _vi("a", F, [3]), _vi("b", F, [3])],
                             [_vi("s_out", F, [3]), _vi("o1", F, [3]), _vi("o2", F, [3])])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "y1", "y2"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[0, 1])
    m = _model([node], [_vi("s0", F, [3]), _vi("xa", F, [3, "T"]), _vi("xb", F, ["T", 3])],
               [_vi("s", F, [3]), _vi("y1", F, [3, "T"]), _vi("y2", F, ["T", 3])])
    mod = caten.onnx.load(m, runtime=runtime)
    assert _forms(mod.source) == ["scan"]
    for T in (1, 6):
        _close(mod, m, {"s0": _f(3), "xa": _f(3, T), "xb": _f(T, 3)}, rtol=1e-5)


def test_scan_opset8_batch():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "x"], ["o"])], "b",
                             [_vi("s_in", F, [2]), _vi("x", F, [2])], [_vi("s_out", F, [2]), _vi("o", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[1])
    m = _model([node], [_vi("s0", F, [3, 2]), _vi("xs", F, [3, 5, 2])], [_vi("s", F, [3, 2]), _vi("ys", F, [3, 5, 2])],
               opset=8)
    mod = caten.onnx.load(m, runtime="numpy")
    assert _forms(mod.source) == ["scan", "scan"]  # over the batch, then over the sequence
    _close(mod, m, {"s0": _f(3, 2), "xs": _f(3, 5, 2)}, rtol=1e-5)


def test_scan_inside_a_runtime_loop():
    """A Scan (cumulative sum over rows) in the body of a Loop with a run-time trip count."""
    sb = helper.make_graph([helper.make_node("Add", ["s_in", "r"], ["s_out"]),
                            helper.make_node("Identity", ["s_out"], ["o"])], "sb",
                           [_vi("s_in", F, [3]), _vi("r", F, [3])], [_vi("s_out", F, [3]), _vi("o", F, [3])])
    nodes = [helper.make_node("Identity", ["ci"], ["co"]),
             helper.make_node("Scan", ["zero3", "y_in"], ["tot", "cum"], body=sb, num_scan_inputs=1),
             helper.make_node("Mul", ["cum", "half"], ["y_out"])]
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("y_in", F, [4, 3])],
                             [_vi("co", TP.BOOL, []), _vi("y_out", F, [4, 3])])
    consts = {"zero3": np.zeros(3, np.float32), "half": np.array(0.5, np.float32)}
    m = _model([helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)],
               [_vi("y0", F, [4, 3]), _vi("M", TP.INT64, [])], [_vi("y", F, [4, 3])],
               [numpy_helper.from_array(v, k) for k, v in consts.items()])
    mod = caten.onnx.load(m, runtime="numpy")
    assert sorted(_forms(mod.source)) == ["scan", "while"]
    for M in (0, 3):
        _close(mod, m, {"y0": _f(4, 3), "M": np.array(M, np.int64)}, rtol=1e-5)


def test_runtime_loop_whose_body_needs_a_constant_index_is_refused():
    """Slice bounds from the iteration number need it at import: with a run-time trip count the
    loop can neither run as a `while` nor unroll, and the diagnostic says so."""
    nodes = [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Unsqueeze", ["i", "ax"], ["s"]),
             helper.make_node("Add", ["s", "one"], ["e"]), helper.make_node("Slice", ["x", "s", "e"], ["xi"]),
             helper.make_node("Add", ["y_in", "xi"], ["y_out"])]
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("y_in", F, [1, 4])],
                             [_vi("co", TP.BOOL, []), _vi("y_out", F, [1, 4])])
    consts = {"ax": np.array([0], np.int64), "one": np.array([1], np.int64)}
    m = _model([helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)],
               [_vi("x", F, [7, 4]), _vi("y0", F, [1, 4]), _vi("M", TP.INT64, [])], [_vi("y", F, [1, 4])],
               [numpy_helper.from_array(v, k) for k, v in consts.items()])
    with pytest.raises(Error, match="as a run-time loop: Slice"):
        caten.onnx.load(m, runtime="numpy")
