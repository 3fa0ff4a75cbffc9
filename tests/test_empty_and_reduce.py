"""Empty tensors and reductions (LANGUAGE.md 5.1): every dim may be 0; matmul over an empty
inner dim gives zeros, over an empty outer dim an empty result; sum/prod of an empty axis give
0/1, max/min/argmax fail at the call. Checked against numpy on numpy, llvm and c, with static
and dynamic dims, and through the C ABI of the AOT libraries."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import caten
from caten.run.runtime import CompileOptions
from caten.run.runtime import get as get_runtime

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


def _library(rt: str, src: str, tmp_path, name: str):
    prog = caten.loads(src, runtime=rt).__getattr__(name).elaborate({})
    art = get_runtime(rt).emit(prog, "lib", CompileOptions())
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
