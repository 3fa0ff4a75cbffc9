"""ONNX sequences, optionals, the preview-training optimizers and BitCast through caten's ONNX backend,
each against onnx's ReferenceEvaluator on hand-built models (sequences and optionals are taken apart at
conversion: the fed values decide lengths and presence)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from caten.frontends.onnx.types import Unsupported  # noqa: E402
from caten.onnx import backend  # noqa: E402

F = TP.FLOAT


def _seq(name: str, elem: int = F) -> onnx.ValueInfoProto:
    return oh.make_value_info(name, oh.make_sequence_type_proto(oh.make_tensor_type_proto(elem, None)))


def _opt_tensor(name: str, elem: int = F) -> onnx.ValueInfoProto:
    return oh.make_value_info(name, oh.make_optional_type_proto(oh.make_tensor_type_proto(elem, None)))


def _model(nodes, ins, outs, opset: int = 18, extra=()) -> onnx.ModelProto:
    ops = [oh.make_opsetid("", opset), *extra]
    return oh.make_model(oh.make_graph(nodes, "g", ins, outs), opset_imports=ops)


def _same(got, ref) -> None:
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        if isinstance(r, list):
            assert isinstance(g, list) and len(g) == len(r)
            _same(g, r)
        elif r is None:
            assert g is None
        else:
            g, r = np.asarray(g), np.asarray(r)
            assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, r.dtype, g.shape, r.shape)
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-7)


def _check(model, feeds: list, runtime: str = "llvm", names: list[str] | None = None) -> None:
    names = names or [vi.name for vi in model.graph.input]
    ref = ReferenceEvaluator(model).run(None, dict(zip(names, feeds)))
    _same(list(backend.prepare(model, runtime=runtime).run(feeds)), ref)


RNG = np.random.default_rng(40)


def _r(*shape: int, dt=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("rt", ["llvm", "numpy"])
def test_sequence_ops_agree_with_the_reference(rt):
    """construct, insert (negative position), at, erase, length, concat (with and without a new axis)."""
    nodes = [
        oh.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        oh.make_node("SequenceInsert", ["s0", "c", "p"], ["s1"]),
        oh.make_node("SequenceAt", ["s1", "q"], ["at"]),
        oh.make_node("SequenceErase", ["s1"], ["s2"]),
        oh.make_node("SequenceLength", ["s2"], ["n"]),
        oh.make_node("ConcatFromSequence", ["s1"], ["cat"], axis=-1),
        oh.make_node("SequenceConstruct", ["a", "a"], ["s3"]),
        oh.make_node("ConcatFromSequence", ["s3"], ["stk"], axis=-1, new_axis=1),
        oh.make_node("SequenceEmpty", [], ["e"], dtype=F),
        oh.make_node("SequenceInsert", ["e", "b"], ["s4"]),
    ]
    ins = [oh.make_tensor_value_info(k, F, None) for k in "abc"]
    ins += [oh.make_tensor_value_info(k, TP.INT64, []) for k in "pq"]
    t = oh.make_tensor_value_info
    outs = [_seq("s1"), t("at", F, None), _seq("s2"), t("n", TP.INT64, None), t("cat", F, None), t("stk", F, None),
            _seq("s4")]
    feeds = [_r(3, 2), _r(3, 5), _r(3, 0), np.array(-1), np.array(-3)]
    _check(_model(nodes, ins, outs), feeds, rt)


def test_sequence_inputs_map_and_split():
    """A sequence input of ragged elements through SequenceMap (a body with an outer tensor and Shape),
    and SplitToSequence with a scalar split and without keepdims."""
    body = oh.make_graph(
        [oh.make_node("Add", ["x", "t"], ["y"]), oh.make_node("Shape", ["x"], ["s"])], "body",
        [oh.make_tensor_value_info("x", F, None), oh.make_tensor_value_info("t", F, None)],
        [oh.make_tensor_value_info("y", F, None), oh.make_tensor_value_info("s", TP.INT64, None)])
    nodes = [oh.make_node("SequenceMap", ["xs", "t"], ["ys", "shapes"], body=body),
             oh.make_node("SplitToSequence", ["d", "k"], ["parts"], axis=1),
             oh.make_node("SplitToSequence", ["d"], ["rows"], axis=0, keepdims=0)]
    ins = [_seq("xs"), oh.make_tensor_value_info("t", F, [4]), oh.make_tensor_value_info("d", F, [3, 7]),
           oh.make_tensor_value_info("k", TP.INT64, [])]
    outs = [_seq("ys"), _seq("shapes", TP.INT64), _seq("parts"), _seq("rows")]
    feeds = [[_r(4), _r(2, 4), _r(1, 3, 4)], _r(4), _r(3, 7), np.array(3)]
    _check(_model(nodes, ins, outs), feeds)


def test_identity_and_empty_sequences():
    m = _model([oh.make_node("Identity", ["xs"], ["ys"])], [_seq("xs")], [_seq("ys")])
    _check(m, [[_r(2, 3), _r(5)]])
    _check(m, [[_r(1)]], runtime="numpy")


@pytest.mark.parametrize("present", [True, False])
def test_optionals(present):
    """has-element of a present / empty optional, of a tensor and of a missing input; get-element; identity."""
    nodes = [oh.make_node("OptionalHasElement", ["o"], ["h"]),
             oh.make_node("OptionalHasElement", ["x"], ["hx"]),
             oh.make_node("OptionalHasElement", [""], ["hn"]),
             oh.make_node("Optional", ["x"], ["ox"]),
             oh.make_node("OptionalGetElement", ["ox"], ["gx"]),
             oh.make_node("Identity", ["o"], ["io"])]
    ins = [_opt_tensor("o"), oh.make_tensor_value_info("x", F, [2, 3])]
    b = oh.make_tensor_value_info
    outs = [b("h", TP.BOOL, []), b("hx", TP.BOOL, []), b("hn", TP.BOOL, []), b("gx", F, [2, 3]), _opt_tensor("io")]
    o, x = (_r(4, 1) if present else None), _r(2, 3)
    # the reference evaluator wraps Optional's value in a list and cannot pass an empty optional on:
    # the expected values are the ops' definitions (presence, and the very tensors fed)
    want = [np.array(present), np.array(True), np.array(False), x, o]
    _same(list(backend.prepare(_model(nodes, ins, outs, opset=18)).run([o, x])), want)


def test_optional_get_element_of_an_empty_optional_is_refused():
    m = _model([oh.make_node("OptionalGetElement", ["o"], ["y"])], [_opt_tensor("o")],
               [oh.make_tensor_value_info("y", F, None)])
    with pytest.raises(Unsupported, match="empty"):
        backend.prepare(m).run([None])


def test_sequence_at_out_of_bounds_is_refused():
    m = _model([oh.make_node("SequenceAt", ["xs", "i"], ["y"])],
               [_seq("xs"), oh.make_tensor_value_info("i", TP.INT64, [])], [oh.make_tensor_value_info("y", F, None)])
    with pytest.raises(Unsupported, match="out of bounds"):
        backend.prepare(m).run([[_r(2)], np.array(1)])


TRAIN = oh.make_opsetid("ai.onnx.preview.training", 1)


def _train(op: str, shapes: list[tuple], t: int, dt=np.float32, **attrs) -> None:
    """One optimizer node over len(shapes) tensors of odd shapes (and an empty one), vs the reference."""
    code = TP.DOUBLE if dt == np.float64 else F
    k = len(shapes)
    kinds = {"Adagrad": "XGH", "Adam": "XGVH", "Momentum": "XGV"}[op]
    groups = [[f"{c}{i}" for i in range(k)] for c in kinds]
    outs_of = {"Adagrad": "XH", "Adam": "XVH", "Momentum": "XV"}[op]
    outs = [f"{c}{i}_new" for c in outs_of for i in range(k)]
    node = oh.make_node(op, ["R", "T", *sum(groups, [])], outs, domain=TRAIN.domain, **attrs)
    ins = [oh.make_tensor_value_info("R", code, []), oh.make_tensor_value_info("T", TP.INT64, [])]
    ins += [oh.make_tensor_value_info(nm, code, list(shapes[i])) for g in groups for i, nm in enumerate(g)]
    ovs = [oh.make_tensor_value_info(o, code, list(shapes[int(o[1:].split("_")[0])])) for o in outs]
    m = _model([node], ins, ovs, extra=[TRAIN])
    feeds = [np.array(0.1, dt), np.array(t)]
    feeds += [np.abs(_r(*shapes[i], dt=dt)) if c == "H" else _r(*shapes[i], dt=dt) for c in kinds for i in range(k)]
    names = [vi.name for vi in ins]
    ref = ReferenceEvaluator(m).run(None, dict(zip(names, feeds)))
    got = backend.prepare(m).run(feeds)
    assert len(got) == len(ref) == len(outs)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == dt
        np.testing.assert_allclose(g, r.astype(dt), rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-7)


@pytest.mark.parametrize("t", [0, 3])
def test_training_optimizers(t):
    shapes = [(3,), (2, 5), (0, 2)]
    _train("Adagrad", shapes, t, decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)
    _train("Adam", shapes, t, alpha=0.9, beta=0.999, epsilon=1e-7, norm_coefficient=0.02,
           norm_coefficient_post=0.01)
    _train("Momentum", shapes, t, alpha=0.9, beta=0.3, mode="standard", norm_coefficient=0.01)
    _train("Momentum", shapes[:1], t, alpha=0.95, beta=0.1, mode="nesterov", norm_coefficient=0.0)


def test_training_optimizer_in_f64():
    _train("Adam", [(4, 3)], 2, dt=np.float64, alpha=0.8, beta=0.99, epsilon=1e-9, norm_coefficient=0.0,
           norm_coefficient_post=0.0)


BITS = [(F, TP.INT32, np.float32), (TP.INT64, TP.DOUBLE, np.int64), (TP.UINT16, TP.INT16, np.uint16),
        (TP.BOOL, TP.UINT8, np.bool_), (TP.INT8, TP.UINT8, np.int8), (TP.DOUBLE, TP.UINT64, np.float64)]


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_bitcast(rt):
    nodes = [oh.make_node("BitCast", [f"x{i}"], [f"y{i}"], to=b) for i, (_, b, _) in enumerate(BITS)]
    ins = [oh.make_tensor_value_info(f"x{i}", a, None) for i, (a, _, _) in enumerate(BITS)]
    outs = [oh.make_tensor_value_info(f"y{i}", b, None) for i, (_, b, _) in enumerate(BITS)]
    feeds = []
    for _, _, dt in BITS:
        if dt == np.bool_:
            feeds.append(RNG.random((2, 3)) < 0.5)
        elif np.dtype(dt).kind == "f":
            x = (RNG.standard_normal(7) * 1e3).astype(dt)
            x[:4] = [np.nan, -np.inf, -0.0, np.finfo(dt).tiny / 4]
            feeds.append(x)
        else:
            info = np.iinfo(dt)
            feeds.append(RNG.integers(info.min, info.max, (3, 1), dtype=dt, endpoint=True))
    m = _model(nodes, ins, outs, opset=26)
    ref = [x.astype(np.uint8) if x.dtype == np.bool_ else x.view(oh.tensor_dtype_to_np_dtype(b))
           for x, (_, b, _) in zip(feeds, BITS)]
    for g, r in zip(backend.prepare(m, runtime=rt).run(feeds), ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        assert np.array_equal(g.view(np.uint8), r.view(np.uint8))


@pytest.mark.parametrize("a,b,why", [(TP.FLOAT16, TP.INT16, "16- and 8-bit floats"), (TP.UINT8, TP.BOOL, "bool")])
def test_bitcast_refusals(a, b, why):
    m = _model([oh.make_node("BitCast", ["x"], ["y"], to=b)], [oh.make_tensor_value_info("x", a, [2])],
               [oh.make_tensor_value_info("y", b, [2])], opset=26)
    with pytest.raises(Unsupported, match=why):
        backend.prepare(m).run([np.zeros(2, oh.tensor_dtype_to_np_dtype(a))])


ML = oh.make_opsetid("ai.onnx.ml", 5)


def _ml_check(node, x: np.ndarray, out_type: int, extra_in=(), feeds_extra=()) -> None:
    ins = [oh.make_tensor_value_info("X", oh.np_dtype_to_tensor_dtype(x.dtype), list(x.shape)), *extra_in]
    m = _model([node], ins, [oh.make_tensor_value_info("Y", out_type, None)], extra=[ML])
    feeds = [x, *feeds_extra]
    ref = ReferenceEvaluator(m).run(None, {vi.name: v for vi, v in zip(ins, feeds)})
    _same(list(backend.prepare(m).run(feeds)), ref)


def test_binarizer_and_array_feature_extractor():
    x = _r(3, 5)
    x[0, 0] = np.nan
    _ml_check(oh.make_node("Binarizer", ["X"], ["Y"], domain=ML.domain, threshold=0.1), x, F)
    ind = oh.make_tensor_value_info("I", TP.INT64, [3])
    node = oh.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML.domain)
    _ml_check(node, x, F, [ind], [np.array([4, 0, 4])])
    _ml_check(node, _r(5, dt=np.float64), TP.DOUBLE, [ind], [np.array([1, 2, 3])])


@pytest.mark.parametrize("agg", [0, 1, 2, 3])
def test_tree_ensemble(agg):
    """Two trees over 3 features and 3 targets: every comparison mode, a membership set, a missing
    value that tracks true, a NaN row; double splits on f32 input; and a one-leaf tree."""
    # tree 0: node0 (f0 <= 0.3) -> node1 / node2; node1 (f1 in {1, 2.5}) -> leaf0 / leaf1;
    # node2 (f2 > -0.2, missing true) -> leaf2 / node3; node3 (f0 != 1.0) -> leaf3 / leaf4
    # tree 1 (root 4): node4 (f1 < 0.1) -> leaf5 / node5; node5 (f2 >= 0.7) -> leaf6 / node6;
    # node6 (f0 == 2.0) -> leaf8 / leaf9; tree 2 (root 7): one leaf (leaf7: the spec's and the reference's)
    attrs = dict(
        nodes_featureids=[0, 1, 2, 0, 1, 2, 0, 0],
        nodes_modes=oh.make_tensor("m", TP.UINT8, [8], [0, 6, 3, 5, 1, 2, 4, 0]),
        nodes_splits=oh.make_tensor("s", TP.DOUBLE, [8], [0.3, np.nan, -0.2, 1.0, 0.1, 0.7, 2.0, 0.0]),
        nodes_truenodeids=[1, 0, 2, 3, 5, 6, 8, 7], nodes_trueleafs=[0, 1, 1, 1, 1, 1, 1, 1],
        nodes_falsenodeids=[2, 1, 3, 4, 5, 6, 9, 7], nodes_falseleafs=[0, 1, 0, 1, 0, 0, 1, 1],
        nodes_missing_value_tracks_true=[0, 0, 1, 0, 0, 0, 0, 0],
        membership_values=oh.make_tensor("mv", TP.FLOAT, [3], [1.0, 2.5, np.nan]),
        leaf_targetids=[0, 1, 2, 0, 1, 2, 0, 1, 2, 1],
        leaf_weights=oh.make_tensor("w", TP.DOUBLE, [10], [0.1, 1.3, -2.2, 3.3, 0.7, 1.1, -0.4, 5.5, 2.25, 0.3]),
        tree_roots=[0, 4, 7], n_targets=3, aggregate_function=agg, post_transform=0)
    node = oh.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML.domain, **attrs)
    x = np.array([[0.1, 1.0, 0.0], [0.1, 2.5, 0.9], [0.9, 0.0, np.nan], [1.0, 0.5, -0.5], [2.0, 0.2, 0.1],
                  [np.nan, np.nan, np.nan], [0.3, 0.3, 0.7]], np.float32)
    _ml_check(node, x, F)


def test_tree_ensemble_refuses_a_one_leaf_tree_the_spec_and_reference_read_differently():
    node = oh.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML.domain, nodes_featureids=[0],
                        nodes_modes=oh.make_tensor("m", TP.UINT8, [1], [0]),
                        nodes_splits=oh.make_tensor("s", TP.FLOAT, [1], [0.0]), nodes_truenodeids=[1],
                        nodes_trueleafs=[1], nodes_falsenodeids=[1], nodes_falseleafs=[1], leaf_targetids=[0, 0],
                        leaf_weights=oh.make_tensor("w", TP.FLOAT, [2], [1.0, 2.0]), tree_roots=[0], n_targets=1)
    with pytest.raises(Unsupported, match="one leaf"):
        _ml_check(node, _r(2, 1), F)


@pytest.mark.parametrize("mode,lo,hi,skip", [("TF", 1, 3, 2), ("IDF", 2, 3, 1), ("TFIDF", 1, 2, 0)])
def test_tfidf_vectorizer(mode, lo, hi, skip):
    """Uni-, bi- and trigrams sharing output columns, weights, skips; i64 rows and an i32 vector."""
    # unigrams 1 2 3; bigrams (1,1) (2,2) (3,3) (1,2); trigram (3,1,2)
    pool = [1, 2, 3, 1, 1, 2, 2, 3, 3, 1, 2, 3, 1, 2]
    attrs = dict(mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip, ngram_counts=[0, 3, 11],
                 ngram_indexes=[0, 1, 2, 3, 4, 3, 5, 6], pool_int64s=pool)
    if mode != "TF":
        attrs["weights"] = [0.5, -1.25, 2.0, 3.0, 0.1, 7.0, 1.5]
    node = oh.make_node("TfIdfVectorizer", ["X"], ["Y"], **attrs)
    for x in (RNG.integers(0, 4, (3, 9)), RNG.integers(1, 4, 11).astype(np.int32)):
        m = _model([node], [oh.make_tensor_value_info("X", oh.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                   [oh.make_tensor_value_info("Y", F, None)])
        _same(list(backend.prepare(m).run([x])), ReferenceEvaluator(m).run(None, {"X": x}))


def test_unfed_sequence_or_optional_input_is_refused_at_import():
    from caten.frontends.onnx import convert

    for vi in (_seq("xs"), _opt_tensor("xs")):
        m = _model([oh.make_node("Identity", ["xs"], ["ys"])], [vi], [_seq("ys")])
        with pytest.raises(Unsupported, match="needs its value"):
            convert(m)


def test_flex_attention_with_a_score_mod_expands_to_its_function_body():
    """An ai.onnx.preview op with a subgraph attribute: the body (with the subgraph inlined) is lowered."""
    score = oh.make_graph([oh.make_node("Tanh", ["s"], ["t"]), oh.make_node("Mul", ["t", "k"], ["y"])], "mod",
                          [oh.make_tensor_value_info("s", F, None)], [oh.make_tensor_value_info("y", F, None)],
                          [onnx.numpy_helper.from_array(np.array(2.5, np.float32), "k")])
    node = oh.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", score_mod=score)
    shapes = {"Q": [1, 2, 3, 4], "K": [1, 2, 5, 4], "V": [1, 2, 5, 3]}
    ins = [oh.make_tensor_value_info(k, F, s) for k, s in shapes.items()]
    m = _model([node], ins, [oh.make_tensor_value_info("Y", F, None)], opset=26,
               extra=[oh.make_opsetid("ai.onnx.preview", 1)])
    rng = np.random.default_rng(300)  # its own stream: the data must not depend on which tests ran first
    feeds = [rng.standard_normal(s).astype(np.float32) for s in shapes.values()]
    (got,), (ref,) = backend.prepare(m).run(feeds), ReferenceEvaluator(m).run(None, dict(zip(shapes, feeds)))
    # f32 softmax(QK^T)V: the reference normalizes each probability, caten divides the weighted sum once
    # (caten/schedule/softnorm.py); both round differently by a few ulps of |V| (about 3 here: ulp 2.4e-7)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-6)
