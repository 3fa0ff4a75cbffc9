"""The 4-bit integer dtypes i4 and u4: one element per byte (ml_dtypes' layout), computed in i32 and
wrapped to 4 bits after every op, as i8 wraps at 8.

Oracles, none of them caten: integer arithmetic in numpy int64 wrapped by ml_dtypes' own astype
(int64 -> int4 keeps the low four bits), ml_dtypes' astype for casts from every dtype (floats
truncate toward zero and wrap; nan and +-inf give 0), numpy's for casts out of i4/u4, the raw bytes
against ml_dtypes' (`-1` is 0x0F), onnx's reference evaluator for the ONNX importer. Each runs on the
numpy, llvm and c runtimes, and llvm/c again with check_bounds; shapes are odd, some dims empty, some
inputs strided numpy views.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.errors import Error

NP4 = {"i4": ml_dtypes.int4, "u4": ml_dtypes.uint4}
RANGE = {"i4": (-8, 7), "u4": (0, 15)}
RUNS = [("numpy", False), ("llvm", False), ("c", False), ("llvm", True), ("c", True)]
OTHERS = ("bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64")

SRC = """
(composite arith ((A{T}[N]) (B{T}[N]) -> (S{T}[N]) (D{T}[N]) (P{T}[N]) (X{T}[N]) (G{T}[N]) (Q{T}[N]) (R{T}[N])
                                       (W{T}[N]) (O{T}[N]) (Y{T}[N]) (L{bool}[N]) (E{bool}[N]))
  (return (+ A B) (- A B) (* A B) (max A B) (neg A) (idiv A B) (mod A B) (and A B) (or A B) (xor A B)
          (< A B) (!= A B)))
(composite lits ((A{T}[N]) -> (S{T}[N]) (P{T}[N]) (M{T}[N])) (return (+ A 7) (* A 3) (min A 1)))
(composite red ((A{T}[M N]) -> (S0{T}[N]) (S1{T}[M]) (P1{T}[M]) (X0{T}[N]) (N1{T}[M]) (I{i64}[M]))
  (return (sum A :axis 0) (sum A :axis 1) (prod A :axis 1) (max A :axis 0) (min A :axis 1) (argmax A :axis 1)))
(composite views ((A{T}[M N]) -> (Y{T}[N M]) (Z{T}[M N]))
  (return (+ (transpose A) 1) (* (flip A :axis 1) 2)))
(composite mm ((A{T}[M K]) (B{T}[K N]) -> (C{T}[M N])) (matmul A B))
"""


@functools.cache
def _mod(runtime: str, bounds: bool, dt: str, src: str = SRC):
    ok, why = R.get(runtime).available()
    if not ok:
        pytest.skip(f"runtime {runtime} unavailable: {why}")
    return caten.loads(src, runtime=runtime, check_bounds=bounds, defines={"T": dt})


def _wrap(v: np.ndarray, dt: str) -> np.ndarray:
    """int64 values as dt by ml_dtypes (its int64 -> int4 conversion keeps the low four bits)."""
    return np.asarray(v, np.int64).astype(NP4[dt])


def _eq(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    g, w = got.astype(np.int64), want.astype(np.int64)
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert bad.size == 0, f"{what}: {bad.size} differ, e.g. got {g.reshape(-1)[bad[:5]]} want {w.reshape(-1)[bad[:5]]}"
    if got.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):  # ml_dtypes' bytes: high nibble 0
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"{what}: bytes differ"


def _pairs(dt: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = RANGE[dt]
    v = np.arange(lo, hi + 1)
    return np.repeat(v, 16), np.tile(v, 16)


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
def test_every_pair_through_the_binary_ops(rt: str, bounds: bool, dt: str) -> None:
    a, b = _pairs(dt)
    outs = _mod(rt, bounds, dt).arith(a.astype(NP4[dt]), b.astype(NP4[dt]))
    nz = np.where(b == 0, 1, b)
    want = [a + b, a - b, a * b, np.maximum(a, b), -a, np.where(b == 0, 0, a // nz), np.where(b == 0, 0, a % nz),
            a & b, a | b, a ^ b]
    names = ["+", "-", "*", "max", "neg", "idiv", "mod", "and", "or", "xor"]
    for got, w, name in zip(outs, want, names):
        _eq(got, _wrap(w, dt), f"{dt} {name} on {rt}")
    _eq(outs[10], a < b, f"{dt} < on {rt}")
    _eq(outs[11], a != b, f"{dt} != on {rt}")


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
def test_literals_wrap_and_out_of_range_literals_are_refused(rt: str, bounds: bool, dt: str) -> None:
    lo, hi = RANGE[dt]
    a = np.arange(lo, hi + 1)
    s, p, m = _mod(rt, bounds, dt).lits(a.astype(NP4[dt]))
    _eq(s, _wrap(a + 7, dt), "+ 7")
    _eq(p, _wrap(a * 3, dt), "* 3")
    _eq(m, _wrap(np.minimum(a, 1), dt), "min 1")
    with pytest.raises(Error, match="does not fit"):
        caten.loads(f"(composite f ((A{{{dt}}}[N]) -> (B{{{dt}}}[N])) (+ A {hi + 1}))", runtime=rt)


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
def test_casts_from_every_dtype_wrap_as_ml_dtypes(rt: str, bounds: bool, dt: str) -> None:
    """float -> i4/u4 truncates toward zero and wraps (7.5 -> 7, -8.5 -> -8, 100.0 -> 4; nan, +-inf -> 0),
    as ml_dtypes' astype and caten's float -> i8; integers keep their low four bits. (ml_dtypes goes
    through a C int: past +-2**31 it gives 0, where caten wraps the i64 value as its i8 cast does.)"""
    f = np.array([7.5, -8.5, 100.0, -100.0, 8.0, 16.0, 3.7, -3.7, 0.0, -0.0, -0.9, 15.99, 1e6 + 3, -2.0 ** 30 - 5,
                  np.nan, np.inf, -np.inf, 2.5, -2.5], np.float64)
    ints = np.array([0, 1, -1, 7, 8, -8, -9, 15, 16, 17, 100, -100, 127, -128], np.int64)
    for src in OTHERS:
        if src == "bool":
            x = np.array([True, False, True])
        elif src[0] in "iu":
            info = np.iinfo(np.dtype(src.replace("i", "int").replace("u", "uint")))
            x = np.array([*(int(v) for v in ints if info.min <= v <= info.max), int(info.min), int(info.max)],
                         dtype=object).astype(info.dtype)
        else:
            with np.errstate(over="ignore"):  # (1e6 is inf in f16)
                x = f.astype(np.dtype(ml_dtypes.bfloat16) if src == "bf16" else src.replace("f", "float"))
        m = _mod(rt, bounds, dt, f"(composite cv ((X{{{src}}}[N]) -> (Y{{{dt}}}[N])) (cast X {dt}))")
        with np.errstate(invalid="ignore", over="ignore"):
            want = x.astype(NP4[dt]) if src != "bf16" else x.astype(np.float32).astype(NP4[dt])
        _eq(m.cv(x), want, f"{src} -> {dt} on {rt}")
    far = np.array([2.0 ** 40 + 5, -(2.0 ** 40) - 5, 2.0 ** 62 + 2048 * 3], np.float64)
    m = _mod(rt, bounds, dt, f"(composite cv ((X{{f64}}[N]) -> (Y{{{dt}}}[N])) (cast X {dt}))")
    _eq(m.cv(far), _wrap(far.astype(np.int64), dt), f"f64 past 2**31 -> {dt} on {rt}: the i64's low bits")


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
def test_casts_to_every_dtype_are_exact(rt: str, bounds: bool, dt: str) -> None:
    lo, hi = RANGE[dt]
    a = np.arange(lo, hi + 1)
    other = "u4" if dt == "i4" else "i4"
    for to in (*OTHERS, other):
        m = _mod(rt, bounds, dt, f"(composite cv ((X{{{dt}}}[N]) -> (Y{{{to}}}[N])) (cast X {to}))")
        got = np.asarray(m.cv(a.astype(NP4[dt])))
        if to in NP4:
            want = _wrap(a, to)
        elif to == "bool":
            want = a != 0
        else:
            np_to = np.dtype(ml_dtypes.bfloat16) if to == "bf16" else np.dtype(
                to.replace("f", "float").replace("i", "int").replace("u", "uint"))
            want = a.astype(np_to)  # (negative -> unsigned: two's complement, as numpy)
        _eq(got, want, f"{dt} -> {to} on {rt}")


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
@pytest.mark.parametrize("shape", [(7, 13), (1, 1), (0, 5), (5, 0), (33, 65)])
def test_reductions_wrap_like_i8(rt: str, bounds: bool, dt: str, shape: tuple[int, int]) -> None:
    """sum/prod keep the dtype and wrap (as i8's do); max/min/argmax compare the 4-bit values."""
    lo, hi = RANGE[dt]
    a = np.random.default_rng(sum(shape)).integers(lo, hi + 1, shape)
    m = _mod(rt, bounds, dt)
    if 0 in shape:  # max/min/argmax of an empty axis is an error at the call: sums only
        m = _mod(rt, bounds, dt, "(composite s ((A{T}[M N]) -> (S0{T}[N]) (S1{T}[M]) (P1{T}[M]))"
                                 " (return (sum A :axis 0) (sum A :axis 1) (prod A :axis 1)))")
        s0, s1, p1 = m.s(a.astype(NP4[dt]))
    else:
        s0, s1, p1, x0, n1, i1 = m.red(a.astype(NP4[dt]))
        _eq(x0, _wrap(a.max(0), dt), "max axis 0")
        _eq(n1, _wrap(a.min(1), dt), "min axis 1")
        _eq(i1, a.argmax(1), "argmax axis 1")
    _eq(s0, _wrap(a.sum(0), dt), "sum axis 0")
    _eq(s1, _wrap(a.sum(1), dt), "sum axis 1")
    _eq(p1, _wrap(np.prod(a, 1), dt), "prod axis 1")


@pytest.mark.parametrize("dt", ["i4", "u4"])
@pytest.mark.parametrize("rt,bounds", RUNS)
def test_views_strided_inputs_and_matmul(rt: str, bounds: bool, dt: str) -> None:
    lo, hi = RANGE[dt]
    rng = np.random.default_rng(3)
    big = rng.integers(lo, hi + 1, (14, 27))
    strided = big.astype(NP4[dt])[1::2, ::3]  # a numpy view with steps in both axes: (7, 9)
    a = big[1::2, ::3]
    m = _mod(rt, bounds, dt)
    y, z = m.views(strided)
    _eq(y, _wrap(a.T + 1, dt), "transpose + 1")
    _eq(z, _wrap(a[:, ::-1] * 2, dt), "flip * 2")
    for mk, kn in (((7, 9), (9, 5)), ((0, 4), (4, 3)), ((3, 0), (0, 2)), ((33, 70), (70, 17))):
        x, w = rng.integers(lo, hi + 1, mk), rng.integers(lo, hi + 1, kn)
        _eq(m.mm(x.astype(NP4[dt]), w.astype(NP4[dt])), _wrap(x @ w, dt), f"matmul {mk} {kn}")


def test_bitcast_of_a_4bit_integer_is_refused() -> None:
    with pytest.raises(Error, match="4-bit integer"):
        caten.loads("(composite f ((A{i4}[N]) -> (B{u8}[N])) (bitcast A u8))", runtime="numpy")


def test_opencl_agrees_on_every_pair() -> None:
    """PoCL (the C-style renderer's OpenCL dialect): the wrap and the byte layout."""
    for dt in ("i4", "u4"):
        a, b = _pairs(dt)
        outs = _mod("opencl", False, dt).arith(a.astype(NP4[dt]), b.astype(NP4[dt]))
        for got, w in zip(outs[:5], (a + b, a - b, a * b, np.maximum(a, b), -a)):
            _eq(got, _wrap(w, dt), f"{dt} on opencl")


def test_tensor_round_trip_names_and_promotion() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    t = caten.Tensor(x)
    assert t.dtype == "i4"
    y = (t + 1).numpy()
    assert y.dtype == np.dtype(ml_dtypes.int4)
    _eq(y, _wrap(x.astype(np.int64) + 1, "i4"), "Tensor + 1")
    u = caten.Tensor(np.array([1.5, -1.0, 100.0], np.float32)).to(torch.uint4)
    assert u.dtype == "u4"
    _eq(u.numpy(), np.array([1.5, -1.0, 100.0], np.float32).astype(ml_dtypes.uint4), "to(torch.uint4)")
    with pytest.raises(Error, match="4-bit integers promote"):
        t + caten.Tensor(np.array([1, 2, 3, 4], np.int8))


def _onnx_model(nodes, inputs, outputs, inits=()):
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
def test_onnx_int4_casts_and_packed_initializers_match_the_reference(rt: str) -> None:
    """INT4/UINT4 are caten's i4/u4: a Cast wraps as onnx's reference (astype), a packed INT4
    initializer (two per byte in the proto) is read unpacked by onnx.numpy_helper, outputs leave as
    ml_dtypes arrays."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from caten.onnx import backend

    w = np.array([-8, -1, 0, 7, 3], np.int8).astype(ml_dtypes.int4)
    init = numpy_helper.from_array(w, "w")
    assert init.data_type == TensorProto.INT4 and len(init.raw_data) == 3  # packed: 5 nibbles in 3 bytes
    nodes = [helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT4),
             helper.make_node("Cast", ["x"], ["xu"], to=TensorProto.UINT4),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "wf"], ["s"])]
    model = _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                        [helper.make_tensor_value_info("xi", TensorProto.INT4, [5]),
                         helper.make_tensor_value_info("xu", TensorProto.UINT4, [5]),
                         helper.make_tensor_value_info("s", TensorProto.FLOAT, [5])], [init])
    x = np.array([7.5, -8.5, 100.0, -3.7, 15.9], np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    backend.RUNTIME = rt
    try:
        got = backend.prepare(model).run([x])
    finally:
        backend.RUNTIME = "llvm"
    for g, wv in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(wv).dtype
        assert np.array_equal(np.asarray(g).astype(np.float64), np.asarray(wv).astype(np.float64)), (g, wv)


@pytest.mark.parametrize("to", ["INT4", "UINT4"])
def test_onnx_quantize_dequantize_int4_round_trip(to: str) -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from caten.onnx import backend

    code = getattr(TensorProto, to)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], output_dtype=code),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = _onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [11]),
                                helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                                helper.make_tensor_value_info("z", code, [])],
                        [helper.make_tensor_value_info("q", code, [11]),
                         helper.make_tensor_value_info("y", TensorProto.FLOAT, [11])])
    x = np.array([-100, -4.5, -3.25, -0.75, -0.25, 0, 0.25, 0.75, 1.25, 3.6, 100], np.float32)
    s, z = np.array(0.5, np.float32), np.array(2, np.int64).astype(helper.tensor_dtype_to_np_dtype(code))
    want = ReferenceEvaluator(model).run(None, {"x": x, "s": s, "z": z})
    got = backend.prepare(model).run([x, s, z])
    assert got[0].dtype == want[0].dtype
    assert np.array_equal(got[0].astype(np.int64), want[0].astype(np.int64)), (got[0], want[0])
    assert np.array_equal(got[1], want[1])


def test_test_runtime_merges_only_the_columns_it_runs(tmp_path) -> None:
    """`caten test-runtime --dtypes i4,u4 --merge`: the i4/u4 cells of the rows run replace theirs in the
    existing report, every other cell (and the gradient section) stays, the counts are recomputed."""
    import json

    from caten.cli.testrt import run_conformance

    md = tmp_path / "numpy.md"
    assert run_conformance("numpy", str(md), False, "[AC][DM][DP]*", None) == 0  # ADD, CMPLT, CMPNE
    before = json.loads(md.with_suffix(".json").read_text())
    old = {(r["op"], r["dtype"]): r for r in before["results"]}
    text = md.read_text()
    fake = [dict(r, status="fail") if r["dtype"] in ("i4", "u4") or r["op"] == "CMPNE" else r
            for r in before["results"]]  # what the merge must replace (CMPLT's i4/u4) and keep (CMPNE's)
    md.with_suffix(".json").write_text(json.dumps(dict(before, results=fake)))
    # (exit status 1: the merged report still holds the kept failures)
    assert run_conformance("numpy", str(md), False, "CMPLT", None, dtypes="i4,u4", merge=True) == 1
    after = json.loads(md.with_suffix(".json").read_text())
    new = {(r["op"], r["dtype"]): r["status"] for r in after["results"]}
    assert new.keys() == old.keys() and after["gradients"] == before["gradients"]
    assert new[("CMPLT", "i4")] == new[("CMPLT", "u4")] == new[("CMPLT", "f32")] == "pass"
    assert new[("CMPNE", "i8")] == new[("CMPNE", "i4")] == "fail"  # not run: kept as the report had it
    merged = md.read_text()
    assert "| op | bool | i8 |" in merged and "| i4 | u4 |" in merged
    n_fail = sum(s == "fail" for s in new.values())
    assert f"{len(new) - n_fail} passed, {n_fail} failed" in merged
    assert merged[merged.index("## Gradients"):].split("\n\n")[1] == text[text.index("## Gradients"):].split("\n\n")[1]
    with pytest.raises(Error, match="--dtypes"):
        run_conformance("numpy", str(md), False, "CMPLT", None, dtypes="i5", merge=True)


@pytest.mark.parametrize("rt,bounds", RUNS)
def test_quantize_to_4_bits_saturates(rt: str, bounds: bool) -> None:
    """`(quantize X S :dtype i4)`: round half to even, then clamped to -8..7 (u4: 0..15), not wrapped."""
    src = ("(composite q ((X{f32}[N]) (S{f32}[]) -> (Y{i4}[N]) (U{u4}[N]))"
           " (return (quantize X S :dtype i4) (quantize X S :dtype u4)))")
    x = np.array([-100, -8.5, -7.5, -0.5, 0.5, 1.5, 2.5, 7.4, 7.6, 15.5, 100, np.nan], np.float32)
    y, u = _mod(rt, bounds, "i4", src).q(x, np.array(1.0, np.float32))
    r = np.where(np.isnan(x), 0, np.rint(x))
    _eq(y, _wrap(np.clip(r, -8, 7), "i4"), "quantize :dtype i4")
    _eq(u, _wrap(np.clip(r, 0, 15), "u4"), "quantize :dtype u4")
