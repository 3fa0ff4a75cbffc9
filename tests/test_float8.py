"""The float8 dtypes (f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz): one byte stored, computed in f32.

Oracles, none of them caten: ml_dtypes (every byte's value, exhaustively; f32 -> float8 rounding on
edges, ties and random bits; every pair of bytes through + - * / max, computed in f32 and rounded
once), onnx's reference Cast (caten's `cast` to a float8 is its saturate=1), numpy in f32/f64 for
reductions and matmul. Each runs on the numpy, llvm and c runtimes, and llvm/c again with
check_bounds; shapes are odd, and some have an empty dim.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import caten
from caten import loopir as L
from caten import plugin as R
from caten.errors import Error
from caten.ir import dtypes as T
from caten.lower import numerics_narrow as nar
from caten.lower.evaluate import evaluate

F8 = {T.f8e4m3: ml_dtypes.float8_e4m3fn, T.f8e5m2: ml_dtypes.float8_e5m2,
      T.f8e4m3fnuz: ml_dtypes.float8_e4m3fnuz, T.f8e5m2fnuz: ml_dtypes.float8_e5m2fnuz}
RUNS = [("numpy", False), ("llvm", False), ("c", False), ("llvm", True), ("c", True)]
ALL_BYTES = np.arange(256, dtype=np.uint8)

SRC = """
(composite arith ((A{T}[N]) (B{T}[N]) -> (S{T}[N]) (D{T}[N]) (P{T}[N]) (Q{T}[N]) (M{T}[N]) (G{T}[N]))
  (return (+ A B) (- A B) (* A B) (/ A B) (max A B) (neg A)))
(composite unary ((A{T}[N]) -> (W{f32}[N]) (R{T}[N]) (I{i32}[N]) (U{u8}[N]) (H{f16}[N]))
  (return (cast A f32) (sqrt A) (cast A i32) (cast A u8) (cast A f16)))
(composite from32 ((X{f32}[N]) -> (Y{T}[N])) (cast X T))
(composite from64 ((X{f64}[N]) (I{i32}[N]) (H{f16}[N]) (B{bf16}[N]) -> (Y{T}[N]) (J{T}[N]) (K{T}[N]) (L{T}[N]))
  (return (cast X T) (cast I T) (cast H T) (cast B T)))
(composite reduce ((A{T}[M N]) -> (S0{T}[N]) (S1{T}[M]) (P1{T}[M]) (E1{T}[M]))
  (return (sum A :axis 0) (sum A :axis 1) (prod A :axis 1) (mean A :axis 1)))
(composite rmax ((A{T}[M N]) -> (X0{T}[N]) (X1{T}[M])) (return (max A :axis 0) (max A :axis 1)))
(composite mm ((A{T}[M K]) (B{T}[K N]) -> (C{T}[M N])) (matmul A B))
(composite bmm ((A{T}[Z M K]) (B{T}[Z K N]) -> (C{T}[Z M N])) (matmul A B))
"""


@functools.cache
def _mod(runtime: str, bounds: bool, dt: T.DType):
    ok, why = R.get(runtime).available()
    if not ok:
        pytest.skip(f"runtime {runtime} unavailable: {why}")
    return caten.loads(SRC, runtime=runtime, check_bounds=bounds, defines={"T": dt.name})


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray, zero_sign: bool = True) -> np.ndarray:
    """Equal as values, nan matching nan and (with `zero_sign`) the sign of a zero counted."""
    g, w = _f32(got), _f32(want)
    eq = (g.view(np.uint32) == w.view(np.uint32)) if zero_sign else (g == w)
    return eq | (np.isnan(g) & np.isnan(w))


def _check(got, want, what: str, inputs=None, zero_sign: bool = True) -> None:
    got = np.asarray(got)
    assert got.dtype == np.asarray(want).dtype, f"{what}: dtype {got.dtype} vs {np.asarray(want).dtype}"
    ok = _same(got, want, zero_sign)
    bad = np.flatnonzero(~ok.reshape(-1))
    where = "" if inputs is None else f" at {[np.asarray(i).reshape(-1)[bad[:4]] for i in inputs]}"
    assert bad.size == 0, (f"{what}: {bad.size} of {ok.size} differ{where}: "
                           f"{_f32(got).reshape(-1)[bad[:4]]} vs {_f32(want).reshape(-1)[bad[:4]]}")


def _onnx_cast(x: np.ndarray, dt: T.DType, saturate: int = 1) -> np.ndarray:
    """onnx's reference Cast of f32/f64 x to the float8 dtype dt."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    code = {T.f8e4m3: TensorProto.FLOAT8E4M3FN, T.f8e5m2: TensorProto.FLOAT8E5M2,
            T.f8e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ, T.f8e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ}[dt]
    src = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.DOUBLE
    node = helper.make_node("Cast", ["x"], ["y"], to=code, saturate=saturate)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", src, [len(x)])],
                          [helper.make_tensor_value_info("y", code, [len(x)])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(m)
    return np.asarray(ReferenceEvaluator(m).run(None, {"x": x})[0]).view(np.uint8).view(F8[dt])


def _f32_inputs(dt: T.DType) -> np.ndarray:
    """f32 values at every edge of dt's rounding (ties at each scale, the subnormal grid and the
    top of the range, nan, +-inf, -0) and random bit patterns, dense across dt's range."""
    f, rng = T.MINIFLOAT[dt], np.random.default_rng(5)
    grid = _f32(ALL_BYTES.view(F8[dt]))
    grid = np.unique(grid[np.isfinite(grid)])
    mids = (grid[:-1].astype(np.float64) + grid[1:]) / 2  # ties: exact in f32
    near = np.concatenate([np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                           np.nextafter(mids.astype(np.float32), np.float32(-np.inf))])
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, f.max, -f.max, f.max * 1.03125, f.max * 1.0625,
                      f.max * 1.1, 1e30, -1e30, f.tiny, f.tiny / 2, -f.tiny / 2, f.tiny * 0.50001, 1e-30, -1e-30,
                      3.4e38, 1e-45], np.float64)
    lo, hi = np.log2(f.tiny) - 2, np.log2(f.max) + 2
    dense = np.exp2(rng.uniform(lo, hi, 40_000)) * rng.choice([-1.0, 1.0], 40_000)
    with np.errstate(invalid="ignore"):
        bits = rng.integers(0, 1 << 32, 20_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([_f32(mids), -_f32(mids), near, _f32(edges), _f32(dense), bits]).astype(np.float32)


@pytest.mark.parametrize("dt", list(F8), ids=str)
def test_rounding_primitives_equal_ml_dtypes(dt):
    """The decompose pass's rounding (arithmetic results: overflow as ml_dtypes) in loop IR."""
    x = _f32_inputs(dt)
    got = evaluate(nar.round_to(L.var("x", T.f32), dt), {"x": x})
    with np.errstate(over="ignore", invalid="ignore"):
        _check(got, x.astype(F8[dt]), f"round to {dt}", [x])


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_every_byte_loads_and_converts_as_ml_dtypes(dt, runtime, bounds):
    a = ALL_BYTES.view(F8[dt])
    w, r, i, u, h = _mod(runtime, bounds, dt).unary(a)
    _check(w, _f32(a), f"{dt} -> f32")
    with np.errstate(invalid="ignore"):
        _check(r, np.sqrt(_f32(a)).astype(F8[dt]), f"sqrt {dt}")
        _check(h, _f32(a).astype(np.float16), f"{dt} -> f16")
        v = np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0.0, posinf=0.0, neginf=0.0)
    assert np.array_equal(i, v.astype(np.int32)), f"{dt} -> i32"
    assert np.array_equal(u, v.astype(np.int64).astype(np.uint8)), f"{dt} -> u8"


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_every_pair_of_bytes_computes_in_f32_and_rounds_once(dt, runtime, bounds):
    """+ - * / max over all 65536 pairs, and neg over every byte: ml_dtypes computes in f32 and
    rounds once (past the range: nan, or inf in e5m2) -- so must caten. (The sign of max(-0, 0)
    differs between the numpy reference and the compiled runtimes for every float dtype, f32
    too: not a float8 matter, so max compares zeros by value.)"""
    a, b = (v.reshape(-1).view(F8[dt]) for v in np.meshgrid(ALL_BYTES, ALL_BYTES))
    got = _mod(runtime, bounds, dt).arith(a, b)
    fa, fb = _f32(a), _f32(b)
    with np.errstate(all="ignore"):
        want = [fa + fb, fa - fb, fa * fb, fa / fb, np.maximum(fa, fb), -fa]
        for name, g, w in zip(("+", "-", "*", "/", "max", "neg"), got, want):
            _check(g, w.astype(F8[dt]), f"{dt} {name}", [a, b], zero_sign=name != "max")


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_cast_from_f32_is_onnx_cast_with_saturation(dt, runtime, bounds):
    x = _f32_inputs(dt)
    want = _onnx_cast(x, dt)
    _check(_mod(runtime, bounds, dt).from32(x), want, f"f32 -> {dt}", [x])
    _check(T.saturate(x, dt), want, f"the reference's f32 -> {dt}", [x])


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_casts_from_f64_ints_f16_bf16_saturate(dt, runtime, bounds):
    """Other sources round through f32, as the reference (caten.ir.dtypes.saturate) and onnx's."""
    x = _f32_inputs(dt)[:20_000].astype(np.float64)
    rng = np.random.default_rng(2)
    n = len(x)
    i = rng.integers(-100_000, 100_000, n).astype(np.int32)
    i[:4] = [0, 2 ** 31 - 1, -2 ** 31, 448]
    with np.errstate(over="ignore", invalid="ignore"):
        h, b = x.astype(np.float16), x.astype(ml_dtypes.bfloat16)
    y, j, k, m = _mod(runtime, bounds, dt).from64(x, i, h, b)
    _check(y, _onnx_cast(x, dt), f"f64 -> {dt}", [x])
    _check(j, _onnx_cast(i.astype(np.float32), dt), f"i32 -> {dt}", [i])
    _check(k, _onnx_cast(_f32(h), dt), f"f16 -> {dt}", [h])
    _check(m, _onnx_cast(_f32(b), dt), f"bf16 -> {dt}", [b])


@pytest.mark.parametrize("src", list(F8), ids=str)
@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_float8_to_float8_is_onnx_cast(src, runtime):
    a = ALL_BYTES.view(F8[src])
    srcs = " ".join(f"(Y{k}{{{d}}}[N])" for k, d in enumerate(F8))
    body = " ".join(f"(cast A {d})" for d in F8)
    m = caten.loads(f"(composite f ((A{{{src}}}[N]) -> {srcs}) (return {body}))", runtime=runtime)
    for got, dt in zip(m.f(a), F8):  # (a cast to its own dtype is none: e5m2's inf stays inf)
        _check(got, a if dt == src else _onnx_cast(_f32(a), dt), f"{src} -> {dt}", [a])


def _grid_values(dt: T.DType, shape: tuple[int, ...], rng, specials: bool) -> np.ndarray:
    """dt values in +-[1/4, 8] (few significant bits: f32 sums of their products are exact,
    whatever the order), some zeros, and with `specials` a nan (and an inf where dt has one)."""
    v = rng.choice([0.25, 0.375, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 0.0], size=shape)
    v = v * rng.choice([-1.0, 1.0], size=shape)
    if specials and v.size >= 8:
        flat = v.reshape(-1)
        flat[rng.integers(0, v.size)] = np.nan
        if T.MINIFLOAT[dt].inf:
            flat[rng.integers(0, v.size)] = np.inf
    return v.astype(F8[dt])


MM_SHAPES = [(1, 1, 1), (7, 5, 13), (33, 17, 9), (3, 0, 4), (0, 5, 3), (64, 31, 65)]


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_matmul_computes_in_f32_and_casts_the_result(dt, runtime, bounds):
    """Products and sums in f32, the result cast to dt (saturating); the oracle sums in f64, exact
    on these values, so any order of summation must agree bit for bit."""
    rng = np.random.default_rng(8)
    m = _mod(runtime, bounds, dt)
    for (mm, k, n) in MM_SHAPES:
        for specials in (False, True):
            a, b = _grid_values(dt, (mm, k), rng, specials), _grid_values(dt, (k, n), rng, specials)
            with np.errstate(invalid="ignore"):
                want = T.saturate(a.astype(np.float64) @ b.astype(np.float64), dt)
            _check(m.mm(a, b), want, f"{dt} matmul {mm}x{k}x{n}")
    a, b = _grid_values(dt, (3, 5, 7), rng, False), _grid_values(dt, (3, 7, 2), rng, False)
    _check(m.bmm(a, b), T.saturate(a.astype(np.float64) @ b.astype(np.float64), dt), f"{dt} batched matmul")


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_reductions_accumulate_in_f32_and_round_once(dt, runtime, bounds):
    rng = np.random.default_rng(9)
    m = _mod(runtime, bounds, dt)
    for shape in [(7, 13), (1, 1), (0, 5), (5, 0), (129, 3)]:
        a = _grid_values(dt, shape, rng, specials=shape == (7, 13))
        fa = _f32(a)
        got = m.reduce(a)
        with np.errstate(all="ignore"):  # sums and products of these values are exact in f32 in any order
            sums, p1 = [fa.sum(0), fa.sum(1)], np.prod(fa, axis=1)
            mean = fa.sum(1).astype(F8[dt]).astype(np.float32) / np.float32(max(shape[1], 1))
        for name, g, w in zip(("sum0", "sum1"), got[:2], sums):
            _check(g, w.astype(F8[dt]), f"{dt} {name} {shape}")
        if shape[0] <= 7:
            _check(got[2], p1.astype(F8[dt]), f"{dt} prod {shape}")
        if shape[1] and shape != (7, 13):  # (mean is a sum rounded to dt, then a division)
            _check(got[3], mean.astype(F8[dt]), f"{dt} mean {shape}")
        if 0 in shape:  # max has no identity: caten refuses an empty axis
            with pytest.raises(Error, match="empty axis"):
                m.rmax(a)
        else:
            for name, g, w in zip(("max0", "max1"), m.rmax(a), (fa.max(0), fa.max(1))):
                _check(g, w.astype(F8[dt]), f"{dt} {name} {shape}")


@pytest.mark.parametrize("dt", list(F8), ids=str)
def test_elementwise_with_an_empty_dim_and_odd_sizes_on_every_runtime(dt):
    rng = np.random.default_rng(4)
    for n in (0, 1, 13, 1031):
        a, b = _grid_values(dt, (n,), rng, True), _grid_values(dt, (n,), rng, True)
        outs = [_mod(rt, bounds, dt).arith(a, b) for rt, bounds in RUNS]
        for o in outs[1:]:
            for j, (g, w) in enumerate(zip(o, outs[0])):
                _check(g, w, f"{dt} n={n} output {j}", zero_sign=j != 4)  # (max: see above)


def test_literals_take_the_dtype_as_ml_dtypes_rounds_them():
    src = "(composite f ((A{f8e4m3}[N]) -> (B{f8e4m3}[N])) (+ (* A 0.3) 500.0))"
    a = np.array([0.0, 1.0, -1.0], ml_dtypes.float8_e4m3fn)
    want = ((_f32(a) * _f32(np.float32(0.3).astype(ml_dtypes.float8_e4m3fn))).astype(ml_dtypes.float8_e4m3fn)
            .astype(np.float32) + np.float32(500.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    for rt in ("numpy", "llvm", "c"):
        _check(caten.loads(src, runtime=rt).f(a), want.astype(ml_dtypes.float8_e4m3fn), f"literals on {rt}")


def test_diagnostics():
    with pytest.raises(Error, match="BITCAST of f8e4m3"):
        caten.loads("(composite f ((A{f8e4m3}[N]) -> (B{u8}[N])) (bitcast A u8))", runtime="numpy")
    with pytest.raises(Error, match="different dtypes"):
        caten.loads("(composite f ((A{f8e4m3}[N]) (B{f8e5m2}[N]) -> (C{f8e4m3}[N])) (+ A B))", runtime="numpy")


def test_tensor_api_takes_torch_names_and_matches_torch_conversion():
    x = np.array([1.0, 2.5, 500.0, -3.0, np.inf, -1e9, 1e-9, -1e-9, np.nan, 0.1, 17.0], np.float32)
    for name, dt in [("float8_e4m3fn", T.f8e4m3), ("float8_e5m2", T.f8e5m2), ("float8_e4m3fnuz", T.f8e4m3fnuz),
                     ("float8_e5m2fnuz", T.f8e5m2fnuz)]:
        t = caten.Tensor(x).to(getattr(caten, name))
        assert t.dtype == dt.name
        _check(t.numpy(), _onnx_cast(x, dt), f"Tensor.to({name})")
        _check((t * 2.0).numpy(), (_f32(t.numpy()) * 2).astype(F8[dt]), f"{name} * 2")
        assert caten.Tensor(t.numpy()).dtype == dt.name  # an ml_dtypes array keeps its dtype
        with pytest.raises(Error, match="promote with nothing"):
            _ = t + caten.Tensor(x)
    torch = pytest.importorskip("torch")
    want = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    got = caten.Tensor(x).to(torch.float8_e4m3fn).numpy().view(np.uint8)
    keep = ~np.isnan(x)
    assert np.array_equal(got[keep], want[keep])


@pytest.mark.parametrize("dt", list(F8), ids=str)
def test_opencl_agrees_with_numpy_on_every_pair_and_every_cast(dt):
    """The C-style renderer's other target (PoCL on the host): the same helpers, as OpenCL C."""
    ok, why = R.get("opencl").available()
    if not ok:
        pytest.skip(f"opencl unavailable: {why}")
    a, b = (v.reshape(-1).view(F8[dt]) for v in np.meshgrid(ALL_BYTES, ALL_BYTES))
    x = _f32_inputs(dt)[:30_000]
    ref, ocl = _mod("numpy", False, dt), caten.loads(SRC, runtime="opencl", defines={"T": dt.name})
    for j, (g, w) in enumerate(zip(ocl.arith(a, b), ref.arith(a, b))):
        _check(g, w, f"{dt} arith output {j} on opencl", zero_sign=j != 4)
    _check(ocl.from32(x), ref.from32(x), f"f32 -> {dt} on opencl", [x])
    for g, w in zip(ocl.unary(a[:256]), ref.unary(a[:256])):
        _check(g, w, f"{dt} unary on opencl")


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_a_round_trip_through_a_wider_float_is_folded_only_where_it_is_exact(runtime):
    """The cast-cast rule drops (cast (cast x f32) T) only where every x survives: not e5m2's inf,
    which the saturating cast back turns into 57344 (as the numpy reference, which no rule touches)."""
    src = ("(composite f ((A{T}[N]) -> (B{T}[N]) (C{f8e4m3}[N]))"
           " (return (cast (cast A f32) T) (cast (cast A f16) f8e4m3)))")
    for dt in F8:
        a = ALL_BYTES.view(F8[dt])
        want = caten.loads(src, runtime="numpy", defines={"T": dt.name}).f(a)
        got = caten.loads(src, runtime=runtime, defines={"T": dt.name}).f(a)
        for g, w in zip(got, want):
            _check(g, w, f"{dt} round trip on {runtime}")
    inf = np.array([np.inf, -np.inf], np.float32).astype(ml_dtypes.float8_e5m2)
    got = caten.loads(src, runtime=runtime, defines={"T": "f8e5m2"}).f(inf)[0]
    assert _f32(got).tolist() == [57344.0, -57344.0]


def test_torch_export_casts_to_float8_as_torch():
    """A module exported from torch (caten.frontends.torch) that rounds through each float8 type."""
    torch = pytest.importorskip("torch")
    from caten.frontends.torch.export import from_torch

    class M(torch.nn.Module):
        def forward(self, x):
            return [x.to(d).to(torch.float32) * 2 for d in (torch.float8_e4m3fn, torch.float8_e5m2,
                                                            torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)]

    x = torch.from_numpy(_f32_inputs(T.f8e4m3)[:5000])
    got = from_torch(M(), (x,), runtime="llvm")(x.numpy())
    for g, w in zip(got, M()(x)):
        _check(np.asarray(g), w.numpy(), "torch.export float8 round trip", [x.numpy()])


@pytest.mark.parametrize("dt", list(F8), ids=str)
@pytest.mark.parametrize("runtime,bounds", RUNS)
def test_scatter_add_and_argsort(dt, runtime, bounds):
    """scatter-add rounds after each update (numpy in f32, one update at a time); argsort orders
    the f32 values stably, nan last (numpy's)."""
    src = """(composite f ((X{T}[N]) (I{i64}[K]) (S{T}[K]) -> (Y{T}[N]) (O{i64}[N]))
      (return (scatter-add X I S) (argsort X)))"""
    rng = np.random.default_rng(12)
    x, s = _grid_values(dt, (37,), rng, True), _grid_values(dt, (50,), rng, False)
    i = rng.integers(0, 37, 50)
    ok, why = R.get(runtime).available()
    if not ok:
        pytest.skip(why)
    y, order = caten.loads(src, runtime=runtime, check_bounds=bounds, defines={"T": dt.name}).f(x, i, s)
    want = x.copy()
    for k, j in enumerate(i):
        want[j] = (_f32(want[j]) + _f32(s[k])).astype(F8[dt])
    _check(y, want, f"{dt} scatter-add")
    assert np.array_equal(order, np.argsort(_f32(x), kind="stable")), f"{dt} argsort"
