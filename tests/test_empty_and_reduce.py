"""Empty tensors and reductions (LANGUAGE.md 5.1): every dim may be 0; matmul over an empty
inner dim gives zeros, over an empty outer dim an empty result; sum/prod of an empty axis give
0/1, max/min/argmax fail at the call. Checked against numpy on numpy, llvm and c, with static
and dynamic dims, and through the C ABI of the AOT libraries."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import caten
from caten import pipeline
from caten.plugin import Options
from caten.plugin import get as get_runtime

RUNTIMES = ["numpy", "llvm", "c"]
SHAPES = [(8, 8, 0), (0, 8, 8), (8, 0, 8), (3, 0, 0), (0, 0, 5), (5, 0, 1), (1, 0, 7)]

MM = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (return (matmul A B)))"
BMM = "(composite bmm ((A{f64}[G, M, K]) (B{f64}[G, K, N]) -> (C{f64}[G, M, N])) (return (matmul A B)))"


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def static_mm(m: int, k: int, n: int) -> str:
    return f"(composite mm ((A{{f32}}[{m}, {k}]) (B{{f32}}[{k}, {n}]) -> (C{{f32}}[{m}, {n}])) (return (matmul A B)))"


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("mkn", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_empty_dims_static(rt, mkn):
    m, k, n = mkn
    mod = caten.loads(static_mm(m, k, n), runtime=rt)
    a, b = ones(m, k), ones(k, n)
    got = mod.mm(a, b)
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_array_equal(got, a @ b)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_matmul_empty_dims_dynamic(rt):
    """One compiled kernel for every size; a K = 0 call after real ones (and a large output,
    which the output pool recycles) must give zeros, not what the buffer held."""
    mod = caten.loads(MM, runtime=rt)
    rng = np.random.default_rng(1)
    for m, k, n in [(8, 8, 8), (8, 0, 8), (600, 7, 600), (600, 0, 600), *SHAPES, (6, 0, 40)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        got = mod.mm(a, b)
        assert got.shape == (m, n)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_batched_matmul_empty_inner_dim(rt):
    mod = caten.loads(BMM, runtime=rt)
    for g, m, k, n in [(2, 3, 4, 5), (2, 3, 0, 5), (0, 3, 4, 5), (3, 7, 0, 9)]:
        got = mod.bmm(np.full((g, m, k), 2.0), np.full((g, k, n), 3.0))
        np.testing.assert_array_equal(got, np.full((g, m, n), 6.0 * k))


REDUCE = """
(composite s ((A{f32}[M, K]) -> (C{f32}[M])) (return (sum A :axis 1)))
(composite p ((A{f32}[M, K]) -> (C{f32}[M])) (return (prod A :axis 1)))
(composite sall ((A{f64}[M, K]) -> (C{f64}[])) (return (sum A)))
(composite si ((A{i32}[M, K]) -> (C{i32}[M])) (return (sum A :axis 1)))
(composite mx ((A{f32}[M, K]) -> (C{f32}[M])) (return (max A :axis 1)))
(composite mn ((A{i32}[M, K]) -> (C{i32}[M])) (return (min A :axis 1)))
(composite am ((A{f32}[M, K]) -> (C{i64}[M])) (return (argmax A :axis 1)))
(composite any ((A{bool}[M, K]) -> (C{bool}[M])) (return (max A :axis 1)))
"""


@pytest.mark.parametrize("rt", RUNTIMES)
def test_reductions_over_empty_axes(rt):
    mod = caten.loads(REDUCE, runtime=rt)
    for shape in [(3, 0), (0, 3), (0, 0)]:
        a = np.full(shape, 2.0, np.float32)
        np.testing.assert_array_equal(mod.s(a), a.sum(axis=1))
        np.testing.assert_array_equal(mod.p(a), a.prod(axis=1))
        np.testing.assert_array_equal(mod.sall(a.astype(np.float64)), a.sum())
        np.testing.assert_array_equal(mod.si(a.astype(np.int32)), a.astype(np.int32).sum(axis=1))
        np.testing.assert_array_equal(mod.any(a.astype(bool)), a.astype(bool).any(axis=1))
    # no identity: an error at the call when the reduced axis is empty, as numpy's ValueError
    for f, dt in [(mod.mx, np.float32), (mod.mn, np.int32), (mod.am, np.float32)]:
        for shape in [(3, 0), (0, 0)]:
            with pytest.raises(ValueError):
                np.max(np.ones(shape), axis=1)
            with pytest.raises(caten.Error, match="empty axis"):
                f(np.ones(shape, dt))
        assert f(np.ones((0, 3), dt)).shape == (0,)  # reducing a non-empty axis of nothing is fine
    np.testing.assert_array_equal(mod.am(np.array([[1, 5, 5], [7, 0, 1]], np.float32)), [1, 0])


@pytest.mark.parametrize("rt", RUNTIMES)
def test_sum_over_a_literal_empty_axis_next_to_a_symbolic_one(rt):
    """Fuzz seed 1002684: the blocked-sum planner divided by a literal 0 extent (a
    ZeroDivisionError at compile time on llvm and c)."""
    src = """(composite fz ((X0{f32}[0, 1, N]) (X1{f32}[1, N]) -> (Y0{f32}[]))
  (setf v0 (reshape X0 [(* 0 1) (dim X0 2)]))
  (setf v3 (sum v0 :axis 1))
  (setf v4 (+ (permute X1 [1 0]) v3))
  (return (sum v4 :axis [0 1])))"""
    mod = caten.loads(src, runtime=rt, use_cache=False)
    for n in (1, 3):
        x0, x1 = np.zeros((0, 1, n), np.float32), np.arange(n, dtype=np.float32).reshape(1, n) + 1
        want = (x1.T + x0.reshape(0, n).sum(axis=1)).sum()
        np.testing.assert_array_equal(mod.fz(x0, x1), want)


def _library(rt: str, src: str, tmp_path, name: str):
    prog = caten.loads(src, runtime=rt).__getattr__(name).elaborate({})
    art = pipeline.emit(get_runtime(rt), prog, "lib", Options())
    path = tmp_path / f"lib{name}_{rt}.so"
    path.write_bytes(art[".so"])
    return ctypes.CDLL(str(path))


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_aot_library_empty_inner_dim(rt, tmp_path):
    """C ABI: `mm(A, B, C, M, K, N)` with K = 0 returns 0 and writes zeros over what C held."""
    lib = _library(rt, MM, tmp_path, "mm")
    for m, k, n in [(4, 3, 5), (4, 0, 5), (13, 0, 70), (0, 3, 5)]:
        a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
        c = np.full((m, n), 7.0, np.float32)
        args = [_ptr(a), _ptr(b), _ptr(c)] + [ctypes.c_int64(v) for v in (m, k, n)]
        assert lib.mm(*args) == 0
        np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_aot_library_max_over_empty_axis_fails(rt, tmp_path):
    lib = _library(rt, REDUCE, tmp_path, "mx")
    a = np.ones((3, 4), np.float32)
    c = np.zeros(3, np.float32)
    assert lib.mx(_ptr(a), _ptr(c), ctypes.c_int64(3), ctypes.c_int64(4)) == 0
    np.testing.assert_array_equal(c, [1, 1, 1])
    e = np.ones((3, 0), np.float32)
    assert lib.mx(_ptr(e), _ptr(c), ctypes.c_int64(3), ctypes.c_int64(0)) != 0


# ---------------------------------------------------------------------------------------------
# Accuracy of long float sums (LANGUAGE.md 5.1: no worse than numpy's pairwise summation)

ACC = """
(composite bsum ((X{f32}[]) -> (Y{f32}[])) (return (sum (expand X [600000000]))))
(composite bmean ((X{f32}[]) -> (Y{f32}[])) (return (mean (expand X [600000000]))))
(composite s ((X{f32}[N]) -> (Y{f32}[])) (return (sum X)))
(composite m ((X{f32}[N]) -> (Y{f32}[])) (return (mean X)))
(composite v ((X{f32}[N]) -> (Y{f32}[])) (return (mean (* (- X (mean X)) (- X (mean X))))))
(composite rows ((X{f32}[M, N]) -> (Y{f32}[M])) (return (sum X :axis 1)))
(composite s64 ((X{f64}[N]) -> (Y{f64}[])) (return (sum X)))
"""


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_sum_of_600m_broadcast_ones_is_exact(rt):
    """A serial f32 accumulator (or a few vector partials) stops growing at 2^24 per
    partial: 600M ones gave 536870912. Blocks of partials closed into a wide accumulator
    give every integer up to far beyond that exactly (a broadcast scalar: no memory on the
    compiled runtimes; the numpy oracle would materialize 2.4 GB, and is numpy's sum anyway)."""
    mod = caten.loads(ACC, runtime=rt)
    one = np.array(1.0, np.float32)
    assert float(mod.bsum(one)) == 600_000_000.0
    assert float(mod.bmean(one)) == 1.0


def _rel(got, want) -> float:
    return abs(float(got) - float(want)) / abs(float(want))


@pytest.mark.parametrize("rt", RUNTIMES + ["opencl"])
def test_long_sum_mean_var_error_like_numpy(rt):
    """2^23 uniforms (numpy's pairwise sum errs ~1e-8 relative; one accumulator, or 32
    partials, ~1e-6): sum, mean and a variance within 1e-7 (under 2 f32 rounding steps)."""
    if rt == "opencl" and not get_runtime("opencl").available()[0]:
        pytest.skip("no OpenCL device")
    mod = caten.loads(ACC, runtime=rt)
    x = np.random.default_rng(7).random(1 << 23, dtype=np.float32)
    x64 = x.astype(np.float64)
    assert _rel(x.sum(), x64.sum()) < 1e-7  # the anchor: numpy's own error is this small
    assert _rel(mod.s(x), x64.sum()) < 1e-7
    assert _rel(mod.m(x), x64.mean()) < 1e-7
    assert _rel(mod.v(x), x64.var()) < 1e-6
    # sums of partly cancelling values: the bound is on sum|x| (eps * sum|x| * a few)
    y = (x - np.float32(0.5)) * np.float32(1000)
    assert abs(float(mod.s(y)) - y.astype(np.float64).sum()) < 2e-7 * np.abs(y.astype(np.float64)).sum()


@pytest.mark.parametrize("rt", RUNTIMES)
def test_blocked_row_sums_match_numpy(rt):
    """Rows cut into blocks, with partial last blocks and rows shorter than a block."""
    mod = caten.loads(ACC, runtime=rt)
    rng = np.random.default_rng(3)
    for shape in [(3, 5000), (2, 2049), (4, 2048), (5, 1), (1, 4097 * 3), (2, 0)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(mod.rows(x), x.astype(np.float64).sum(axis=1), rtol=1e-6, atol=1e-4)
    z = rng.standard_normal(300_001)
    np.testing.assert_allclose(mod.s64(z), z.sum(), rtol=1e-13)


def test_blocking_is_in_the_loop_ir():
    """Every renderer gets it: the lowered kernel of an f32 sum over a dynamic axis closes
    blocks into an f64 accumulator; a sum that fits in one block is left as it was."""
    from caten import loopir as L
    from caten.lower.kernel_lowerer import lower
    from caten.lower.trial import check_group
    from caten.schedule import schedule

    def accs(src: str) -> list[str]:
        prog = caten.loads(src, runtime="numpy").f.elaborate({})
        found: list[str] = []

        def walk(stmts):
            for s in stmts:
                if isinstance(s, L.Acc):
                    found.append(s.dtype.name)
                walk(getattr(s, "body", []))
        for k in lower(schedule(prog, check=check_group)):
            walk(k.body)
        return found

    assert sorted(accs("(composite f ((X{f32}[N]) -> (Y{f32}[])) (return (sum X)))")) == ["f32", "f64"]
    assert accs("(composite f ((X{f32}[4, 500]) -> (Y{f32}[4])) (return (sum X :axis 1)))") == ["f32"]
    assert accs("(composite f ((X{i32}[N]) -> (Y{i32}[])) (return (sum X)))") == ["i32"]


# ---------------------------------------------------------------------------------------------
# Exact-division dims (`where K = (/ N 2)`): compiled runtimes compute K from N, and an odd N
# fails at the call (caten.Error; C ABI: non-zero), as a where constraint does

HALVE = """
(composite halve ((X{f32}[N]) -> (Y{f32}[K]) where K = (/ N 2))
  (return (sum (reshape X [K 2]) :axis 1)))
(composite pairs ((X{f32}[N]) -> (Y{f32}[K, 2]) where K = (/ N 2))
  (return (* 2.0 (reshape X [K 2]))))
(composite thirds ((X{f32}[M, N]) -> (Y{f32}[M, K]) where K = (/ N 3))
  (return (max (reshape X [M K 3]) :axis 2)))
"""


@pytest.mark.parametrize("rt", RUNTIMES + ["opencl"])
def test_exact_division_dims(rt):
    if rt == "opencl" and not get_runtime("opencl").available()[0]:
        pytest.skip("no OpenCL device")
    mod = caten.loads(HALVE, runtime=rt)
    for n in (6, 2, 0, 4100):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(mod.halve(x), x.reshape(-1, 2).sum(1))
        np.testing.assert_array_equal(mod.pairs(x), 2 * x.reshape(-1, 2))
    x = np.arange(4 * 9, dtype=np.float32).reshape(4, 9)
    np.testing.assert_array_equal(mod.thirds(x), x.reshape(4, 3, 3).max(2))
    for n in (7, 1):
        with pytest.raises(caten.Error, match="divisible by 2"):
            mod.halve(np.ones(n, np.float32))
        with pytest.raises(caten.Error, match="divisible by 2"):
            mod.pairs(np.ones(n, np.float32))
    with pytest.raises(caten.Error, match="divisible by 3"):
        mod.thirds(np.ones((4, 10), np.float32))


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_aot_library_exact_division(rt, tmp_path):
    lib = _library(rt, HALVE, tmp_path, "halve")
    for n in (6, 4100):
        x = np.arange(n, dtype=np.float32)
        y = np.full(n // 2, -1.0, np.float32)
        assert lib.halve(_ptr(x), _ptr(y), ctypes.c_int64(n)) == 0
        np.testing.assert_array_equal(y, x.reshape(-1, 2).sum(1))
    x = np.ones(7, np.float32)
    y = np.full(3, -1.0, np.float32)
    assert lib.halve(_ptr(x), _ptr(y), ctypes.c_int64(7)) != 0
    np.testing.assert_array_equal(y, -1.0)  # nothing ran
