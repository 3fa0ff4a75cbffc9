"""Every library name of LANGUAGE.md section 5, black-box, against independent numpy oracles.

Each case compiles a one-line composite through the public API (`caten.loads`) and calls it
with numpy arrays; the result's dtype and shape must be exactly the declared ones and its
values must match a reference written directly in numpy (or `math`). The semantic details of
section 5.1 (literal dtypes, floor division, scopes, derived dims, ...) are tested at the end.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
import pytest

import caten

# --------------------------------------------------------------------------------------------
# helpers

DTYPE_NAMES = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32",
    np.dtype(np.uint64): "u64",
    np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(ml_dtypes.bfloat16): "bf16",
}
F32, F64, I32, I64, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.bool_))
FLOATS = [F32, F64]
INTS = [I32, I64]
NAMES = "ABCDEFGH"
erf = np.vectorize(math.erf, otypes=[np.float64])


@functools.cache
def load(src: str, runtime: str):
    return caten.loads(src, runtime=runtime)


def ann(name: str, dtype, shape) -> str:
    """`NAME{DTYPE}[D, ...]`, or `NAME{DTYPE}` for rank 0."""
    dt = DTYPE_NAMES[np.dtype(dtype)]
    if len(shape) == 0:
        return f"{name}{{{dt}}}"
    return f"{name}{{{dt}}}[{', '.join(str(d) for d in shape)}]"


def source(expr: str, args, outs) -> str:
    """A composite `f` whose inputs are A, B, ... (concrete shapes) returning `expr`."""
    ins = " ".join(ann(n, a.dtype, a.shape) for n, a in zip(NAMES, args))
    outd = " ".join(ann(f"Y{i}", d, s) for i, (d, s) in enumerate(outs))
    return f"(composite f (({ins}) -> ({outd}))\n  (return {expr}))"


def run(runtime: str, expr: str, *args, out):
    """Compile `(return expr)` with inputs typed after `args` and output(s) `out`=(dtype, shape)."""
    outs = [out] if isinstance(out, tuple) else list(out)
    return load(source(expr, args, outs), runtime).f(*args)


def expect(y, ref, dtype=None, rtol=1e-6, atol=0.0):
    ref = np.asarray(ref)
    dtype = np.dtype(dtype if dtype is not None else ref.dtype)
    assert isinstance(y, np.ndarray), type(y)
    assert y.dtype == dtype, (y.dtype, dtype)
    assert y.shape == ref.shape, (y.shape, ref.shape)
    if dtype.kind in "biu":
        np.testing.assert_array_equal(y, ref.astype(dtype))
    else:
        np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def check(runtime: str, expr: str, args, ref, dtype=None, rtol=1e-6, atol=0.0):
    """Run `expr` on `args`; compare with `ref` (declared output = dtype or ref's dtype, ref's shape)."""
    ref = np.asarray(ref)
    dtype = np.dtype(dtype if dtype is not None else ref.dtype)
    copies = [np.array(a, copy=True) for a in args]
    y = run(runtime, expr, *args, out=(dtype, ref.shape))
    for a, c in zip(args, copies):  # inputs are never modified
        np.testing.assert_array_equal(a, c)
    expect(y, ref, dtype, rtol, atol)
    return y


def uniform(shape, lo=-3.0, hi=3.0, dtype=F32, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


def ints(shape, lo=-20, hi=20, dtype=I32, seed=0):
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


def bools(shape, seed=0):
    return np.random.default_rng(seed).random(shape) < 0.5


def raises_caten_error(runtime, src, *args):
    """The error may come at load (elaboration) time or at call time; both are fine."""
    with pytest.raises(caten.Error):
        mod = caten.loads(src, runtime=runtime)
        mod.f(*args)


# --------------------------------------------------------------------------------------------
# arithmetic

BIN_SHAPES = [
    ((7, 13), (7, 13)),
    ((7, 13), (13,)),
    ((7, 13), (7, 1)),
    ((7, 1), (1, 13)),
    ((), (7, 13)),
    ((7, 13), ()),
    ((1, 13), (7, 1)),
]
BIN_REF = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "mod": np.mod,
    "idiv": np.floor_divide,
}


def _bin_operands(op, sa, sb, dtype):
    if dtype.kind == "f":
        a, b = uniform(sa, dtype=dtype, seed=1), uniform(sb, dtype=dtype, seed=2)
        if op in ("/", "mod", "idiv"):
            b = (np.where(uniform(sb, seed=3) > 0, 1, -1) * uniform(sb, 0.5, 2.0, seed=4)).astype(dtype)
        if op == "pow":
            a, b = uniform(sa, 0.1, 3.0, dtype, 5), uniform(sb, -2.0, 2.0, dtype, 6)
    else:
        a, b = ints(sa, dtype=dtype, seed=1), ints(sb, dtype=dtype, seed=2)
        if op in ("mod", "idiv"):
            b = (ints(sb, 1, 6, dtype, 3) * np.where(bools(sb, 4), 1, -1)).astype(dtype)
        if op == "pow":
            a, b = ints(sa, -4, 4, dtype, 5), ints(sb, 0, 4, dtype, 6)
    return a, b


@pytest.mark.parametrize("shapes", BIN_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}".replace(" ", ""))
@pytest.mark.parametrize("op", list(BIN_REF))
def test_binary_f32_broadcast(runtime, op, shapes):
    a, b = _bin_operands(op, *shapes, F32)
    ref = BIN_REF[op](a, b)
    check(runtime, f"({op} A B)", [a, b], ref, F32, rtol=1e-5 if op == "pow" else 1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [F64, I32, I64], ids=str)
@pytest.mark.parametrize("op", list(BIN_REF))
def test_binary_other_dtypes(runtime, op, dtype):
    if op == "/" and dtype.kind != "f":
        pytest.skip("integer / is a dtype error (tested below)")
    a, b = _bin_operands(op, (7, 13), (13,), dtype)
    ref = BIN_REF[op](a, b).astype(dtype)
    check(runtime, f"({op} A B)", [a, b], ref, dtype, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=str)
@pytest.mark.parametrize(
    "expr,ref",
    [
        ("(neg A)", np.negative),
        ("(- A)", np.negative),
        ("(recip A)", np.reciprocal),
        ("(abs A)", np.abs),
        ("(sign A)", np.sign),
    ],
    ids=["neg", "unary-", "recip", "abs", "sign"],
)
def test_unary_arith(runtime, expr, ref, dtype):
    if "recip" in expr and dtype.kind != "f":
        pytest.skip("recip needs a float operand")
    if dtype.kind == "f":
        a = uniform((7, 13), dtype=dtype)
        a[0, :3] = 0
        if "recip" in expr:
            a = np.where(a == 0, 1.5, a).astype(dtype)
    else:
        a = ints((7, 13), dtype=dtype)
        a[0, :3] = 0
    check(runtime, expr, [a], ref(a), dtype, rtol=1e-6)


@pytest.mark.parametrize(
    "expr,shapes,ref",
    [
        ("(+ A B C)", [(7, 13), (13,), (7, 1)], lambda a, b, c: a + b + c),
        ("(+ A B C D)", [(7, 13), (7, 13), (1, 13), ()], lambda a, b, c, d: a + b + c + d),
        ("(* A B C)", [(7, 13), (13,), (7, 1)], lambda a, b, c: a * b * c),
        ("(* A B C D)", [(7, 13), (7, 13), (1, 13), ()], lambda a, b, c, d: a * b * c * d),
        ("(+ A 1.5 B)", [(7, 13), (13,)], lambda a, b: a + 1.5 + b),
        ("(* 2.0 A B)", [(7, 13), (13,)], lambda a, b: 2.0 * a * b),
    ],
)
def test_variadic(runtime, expr, shapes, ref):
    args = [uniform(s, seed=i) for i, s in enumerate(shapes)]
    check(runtime, expr, args, ref(*[a.astype(np.float64) for a in args]), F32, rtol=1e-5, atol=1e-6)


def test_variadic_int(runtime):
    a, b, c = ints((7, 13), seed=1), ints((13,), seed=2), ints((7, 1), seed=3)
    check(runtime, "(+ A B C)", [a, b, c], a + b + c, I32)
    check(runtime, "(* A B C)", [a, b, c], a * b * c, I32)


# --------------------------------------------------------------------------------------------
# comparison

CMP_REF = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "=": np.equal,
    "!=": np.not_equal,
}


@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=str)
@pytest.mark.parametrize("shapes", BIN_SHAPES[:4], ids=lambda s: f"{s[0]}x{s[1]}".replace(" ", ""))
@pytest.mark.parametrize("op", list(CMP_REF))
def test_compare(runtime, op, shapes, dtype):
    # small integer range so that `=` is true often; same for floats (integral values)
    a = ints(shapes[0], -2, 2, seed=1).astype(dtype)
    b = ints(shapes[1], -2, 2, seed=2).astype(dtype)
    check(runtime, f"({op} A B)", [a, b], CMP_REF[op](a, b), BOOL)


@pytest.mark.parametrize("op", list(CMP_REF))
def test_compare_literal(runtime, op):
    a = ints((7, 13), -2, 2).astype(F32)
    check(runtime, f"({op} A 1)", [a], CMP_REF[op](a, 1), BOOL)
    check(runtime, f"({op} A 0.5)", [a], CMP_REF[op](a, np.float32(0.5)), BOOL)
    ai = ints((7, 13), -2, 2)
    check(runtime, f"({op} 0 A)", [ai], CMP_REF[op](0, ai), BOOL)


def test_compare_bool(runtime):
    a, b = bools((7, 13), 1), bools((7, 13), 2)
    check(runtime, "(= A B)", [a, b], a == b, BOOL)
    check(runtime, "(!= A B)", [a, b], a != b, BOOL)


# --------------------------------------------------------------------------------------------
# logic

LOGIC_REF = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("dtype", [BOOL, I32, I64], ids=str)
@pytest.mark.parametrize("op", list(LOGIC_REF))
def test_logic_binary(runtime, op, dtype):
    if dtype == BOOL:
        a, b = bools((7, 13), 1), bools((13,), 2)
    else:
        a, b = ints((7, 13), -100, 100, dtype, 1), ints((13,), -100, 100, dtype, 2)
    check(runtime, f"({op} A B)", [a, b], LOGIC_REF[op](a, b), dtype)


@pytest.mark.parametrize("dtype", [BOOL, I32, I64], ids=str)
def test_logic_not(runtime, dtype):
    a = bools((7, 13)) if dtype == BOOL else ints((7, 13), -100, 100, dtype)
    ref = np.logical_not(a) if dtype == BOOL else np.invert(a)
    check(runtime, "(not A)", [a], ref, dtype)


@pytest.mark.parametrize("dtype", [BOOL, I32], ids=str)
def test_logic_variadic(runtime, dtype):
    if dtype == BOOL:
        a, b, c = bools((7, 13), 1), bools((7, 13), 2), bools((7, 1), 3)
    else:
        a, b, c = ints((7, 13), 0, 255, dtype, 1), ints((7, 13), 0, 255, dtype, 2), ints((7, 1), 0, 255, dtype, 3)
    check(runtime, "(and A B C)", [a, b, c], a & b & c, dtype)
    check(runtime, "(or A B C)", [a, b, c], a | b | c, dtype)


def test_logic_of_comparisons(runtime):
    a = uniform((7, 13))
    ref = ((a > -1) & (a < 1)) | np.isnan(a)
    check(runtime, "(or (and (> A -1) (< A 1)) (!= A A))", [a], ref, BOOL)
    check(runtime, "(xor (> A 0) (> A 1))", [a], (a > 0) ^ (a > 1), BOOL)


# --------------------------------------------------------------------------------------------
# where

@pytest.mark.parametrize(
    "expr,ref",
    [
        ("(where C A B)", lambda a, b, c: np.where(c, a, b)),
        ("(+ (where C A 0.0) B)", lambda a, b, c: np.where(c, a, 0) + b),
        ("(* (where C 0 A) B)", lambda a, b, c: np.where(c, 0, a) * b),
        ("(where C 1.5 (+ A B))", lambda a, b, c: np.where(c, 1.5, a + b)),
        ("(where (and C (> A 0)) A (* B 0.1))", lambda a, b, c: np.where(c & (a > 0), a, b * np.float32(0.1))),
    ],
)
def test_where(runtime, expr, ref):
    a, b, c = uniform((7, 13), seed=1), uniform((13,), seed=2), bools((7, 13))
    check(runtime, expr, [a, b, c], ref(a, b, c).astype(F32), F32)


def test_where_broadcast_condition(runtime):
    c, a, b = bools((7, 1)), uniform((1, 13), seed=1), uniform((), seed=2)
    check(runtime, "(where A B C)", [c, a, b], np.where(c, a, b), F32)


def test_where_int_and_bool(runtime):
    c, a = bools((7, 13)), ints((7, 13))
    check(runtime, "(where A B -1)", [c, a], np.where(c, a, -1), I32)
    c2, d = bools((7, 13), 3), bools((7, 13), 4)
    check(runtime, "(where A B C)", [c, c2, d], np.where(c, c2, d), BOOL)


def test_where_literal_branches(runtime):
    c = bools((7, 13))
    check(runtime, "(where A 1.0 -1.0)", [c], np.where(c, 1.0, -1.0), F32)


# --------------------------------------------------------------------------------------------
# cast

CAST_VALUES = np.array([-2.7, -2.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 1.9, 2.5, 99.99, -99.99])


@pytest.mark.parametrize(
    "src,dst",
    [
        (F32, I32), (F32, I64), (F64, I32), (F64, I64), (F32, BOOL), (F64, BOOL), (I32, BOOL),
        (I64, BOOL), (BOOL, F32), (BOOL, I32), (I32, F32), (I32, F64), (I32, I64), (I64, I32),
        (F32, F64), (F64, F32), (I64, F32), (F32, F32),
    ],
    ids=lambda d: DTYPE_NAMES[d],
)
def test_cast(runtime, src, dst):
    if src == BOOL:
        a = bools((7, 13))
    elif src.kind == "f":
        a = np.concatenate([CAST_VALUES, uniform((78,), -50, 50, F64)]).reshape(7, 13).astype(src)
    else:
        a = ints((7, 13), -50, 50, src)
        a[0, :3] = 0
    if dst.kind in "iu" and src.kind == "f":
        ref = np.trunc(a).astype(dst)  # truncation toward zero
    elif dst == BOOL:
        ref = a != 0
    else:
        ref = a.astype(dst)
    check(runtime, f"(cast A {DTYPE_NAMES[dst]})", [a], ref, dst)


# --------------------------------------------------------------------------------------------
# math


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805
MATH = {
    "exp": (np.exp, -5, 5),
    "log": (np.log, 0.01, 10),
    "exp2": (np.exp2, -5, 5),
    "log2": (np.log2, 0.01, 10),
    "sqrt": (np.sqrt, 0, 10),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.01, 10),
    "sin": (np.sin, -6, 6),
    "cos": (np.cos, -6, 6),
    "tan": (np.tan, -1.3, 1.3),
    "tanh": (np.tanh, -5, 5),
    "sigmoid": (_sigmoid, -10, 10),
    "relu": (lambda x: np.maximum(x, 0), -3, 3),
    "gelu": (lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), -5, 5),
    "silu": (lambda x: x * _sigmoid(x), -8, 8),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), -4, 4),
    "selu": (lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)), -4, 4),
    "softplus": (lambda x: np.logaddexp(0, x), -20, 20),
    "erf": (erf, -3, 3),
}


@pytest.mark.parametrize("shape", [(7, 13), (7, 1, 13), ()], ids=["7x13", "7x1x13", "scalar"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", list(MATH))
def test_math(runtime, op, dtype, shape):
    ref, lo, hi = MATH[op]
    x = uniform(shape, lo, hi, dtype)
    if op in ("relu", "gelu", "elu", "selu", "silu", "sign", "erf", "tanh", "sin") and x.ndim:
        x.flat[:1] = 0
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == F32 else dict(rtol=1e-9, atol=1e-12)
    y = check(runtime, f"({op} A)", [x], ref(x.astype(np.float64)), dtype, **tol)
    if shape == ():
        assert y.shape == ()


def test_softplus_stable(runtime):
    x = np.array([-200.0, -100.0, -30.0, 0.0, 30.0, 100.0, 200.0], dtype=F32)
    y = check(runtime, "(softplus A)", [x], np.logaddexp(0, x.astype(np.float64)), F32, rtol=1e-6, atol=1e-7)
    assert np.all(y >= 0) and np.all(np.isfinite(y))


def test_erf_small_arguments(runtime):
    # erf(x) ~ 2x/sqrt(pi) near 0: relative accuracy is expected there, as from numpy/scipy/libm
    x = np.array([1e-2, -3e-3, 1e-3, 1e-4, -1e-5, 1e-6], dtype=F32)
    check(runtime, "(erf A)", [x], erf(x.astype(np.float64)), F32, rtol=1e-4)


def test_sigmoid_extremes(runtime):
    x = np.array([-200.0, -100.0, 0.0, 100.0, 200.0], dtype=F32)
    y = check(runtime, "(sigmoid A)", [x], _sigmoid(x.astype(np.float64)), F32, rtol=1e-6, atol=1e-30)
    assert np.all(np.isfinite(y))


def test_math_type_variable(runtime):
    src = "(composite f ((X{T}[N]) -> (Y{T}[N])) (return (exp (tanh X))))"
    mod = load(src, runtime)
    for dtype in (F32, F64, F32):
        x = uniform((11,), dtype=dtype)
        expect(mod.f(x), np.exp(np.tanh(x.astype(np.float64))), dtype, rtol=1e-5 if dtype == F32 else 1e-12)


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "sigmoid", "mean"])
def test_math_int_operand_is_error(runtime, op):
    src = f"(composite f ((X{{i32}}[N]) -> (Y{{f32}}[N])) (return ({op} X)))"
    if op == "mean":
        src = "(composite f ((X{i32}[N]) -> (Y{f32})) (return (mean X)))"
    raises_caten_error(runtime, src, ints((5,)))


# --------------------------------------------------------------------------------------------
# reductions

RED_REF = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
}
AXES = [None, 0, 1, -1, 2, [0, 2], [2, 0], [-1, 0], [1], [], [0, 1, 2]]


def _red_expr(op, axis, keepdims):
    s = f"({op} A"
    if axis is not None:
        s += f" :axis {axis}" if isinstance(axis, int) else f" :axis [{' '.join(map(str, axis))}]"
    if keepdims is not None:
        s += f" :keepdims {'true' if keepdims else 'false'}"
    return s + ")"


def _np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


@pytest.mark.parametrize("keepdims", [None, True, False], ids=["default", "keep", "nokeep"])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", list(RED_REF))
def test_reduce_f32(runtime, op, axis, keepdims):
    x = uniform((3, 5, 7), 0.5, 1.5, seed=7) if op == "prod" else uniform((3, 5, 7))
    ref = RED_REF[op](x.astype(np.float64), axis=_np_axis(axis), keepdims=bool(keepdims))
    y = check(runtime, _red_expr(op, axis, keepdims), [x], ref, F32, rtol=2e-5, atol=2e-6)
    if axis is None and not keepdims:
        assert y.shape == ()


@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 1], [1, 0]], ids=str)
@pytest.mark.parametrize("op", list(RED_REF))
def test_reduce_2d_odd(runtime, op, axis):
    x = uniform((7, 13), 0.8, 1.2, seed=3) if op == "prod" else uniform((7, 13))
    ref = RED_REF[op](x.astype(np.float64), axis=_np_axis(axis))
    check(runtime, _red_expr(op, axis, None), [x], ref, F32, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("axis", [None, 1, [0, 2], -1], ids=str)
@pytest.mark.parametrize("op", list(RED_REF))
def test_reduce_f64(runtime, op, axis):
    x = uniform((3, 5, 7), 0.5, 1.5, F64)
    ref = RED_REF[op](x, axis=_np_axis(axis))
    check(runtime, _red_expr(op, axis, None), [x], ref, F64, rtol=1e-12)


@pytest.mark.parametrize("keepdims", [None, True], ids=["default", "keep"])
@pytest.mark.parametrize("axis", [None, 0, -1, [2, 0], []], ids=str)
@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce_int_keeps_dtype(runtime, op, dtype, axis, keepdims):
    x = ints((3, 5, 7), -3, 3, dtype) if op == "prod" else ints((3, 5, 7), -1000, 1000, dtype)
    kw = {"dtype": dtype} if op in ("sum", "prod") else {}  # numpy would widen to i64; caten keeps i32
    ref = RED_REF[op](x, axis=_np_axis(axis), keepdims=bool(keepdims), **kw)
    check(runtime, _red_expr(op, axis, keepdims), [x], ref, dtype)


def test_i32_overflow_wraps(runtime):
    x = np.full((3,), 2**30, dtype=I32)
    check(runtime, "(sum A)", [x], np.array(3 * 2**30 - 2**32, dtype=I32), I32)
    big = np.array([2**31 - 1, -(2**31), 2**30], dtype=I32)
    check(runtime, "(+ A 1)", [big], np.array([-(2**31), -(2**31) + 1, 2**30 + 1], dtype=I32), I32)
    check(runtime, "(* A 2)", [big], (big.astype(np.int64) * 2).astype(I32), I32)


SMALL_DTYPES = [np.dtype(t) for t in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64, np.float16)]


@pytest.mark.parametrize("dtype", SMALL_DTYPES + [np.dtype(ml_dtypes.bfloat16)], ids=str)
def test_other_dtypes(runtime, dtype):
    """The remaining dtypes of section 3 through a few ops (results keep the operand dtype)."""
    a = ints((7, 13), 0, 9, seed=1).astype(dtype)
    b = ints((13,), 1, 9, seed=2).astype(dtype)
    exact = dtype.kind in "iu"
    tol = {} if exact else dict(rtol=1e-2, atol=1e-2)
    check(runtime, "(+ A B)", [a, b], (a + b).astype(dtype), dtype, **tol)
    check(runtime, "(* A 2)", [a], (a * 2).astype(dtype), dtype, **tol)
    check(runtime, "(max A B)", [a, b], np.maximum(a, b), dtype, **tol)
    check(runtime, "(max A :axis 1)", [a], a.max(axis=1), dtype, **tol)
    check(runtime, "(< A B)", [a, b], a < b, BOOL)
    check(runtime, "(transpose (where (> A 4) A B))", [a, b], np.where(a > 4, a, b).T, dtype, **tol)
    check(runtime, "(cast A f32)", [a], a.astype(np.float32), F32)
    if exact:
        check(runtime, "(sum A :axis 0)", [a], a.sum(axis=0, dtype=dtype), dtype)
        check(runtime, "(idiv A B)", [a, b], a // b, dtype)
        check(runtime, "(mod A B)", [a, b], a % b, dtype)
    else:
        check(runtime, "(sum A :axis 0)", [a], a.astype(np.float64).sum(axis=0), dtype, rtol=1e-2)
        check(runtime, "(exp (* A 0.25))", [a], np.exp(a.astype(np.float64) * 0.25), dtype, rtol=1e-2)
        check(runtime, "(/ A B)", [a, b], a.astype(np.float64) / b, dtype, rtol=1e-2)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 1]], ids=str)
@pytest.mark.parametrize("op,ref", [("max", np.any), ("min", np.all)], ids=["max-any", "min-all"])
def test_reduce_bool_any_all(runtime, op, ref, axis):
    x = np.random.default_rng(1).random((7, 13)) < 0.8
    x[2] = False
    x[4] = True
    x[:, 5] = True
    check(runtime, _red_expr(op, axis, None), [x], ref(x, axis=_np_axis(axis)), BOOL)


@pytest.mark.parametrize("op", ["sum", "prod"])
def test_reduce_bool_sum_is_error(runtime, op):
    raises_caten_error(runtime, f"(composite f ((X{{bool}}[N]) -> (Y{{bool}})) (return ({op} X)))", bools((5,)))


@pytest.mark.parametrize("keepdims", [None, True], ids=["default", "keep"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3], ids=str)
@pytest.mark.parametrize("op,ref", [("argmax", np.argmax), ("argmin", np.argmin)], ids=["argmax", "argmin"])
def test_argreduce(runtime, op, ref, axis, keepdims):
    x = uniform((3, 5, 7))
    r = ref(x, axis=axis, keepdims=bool(keepdims))
    check(runtime, _red_expr(op, axis, keepdims), [x], r, I64)


@pytest.mark.parametrize("op,ref", [("argmax", np.argmax), ("argmin", np.argmin)], ids=["argmax", "argmin"])
def test_argreduce_ties_int(runtime, op, ref):
    x = ints((7, 13), -2, 2)  # many ties: numpy returns the first occurrence
    for axis in (None, 0, 1):
        check(runtime, _red_expr(op, axis, None), [x], ref(x, axis=axis), I64)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [F32, I32, I64, F64], ids=str)
def test_max_min_two_tensors(runtime, op, dtype):
    a = uniform((7, 13), dtype=dtype, seed=1) if dtype.kind == "f" else ints((7, 13), dtype=dtype, seed=1)
    b = uniform((7, 1), dtype=dtype, seed=2) if dtype.kind == "f" else ints((7, 1), dtype=dtype, seed=2)
    ref = np.maximum if op == "max" else np.minimum
    check(runtime, f"({op} A B)", [a, b], ref(a, b), dtype)
    check(runtime, f"({op} A 0)", [a], ref(a, 0).astype(dtype), dtype)


@pytest.mark.parametrize("op", list(RED_REF))
def test_reduce_rank0_is_identity(runtime, op):
    x = np.array(1.25, dtype=F32)
    y = check(runtime, f"({op} A)", [x], x, F32)
    assert y.shape == ()


def test_reduce_size1_axis(runtime):
    x = uniform((7, 1, 13))
    check(runtime, "(sum A :axis 1)", [x], x.sum(axis=1), F32)
    check(runtime, "(max A :axis [1 2] :keepdims true)", [x], x.max(axis=(1, 2), keepdims=True), F32)
    check(runtime, "(mean A :axis [0 1])", [x], x.astype(np.float64).mean(axis=(0, 1)), F32, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# movement

X713 = np.arange(7 * 13, dtype=np.float32).reshape(7, 13) - 40.5


@pytest.mark.parametrize(
    "expr,ref",
    [
        ("(reshape A [13 7])", lambda x: x.reshape(13, 7)),
        ("(reshape A [91])", lambda x: x.reshape(91)),
        ("(reshape A [7 13 1])", lambda x: x.reshape(7, 13, 1)),
        ("(reshape A [1 91])", lambda x: x.reshape(1, 91)),
        ("(reshape (transpose A) [91])", lambda x: x.T.reshape(91)),
        ("(permute A [1 0])", lambda x: x.T),
        ("(transpose A)", lambda x: x.T),
        ("(contiguous A)", lambda x: x),
        ("(contiguous (transpose A))", lambda x: np.ascontiguousarray(x.T)),
        ("(flip A :axis 0)", lambda x: x[::-1]),
        ("(flip A :axis 1)", lambda x: x[:, ::-1]),
        ("(flip A :axis -1)", lambda x: x[:, ::-1]),
        ("(slice A [1 5 1])", lambda x: x[1:5]),
        ("(slice A [-3 100 1])", lambda x: x[-3:100]),
        ("(slice A [0 7 2] [1 -1 3])", lambda x: x[0:7:2, 1:-1:3]),
        ("(slice A [-5 -1 2])", lambda x: x[-5:-1:2]),
        ("(slice A [2 7 1] [-13 13 4])", lambda x: x[2:7, -13:13:4]),
        ("(slice A [0 100 3] [5 6 1])", lambda x: x[0:100:3, 5:6]),
        ("(slice A [-100 3 1] [-4 1000 1])", lambda x: x[-100:3, -4:1000]),
        ("(slice (transpose A) [1 4 2])", lambda x: x.T[1:4:2]),
        ("(pad A [[1 2] [0 3]])", lambda x: np.pad(x, ((1, 2), (0, 3)))),
        ("(pad A [[1 2] [0 3]] :value 1.5)", lambda x: np.pad(x, ((1, 2), (0, 3)), constant_values=1.5)),
        ("(pad A [[0 0] [4 1]] :value -inf)", lambda x: np.pad(x, ((0, 0), (4, 1)), constant_values=-np.inf)),
        ("(expand (slice A [0 1 1]) [7 13])", lambda x: np.broadcast_to(x[0:1], (7, 13))),
        ("(expand (slice A [0 7 1] [2 3 1]) [7 13])", lambda x: np.broadcast_to(x[:, 2:3], (7, 13))),
        ("(expand A [4 7 13])", lambda x: np.broadcast_to(x, (4, 7, 13))),
        ("(+ (expand A [2 7 13]) 1.0)", lambda x: np.broadcast_to(x, (2, 7, 13)) + 1),
        ("(concat A A :axis 0)", lambda x: np.concatenate([x, x], axis=0)),
        ("(concat A (* A 2.0) :axis 1)", lambda x: np.concatenate([x, 2 * x], axis=1)),
        ("(concat A A (neg A) :axis 1)", lambda x: np.concatenate([x, x, -x], axis=1)),
        ("(concat A (transpose (transpose A)) :axis -1)", lambda x: np.concatenate([x, x], axis=-1)),
    ],
)
def test_movement_2d(runtime, expr, ref):
    check(runtime, expr, [X713.copy()], np.ascontiguousarray(ref(X713)), F32)


X357 = np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 5, 7)


@pytest.mark.parametrize(
    "expr,ref",
    [
        ("(permute A [2 0 1])", lambda x: x.transpose(2, 0, 1)),
        ("(permute A [0 2 1])", lambda x: x.transpose(0, 2, 1)),
        ("(permute A [1 2 0])", lambda x: x.transpose(1, 2, 0)),
        ("(transpose A)", lambda x: x.transpose(0, 2, 1)),
        ("(reshape (permute A [2 0 1]) [7 15])", lambda x: x.transpose(2, 0, 1).reshape(7, 15)),
        ("(flip A :axis 1)", lambda x: x[:, ::-1]),
        ("(flip (permute A [1 0 2]) :axis 0)", lambda x: x.transpose(1, 0, 2)[::-1]),
        ("(slice A [1 3 1])", lambda x: x[1:3]),
        ("(slice A [0 3 1] [-2 5 1] [1 7 3])", lambda x: x[:, -2:, 1::3]),
        ("(pad A [[0 1] [2 0] [1 1]] :value 9.0)", lambda x: np.pad(x, ((0, 1), (2, 0), (1, 1)), constant_values=9)),
        ("(sum (permute A [2 0 1]) :axis 0)", lambda x: x.sum(axis=2)),
        ("(contiguous (permute A [2 1 0]))", lambda x: x.transpose(2, 1, 0)),
    ],
)
def test_movement_3d(runtime, expr, ref):
    check(runtime, expr, [X357.copy()], np.ascontiguousarray(ref(X357)), F32)


@pytest.mark.parametrize(
    "shape,target",
    [((13,), (7, 13)), ((7, 1), (7, 13)), ((1, 13), (4, 7, 13)), ((), (3, 4)), ((13,), (2, 3, 13)), ((1,), (5,))],
    ids=str,
)
def test_expand(runtime, shape, target):
    x = uniform(shape)
    check(runtime, f"(expand A [{' '.join(map(str, target))}])", [x], np.broadcast_to(x, target), F32)


def test_reshape_to_and_from_scalar(runtime):
    x = np.array([2.5], dtype=F32)
    y = check(runtime, "(reshape A [])", [x], x.reshape(()), F32)
    assert y.shape == ()
    s = np.array(3.5, dtype=F32)
    check(runtime, "(reshape A [1 1])", [s], s.reshape(1, 1), F32)


def test_concat_three_different_sizes(runtime):
    a, b, c = uniform((2, 13), seed=1), uniform((3, 13), seed=2), uniform((4, 13), seed=3)
    check(runtime, "(concat A B C :axis 0)", [a, b, c], np.concatenate([a, b, c], 0), F32)
    d, e = uniform((7, 1), seed=4), uniform((7, 5), seed=5)
    check(runtime, "(concat B A C :axis 1)", [X713, d, e], np.concatenate([d, X713, e], 1), F32)


@pytest.mark.parametrize("dtype", [I32, I64, BOOL, F64], ids=str)
def test_movement_other_dtypes(runtime, dtype):
    x = (X713 > 0) if dtype == BOOL else X713.astype(dtype)
    check(runtime, "(transpose A)", [x], x.T, dtype)
    check(runtime, "(concat A (flip A :axis 0) :axis 0)", [x], np.concatenate([x, x[::-1]]), dtype)
    check(runtime, "(slice A [1 6 2] [-3 13 1])", [x], x[1:6:2, -3:], dtype)
    check(runtime, "(expand (reshape A [1 7 13]) [2 7 13])", [x], np.broadcast_to(x, (2, 7, 13)), dtype)
    if dtype != BOOL:
        check(runtime, "(pad A [[1 1] [2 0]] :value 7)", [x], np.pad(x, ((1, 1), (2, 0)), constant_values=7), dtype)
    else:
        check(runtime, "(pad A [[1 1] [2 0]])", [x], np.pad(x, ((1, 1), (2, 0))), dtype)


# --------------------------------------------------------------------------------------------
# creation


@pytest.mark.parametrize(
    "expr,ref",
    [
        ("(full [3 4] 2.5)", np.full((3, 4), 2.5, np.float32)),
        ("(full [3 4] 7 :dtype i32)", np.full((3, 4), 7, np.int32)),
        ("(full [5] -1 :dtype i64)", np.full((5,), -1, np.int64)),
        ("(full [2 3] 0.1 :dtype f64)", np.full((2, 3), 0.1, np.float64)),
        ("(full [] 3.0)", np.array(3.0, np.float32)),
        ("(zeros [2 3])", np.zeros((2, 3), np.float32)),
        ("(zeros [2 3] :dtype i64)", np.zeros((2, 3), np.int64)),
        ("(ones [5])", np.ones((5,), np.float32)),
        ("(ones [5 1 2] :dtype i32)", np.ones((5, 1, 2), np.int32)),
        ("(ones [4] :dtype bool)", np.ones((4,), np.bool_)),
        ("(arange 10)", np.arange(10, dtype=np.int64)),
        ("(arange 10 :dtype i32)", np.arange(10, dtype=np.int32)),
        ("(arange 6 :dtype f32)", np.arange(6, dtype=np.float32)),
        ("(arange 1)", np.arange(1, dtype=np.int64)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_creation_no_inputs(runtime, expr, ref):
    y = run(runtime, expr, out=(ref.dtype, ref.shape))
    expect(y, ref, rtol=0)


def test_creation_with_dims_from_inputs(runtime):
    src = """
(composite f ((A{f32}[M, N]) -> (Y{f32}[M, N], Z{f32}[M, N], W{i64}[N]))
  (return (+ A (ones [M N])) (+ A (cast (arange N) f32)) (arange N)))
"""
    a = uniform((7, 13))
    y, z, w = load(src, runtime).f(a)
    expect(y, a + 1, F32)
    expect(z, a + np.arange(13, dtype=F32), F32)
    expect(w, np.arange(13), I64)


def test_creation_broadcasts_in_arith(runtime):
    a = uniform((7, 13))
    check(runtime, "(* A (full [13] 2.0))", [a], a * 2, F32)
    check(runtime, "(- A (zeros [7 1]))", [a], a, F32)


RAND_N = (200, 500)


def _rand_mod(runtime, op, seeds=(1,)):
    lines = [f"(composite f{s} (() -> (Y{{f32}}[{RAND_N[0]}, {RAND_N[1]}])) (return ({op} [{RAND_N[0]} {RAND_N[1]}]"
             f" :seed {s})))" for s in seeds]
    return load("\n".join(lines), runtime)


@pytest.mark.parametrize("op", ["rand", "randn"])
def test_random_shape_dtype_determinism(runtime, op):
    mod = _rand_mod(runtime, op, (1, 2))
    a, a2, b = mod.f1(), mod.f1(), mod.f2()
    for y in (a, a2, b):
        assert isinstance(y, np.ndarray) and y.dtype == F32 and y.shape == RAND_N
        assert np.all(np.isfinite(y))
    np.testing.assert_array_equal(a, a2)  # deterministic per seed
    again = caten.loads(
        f"(composite g (() -> (Y{{f32}}[{RAND_N[0]}, {RAND_N[1]}])) (return ({op} [{RAND_N[0]} {RAND_N[1]}] :seed 1)))",
        runtime=runtime,
    ).g()
    np.testing.assert_array_equal(a, again)  # ... across compilations too
    assert not np.array_equal(a, b)  # different seeds differ
    assert np.mean(a == b) < 0.01
    assert len(np.unique(a)) > 0.9 * a.size  # not constant / not repeating
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[:, 0], a[:, 1])


def test_rand_distribution(runtime):
    y = _rand_mod(runtime, "rand").f1().astype(np.float64)
    assert y.min() >= 0.0 and y.max() < 1.0
    assert abs(y.mean() - 0.5) < 0.01
    assert abs(y.std() - math.sqrt(1 / 12)) < 0.01
    hist, _ = np.histogram(y, bins=10, range=(0, 1))
    assert np.all(np.abs(hist / y.size - 0.1) < 0.01)


def test_randn_distribution(runtime):
    y = _rand_mod(runtime, "randn").f1().astype(np.float64)
    assert abs(y.mean()) < 0.02
    assert abs(y.std() - 1.0) < 0.02
    assert abs(np.mean(np.abs(y) < 1) - 0.6827) < 0.01
    assert y.min() < -3 and y.max() > 3


def test_rand_in_expression(runtime):
    a = uniform((7, 13))
    y = run(runtime, "(+ A (rand [7 13] :seed 5))", a, out=(F32, (7, 13)))
    assert y.dtype == F32 and np.all((y - a >= -1e-6) & (y - a < 1 + 1e-6))


# --------------------------------------------------------------------------------------------
# nn

@pytest.mark.parametrize(
    "sa,sb",
    [
        ((7, 13), (13, 5)),
        ((3, 7, 13), (3, 13, 5)),
        ((2, 1, 7, 13), (3, 13, 5)),
        ((7, 13), (4, 13, 5)),
        ((4, 7, 13), (13, 5)),
        ((1, 13), (13, 1)),
        ((13,), (13, 5)),
        ((7, 13), (13,)),
    ],
    ids=str,
)
def test_matmul(runtime, sa, sb):
    a, b = uniform(sa, seed=1), uniform(sb, seed=2)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    check(runtime, "(matmul A B)", [a, b], ref, F32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [F64, I32, I64], ids=str)
def test_matmul_dtypes(runtime, dtype):
    if dtype.kind == "f":
        a, b = uniform((2, 7, 13), dtype=dtype, seed=1), uniform((13, 5), dtype=dtype, seed=2)
    else:
        a, b = ints((2, 7, 13), -5, 5, dtype, 1), ints((13, 5), -5, 5, dtype, 2)
    check(runtime, "(matmul A B)", [a, b], np.matmul(a, b).astype(dtype), dtype, rtol=1e-12)


@pytest.mark.parametrize("sx", [(7, 13), (2, 7, 13), (1, 13)], ids=str)
def test_linear(runtime, sx):
    x, w, b = uniform(sx, seed=1), uniform((13, 5), seed=2), uniform((5,), seed=3)
    ref = x.astype(np.float64) @ w.astype(np.float64) + b
    check(runtime, "(linear A B C)", [x, w, b], ref, F32, rtol=1e-5, atol=1e-5)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize(
    "shape,axis,kw",
    [((7, 13), -1, ""), ((7, 13), -1, " :axis -1"), ((7, 13), 0, " :axis 0"), ((3, 5, 7), 1, " :axis 1"),
     ((7, 1), -1, ""), ((13,), -1, "")],
    ids=str,
)
@pytest.mark.parametrize("op", ["softmax", "log-softmax"])
def test_softmax(runtime, op, shape, axis, kw):
    x = uniform(shape, -10, 10)
    ref = (_softmax if op == "softmax" else _log_softmax)(x.astype(np.float64), axis)
    check(runtime, f"({op} A{kw})", [x], ref, F32, rtol=1e-5, atol=1e-6)


def test_softmax_large_values_stable(runtime):
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1001.0]], dtype=F32)
    check(runtime, "(softmax A)", [x], _softmax(x.astype(np.float64), -1), F32, rtol=1e-5, atol=1e-7)
    check(runtime, "(log-softmax A)", [x], _log_softmax(x.astype(np.float64), -1), F32, rtol=1e-5, atol=1e-5)


def test_softmax_f64(runtime):
    x = uniform((7, 13), dtype=F64)
    check(runtime, "(softmax A)", [x], _softmax(x, -1), F64, rtol=1e-12)


def _layernorm(x, g, b, axes, eps):
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


@pytest.mark.parametrize(
    "xs,gs,kw,axes,eps",
    [
        ((7, 13), (13,), "", (-1,), 1e-5),
        ((7, 13), (13,), " :axis -1 :eps 0.5", (-1,), 0.5),
        ((7, 13), (13,), " :eps 1e-3", (-1,), 1e-3),
        ((7, 13), (13,), " :axis 1", (1,), 1e-5),
        ((3, 5, 7), (5, 7), " :axis [-2 -1]", (-2, -1), 1e-5),
        ((3, 5, 7), (5, 7), " :axis [1 2] :eps 0.25", (1, 2), 0.25),
        ((7, 1), (1,), "", (-1,), 1e-5),
    ],
    ids=str,
)
def test_layernorm(runtime, xs, gs, kw, axes, eps):
    x, g, b = uniform(xs, seed=1), uniform(gs, seed=2), uniform(gs, seed=3)
    ref = _layernorm(*(v.astype(np.float64) for v in (x, g, b)), axes, eps)
    check(runtime, f"(layernorm A B C{kw})", [x, g, b], ref, F32, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw,eps", [("", 1e-6), (" :eps 0.01", 0.01), (" :axis -1 :eps 0.001", 1e-3)], ids=str)
@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_rmsnorm(runtime, kw, eps, scale):
    x, g = uniform((7, 13), seed=1) * np.float32(scale), uniform((13,), seed=2)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps) * g
    check(runtime, f"(rmsnorm A B{kw})", [x, g], ref, F32, rtol=1e-4, atol=1e-5)


def test_rmsnorm_3d_axis_list(runtime):
    x, g = uniform((3, 5, 7), seed=1), uniform((5, 7), seed=2)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(axis=(1, 2), keepdims=True) + 1e-6) * g
    check(runtime, "(rmsnorm A B :axis [1 2])", [x, g], ref, F32, rtol=1e-4, atol=1e-5)


def conv2d_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct NCHW/OIHW convolution (cross-correlation, as torch) by explicit loops, float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    assert c == cg * groups and o % groups == 0
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    wo = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, ho, wo))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(ho):
            for j in range(wo):
                for ki in range(kh):
                    for kj in range(kw):
                        xi, xj = i * stride + ki * dilation, j * stride + kj * dilation
                        out[:, oc, i, j] += xp[:, g * cg:(g + 1) * cg, xi, xj] @ w[oc, :, ki, kj]
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


@pytest.mark.parametrize(
    "xs,ws,bias,kw",
    [
        ((1, 1, 5, 5), (1, 1, 3, 3), False, {}),
        ((2, 3, 7, 9), (4, 3, 3, 3), True, {}),
        ((2, 3, 7, 9), (4, 3, 3, 3), False, {"stride": 2}),
        ((2, 3, 7, 9), (4, 3, 3, 3), True, {"padding": 1}),
        ((2, 3, 9, 11), (4, 3, 3, 2), True, {"dilation": 2}),
        ((2, 4, 7, 9), (6, 2, 3, 3), True, {"groups": 2}),
        ((2, 4, 8, 9), (4, 1, 3, 3), False, {"groups": 4, "padding": 1}),
        ((2, 4, 11, 13), (6, 2, 3, 3), True, {"stride": 2, "padding": 2, "dilation": 2, "groups": 2}),
        ((1, 3, 6, 6), (5, 3, 1, 1), True, {"stride": 3}),
    ],
    ids=lambda v: str(v).replace(" ", ""),
)
def test_conv2d(runtime, xs, ws, bias, kw):
    x, w = uniform(xs, seed=1), uniform(ws, seed=2)
    args = [x, w]
    b = None
    if bias:
        b = uniform((ws[0],), seed=3)
        args.append(b)
    opts = "".join(f" :{k} {v}" for k, v in kw.items())
    expr = f"(conv2d A B{' C' if bias else ''}{opts})"
    check(runtime, expr, args, conv2d_ref(x, w, b, **kw), F32, rtol=1e-4, atol=1e-4)


def _pool_ref(x, k, s, red):
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = red(x[:, :, i * s:i * s + k, j * s:j * s + k].astype(np.float64), axis=(2, 3))
    return out


@pytest.mark.parametrize(
    "shape,k,s,kw",
    [
        ((2, 3, 8, 8), 2, 2, " :kernel 2"),
        ((2, 3, 7, 9), 2, 2, " :kernel 2 :stride 2"),
        ((2, 3, 7, 9), 3, 1, " :kernel 3 :stride 1"),
        ((1, 2, 9, 11), 3, 2, " :kernel 3 :stride 2"),
        ((1, 1, 5, 5), 5, 5, " :kernel 5"),
    ],
    ids=str,
)
@pytest.mark.parametrize("op,red", [("max-pool2d", np.max), ("avg-pool2d", np.mean)], ids=["max", "avg"])
def test_pool2d(runtime, op, red, shape, k, s, kw):
    x = uniform(shape)
    check(runtime, f"({op} A{kw})", [x], _pool_ref(x, k, s, red), F32, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(7, 13), (1, 5), (4, 1)], ids=str)
def test_cross_entropy(runtime, shape):
    logits = uniform(shape, -5, 5)
    labels = np.random.default_rng(3).integers(0, shape[1], size=shape[0])
    onehot = np.eye(shape[1], dtype=F32)[labels]
    ref = -np.mean(np.sum(onehot * _log_softmax(logits.astype(np.float64), -1), axis=-1))
    y = check(runtime, "(cross-entropy A B)", [logits, onehot], ref, F32, rtol=1e-5, atol=1e-6)
    assert y.shape == ()


@pytest.mark.parametrize("shape", [(7, 13), (5,), (2, 3, 4), ()], ids=str)
def test_mse(runtime, shape):
    a, b = uniform(shape, seed=1), uniform(shape, seed=2)
    ref = np.mean((a.astype(np.float64) - b) ** 2)
    y = check(runtime, "(mse A B)", [a, b], ref, F32, rtol=1e-5, atol=1e-7)
    assert y.shape == ()


# --------------------------------------------------------------------------------------------
# section 5.1 semantics and section 10 behaviour


def test_literal_takes_tensor_dtype(runtime):
    a64 = uniform((7, 13), dtype=F64)
    check(runtime, "(* A 0.1)", [a64], a64 * 0.1, F64, rtol=1e-15)  # literal at f64 precision
    z = np.zeros((3,), F64)
    check(runtime, "(+ A 0.1)", [z], np.full(3, 0.1), F64, rtol=0)
    a32 = uniform((7, 13))
    check(runtime, "(+ A 0.1)", [a32], a32 + np.float32(0.1), F32, rtol=1e-7)
    ai = ints((7, 13))
    check(runtime, "(+ A 1)", [ai], ai + 1, I32)
    check(runtime, "(* 3 A)", [ai.astype(I64)], 3 * ai.astype(I64), I64)
    check(runtime, "(- A 1)", [a64], a64 - 1, F64, rtol=0)
    b = bools((7, 13))
    check(runtime, "(and A true)", [b], b, BOOL)
    check(runtime, "(or A false)", [b], b, BOOL)


def test_literal_folding(runtime):
    ai = ints((7, 13))
    check(runtime, "(+ A (* 2 3))", [ai], ai + 6, I32)
    a = uniform((7, 13))
    check(runtime, "(* A (+ 0.5 0.25))", [a], a * 0.75, F32)
    check(runtime, "(min A inf)", [a], a, F32)
    check(runtime, "(max A -inf)", [a], a, F32)
    y = run(runtime, "(+ 1 2)", out=(I64, ()))
    expect(y, np.array(3, np.int64))
    y = run(runtime, "(* 1.5 2.0)", out=(F32, ()))
    expect(y, np.array(3.0, np.float32))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_floor_idiv_mod(runtime, dtype):
    a = np.array([-7, 7, -7, 7, -8, 0, -1, 1, 9, -9], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 5, 4, -4, 4, 4], dtype=dtype)
    check(runtime, "(idiv A B)", [a, b], np.array([-4, 3, 3, -4, -3, 0, -1, -1, 2, -3], dtype), dtype)
    check(runtime, "(mod A B)", [a, b], np.array([1, 1, -1, -1, 1, 0, 3, -3, 1, 3], dtype), dtype)
    check(runtime, "(idiv A 2)", [a], np.floor_divide(a, 2), dtype)
    check(runtime, "(mod A 2)", [a], np.mod(a, 2), dtype)
    check(runtime, "(idiv A -3)", [a], np.floor_divide(a, -3), dtype)
    check(runtime, "(mod A -3)", [a], np.mod(a, -3), dtype)


def test_float_floor_mod(runtime):
    a = np.array([-7.0, 7.0, -7.5, 7.5, -0.5], dtype=F32)
    check(runtime, "(mod A 2.0)", [a], np.mod(a, np.float32(2)), F32)
    check(runtime, "(idiv A 2.0)", [a], np.floor_divide(a, np.float32(2)), F32)


@pytest.mark.parametrize(
    "sig,body,args",
    [
        ("(A{i32}[N]) -> (Y{i32}[N])", "(+ A 1.5)", [ints((4,))]),  # float literal on an int tensor
        ("(A{f32}[N], B{f64}[N]) -> (Y{f32}[N])", "(+ A B)", [uniform((4,)), uniform((4,), dtype=F64)]),
        ("(A{i32}[N], B{i64}[N]) -> (Y{i64}[N])", "(* A B)", [ints((4,)), ints((4,), dtype=I64)]),
        ("(A{i32}[N], B{i32}[N]) -> (Y{i32}[N])", "(/ A B)", [ints((4,)), ints((4,), 1, 3)]),
        ("(A{f32}[N], B{f32}[N]) -> (Y{f32}[N])", "(where A B B)", [uniform((4,)), uniform((4,))]),
        ("(A{f32}[N]) -> (Y{f64}[N])", "(* A 2.0)", [uniform((4,))]),  # declared output dtype mismatch
        ("(A{f32}[N]) -> (Y{f32}[N])", "(pad A [[-1 0]])", [uniform((4,))]),  # negative pad
    ],
    ids=["float-literal-int", "f32+f64", "i32*i64", "int-div", "where-non-bool", "out-dtype", "neg-pad"],
)
def test_dtype_errors(runtime, sig, body, args):
    raises_caten_error(runtime, f"(composite f ({sig}) (return {body}))", *args)


def test_result_dtypes_exact(runtime):
    src = """
(composite f ((A{f32}[M, N], B{i32}[M, N]) -> (C{bool}[M, N], D{i64}[M], E{i32}, F{f32}[M, 1], G{i32}[M, N]))
  (return (< A 0.0) (argmax A :axis 1) (sum B) (mean A :axis -1 :keepdims true) (max B (abs B))))
"""
    a, b = uniform((7, 13)), ints((7, 13))
    c, d, e, f, g = load(src, runtime).f(a, b)
    expect(c, a < 0, BOOL)
    expect(d, np.argmax(a, axis=1), I64)
    expect(e, np.sum(b, dtype=I32), I32)
    expect(f, a.astype(np.float64).mean(axis=-1, keepdims=True), F32, rtol=1e-5, atol=1e-6)
    expect(g, np.abs(b), I32)
    assert e.shape == () and isinstance(e, np.ndarray)


def test_inputs_never_modified(runtime):
    src = """
(composite f ((A{f32}[M, N], B{f32}[N]) -> (Y{f32}[M, N], Z{f32}[N]))
  (setf A (+ A 1.0))
  (setf B (* B 2.0))
  (return A B))
"""
    a, b = uniform((7, 13)), uniform((13,))
    a0, b0 = a.copy(), b.copy()
    y, z = load(src, runtime).f(a, b)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    expect(y, a0 + 1, F32)
    expect(z, b0 * 2, F32)
    # a strided / non-contiguous view as input is accepted and also left alone
    big = uniform((14, 26), seed=4)
    big0 = big.copy()
    view = big[::2, ::2]
    y2, _ = load(src, runtime).f(view, b)
    expect(y2, big0[::2, ::2] + 1, F32)
    np.testing.assert_array_equal(big, big0)
    # Fortran-ordered input
    f = np.asfortranarray(uniform((7, 13), seed=5))
    y3, _ = load(src, runtime).f(f, b)
    expect(y3, f + 1, F32)


def test_scalar_rank0(runtime):
    s, x = np.array(2.5, dtype=F32), uniform((7, 13))
    y = check(runtime, "(+ A 1.0)", [s], np.array(3.5, F32), F32)
    assert isinstance(y, np.ndarray) and y.ndim == 0
    check(runtime, "(* A B)", [s, x], s * x, F32)
    check(runtime, "(exp A)", [s], np.exp(np.float64(2.5)), F32, rtol=1e-6)
    check(runtime, "(sum (* A B))", [s, x], (s * x.astype(np.float64)).sum(), F32, rtol=1e-5, atol=1e-5)
    si = np.array(-7, dtype=I32)
    check(runtime, "(idiv A 2)", [si], np.array(-4, I32), I32)


def test_composite_calls_composite(runtime):
    src = """
; a helper with a type variable, then two users
(composite sq ((X{T}[N]) -> (Y{T}[N])) (return (* X X)))
(defcomposite sq-plus-one ((A{f32}[M]) -> (B{f32}[M]))
  "squares and adds one"
  (return (+ (sq A) 1.0)))
(composite twice ((A{i32}[K]) -> (B{i32}[K])) (sq (sq A)))
"""
    mod = load(src, runtime)
    a = uniform((11,))
    expect(mod.sq_plus_one(a), a * a + 1, F32)
    ai = ints((5,), -5, 5)
    expect(mod.twice(ai), ai**4, I32)
    expect(mod.sq(a.astype(F64)), a.astype(F64) ** 2, F64)


def test_multiple_outputs_tuple(runtime):
    src = "(composite two ((A{f32}[N], B{f32}[N]) -> (S{f32}[N], D{f32}[N])) (return (+ A B) (- A B)))"
    a, b = uniform((13,), seed=1), uniform((13,), seed=2)
    out = load(src, runtime).two(a, b)
    assert isinstance(out, tuple) and len(out) == 2
    expect(out[0], a + b, F32)
    expect(out[1], a - b, F32)


def test_setf_shadowing_and_implicit_return(runtime):
    src = """
(composite f ((A{f32}[M, N]) -> (Y{f32}[M, N]))
  (setf h (* A 2.0))
  (setf g h)
  (setf h (+ h 1.0))   ; shadows the first h; g still holds the old value
  (- h g))
(composite g ((A{f32}[M, N]) -> (Y{f32}[M, N]))
  (setf h A)
  (setf h (* h h))
  (setf h (+ h A))
  h)
"""
    mod = load(src, runtime)
    a = uniform((7, 13))
    expect(mod.f(a), np.ones_like(a), F32, rtol=1e-6)
    expect(mod.g(a), a * a + a, F32, rtol=1e-6)


def test_let(runtime):
    src = """
(composite f ((A{f32}[N]) -> (Y{f32}[N]))
  (let ((a (* A 2.0)) (b (+ A 1.0)))
    (* a b)))
(composite g ((A{f32}[N]) -> (Y{f32}[N]))
  (setf a A)
  (setf r (let ((a (* A 10.0))) (+ a 1.0)))   ; the inner a is local
  (return (+ r a)))
(composite h ((A{f32}[N]) -> (Y{f32}[N]))
  (setf acc A)
  (let ((t2 (* A 2.0)))
    (setf acc (+ acc t2)))                      ; setf of an outer name rebinds it
  (return acc))
"""
    mod = load(src, runtime)
    a = uniform((13,))
    expect(mod.f(a), (2 * a) * (a + 1), F32, rtol=1e-6)
    expect(mod.g(a), (10 * a + 1) + a, F32, rtol=1e-6)
    expect(mod.h(a), 3 * a, F32, rtol=1e-6)


def test_dotimes(runtime):
    src = """
(composite f ((A{f32}[N]) -> (Y{f32}[N]))
  (setf h A)
  (dotimes (i 3) (setf h (* h 2.0)))
  (return h))
(composite g ((A{i64}[N]) -> (Y{i64}[N]))
  (setf h A)
  (dotimes (i 4) (setf h (+ h i)))          ; i is an i64 scalar: 0+1+2+3
  (return h))
(composite layers ((X{f32}[B, D], W{f32}[D, D]) -> (Y{f32}[B, D]))
  (setf h X)
  (dotimes (l 2)
    (setf h (tanh (matmul h W))))
  (return h))
"""
    mod = load(src, runtime)
    a = uniform((13,))
    expect(mod.f(a), 8 * a, F32)
    ai = ints((5,), dtype=I64)
    expect(mod.g(ai), ai + 6, I64)
    x, w = uniform((4, 6), seed=1), uniform((6, 6), -0.5, 0.5, seed=2)
    h = x.astype(np.float64)
    for _ in range(2):
        h = np.tanh(h @ w)
    expect(mod.layers(x, w), h, F32, rtol=1e-5, atol=1e-6)


def test_dotimes_count_from_bound_dim(runtime):
    src = """
(composite k ((A{i64}[N]) -> (Y{i64}[N]))
  (setf h A)
  (dotimes (i N) (setf h (+ h 1)))          ; count from a dim bound with defines
  h)
"""
    mod = caten.loads(src, runtime=runtime, defines={"N": 5})
    ai = ints((5,), dtype=I64)
    expect(mod.k(ai), ai + 5, I64)


def test_where_derived_dims(runtime):
    src = """
(composite repeat-rows ((A{T}[M, N]) -> (C{T}[K, N]) where K = (* 2 M))
  (return (concat A A :axis 0)))
(composite inline ((A{T}[M, N]) -> (C{T}[(* 2 M), N]))
  (return (concat A A :axis 0)))
(composite two-wheres ((A{f32}[M, N]) -> (C{f32}[K, N], D{f32}[M, L]) where K = (* 2 M), L = (+ N 1))
  (return (concat A A :axis 0) (pad A [[0 0] [0 1]] :value 3.0)))
"""
    mod = load(src, runtime)
    for x in (uniform((3, 5)), ints((4, 2)), uniform((1, 7), dtype=F64), bools((2, 3))):
        ref = np.concatenate([x, x], axis=0)
        expect(mod.repeat_rows(x), ref, x.dtype)
        expect(mod.inline(x), ref, x.dtype)
    x = uniform((3, 5))
    c, d = mod.two_wheres(x)
    expect(c, np.concatenate([x, x]), F32)
    expect(d, np.pad(x, ((0, 0), (0, 1)), constant_values=3.0), F32)


def test_type_variable_variants(runtime):
    src = "(composite f ((X{T}[N], Y{T}[N]) -> (Z{T}[N])) (return (+ X (* Y 2))))"
    mod = load(src, runtime)
    for dtype in (F32, F64, I32, I64, F32):
        x = ints((9,), -5, 5, dtype, 1)
        y = ints((9,), -5, 5, dtype, 2)
        expect(mod.f(x, y), x + y * 2, dtype)


def test_dimension_symbols(runtime):
    src = """
(composite f ((A{i64}[N]) -> (Y{i64}[N])) (return (+ A N)))
(composite g ((A{f32}[M, N]) -> (Y{f32}[(* M N)])) (return (reshape A [(* M N)])))
(composite k ((A{f32}[M, N], B{f32}[N]) -> (Y{f32}[M, N])) (return (+ A B)))
(composite s ((A{f32}[M, N]) -> (Y{f32}[N, M])) (return (transpose A)))
"""
    mod = load(src, runtime)
    for n in (1, 4, 13):
        ai = ints((n,), dtype=I64)
        expect(mod.f(ai), ai + n, I64)
    for shape in ((7, 13), (1, 5), (3, 2)):
        a = uniform(shape)
        expect(mod.g(a), a.reshape(-1), F32)
        expect(mod.k(a, uniform(shape[1:], seed=9)), a + uniform(shape[1:], seed=9), F32)
        expect(mod.s(a), a.T, F32)


@pytest.mark.parametrize(
    "out,body,ref",
    [
        ("[M, (- N 1)]", "(slice A [0 M 1] [0 (- N 1) 1])", lambda a: a[:, :-1]),
        ("[(- M 1), (- N 1)]", "(slice A [1 M 1] [1 N 1])", lambda a: a[1:, 1:]),
        ("[(- M 1), N]", "(slice A [0 (- M 1) 1])", lambda a: a[:-1]),
    ],
)
def test_slice_with_dim_expressions(runtime, out, body, ref):
    mod = load(f"(composite h ((A{{f32}}[M, N]) -> (Y{{f32}}{out})) (return {body}))", runtime)
    for shape in ((7, 13), (2, 5), (3, 2)):
        a = uniform(shape)
        expect(mod.h(a), ref(a), F32)


@pytest.mark.parametrize(
    "src,args",
    [
        ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (return A))", [uniform((3,)), uniform((3,))]),  # too many
        ("(composite f ((A{f32}[N], B{f32}[N]) -> (Y{f32}[N])) (return (+ A B)))", [uniform((3,))]),  # too few
        ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (return A))", [uniform((3,), dtype=F64)]),  # dtype
        ("(composite f ((A{f32}[7, 13]) -> (Y{f32}[7, 13])) (return A))", [uniform((7, 12))]),  # shape
        ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (return A))", [uniform((3, 1))]),  # rank
        ("(composite f ((A{f32}[N], B{f32}[N]) -> (Y{f32}[N])) (return (+ A B)))",
         [uniform((3,)), uniform((4,))]),  # inconsistent dim
        ("(composite f ((A{f32}[M], B{f32}[K]) -> (Y{f32}[K]) where K = (* 2 M)) (return B))",
         [uniform((3,)), uniform((5,))]),  # failed where
        ("(composite f ((A{T}[N], B{T}[N]) -> (Y{T}[N])) (return (+ A B)))",
         [uniform((3,)), uniform((3,), dtype=F64)]),  # T bound twice differently
    ],
    ids=["too-many", "too-few", "dtype", "shape", "rank", "dim-mismatch", "where-fails", "typevar-mismatch"],
)
def test_call_errors(runtime, src, args):
    mod = load(src, runtime)
    with pytest.raises(caten.Error) as ei:
        mod.f(*args)
    assert isinstance(ei.value, ValueError)


def test_diagnostic_has_location(runtime):
    src = "(composite f ((A{f32}[N]) -> (Y{f32}[N]))\n  (return (no-such-op A)))"
    with pytest.raises(caten.Error) as ei:
        caten.loads(src, runtime=runtime).f(uniform((3,)))
    e = ei.value
    assert e.line == 2 and e.col is not None
