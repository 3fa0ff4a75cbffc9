"""Casts written once, in the decompose pass (caten.lower.numerics_narrow): rounding to f16/bf16
and the saturating float->int conversion.

The primitives are evaluated by caten.lower.evaluate and compared bit for bit with numpy /
ml_dtypes (rounding) and with the op table's CAST reference (saturation) on random bit patterns
and every boundary; then the llvm and c runtimes, which now spell only storage and `ftoi`, are
compared with the numpy runtime on the same values through the language's `cast` and f16/bf16
arithmetic.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten import loopir as L
from caten import plugin as R
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.lower import numerics_narrow as nar
from caten.lower.decompose import decompose
from caten.lower.evaluate import _cast, evaluate

NARROW = {T.f16: np.float16, T.bf16: ml_dtypes.bfloat16}
INTS = [T.i8, T.i16, T.i32, T.i64, T.u8, T.u16, T.u32, T.u64]
# f32 bit patterns at every boundary of f16/bf16 rounding: ties, the top of the range (65504,
# the tie at 65520), the subnormal grid and its edge (2^-14, 2^-24, the tie at 2^-25), NaN, inf
EDGES = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x7F800001,
                  0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0xC77FF000, 0x47800000,
                  0x38800000, 0x387FFFFF, 0x387FF000, 0x33800000, 0x33000000, 0x33000001, 0x32FFFFFF,
                  1, 0x00800000, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F801000,
                  0x3F803000, 0x3F802FFF], np.uint32)


def _f32(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = got.astype(np.float32), want.astype(np.float32)
    return (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))


@pytest.mark.parametrize("dt", list(NARROW), ids=str)
def test_rounding_equals_numpy_on_edges_and_random_bits(dt):
    rng = np.random.default_rng(7)
    near = rng.integers(0x30000000, 0x48000000, 50_000)  # f16's whole range, densely
    bits = np.concatenate([EDGES, rng.integers(0, 1 << 32, 50_000), near, near | 0x80000000])
    f = _f32(bits)
    got = evaluate(nar.round_to(L.var("x", T.f32), dt), {"x": f})
    assert got.dtype == NARROW[dt]
    with np.errstate(over="ignore", invalid="ignore"):  # a signaling NaN's bits quiet in the cast (IEEE)
        want = f.astype(NARROW[dt])
    ok = _same_bits(got, want)
    assert ok.all(), f"{dt}: {(~ok).sum()} differ, e.g. {f[~ok][:3]} -> {got[~ok][:3]} vs {want[~ok][:3]}"


@settings(max_examples=300, deadline=None)
@given(st.integers(0, (1 << 32) - 1), st.sampled_from(list(NARROW)))
def test_property_rounding_equals_numpy(bits, dt):
    f = _f32(np.array([bits]))
    with np.errstate(over="ignore"):
        assert _same_bits(evaluate(nar.round_to(L.var("x", T.f32), dt), {"x": f}), f.astype(NARROW[dt])).all()


def _cast_inputs(src: T.DType) -> np.ndarray:
    rng = np.random.default_rng(3)
    top = [2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, -(2.0 ** 64), 2.0 ** 63 - 2.0 ** 40, 2.0 ** 64 - 2.0 ** 40,
           -1.5, 1.5, -0.0, 0.99, -0.99, 255.5, 256.0, -129.0, 65535.9, 2.0 ** 31, -(2.0 ** 31) - 1.0,
           np.inf, -np.inf, np.nan]
    with np.errstate(over="ignore", invalid="ignore"):  # random bits hold signaling NaNs
        f = _f32(rng.integers(0, 1 << 32, 20_000)).astype(np.float64)
        return np.concatenate([np.array(top), f, f * 1e12, rng.uniform(-3e19, 3e19, 5000)]).astype(src.np)


@pytest.mark.parametrize("src", [T.f16, T.bf16, T.f32, T.f64], ids=str)
@pytest.mark.parametrize("dt", INTS, ids=str)
def test_float_to_int_equals_the_table_reference(src, dt):
    x = _cast_inputs(src)
    got = evaluate(nar.float_to_int(L.var("x", src), dt), {"x": x})
    with np.errstate(invalid="ignore"):  # the reference's own NaN handling (evaluate() runs it so too)
        want = _cast(x, dt)
    bad = np.flatnonzero(got != want)
    assert got.dtype == want.dtype and bad.size == 0, f"{src}->{dt}: {x[bad[:3]]} -> {got[bad[:3]]} vs {want[bad[:3]]}"


def test_the_pass_leaves_no_rounding_or_saturation_to_renderers():
    """After decompose with nothing native, no f16/bf16-valued arithmetic, no cast into a narrow
    float and no float->int CAST is left; with ("round", "f16") native the f16 ones stay."""
    h = L.var("h", T.f16)
    s = L.Store("out", L.const(0), L.alu(Op.ADD, T.f16, h, h))
    c = L.Store("oi", L.const(0), L.alu(Op.CAST, T.i32, L.var("f", T.f32)))
    b = L.Store("ob", L.const(0), L.alu(Op.CAST, T.bf16, L.var("d", T.f64)))
    k = L.Kernel("k", [], [], [s, c, b])

    def left(native):
        out = []
        stack = [st_.value for st_ in decompose([k], native)[0].body]
        seen = set()
        while stack:
            e = stack.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if e.op in (Op.ADD, Op.CAST) and (e.dtype in NARROW or (e.op is Op.CAST and e.dtype.is_int
                                                                         and e.src[0].dtype.is_float)):
                out.append((e.op, e.dtype))
            stack.extend(e.src)
        return out

    assert left(frozenset()) == []
    assert left(frozenset({("round", "f16")})) == [(Op.ADD, T.f16)]


SRC = """(composite f ((X{f32}[N]) (D{f64}[N]) -> (H{f16}[N]) (B{bf16}[N]) (HB{f16}[N]) (S{i32}[N]) (U{u8}[N])
                          (W{u64}[N]) (Q{i64}[N]) (A{bf16}[N]) (DH{f16}[N]))
  (setf h (cast X f16))
  (setf b (cast X bf16))
  (return h b (cast b f16) (cast X i32) (cast X u8) (cast D u64) (cast h i64) (* (+ b b) (cast 1.1 bf16))
          (cast D f16)))"""


@functools.cache
def _fn(runtime: str):
    ok, why = R.get(runtime).available()
    if not ok:
        pytest.skip(f"runtime {runtime} unavailable: {why}")
    return caten.loads(SRC, runtime=runtime).f


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_runtimes_cast_as_numpy_does(runtime):
    rng = np.random.default_rng(11)
    x = np.concatenate([_f32(EDGES), _f32(rng.integers(0x30000000, 0x48000000, 4000)),
                        _f32(rng.integers(0, 1 << 32, 4000)), rng.uniform(-300, 300, 2000).astype(np.float32)])
    with np.errstate(invalid="ignore"):  # x's random bits hold signaling NaNs
        d = np.concatenate([x.astype(np.float64) * 3.7, np.array([2.0 ** 64, -1.0, 1e30, np.nan])])[: x.size]
    got = _fn(runtime)(x, d)
    want = list(_fn("numpy")(x, d))
    # out-of-range float->int is unspecified in the language (the numpy runtime wraps); the
    # compiled runtimes saturate, as the loop IR's reference says (caten.lower.evaluate)
    h = want[0]
    with np.errstate(invalid="ignore"):
        want[3:7] = [_cast(x, T.i32), _cast(x, T.u8), _cast(d, T.u64), _cast(h.astype(np.float32), T.i64)]
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype.kind == "f" or g.dtype == ml_dtypes.bfloat16:
            ok = _same_bits(g, w)
        else:
            ok = g == w
        assert ok.all(), f"{runtime} output {i}: {(~ok).sum()} differ, e.g. {x[~ok][:3]}: {g[~ok][:3]} vs {w[~ok][:3]}"
