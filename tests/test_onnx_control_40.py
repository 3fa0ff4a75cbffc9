"""ONNX control flow (If, Loop, Scan) and the recurrent layers (RNN, GRU, LSTM) against onnx's
reference evaluator, and onnxruntime where the reference ignores an attribute (sequence_lens, clip,
input_forget, activations); they import as caten's run-time forms (tests/test_onnx_control.py
covers run-time conditions and trip counts). llvm on every case; numpy and c on one each."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import caten.onnx  # noqa: E402
from caten.errors import Error  # noqa: E402

R = np.random.default_rng(40)
F = TP.FLOAT


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, ins, outs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", ins, outs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds: dict, runtime="llvm", oracle=None, rtol=1e-5, atol=1e-5):
    """caten (graph inputs fed at run time, nothing specialized) against the oracle's outputs."""
    mod = caten.onnx.load(model, runtime=runtime)
    got = mod(*[feeds[n] for n in mod.converted.inputs])
    got = got if isinstance(got, tuple) else (got,)
    want = (oracle or (lambda m, f: ReferenceEvaluator(m).run(None, f)))(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol)


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# ---- If -------------------------------------------------------------------------------------
def _branch(name, op, shape):
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_y"])], name, [], [_vi(f"{name}_y", F, shape)])


@pytest.mark.parametrize("cond", [True, False])
def test_if_runtime_condition_selects(cond):
    """A run-time condition: an `if` that runs only the taken branch."""
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Exp", [3, 5]),
                            else_branch=_branch("e", "Neg", [3, 5]))
    m = _model([node], [_vi("c", TP.BOOL, []), _vi("x", F, [3, 5])], [_vi("y", F, [3, 5])])
    _check(m, {"c": np.array(cond), "x": _f(3, 5)})


def test_if_constant_condition_imports_taken_branch_only():
    """A constant condition: only the taken branch is imported (the other one has another shape)."""
    then_b = _branch("t", "Sqrt", [3, 5])
    else_b = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e_y"], keepdims=0)], "e", [],
                               [_vi("e_y", F, [])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)
    c = numpy_helper.from_array(np.array(True), "c")
    m = _model([node], [_vi("x", F, [3, 5])], [_vi("y", F, None)], [c])
    mod = caten.onnx.load(m, runtime="numpy")
    assert "sum" not in mod.source
    x = np.abs(_f(3, 5))
    np.testing.assert_allclose(mod(x), ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-6)


def test_if_runtime_condition_with_differing_branches_is_refused():
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Exp", [3, 5]),
                            else_branch=helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e_y"], keepdims=0)],
                                                          "e", [], [_vi("e_y", F, [])]))
    m = _model([node], [_vi("c", TP.BOOL, []), _vi("x", F, [3, 5])], [_vi("y", F, None)])
    with pytest.raises(Error, match="#40"):
        caten.onnx.load(m)


# ---- Loop -----------------------------------------------------------------------------------
def _loop_body():
    """y += x[i : i+1] * i; scan output y; iteration count from the counter."""
    nodes = [
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Unsqueeze", ["i", "ax0"], ["s"]),
        helper.make_node("Add", ["s", "one"], ["e"]),
        helper.make_node("Slice", ["x", "s", "e"], ["xi"]),
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["xi", "fi"], ["d"]),
        helper.make_node("Add", ["y_in", "d"], ["y_out"]),
        helper.make_node("Identity", ["y_out"], ["scan"]),
    ]
    ins = [_vi("i", TP.INT64, []), _vi("cond_in", TP.BOOL, []), _vi("y_in", F, [1, 4])]
    return helper.make_graph(nodes, "body", ins,
                             [_vi("cond_out", TP.BOOL, []), _vi("y_out", F, [1, 4]), _vi("scan", F, [1, 4])])


@pytest.mark.parametrize("runtime", ["llvm", "numpy"])
def test_loop_constant_trip_count_unrolls(runtime):
    consts = {"M": np.array(5, np.int64), "c": np.array(True), "ax0": np.array([0], np.int64),
              "one": np.array([1], np.int64)}
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    node = helper.make_node("Loop", ["M", "c", "y0"], ["y", "ys"], body=_loop_body())
    m = _model([node], [_vi("x", F, [7, 4]), _vi("y0", F, [1, 4])], [_vi("y", F, [1, 4]), _vi("ys", F, [5, 1, 4])],
               inits)
    _check(m, {"x": _f(7, 4), "y0": _f(1, 4)}, runtime, _ort)  # the reference vstacks: wrong for rank >= 2


def test_loop_condition_folded_each_iteration():
    """No trip count: the loop stops when the (constant-foldable) condition turns false (i < 3)."""
    nodes = [helper.make_node("Less", ["i", "three"], ["cond_out"]), helper.make_node("Add", ["y_in", "x"], ["y_out"])]
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("y_in", F, [2, 3])],
                             [_vi("cond_out", TP.BOOL, []), _vi("y_out", F, [2, 3])])
    inits = [numpy_helper.from_array(np.array(True), "c"), numpy_helper.from_array(np.array(3, np.int64), "three")]
    m = _model([helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)], [_vi("x", F, [2, 3])],
               [_vi("y", F, [2, 3])], inits)
    _check(m, {"x": _f(2, 3)})


def test_loop_runtime_trip_count_is_refused():
    node = helper.make_node("Loop", ["M", "", "y0"], ["y", "ys"], body=_loop_body())
    m = _model([node], [_vi("M", TP.INT64, []), _vi("x", F, [7, 4]), _vi("y0", F, [1, 4])],
               [_vi("y", F, [1, 4]), _vi("ys", F, None)])
    with pytest.raises(Error, match="#40"):
        caten.onnx.load(m)


# ---- Scan -----------------------------------------------------------------------------------
def test_scan_axes_and_directions():
    """Two scan inputs (one along axis 1, one reversed), two states, outputs stacked on axis 1 / reversed."""
    nodes = [helper.make_node("Add", ["s_in", "a"], ["s_out"]), helper.make_node("Mul", ["p_in", "b"], ["p_out"]),
             helper.make_node("Sub", ["s_out", "b"], ["o1"]), helper.make_node("Identity", ["p_out"], ["o2"])]
    body = helper.make_graph(nodes, "b", [_vi("s_in", F, [3]), _vi("p_in", F, [3]), _vi("a", F, [3]), _vi("b", F, [3])],
                             [_vi("s_out", F, [3]), _vi("p_out", F, [3]), _vi("o1", F, [3]), _vi("o2", F, [3])])
    node = helper.make_node("Scan", ["s0", "p0", "xa", "xb"], ["s", "p", "y1", "y2"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[0, 1], scan_output_axes=[1, 0],
                            scan_output_directions=[0, 1])
    m = _model([node], [_vi(k, F, s) for k, s in (("s0", [3]), ("p0", [3]), ("xa", [3, 5]), ("xb", [5, 3]))],
               [_vi("s", F, [3]), _vi("p", F, [3]), _vi("y1", F, [3, 5]), _vi("y2", F, [5, 3])])
    _check(m, {"s0": _f(3), "p0": _f(3), "xa": _f(3, 5), "xb": _f(5, 3)}, oracle=_ort)  # reference: no reversed outputs


def test_scan_opset8_batch_axis():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["o"])], "b",
                             [_vi("s_in", F, [2]), _vi("x", F, [2])], [_vi("s_out", F, [2]), _vi("o", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)
    m = _model([node], [_vi("s0", F, [3, 2]), _vi("xs", F, [3, 4, 2])], [_vi("s", F, [3, 2]), _vi("ys", F, [3, 4, 2])],
               opset=8)
    _check(m, {"s0": _f(3, 2), "xs": _f(3, 4, 2)}, "c", _ort)


# ---- RNN, GRU, LSTM -------------------------------------------------------------------------
def _rnn_model(op, gates, d, T, B, n_in, H, attrs, layout=0, seq=False, init=False, peep=False, nout=2, dtype=F):
    npt = helper.tensor_dtype_to_np_dtype(dtype)
    arr = lambda *shape: _f(*shape).astype(npt)  # noqa: E731
    x_shape = [B, T, n_in] if layout else [T, B, n_in]
    ins = [_vi("X", dtype, x_shape)]
    feeds = {"X": arr(*x_shape)}
    inits = [numpy_helper.from_array(arr(d, gates * H, n_in) * 0.5, "W"),
             numpy_helper.from_array(arr(d, gates * H, H) * 0.5, "R"),
             numpy_helper.from_array(arr(d, 2 * gates * H) * 0.5, "B")]
    names = ["X", "W", "R", "B", "", ""]
    if seq:
        ins.append(_vi("L", TP.INT32, [B]))
        feeds["L"] = R.integers(1, T + 1, B).astype(np.int32)
        names[4] = "L"
    if init:
        st = [B, d, H] if layout else [d, B, H]
        ins.append(_vi("h0", dtype, st))
        feeds["h0"] = arr(*st)
        names[5] = "h0"
        if op == "LSTM":
            ins.append(_vi("c0", dtype, st))
            feeds["c0"] = arr(*st)
            names.append("c0")
    if peep:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(numpy_helper.from_array(arr(d, 3 * H), "P"))
    while names and names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][:nout]
    node = helper.make_node(op, names, outs, hidden_size=H, layout=layout, **attrs)
    m = _model([node], ins, [_vi(o, dtype, None) for o in outs], inits, opset=14)
    return m, feeds


RNN_CASES = {
    "rnn_bidir_init": ("RNN", 1, 2, 4, 3, 5, 2, {"direction": "bidirectional"}, {"init": True}, None),
    "rnn_relu_affine": ("RNN", 1, 2, 3, 2, 3, 4, {"direction": "bidirectional", "activations": ["Relu", "Affine"],
                                                  "activation_alpha": [0.7], "activation_beta": [0.2]}, {}, "ort"),
    "rnn_thresholded_elu": ("RNN", 1, 2, 3, 2, 3, 4, {"direction": "bidirectional",
                                                      "activations": ["ThresholdedRelu", "Elu"],
                                                      "activation_alpha": [0.1, 0.8]}, {}, "ort"),
    "gru_scaledtanh_softplus": ("GRU", 3, 1, 3, 2, 3, 3, {"activations": ["ScaledTanh", "Softplus"],
                                                         "activation_alpha": [0.9], "activation_beta": [1.1]},
                                {}, "ort"),
    "gru_reverse_lbr": ("GRU", 3, 1, 5, 2, 3, 4, {"direction": "reverse", "linear_before_reset": 1}, {"init": True},
                        None),
    "gru_bidir_layout1": ("GRU", 3, 2, 3, 2, 4, 3, {"direction": "bidirectional"}, {"layout": 1, "init": True}, None),
    "gru_seq_lens": ("GRU", 3, 2, 4, 3, 2, 3, {"direction": "bidirectional"}, {"seq": True, "init": True}, "ort"),
    "lstm_bidir_peep_init": ("LSTM", 4, 2, 3, 3, 2, 3, {"direction": "bidirectional"},
                             {"init": True, "peep": True, "nout": 3}, None),
    "lstm_reverse_layout1": ("LSTM", 4, 1, 3, 2, 3, 5, {"direction": "reverse"}, {"layout": 1, "nout": 3, "init": True},
                             None),
    "lstm_seq_lens": ("LSTM", 4, 2, 4, 3, 3, 2, {"direction": "bidirectional"}, {"seq": True, "nout": 3}, "ort"),
    "lstm_input_forget": ("LSTM", 4, 1, 4, 2, 3, 3, {"input_forget": 1}, {"nout": 3}, "ort"),
    "lstm_clip": ("LSTM", 4, 1, 4, 2, 3, 3, {"clip": 0.5}, {"nout": 3, "init": True}, "ort"),
    "gru_clip": ("GRU", 3, 1, 4, 2, 3, 3, {"clip": 0.4, "linear_before_reset": 1}, {"init": True}, "ort"),
    "rnn_clip": ("RNN", 1, 1, 4, 2, 3, 3, {"clip": 0.3}, {}, "ort"),
    "lstm_f64_numpy": ("LSTM", 4, 1, 3, 2, 3, 2, {}, {"nout": 3, "init": True, "dtype": TP.DOUBLE}, "numpy"),
    "lstm_activations": ("LSTM", 4, 1, 3, 2, 3, 3, {"activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                                                    "activation_alpha": [0.3, 0.1], "activation_beta": [0.4]},
                         {"nout": 3}, "ort"),
}


@pytest.mark.parametrize("case", list(RNN_CASES))
def test_recurrent(case):
    op, gates, d, T, B, n_in, H, attrs, opts, oracle = RNN_CASES[case]
    m, feeds = _rnn_model(op, gates, d, T, B, n_in, H, attrs, **opts)
    runtime = "numpy" if oracle == "numpy" else "llvm"
    _check(m, feeds, runtime, oracle=_ort if oracle == "ort" else None, rtol=1e-4, atol=1e-5)


def test_if_nested_in_loop_per_iteration():
    """An If inside a Loop body whose condition folds per unrolled iteration (i is even): the nested
    subgraph's values are renamed apart in each copy."""
    then_b = helper.make_graph([helper.make_node("Add", ["y_in", "x"], ["t_y"])], "t", [], [_vi("t_y", F, [2, 3])])
    else_b = helper.make_graph([helper.make_node("Mul", ["y_in", "x"], ["e_y"])], "e", [], [_vi("e_y", F, [2, 3])])
    nodes = [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Mod", ["i", "two"], ["r"]),
             helper.make_node("Equal", ["r", "zero"], ["even"]),
             helper.make_node("If", ["even"], ["y_out"], then_branch=then_b, else_branch=else_b)]
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), _vi("y_in", F, [2, 3])],
                             [_vi("co", TP.BOOL, []), _vi("y_out", F, [2, 3])])
    consts = {"M": np.array(4, np.int64), "two": np.array(2, np.int64), "zero": np.array(0, np.int64)}
    m = _model([helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)],
               [_vi("x", F, [2, 3]), _vi("y0", F, [2, 3])], [_vi("y", F, [2, 3])],
               [numpy_helper.from_array(v, k) for k, v in consts.items()])
    _check(m, {"x": _f(2, 3), "y0": _f(2, 3)}, oracle=_ort)  # the reference reads y_in of the wrong scope


def test_loop_carries_a_sequence():
    """A sequence carried through the unrolled loop (elements of growing length)."""
    nodes = [helper.make_node("Identity", ["ci"], ["co"]), helper.make_node("Add", ["i", "one"], ["e"]),
             helper.make_node("Unsqueeze", ["e", "ax"], ["ends"]),
             helper.make_node("Slice", ["x", "start", "ends"], ["part"]),
             helper.make_node("SequenceInsert", ["s_in", "part"], ["s_out"])]
    seq = helper.make_tensor_sequence_value_info
    body = helper.make_graph(nodes, "b", [_vi("i", TP.INT64, []), _vi("ci", TP.BOOL, []), seq("s_in", F, None)],
                             [_vi("co", TP.BOOL, []), seq("s_out", F, None)])
    consts = {"M": np.array(3, np.int64), "one": np.array(1, np.int64), "ax": np.array(0, np.int64),
              "start": np.array([0], np.int64)}
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
             helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [6])],
               [numpy_helper.from_array(v, k) for k, v in consts.items()])
    _check(m, {"x": _f(4)}, oracle=_ort)  # the reference loses the sequence carried from SequenceEmpty


def test_scan_body_op_with_a_function_body_is_expanded():
    """A body op caten lowers through its ONNX function body (CenterCropPad), once per step."""
    body = helper.make_graph([helper.make_node("CenterCropPad", ["xi", "shp"], ["yi"])], "b", [_vi("xi", F, [5, 2])],
                             [_vi("yi", F, [3, 4])])
    m = _model([helper.make_node("Scan", ["x"], ["y"], body=body, num_scan_inputs=1)], [_vi("x", F, [3, 5, 2])],
               [_vi("y", F, [3, 3, 4])], [numpy_helper.from_array(np.array([3, 4], np.int64), "shp")], opset=18)
    _check(m, {"x": _f(3, 5, 2)})


def test_lstm_symbolic_batch_one_program():
    """A dim_param batch: one compiled program serves every batch size (run-time sequence_lens too)."""
    ort = pytest.importorskip("onnxruntime")
    T, n_in, H = 3, 2, 3
    w = {"W": _f(2, 4 * H, n_in), "R": _f(2, 4 * H, H), "B": _f(2, 8 * H)}
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "L"], ["Y", "Y_h"], hidden_size=H, direction="bidirectional")
    m = _model([node], [_vi("X", F, [T, "N", n_in]), _vi("L", TP.INT32, ["N"])],
               [_vi(o, F, None) for o in ("Y", "Y_h")], [numpy_helper.from_array(v, k) for k, v in w.items()], opset=14)
    mod = caten.onnx.load(m)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 4):
        x, lens = _f(T, batch, n_in), R.integers(1, T + 1, batch).astype(np.int32)
        for g, w_ in zip(mod(x, lens), s.run(None, {"X": x, "L": lens})):
            np.testing.assert_allclose(g, w_, rtol=1e-4, atol=1e-5)


def test_scan_symbolic_dim_one_program():
    """A dim symbol on a non-scanned axis: one compiled program for every N (scan along axis 1)."""
    nodes = [helper.make_node("Add", ["s_in", "a"], ["s_out"]), helper.make_node("Mul", ["s_out", "a"], ["o"])]
    body = helper.make_graph(nodes, "b", [_vi("s_in", F, ["N"]), _vi("a", F, ["N"])],
                             [_vi("s_out", F, ["N"]), _vi("o", F, ["N"])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                            scan_output_axes=[1])
    m = _model([node], [_vi("s0", F, ["N"]), _vi("x", F, ["N", 4])], [_vi("s", F, ["N"]), _vi("y", F, ["N", 4])])
    mod = caten.onnx.load(m)
    for rows in (1, 3):
        feeds = {"s0": _f(rows), "x": _f(rows, 4)}
        for g, w in zip(mod(feeds["s0"], feeds["x"]), _ort(m, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
