"""Casts to ONNX's narrow types (ops/narrow.lisp through caten.frontends.onnx.narrow) against
independent oracles: ml_dtypes' conversions (and ONNX's saturate rule, clip then convert; ONNX's
reference `to_float8e8m0` for FLOAT8E8M0), over every f16 value, each format's values, the midpoints
between them and their neighbours, f32 extremes, inf, nan and random f32 bit patterns."""

from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import caten  # noqa: E402
from caten.frontends.onnx.narrow import NARROW, cast_float8, cast_to  # noqa: E402
from caten.frontends.onnx.types import DTYPES, FLOAT8  # noqa: E402

RUNTIMES = ["numpy", "llvm", "c"]
# float8 (caten's own dtypes, cast by cast_float8) and float4 (carried in f32, cast by cast_to)
MINIFLOATS = [*FLOAT8, *(c for c, f in NARROW.items() if f.minifloat is not None)]
ML_NAME = {17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz", 23: "float4_e2m1fn"}
INTS = [c for c, f in NARROW.items() if f.modulus]


def _program(cases: list[tuple[str, str]], src: str) -> str:
    """One composite with one output per case, so each runtime compiles once."""
    outs = " ".join(f"Y{i}{{{dt}}}[N]" for i, (_, dt) in enumerate(cases))
    body = " ".join(e for e, _ in cases)
    return f"(composite narrow ((X{{{src}}}[N]) -> ({outs})) (return {body}))"


def _probe_f32() -> np.ndarray:
    """Every f16 value, each format's values with their midpoints and neighbours, extremes, randoms."""
    parts = [np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)]
    for code in MINIFLOATS:
        vals = np.arange(256 if code != 23 else 16, dtype=np.uint8)
        if code == 23:
            v = np.array([0, .5, 1, 1.5, 2, 3, 4, 6], np.float32)
        else:
            v = vals.view(getattr(ml_dtypes, ML_NAME[code])).astype(np.float32)
        v = np.unique(np.abs(v[np.isfinite(v)]))
        mid = (v[:-1] + v[1:]) / 2
        top = v[-1] + (v[-1] - v[-2]) * np.array([0.5, 1, 1.5], np.float32)
        m = np.concatenate([v, mid, top])
        m = np.concatenate([m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(0))])
        parts += [m, -m]
    rng = np.random.default_rng(0)
    parts.append(rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    parts.append(np.array([np.inf, -np.inf, np.nan, -np.nan, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
                           1.1754942e-38, 2.0 ** -127, 0.0, -0.0], np.float32))
    return np.concatenate(parts).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: both nan, or the same f32 bits (so -0 and +0 differ)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return (np.isnan(got) & np.isnan(want)) | (got.view(np.uint32) == want.view(np.uint32))


def _check(got: np.ndarray, want: np.ndarray, x: np.ndarray, what: str) -> None:
    ok = _same(got, want)
    bad = np.flatnonzero(~ok)[:5]
    assert ok.all(), f"{what}: {len(np.flatnonzero(~ok))} wrong, e.g. x={x[bad]} got {got[bad]} want {want[bad]}"


@pytest.mark.parametrize("rt", RUNTIMES)
def test_minifloat_rounding_matches_ml_dtypes(rt: str) -> None:
    x = _probe_f32()
    cases, oracles = [], []
    for code in MINIFLOATS:
        dt = getattr(ml_dtypes, ML_NAME[code])
        for sat in ([True] if code == 23 else [True, False]):  # (float4 always saturates)
            cases.append((cast_float8("X", "f32", DTYPES[code], sat), DTYPES[code]) if code in FLOAT8 else
                         (cast_to("X", "f32", NARROW[code], sat), "f32"))
            mx = float(ml_dtypes.finfo(dt).max)
            src = np.clip(x, -mx, mx) if sat else x  # ONNX's saturate: clip, then convert
            with np.errstate(invalid="ignore"):  # inf/nan into a format without them: ml_dtypes' defined value
                oracles.append((f"{ML_NAME[code]} saturate={sat}", src.astype(dt).astype(np.float32)))
    outs = caten.loads(_program(cases, "f32"), runtime=rt).narrow(x)
    # float4 has no nan: ml_dtypes gives -0 for a nan with the sign bit clear (ONNX's test data) and +0
    # for one with it set; caten's ops cannot observe a nan's sign, so every nan gives -0
    neg_nan = np.isnan(x) & np.signbit(x)
    for got, (what, want) in zip(outs, oracles):
        keep = ~neg_nan if what.startswith("float4") else np.ones(x.shape, bool)
        _check(np.asarray(got)[keep], want[keep], x[keep], what)
        if what.startswith("float4"):
            assert _same(np.asarray(got)[neg_nan], np.float32(-0.0)).all()


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_minifloat_rounding_from_f16_and_f64(rt: str) -> None:
    """Narrower sources widen exactly first; f64 sources go through f32 as ONNX's reference (ml_dtypes)
    does, so an f64 just off a float8 midpoint rounds onto the midpoint, then to even."""
    x16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    got = caten.loads(_program([(cast_float8("X", "f16", "f8e5m2", False), "f8e5m2")], "f16"), runtime=rt).narrow(x16)
    with np.errstate(invalid="ignore"):  # the nan payloads' conversion, as in the test above
        want = x16.astype(ml_dtypes.float8_e5m2).astype(np.float32)
    _check(np.asarray(got), want, x16, "f16 -> float8_e5m2")
    # f64 values just off a float8 midpoint that f32 rounds onto the midpoint
    v = np.array([1.0625, 1.1875, 17.0, 0.5 + 2.0 ** -5], np.float64)
    x64 = np.concatenate([v + 2.0 ** -40, v - 2.0 ** -40, -(v + 2.0 ** -40)])
    got = caten.loads(_program([(cast_float8("X", "f64", "f8e4m3", False), "f8e4m3")], "f64"), runtime=rt).narrow(x64)
    _check(np.asarray(got), x64.astype(ml_dtypes.float8_e4m3fn).astype(np.float32), x64, "f64 -> float8_e4m3fn")


@pytest.mark.parametrize("rt", RUNTIMES)
def test_int_wrapping_matches_ml_dtypes(rt: str) -> None:
    xf = np.concatenate([np.arange(-300, 300, 0.25), [2.0 ** 30, -(2.0 ** 30) - 64, 1e9 + 0.5, 1e-30, -0.0,
                                                      np.inf, -np.inf, np.nan]]).astype(np.float32)
    xi = np.concatenate([np.arange(-300, 300), [2**31 - 1, -(2**31), 2**30 + 5]]).astype(np.int32)
    for x, src in ((xf, "f32"), (xi, "i32")):
        cases = [(cast_to("X", src, NARROW[c], True), NARROW[c].carrier) for c in INTS]
        outs = caten.loads(_program(cases, src), runtime=rt).narrow(x)
        for got, c in zip(outs, INTS):
            want = x.astype(getattr(ml_dtypes, NARROW[c].name)).astype(np.int64)
            assert np.array_equal(np.asarray(got).astype(np.int64), want), f"{src} -> {NARROW[c].name}"


@pytest.mark.parametrize("rt", RUNTIMES)
def test_e8m0_matches_onnx_reference(rt: str) -> None:
    from onnx.numpy_helper import to_float8e8m0

    x = _probe_f32()
    x = np.concatenate([x, np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32) * np.float32(1.5)])
    modes = [(m, s) for m in ("up", "nearest", "down") for s in (True, False)]
    cases = [(cast_to("X", "f32", NARROW[24], s, m), "f32") for m, s in modes]
    outs = caten.loads(_program(cases, "f32"), runtime=rt).narrow(x)
    for got, (m, s) in zip(outs, modes):
        _check(got, to_float8e8m0(x, s, m).astype(np.float32), x, f"e8m0 round_mode={m} saturate={s}")


def test_backend_carries_narrow_types_across_the_boundary() -> None:
    """A float8 graph input arrives as itself (a caten dtype) and a narrow output leaves as its ml_dtypes type."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from caten.onnx import backend

    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT8E5M2, [6])],
                          [helper.make_tensor_value_info("y", TensorProto.INT4, [6])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    x = np.array([-9.0, -2.5, 0.0, 7.0, 12.0, 40.0], np.float32).astype(ml_dtypes.float8_e5m2)
    (y,) = backend.prepare(model).run([x])
    assert y.dtype == np.dtype(ml_dtypes.int4)
    assert np.array_equal(y.astype(np.int64), x.astype(np.float32).astype(ml_dtypes.int4).astype(np.int64))


def test_load_takes_narrow_inputs_and_initializers_as_carriers() -> None:
    """caten.onnx.load: an INT4 initializer, a FLOAT4E2M1 Constant and a FLOAT8E4M3FN input are read
    as their exact values."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import caten.onnx

    w = np.array([-8, -1, 0, 7], np.int8).astype(ml_dtypes.int4)
    c = np.array([0.5, -1.5, 3.0, 6.0], np.float32).astype(ml_dtypes.float4_e2m1fn)
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
             helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["xf", "wf"], ["s"]),
             helper.make_node("Add", ["s", "cf"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [numpy_helper.from_array(w, "w")])
    mod = caten.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)]), runtime="llvm")
    x = np.array([0.1, 448.0, -3.3, 1e-3], np.float32).astype(ml_dtypes.float8_e4m3fn)
    y = np.asarray(mod(x))
    assert np.array_equal(y, x.astype(np.float32) + w.astype(np.float32) + c.astype(np.float32))


@pytest.mark.parametrize("to", ["INT4", "UINT4", "INT2", "FLOAT8E4M3FN", "FLOAT8E5M2FNUZ", "FLOAT4E2M1"])
def test_quantize_linear_to_narrow_saturates_to_the_format(to: str) -> None:
    """QuantizeLinear to a narrow type clamps to that format's range, not its carrier's (onnx's reference)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from caten.onnx import backend

    code = getattr(TensorProto, to)
    zp_dt = helper.tensor_dtype_to_np_dtype(code)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], output_dtype=code)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9]),
                                        helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                                        helper.make_tensor_value_info("z", code, [])],
                          [helper.make_tensor_value_info("y", code, [9])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    x = np.array([-1000, -9.5, -2.5, -0.3, 0, 0.5, 1.5, 7.6, 1e6], np.float32)
    s, z = np.array(0.5, np.float32), np.array(1, np.float32).astype(zp_dt)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "s": s, "z": z})
    (got,) = backend.prepare(model).run([x, s, z])
    assert got.dtype == want.dtype
    assert _same(got.astype(np.float32), want.astype(np.float32)).all(), (got, want)


def test_narrow_constant_node_is_carried() -> None:
    """A FLOAT8E5M2 Constant node used as a tensor (Concat with a float8 input) holds its exact values."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from caten.onnx import backend

    c = np.array([-57344.0, 0.0001, 3.0], np.float32).astype(ml_dtypes.float8_e5m2)
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
             helper.make_node("Concat", ["x", "c"], ["y"], axis=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT8E5M2, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT8E5M2, [5])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    x = np.array([1.25, -7.0], np.float32).astype(ml_dtypes.float8_e5m2)
    (y,) = backend.prepare(model).run([x])
    assert y.dtype == np.dtype(ml_dtypes.float8_e5m2)
    assert _same(y.astype(np.float32), np.concatenate([x, c]).astype(np.float32)).all()
