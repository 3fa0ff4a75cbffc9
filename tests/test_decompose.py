"""caten.lower.decompose: each hard op written once in primitive loop-IR ops.

The decomposed expressions are evaluated by caten.lower.evaluate (exact IEEE and wrapping
integer semantics, independent of any compiler) and compared bit for bit with what the llvm
runtime computes from the op itself (its renderer's inline code), and within the op table's ulp
limits with the table's numpy reference.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten import loopir as L
from caten import pipeline, target
from caten.conformance.values import compare
from caten.ir import dtypes as T
from caten.ir.ops import TABLE, Ctx, Op
from caten.lower.decompose import DECOMPOSED, Decomposer, decompose
from caten.lower.evaluate import evaluate, fma
from caten.lower.text import dump
from tests.loopir_run import run

FLOATS = [T.f16, T.bf16, T.f32, T.f64]
INTS = [T.i8, T.i16, T.i32, T.i64, T.u8, T.u16, T.u32, T.u64]
UNARY = (Op.EXP2, Op.LOG2, Op.SIN)
FLOAT_OPS = (Op.EXP2, Op.LOG2, Op.SIN, Op.IDIV, Op.MOD, Op.MAX)
# The llvm renderer lets LLVM fuse multiply-adds in its polynomials; on a CPU with FMA (every
# AVX2 and AVX-512 x86) it does, and the pass writes those fusions as explicit `fma`.
HOST_FMA = "+fma" in target.host().features.split(",")


def _float_inputs(dt: T.DType, n: int = 600, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 2.0 ** -149, -(2.0 ** -149),
               5e-324, 1e-310, 2.0 ** -1022, 3.4e38, -3.4e38, 1e300, -1e308, 2.0 ** 14, 2.0 ** 24,
               -(2.0 ** 24), 128.0, -150.0, 1024.0, -1080.0, 1e22, math.pi, 1.5, -2.5, 7.0, -7.0]
    parts = [np.array(special), rng.standard_normal(n) * np.exp2(rng.uniform(-40, 40, n)),
             rng.uniform(-200, 200, n), rng.uniform(-1100, 1100, n)]
    with np.errstate(all="ignore"):
        v = np.concatenate(parts).astype(dt.np)
        raw = rng.integers(0, 1 << dt.bits, n, dtype=np.uint64).astype(f"u{dt.itemsize}").view(dt.np)
    return np.concatenate([v, raw])


def _int_inputs(dt: T.DType, n: int = 600, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dt.np)
    special = np.array([0, 1, info.max, 2, 7, info.min, info.min + 1], dtype=object)
    if dt.kind == "int":
        special = np.concatenate([special, [-1, -2, -7]])
    raw = rng.integers(0, 1 << dt.bits, n, dtype=np.uint64).astype(f"u{dt.itemsize}").view(dt.np)
    small = rng.integers(0, 11, n).astype(dt.np) - (dt.np.type(5) if dt.kind == "int" else dt.np.type(0))
    return np.concatenate([special.astype(dt.np), raw, small.astype(dt.np)])


def _pairs(a: np.ndarray, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Every special value against every other (first 30), then shuffled pairs."""
    k = min(30, a.size)
    x = np.concatenate([np.repeat(a[:k], k), a])
    y = np.concatenate([np.tile(a[:k], k), np.random.default_rng(seed).permutation(a)])
    return x, y


@functools.cache
def _llvm(dt: T.DType, ops: tuple[Op, ...]):
    t = dt.name
    outs = ", ".join(f"Y{i}{{{t}}}[N]" for i in range(len(ops)))
    body = " ".join(f"({op.value} X)" if op in UNARY else f"({op.value} X Z)" for op in ops)
    return caten.loads(f"(composite f ((X{{{t}}}[N]) (Z{{{t}}}[N]) -> ({outs})) (return {body}))",
                       runtime="llvm").f


def _decomposed(op: Op, dt: T.DType, x: np.ndarray, y: np.ndarray, native=()) -> np.ndarray:
    vx, vy = L.var("x", dt), L.var("y", dt)
    e = L.alu(op, dt, vx) if op in UNARY else L.alu(op, dt, vx, vy)
    d = Decomposer(native).x(e)
    assert not _ops_in(d) & set(DECOMPOSED)
    return evaluate(d, {"x": x, "y": y})


def _ops_in(root: L.X) -> set:
    seen, stack, ops = set(), [root], set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        ops.add(e.op)
        stack.extend(e.src)
    return ops


def _kernel_ops(kernels: list[L.Kernel]) -> set:
    """The ops of every expression in the kernels' statements."""
    ops: set = set()
    stack = [s for k in kernels for s in k.body]
    while stack:
        s = stack.pop()
        for v in vars(s).values():
            if isinstance(v, L.X):
                ops |= _ops_in(v)
        stack.extend(getattr(s, "body", []))
    return ops


def _count(root: L.X) -> int:
    seen, stack = set(), [root]
    while stack:
        e = stack.pop()
        if id(e) not in seen:
            seen.add(id(e))
            stack.extend(e.src)
    return len(seen)


def _assert_bits(got: np.ndarray, want: np.ndarray, what: str, x: np.ndarray, y: np.ndarray) -> None:
    assert got.dtype == want.dtype, what
    u = f"u{got.dtype.itemsize}"
    same = got.view(u) == want.view(u)
    if got.dtype.kind not in "iub":
        with np.errstate(invalid="ignore"):
            same |= np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))  # nan payloads aside
    bad = np.nonzero(~same)[0]
    assert bad.size == 0, (f"{what}: {bad.size}/{same.size} differ, e.g. x={x[bad[0]]!r} y={y[bad[0]]!r}: "
                           f"{got[bad[0]]!r} vs llvm {want[bad[0]]!r}")


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_float_ops_bit_identical_to_llvm(dt):
    x, y = _pairs(_float_inputs(dt))
    with np.errstate(all="ignore"):
        outs = _llvm(dt, FLOAT_OPS)(x, y)
    for op, want in zip(FLOAT_OPS, outs):
        got = _decomposed(op, dt, x, y)
        if op in UNARY and not HOST_FMA:  # llvm's own output is unfused here: the table's limits hold
            assert compare(got, want, dt, "math").ok, op
            continue
        _assert_bits(got, want, f"{op.value} {dt}", x, y)


@pytest.mark.parametrize("dt", [T.f16, T.bf16], ids=str)
def test_half_unary_ops_bit_identical_to_llvm_on_every_value(dt):
    x = np.arange(1 << 16, dtype=np.uint64).astype(np.uint16).view(dt.np)
    with np.errstate(all="ignore"):
        outs = _llvm(dt, UNARY)(x, x)
    for op, want in zip(UNARY, outs):
        got = _decomposed(op, dt, x, x)
        if HOST_FMA:
            _assert_bits(got, want, f"{op.value} {dt}", x, x)
        else:
            assert compare(got, want, dt, "math").ok, op


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_divmod_bit_identical_to_llvm(dt):
    x, y = _pairs(_int_inputs(dt))
    outs = _llvm(dt, (Op.IDIV, Op.MOD))(x, y)
    for op, want in zip((Op.IDIV, Op.MOD), outs):
        _assert_bits(_decomposed(op, dt, x, y), want, f"{op.value} {dt}", x, y)


def test_rand_bit_identical_to_llvm():
    n = 4096
    for seed in (0, 7, (1 << 32) + 5, (1 << 64) - 1):
        want = caten.loads(f"(composite r ((X{{i64}}[N]) -> (Y{{u32}}[N])) (RAND [N] :seed {seed}))",
                           runtime="llvm").r(np.zeros(n, np.int64))
        e = Decomposer().x(L.X.make("rand", T.u32, (L.var("c"),), seed))
        assert "rand" not in _ops_in(e)
        got = evaluate(e, {"c": np.arange(n, dtype=np.int64)})
        _assert_bits(got, want, f"rand seed {seed}", np.arange(n), np.arange(n))


def test_rand_matches_reference_for_large_counters():
    rng = np.random.default_rng(3)
    ctr = np.concatenate([rng.integers(0, 1 << 63, 2000, dtype=np.int64), [0, (1 << 32) - 1, 1 << 32, (1 << 63) - 1]])
    for seed in (1, 0xDEADBEEF12345678):
        rand = L.X.make("rand", T.u32, (L.var("c"),), seed)
        want = evaluate(rand, {"c": ctr})  # the op table's threefry2x32
        got = evaluate(Decomposer().x(rand), {"c": ctr})
        np.testing.assert_array_equal(got, want)


def _reference(op: Op, dt: T.DType, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    args = (x,) if op in UNARY else (x, y)
    with np.errstate(all="ignore"):
        return TABLE[op].ref(Ctx(None, x.shape, dt, {}, {}), *args)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_float_ops_within_table_limits(dt):
    x, y = _pairs(_float_inputs(dt, seed=5))
    for op in FLOAT_OPS:
        got, want = _decomposed(op, dt, x, y), _reference(op, dt, x, y)
        out = compare(got, want, dt, "math" if op in UNARY else "basic")
        assert out.ok, f"{op.value} {dt}: {out.reason}"


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_divmod_equals_table_reference(dt):
    x, y = _pairs(_int_inputs(dt, seed=5))
    for op in (Op.IDIV, Op.MOD):
        np.testing.assert_array_equal(_decomposed(op, dt, x, y), _reference(op, dt, x, y), err_msg=f"{op} {dt}")


def _floats(width: int):
    return st.lists(st.floats(width=width, allow_nan=True, allow_infinity=True), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([T.f32, T.f64]), st.sampled_from(FLOAT_OPS), st.data())
def test_property_float_ops_within_table_limits(dt, op, data):
    x = np.array(data.draw(_floats(dt.bits)), dtype=dt.np)
    y = np.array(data.draw(st.lists(st.floats(width=dt.bits), min_size=x.size, max_size=x.size)), dtype=dt.np)
    out = compare(_decomposed(op, dt, x, y), _reference(op, dt, x, y), dt, "math" if op in UNARY else "basic")
    assert out.ok, out.reason


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(INTS), st.sampled_from([Op.IDIV, Op.MOD]), st.data())
def test_property_int_divmod_equals_table_reference(dt, op, data):
    info = np.iinfo(dt.np)
    ints = st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=40)
    x = np.array(data.draw(ints), dtype=dt.np)
    y = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=x.size,
                                    max_size=x.size)), dtype=dt.np)
    np.testing.assert_array_equal(_decomposed(op, dt, x, y), _reference(op, dt, x, y))


def test_native_ops_are_left_alone():
    x, y = L.var("x", T.f32), L.var("y", T.f32)
    i, j = L.var("i", T.i32), L.var("j", T.i32)
    e2, fdiv, idiv = L.alu(Op.EXP2, T.f32, x), L.alu(Op.IDIV, T.f32, x, y), L.alu(Op.IDIV, T.i32, i, j)
    acc = L.alu(Op.MAX, T.f32, x, y, arg="acc")
    index = L.X.make("idiv", T.i64, (L.var("k"), L.const(3)))
    d = Decomposer({Op.EXP2, (Op.IDIV, "int")})
    assert d.x(e2) is e2 and d.x(idiv) is idiv and d.x(acc) is acc and d.x(index) is index
    assert Op.IDIV not in _ops_in(d.x(fdiv))
    both = L.alu(Op.ADD, T.f32, e2, L.alu(Op.SIN, T.f32, x))
    ops = _ops_in(d.x(both))
    assert Op.EXP2 in ops and Op.SIN not in ops and "fma" in ops
    assert Decomposer({"rand"}).x(L.X.make("rand", T.u32, (L.var("c"),), 1)).op == "rand"


def test_shared_subexpressions_stay_shared():
    """A DAG whose tree form is exponential (each EXP2 used twice) decomposes in O(N) nodes."""
    one = Decomposer().x(L.alu(Op.EXP2, T.f32, L.var("x", T.f32)))
    per = _count(one)
    for n in (20, 400):
        e = L.var("x", T.f32)
        for _ in range(n):
            v = L.alu(Op.EXP2, T.f32, e)
            e = L.alu(Op.ADD, T.f32, v, v)
        assert _count(Decomposer().x(e)) <= n * (per + 2) + 1


def test_deep_chains_need_no_recursion():
    e = L.var("x", T.i32)
    for _ in range(3000):  # x -> floor((x + 5) / 2) reaches 4 from below, 5 from above
        e = L.alu(Op.IDIV, T.i32, L.alu(Op.ADD, T.i32, e, L.const(5, T.i32)), L.const(2, T.i32))
    d = Decomposer().x(e)
    assert Op.IDIV not in _ops_in(d)
    x = {"x": np.array([-1000, 0, 1 << 29], np.int32)}
    np.testing.assert_array_equal(evaluate(d, x), evaluate(e, x))
    np.testing.assert_array_equal(evaluate(d, x), [4, 4, 5])


def test_decompose_kernels_of_a_lowered_program():
    src = "(composite f ((X{f32}[N]) (Y{i32}[N]) -> (A{f32}[N], B{i32}[N])) (return (softmax X) (idiv Y 3)))"
    prog = caten.loads(src, runtime="numpy").f.elaborate({})
    lw = pipeline.lower_program(prog, "f", target.host(), 1)
    before = [dump(k) for k in lw.kernels]
    out = decompose(lw.kernels)
    assert [dump(k) for k in lw.kernels] == before  # the input is not modified
    text = "\n".join(dump(k) for k in out)
    assert "exp2" in "\n".join(before) and "exp2" not in text and "fma" in text
    left = _kernel_ops(out) & set(DECOMPOSED)
    assert left <= {Op.MAX}  # a reduction's MAX update ("acc") stays


def _round_f32(v: Fraction) -> np.float32:
    """v correctly rounded to f32 (nearest, ties to even), by comparing the neighbours exactly."""
    c = np.float32(float(v))
    cands = [c, np.nextafter(c, np.float32(np.inf)), np.nextafter(c, np.float32(-np.inf))]
    return min(cands, key=lambda f: (abs(Fraction(float(f)) - v), int(f.view(np.uint32)) & 1))


def test_evaluator_fma_rounds_once():
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(2000) * 8).astype(np.float32), (rng.standard_normal(2000) * 8).astype(np.float32)
    d = np.concatenate([-(a[:1000].astype(np.float64) * b[:1000]).astype(np.float32),
                        (rng.standard_normal(1000) * 2.0 ** rng.integers(-30, 30, 1000)).astype(np.float32)])
    # exact = 2**24 + 3 - 2**-46: rounding to f64 first would land on the midpoint and round to even, up
    a, b, d = (np.append(v, w).astype(np.float32) for v, w in ((a, 1 + 2.0 ** -23), (b, 1 - 2.0 ** -23),
                                                                (d, 2.0 ** 24 + 2)))
    want = [_round_f32(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))) for p, q, r in zip(a, b, d)]
    got = fma(a, b, d)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert got[-1] == 2.0 ** 24 + 2
    assert fma(np.array([1.0 + 2.0 ** -52]), np.array([1.0 - 2.0 ** -53]), np.array([-1.0]))[0] == \
        2.0 ** -52 - 2.0 ** -53 - 2.0 ** -105


def test_evaluator_fma64_rounds_once():
    rng = np.random.default_rng(4)
    a = rng.standard_normal(3000) * np.exp2(rng.integers(-500, 500, 3000))
    b = rng.standard_normal(3000) * np.exp2(rng.integers(-560, 500, 3000))
    d = np.where(rng.random(3000) < 0.5, -(a * b) * (1 + rng.standard_normal(3000) * 2.0 ** -40),
                 rng.standard_normal(3000) * np.exp2(rng.integers(-1074, 1000, 3000)))
    want = [float(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))) for p, q, r in zip(a, b, d)]
    np.testing.assert_array_equal(fma(a, b, d), np.array(want))
    a, b, d = np.array([5e-324, 1e308, 3.0, -0.0, math.inf]), np.array([0.5, 10.0, -0.0, 1.0, 0.0]), \
        np.array([5e-324, -1e308, 0.0, -0.0, 1.0])
    with np.errstate(invalid="ignore"):
        got = fma(a, b, d)
    # 5e-324 * 0.5 + 5e-324 is 1.5 units of the least subnormal: ties to even, 2 units
    assert list(got[:4]) == [2 * 5e-324, math.inf, 0.0, -0.0] and math.isnan(got[4])
    assert math.copysign(1, got[2]) == 1 and math.copysign(1, got[3]) == -1


def test_evaluator_primitives():
    i = L.var("i")
    buf = np.array([10, 20, 30], np.int64)
    masked = L.X.make("masked", T.i64, (L.icmplt(i, L.const(3)), L.load("b", i, T.i64)))
    np.testing.assert_array_equal(evaluate(masked, {"i": np.array([0, 2])}, {"b": buf}), [10, 30])
    a, n = L.var("a", T.i8), L.var("n", T.i8)
    env = {"a": np.array([-7, 7, -128], np.int8), "n": np.array([2, -2, 3], np.int8)}
    np.testing.assert_array_equal(evaluate(L.X.make("idiv", T.i8, (a, n)), env), [-3, -3, -42])
    np.testing.assert_array_equal(evaluate(L.X.make("imod", T.i8, (a, n)), env), [-1, 1, -2])
    np.testing.assert_array_equal(evaluate(L.X.make("shr", T.i8, (a, L.const(1, T.i8))), env), [-4, 3, -64])
    u = L.X.make("bitcast", T.u8, (a,))
    np.testing.assert_array_equal(evaluate(L.X.make("shr", T.u8, (u, L.const(1, T.u8))), env), [124, 3, 64])
    f = L.var("f", T.f32)
    np.testing.assert_array_equal(evaluate(L.X.make("bitcast", T.u32, (f,)), {"f": np.array([1.0, -0.0], np.float32)}),
                                  [0x3F800000, 0x80000000])
    env = {"f": np.array([2.5, -2.5, 3.5, -0.4], np.float32)}
    np.testing.assert_array_equal(evaluate(L.X.make("rint", T.f32, (f,)), env), [2.0, -2.0, 4.0, -0.0])
    np.testing.assert_array_equal(evaluate(L.X.make("floor", T.f32, (f,)), env), [2.0, -3.0, 3.0, -1.0])
    lut = L.X.make("lut", T.u64, (i,), (5, (1 << 64) - 1))
    np.testing.assert_array_equal(evaluate(lut, {"i": np.array([1, 0])}), np.array([(1 << 64) - 1, 5], np.uint64))
    big = {"f": np.array([np.nan, np.inf, -3e9, 3e9, -1.5], np.float32)}
    np.testing.assert_array_equal(evaluate(L.alu(Op.CAST, T.i32, f), big), [0, 0, 0x4D2FA200, -0x4D2FA200, -1])


PROGRAMS = [  # (source, inputs): elementwise programs, so llvm's result is bit for bit the pass's
    ("(composite f ((X{f32}[6, 5]) (Y{f32}[6, 5]) -> (A{f32}[6, 5], B{f32}[6, 5], C{f32}[6, 5]))"
     " (return (sin (* X 1000.0)) (mod X Y) (max (exp X) (log Y))))", (T.f32, T.f32)),
    ("(composite f ((X{f64}[7]) (Y{bf16}[7]) -> (A{f64}[7], B{bf16}[7]))"
     " (return (pow X 1.5) (sin Y)))", (T.f64, T.bf16)),
    ("(composite f ((X{i16}[9]) (Y{i16}[9]) -> (A{i16}[9], B{i16}[9], C{u32}[5]))"
     " (return (idiv X Y) (mod X (- Y 3)) (RAND [5] :seed 11)))", (T.i16, T.i16)),
]


@pytest.mark.parametrize("src,dts", PROGRAMS, ids=["f32", "f64-bf16", "int-rand"])
def test_decomposed_kernels_run_as_llvm_does(src, dts):
    rng = np.random.default_rng(2)
    llvm = caten.loads(src, runtime="llvm").f
    prog = caten.loads(src, runtime="numpy").f.elaborate({})
    shapes = [s.shape for s in prog.inputs]
    xs = [(rng.standard_normal(sh) * 4).astype(dt.np) if dt.is_float else
          rng.integers(-40, 40, sh).astype(dt.np) for sh, dt in zip(shapes, dts)]
    lw = pipeline.lower_program(prog, "f", target.host(), 1)
    kernels = decompose(lw.kernels)
    assert not _kernel_ops(kernels) & set(DECOMPOSED)  # (no reduction here: no MAX "acc" either)
    outs = run(kernels, lw.plan, xs, [s.shape for s in prog.outputs])
    with np.errstate(all="ignore"):
        want = llvm(*xs)
    for got, w in zip(outs, want if isinstance(want, tuple) else (want,)):
        flat = np.arange(got.size)
        _assert_bits(got.reshape(-1), np.asarray(w).reshape(-1), src, flat, flat)


def test_decomposed_softmax_runs_within_reduce_limits():
    src = "(composite f ((X{f32}[3, 17]) -> (Y{f32}[3, 17])) (softmax X :axis 1))"
    x = np.random.default_rng(1).standard_normal((3, 17)).astype(np.float32) * 5
    prog = caten.loads(src, runtime="numpy").f.elaborate({})
    lw = pipeline.lower_program(prog, "f", target.host(), 1)
    (got,) = run(decompose(lw.kernels), lw.plan, [x], [(3, 17)])
    want = caten.loads(src, runtime="numpy").f(x)
    out = compare(got, want, T.f32, "reduce", mag=want, n_reduced=17)
    assert out.ok, out.reason


@pytest.mark.parametrize("dt", [T.f32, T.f64])
def test_abs_selects_become_one_sign_bit_clear(dt):
    """The `abs` composite's three selects (ops/arith.lisp) over f32/f64 are one bit clear after
    the pass (and only the exact pattern: a near miss keeps its selects); the values are numpy's
    abs on every special, checked through the evaluator and the llvm runtime."""
    prog = caten.loads(f"(composite f ((X{{{dt.name}}}[N]) -> (Y{{{dt.name}}}[N])) (abs X))",
                       runtime="numpy").f.elaborate({})
    lw = pipeline.lower_program(prog, "f", target.host(), 1)
    out = decompose(lw.kernels)
    assert Op.WHERE in _kernel_ops(lw.kernels) and Op.WHERE not in _kernel_ops(out) and "bitcast" in _kernel_ops(out)
    x = L.var("x", dt)
    zero, nan = L.const(0.0, dt), L.const(math.nan, dt)
    near = L.alu(Op.WHERE, dt, L.alu(Op.CMPLT, T.bool_, zero, x), x,
                 L.alu(Op.WHERE, dt, L.alu(Op.CMPLT, T.bool_, x, zero), L.alu(Op.NEG, dt, x),
                       L.alu(Op.WHERE, dt, L.alu(Op.CMPNE, T.bool_, x, x), nan, L.const(1.0, dt))))
    assert Op.WHERE in _ops_in(Decomposer().x(near))
    assert Op.WHERE not in _ops_in(Decomposer().x(L.alu(Op.WHERE, dt, *near.src[:2], _abs_rest(x, dt))))
    npdt = np.float32 if dt == T.f32 else np.float64
    v = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, -3e38], npdt)
    y = caten.loads(f"(composite f ((X{{{dt.name}}}[N]) -> (Y{{{dt.name}}}[N])) (abs X))", runtime="llvm").f(v)
    assert np.array_equal(y, np.abs(v), equal_nan=True) and not np.signbit(y).any()
    assert np.array_equal(evaluate(Decomposer().x(L.alu(Op.WHERE, dt, *near.src[:2], _abs_rest(x, dt))),
                                   {"x": v}), np.abs(v), equal_nan=True)


def _abs_rest(x: L.X, dt: T.DType) -> L.X:
    zero = L.const(0.0, dt)
    return L.alu(Op.WHERE, dt, L.alu(Op.CMPLT, T.bool_, x, zero), L.alu(Op.NEG, dt, x),
                 L.alu(Op.WHERE, dt, L.alu(Op.CMPNE, T.bool_, x, x), L.const(math.nan, dt), zero))
