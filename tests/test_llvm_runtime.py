"""The LLVM runtime against the reference interpreter: every op x dtype family, views,
reductions, symbolic dims, fusion counts."""

from __future__ import annotations

import numpy as np
import pytest

from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.ops import Op
from tests.llvm_util import check, program, rand

FLOATS = [T.f16, T.bf16, T.f32, T.f64]
INTS = [T.i8, T.i16, T.i32, T.i64, T.u8, T.u16, T.u32, T.u64]
TOL = {"f16": dict(rtol=2e-3, atol=1e-3), "bf16": dict(rtol=1.6e-2, atol=1e-2),
       "f32": dict(rtol=3e-6, atol=1e-6), "f64": dict(rtol=1e-12, atol=1e-13)}


def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_unary_float(dt):
    r = rng()
    x = B.buffer(dt, (5, 37), 0, "x")
    pos = B.buffer(dt, (5, 37), 1, "p")
    outs = [B.alu(Op.NEG, x), B.alu(Op.RECIP, x), B.alu(Op.SQRT, pos), B.alu(Op.EXP2, x),
            B.alu(Op.LOG2, pos), B.alu(Op.SIN, x)]
    a = rand(dt.np, (5, 37), r, -20, 20)
    p = rand(dt.np, (5, 37), r, 0.01, 50)
    check(program("unary", [x, pos], outs), [a, p], **TOL[dt.name])


@pytest.mark.parametrize("dt", [T.f32, T.f64], ids=str)
def test_transcendental_accuracy(dt):
    """<= 2 ulp (f32) in the normal range; special values like numpy."""
    r = rng()
    n = 200_000
    x = B.buffer(dt, (n,), 0, "x")
    p = program("trans", [x], [B.alu(Op.EXP2, x), B.alu(Op.LOG2, x), B.alu(Op.SIN, x)])
    from tests.llvm_util import run_both
    a = np.concatenate([r.uniform(-126, 127, n // 4), r.uniform(-2, 2, n // 4),
                        np.exp(r.uniform(-80, 80, n // 4)), r.uniform(-100, 100, n - 3 * (n // 4))]).astype(dt.np)
    got, _ = run_both(p, [a])
    a64 = a.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = [np.exp2(a64), np.log2(a64), np.sin(a64)]
    for g, ref, name in zip(got, refs, ["exp2", "log2", "sin"]):
        ok = np.isfinite(ref) & (np.abs(ref) > np.finfo(dt.np).tiny) & (np.abs(ref) < np.finfo(dt.np).max)
        if name == "sin":
            ok &= np.abs(a64) < 1e4
        ulp = np.spacing(np.abs(ref[ok]).astype(dt.np)).astype(np.float64)
        err = np.abs(g[ok].astype(np.float64) - ref[ok]) / ulp
        bound = 2.0 if dt == T.f32 else 4.0
        if name == "sin":  # absolute error near the zeros of sin, relative elsewhere
            err = np.minimum(err, np.abs(g[ok] - ref[ok]) / np.spacing(dt.np.type(1.0)))
        assert err.max() <= bound, (name, err.max())
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1.0, 1e-40, 200.0, -200.0], dt.np)
    x2 = B.buffer(dt, (specials.size,), 0, "x")
    p2 = program("spec", [x2], [B.alu(Op.EXP2, x2), B.alu(Op.LOG2, x2), B.alu(Op.SIN, x2)])
    got, ref = run_both(p2, [specials])
    for g, w in zip(got, ref):
        np.testing.assert_allclose(g, w, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dt", FLOATS + INTS, ids=str)
def test_binary_arith(dt):
    r = rng()
    shape = (7, 13)
    x, y = B.buffer(dt, shape, 0, "x"), B.buffer(dt, shape, 1, "y")
    outs = [B.alu(Op.ADD, x, y), B.alu(Op.MUL, x, y), B.alu(Op.MAX, x, y), B.alu(Op.IDIV, x, y),
            B.alu(Op.MOD, x, y), B.alu(Op.CMPLT, x, y), B.alu(Op.CMPNE, x, y), B.alu(Op.NEG, x)]
    a = rand(dt.np, shape, r)
    b = rand(dt.np, shape, r)
    if dt.is_float:
        b = np.where(np.abs(b) < 0.25, 1.5, b).astype(dt.np)
        b[0, :3] = a[0, :3]
    else:
        b[0, :5] = 0  # integer division by zero gives 0
        b[1, :3] = a[1, :3]
        if dt.kind == "int":
            a[2, 0] = np.iinfo(dt.np).min
            b[2, 0] = -1
    check(program("bin", [x, y], outs), [a, b], **TOL.get(dt.name, {}))


@pytest.mark.parametrize("dt", [T.bool_] + INTS, ids=str)
def test_bitwise_and_where(dt):
    r = rng()
    shape = (3, 29)
    x, y = B.buffer(dt, shape, 0, "x"), B.buffer(dt, shape, 1, "y")
    c = B.buffer(T.bool_, shape, 2, "c")
    outs = [B.alu(Op.AND, x, y), B.alu(Op.OR, x, y), B.alu(Op.XOR, x, y), B.alu(Op.NOT, x),
            B.alu(Op.WHERE, c, x, y), B.alu(Op.MAX, x, y), B.alu(Op.CMPLT, x, y)]
    check(program("bits", [x, y, c], outs), [rand(dt.np, shape, r), rand(dt.np, shape, r), rand(np.bool_, shape, r)])


@pytest.mark.parametrize("src", T.ALL, ids=str)
def test_cast_matrix(src):
    r = rng()
    shape = (4, 11)
    x = B.buffer(src, shape, 0, "x")
    outs = [B.cast(x, d) for d in T.ALL if d != src]
    a = rand(src.np, shape, r, -3, 60)
    if src.kind == "uint" or src.is_float:
        a = np.abs(a) if src.kind == "uint" else a
    if src.is_float:
        a.flat[:4] = np.array([0.0, -0.0, 2.75, -2.75]).astype(src.np)
    got = check(program("cast", [x], outs), [a], rtol=1e-2, atol=1e-2)
    assert len(got) == len(T.ALL) - 1


def test_float_special_casts_and_compares():
    x = B.buffer(T.f32, (6,), 0, "x")
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -0.5, 3.9], np.float32)
    y = B.buffer(T.f32, (6,), 1, "y")
    b = np.array([np.nan, 1.0, np.nan, -0.0, 2.0, 3.9], np.float32)
    outs = [B.cast(x, T.bool_), B.cast(x, T.i32), B.alu(Op.CMPNE, x, y), B.alu(Op.CMPLT, x, y),
            B.alu(Op.MAX, x, y)]
    check(program("spc", [x, y], outs), [a, b])


@pytest.mark.parametrize("dt", [T.f32, T.f64, T.f16, T.i32, T.i8, T.u16, T.bool_, T.bf16], ids=str)
def test_reductions(dt):
    r = rng()
    shape = (3, 5, 7, 9)
    x = B.buffer(dt, shape, 0, "x")
    outs = []
    for op in ("add", "mul", "max"):
        if dt.is_bool and op != "max":
            continue
        for axes in [(3,), (0,), (1, 2), (0, 3), (0, 1, 2, 3), (2,)]:
            outs.append(B.reduce(x, op, axes))
    a = rand(dt.np, shape, r, -2, 2) if op != "mul" else rand(dt.np, shape, r)
    if dt.is_float:
        a = r.uniform(0.8, 1.2, shape).astype(dt.np) * np.sign(r.uniform(-1, 1, shape)).astype(dt.np)
    tol = {"f16": dict(rtol=2e-2, atol=2e-2), "bf16": dict(rtol=5e-2, atol=5e-2)}.get(dt.name, dict(rtol=1e-4))
    check(program("red", [x], outs), [a], **tol)


def test_views():
    r = rng()
    x = B.buffer(T.f32, (6, 10), 0, "x")
    perm = B.permute(x, (1, 0))
    sl = B.step(B.shrink(x, ((1, 6), (2, 9))), (2, 3))
    padded = B.pad(x, ((1, 2), (0, 3)))
    fl = B.flip(x, (0, 1))
    ex = B.expand(B.reshape(B.shrink(x, ((0, 6), (0, 1))), (6, 1)), (6, 10))
    comp = B.alu(Op.EXP2, B.alu(Op.MUL, x, x))
    merged = B.reshape(B.permute(comp, (1, 0)), (60,))  # reshape of a non-contiguous computed view
    split = B.reshape(B.pad(merged, ((2, 2),)), (8, 8))
    fl_pad = B.flip(B.pad(B.alu(Op.SIN, x), ((2, 0), (1, 1))), (1,))
    outs = [perm, sl, padded, fl, ex, merged, split, fl_pad, B.alu(Op.ADD, B.permute(comp, (1, 0)), perm)]
    check(program("views", [x], outs), [rand(np.float32, (6, 10), r, -2, 2)])


def test_index_rand_const():
    n = D.sym("N")
    idx = B.index((n, 5), 0, T.i32)
    idx1 = B.index((n, 5), 1, T.i64)
    bits = B.rand_bits((n, 5), 1234567890123)
    c = B.const(n, T.f32, (n, 5))
    x = B.buffer(T.f32, (n, 5), 0, "x")
    out = B.alu(Op.ADD, x, c)
    p = program("irc", [x], [idx, idx1, bits, out], dims=["N"])
    for nv in (1, 7, 33):
        check(p, [np.ones((nv, 5), np.float32)], env={"N": nv}, exact=True)


def test_symbolic_dims_one_kernel_all_sizes():
    n, m = D.sym("N"), D.sym("M")
    x = B.buffer(T.f32, (n, m), 0, "x")
    y = B.buffer(T.f32, (m,), 1, "y")
    s = B.reduce(B.alu(Op.MUL, x, y), "add", (1,))
    t = B.alu(Op.ADD, B.permute(x, (1, 0)), B.reshape(B.step(B.flip(y, (0,)), (1,)), (m, 1)))
    pd = B.pad(B.shrink(x, ((0, n), (1, m))), ((1, 1), (0, 2)))
    p = program("sym", [x, y], [s, t, pd], dims=["N", "M"])
    r = rng()
    for nv, mv in ((1, 2), (3, 17), (64, 5), (0, 4)):
        check(p, [rand(np.float32, (nv, mv), r), rand(np.float32, (mv,), r)], env={"N": nv, "M": mv}, rtol=1e-5)


def test_defines_fix_a_dim():
    n = D.sym("N")
    x = B.buffer(T.f64, (n, 3), 0, "x")
    p = program("def", [x], [B.reduce(x, "add", (0,))], dims=[], defines={"N": 4})
    check(p, [np.arange(12, dtype=np.float64).reshape(4, 3)])


def _softmax(x, axis):
    m = B.reduce(x, "max", (axis,))
    e = B.alu(Op.EXP2, B.alu(Op.MUL, B.alu(Op.ADD, x, B.alu(Op.NEG, m)), B.const(1.4426950408889634, x.dtype)))
    return B.alu(Op.MUL, e, B.alu(Op.RECIP, B.reduce(e, "add", (axis,))))


def _layernorm(x, n):
    mean = B.alu(Op.MUL, B.reduce(x, "add", (1,)), B.const(1.0 / n, x.dtype))
    d = B.alu(Op.ADD, x, B.alu(Op.NEG, mean))
    var = B.alu(Op.MUL, B.reduce(B.alu(Op.MUL, d, d), "add", (1,)), B.const(1.0 / n, x.dtype))
    rstd = B.alu(Op.RECIP, B.alu(Op.SQRT, B.alu(Op.ADD, var, B.const(1e-5, x.dtype))))
    return B.alu(Op.MUL, d, rstd)


def test_softmax_layernorm_fuse():
    from caten.lower.trial import check_group
    from caten.schedule import schedule
    r = rng()
    x = B.buffer(T.f32, (9, 33), 0, "x")
    for out in (_softmax(x, 1), _layernorm(x, 33)):
        p = program("fused", [x], [out])
        assert len(schedule(p, check=check_group).kernels) <= 2
        check(p, [rand(np.float32, (9, 33), r)], rtol=1e-5, atol=1e-6)
    p = program("colsoftmax", [x], [_softmax(x, 0)])
    check(p, [rand(np.float32, (9, 33), r)], rtol=1e-5, atol=1e-6)


def test_matmul_and_chains():
    r = rng()
    for (m, k, n) in ((5, 7, 3), (33, 65, 17), (64, 64, 64)):
        a = B.buffer(T.f32, (m, k), 0, "a")
        b = B.buffer(T.f32, (k, n), 1, "b")
        prod = B.alu(Op.MUL, B.reshape(a, (m, k, 1)), B.reshape(b, (1, k, n)))
        mm = B.reshape(B.reduce(prod, "add", (1,)), (m, n))
        relu = B.alu(Op.MAX, mm, B.const(0.0, T.f32))
        p = program("mm", [a, b], [mm, relu])
        check(p, [rand(np.float32, (m, k), r), rand(np.float32, (k, n), r)], rtol=1e-4, atol=1e-4)


def test_outputs_alias_inputs_and_each_other():
    x = B.buffer(T.i16, (4,), 0, "x")
    y = B.alu(Op.ADD, x, x)
    p = program("alias", [x], [x, y, y, B.const(3, T.i16)])
    check(p, [np.arange(4, dtype=np.int16)])


def test_scalar_and_empty():
    x = B.buffer(T.f32, (), 0, "x")
    y = B.alu(Op.MUL, x, x)
    check(program("scalar", [x], [y, B.reduce(B.reshape(x, (1,)), "add", (0,))]), [np.array(3.0, np.float32)])
    e = B.buffer(T.f32, (0, 4), 0, "e")
    check(program("empty", [e], [B.reduce(e, "add", (0,)), B.reduce(e, "max", (0, 1)), B.alu(Op.NEG, e)]),
          [np.zeros((0, 4), np.float32)])
