"""Kernels split over threads besides GEMMs (caten.schedule.split), on the llvm runtime at
several thread counts:

- a kernel's first outer loop in chunks per thread (softmax, layernorm, elementwise), each
  thread with its own slice of the kernel-local scratch (softmax's row of exponentials);
- a full float sum's blocks per thread, the wide partials added in thread order;
- and, beside them, GEMMs of a linear layer over [B, T, C] and its transposed form (token mixing).

Sizes straddle the split threshold (the same compiled code runs small calls on one thread) and
hypothesis draws more; every result is checked against numpy in f64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten import pipeline
from caten.plugin import Options
from caten.schedule.split import SPLIT_MIN

SRC = """
(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))
(composite ln ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N])) (layernorm X G B :axis -1 :eps 1e-5))
(composite ew ((A{f32}[N]) (B{f32}[N]) -> (Y{f32}[N])) (* (exp (- A B)) 0.5))
(composite total ((X{f32}[N]) -> (Y{f32}[1])) (sum X :axis 0 :keepdims true))
(composite total2 ((X{f32}[R, N]) -> (Y{f32})) (sum X))
(composite lin ((X{f32}[B, T, C]) (W{f32}[C, H]) (b{f32}[H]) -> (Y{f32}[B, T, H])) (relu (linear X W b)))
(composite tok ((X{f32}[B, T, C]) (W{f32}[T, H]) -> (Y{f32}[B, C, H])) (matmul (permute X [0 2 1]) W))
"""

THREADS = (1, 2, 3)


@pytest.fixture(scope="module")
def mods():
    """One compiled module per thread count (symbolic dims: every size runs the same code)."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for n in THREADS:
            mp.setenv("CATEN_NUM_THREADS", str(n))
            out[n] = caten.loads(SRC, runtime="llvm", use_cache=False)
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(x, g, b):
    x = x.astype(np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def _rows(mods, r: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((r, n), dtype=np.float32) * 3
    g, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    sms, lns = [], []
    for t in THREADS:
        sms.append(mods[t].sm(x).copy())
        lns.append(mods[t].ln(x, g, b).copy())
        np.testing.assert_allclose(sms[-1], _softmax(x), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(lns[-1], _layernorm(x, g, b), rtol=1e-4, atol=1e-4)
    for s, ln in zip(sms[1:], lns[1:]):  # each row is computed by one thread in the same order
        np.testing.assert_array_equal(s, sms[0])
        np.testing.assert_array_equal(ln, lns[0])


@pytest.mark.parametrize("r, n", [(1, 7), (3, 5000), (2, SPLIT_MIN // 2 + 1), (37, 4097), (1000, 300), (4096, 33)])
def test_row_kernels_split_over_threads(mods, r, n):
    _rows(mods, r, n, r * 7 + n)


@settings(max_examples=25, deadline=None)
@given(r=st.integers(1, 600), n=st.integers(1, 700), seed=st.integers(0, 2**16))
def test_row_kernels_fuzz(mods, r, n, seed):
    _rows(mods, r, n, seed)


@pytest.mark.parametrize("n", [0, 1, 2047, 2048, SPLIT_MIN - 1, SPLIT_MIN, SPLIT_MIN + 1, (1 << 20) + 5, 3 * 2048 + 1])
def test_elementwise_and_sum_split_over_threads(mods, n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    want = np.exp(a.astype(np.float64) - b) * 0.5
    for t in THREADS:
        np.testing.assert_allclose(mods[t].ew(a, b), want, rtol=2e-6)
        got = mods[t].total(a)
        assert got.shape == (1,)
        # blocks of 2048 in f32, their sums in f64: the error stays near numpy's pairwise sum's
        assert abs(float(got[0]) - a.astype(np.float64).sum()) <= 1e-6 * np.abs(a).sum() + 1e-30


def test_sum_of_ones_is_exact_at_every_thread_count(mods):
    x = np.ones((1 << 24) + 3, np.float32)  # past f32's 2**24: one f32 accumulator would stop growing
    for t in THREADS:
        assert mods[t].total(x)[0] == np.float32((1 << 24) + 3)
        assert mods[t].total2(x.reshape(1, -1)) == np.float32((1 << 24) + 3)


@settings(max_examples=25, deadline=None)
@given(r=st.integers(1, 70), n=st.integers(1, 9000), seed=st.integers(0, 2**16))
def test_full_sum_fuzz(mods, r, n, seed):
    x = np.random.default_rng(seed).random((r, n), dtype=np.float32)
    want = x.astype(np.float64).sum()
    for t in THREADS:
        assert abs(float(mods[t].total2(x)) - want) <= 1e-6 * want


def _linear_ref(x, w, b):
    return np.maximum(x.astype(np.float64) @ w + b, 0)


@pytest.mark.parametrize("shape", [(8, 196, 512, 300), (3, 1, 7, 13), (2, 127, 33, 1025), (5, 13, 1, 17)])
def test_batched_linear_layers(mods, shape):
    bsz, t, c, h = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((bsz, t, c), dtype=np.float32)
    w = rng.standard_normal((c, h), dtype=np.float32)
    b = rng.standard_normal(h, dtype=np.float32)
    wt = rng.standard_normal((t, h), dtype=np.float32)
    tol = 2e-4 * np.sqrt(max(c, t))
    for n in THREADS:
        np.testing.assert_allclose(mods[n].lin(x, w, b), _linear_ref(x, w, b), rtol=2e-4, atol=tol)
        np.testing.assert_allclose(mods[n].tok(x, wt), np.einsum("btc,th->bch", x.astype(np.float64), wt),
                                   rtol=2e-4, atol=tol)


def test_plans_and_schedules_say_so(mods):
    from caten.runtimes.llvm_rt import RUNTIME

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATEN_NUM_THREADS", "2")
        sm = pipeline.emit(RUNTIME, mods[2].sm.program({})[0], "schedule", Options())[".txt"]
        tot = pipeline.emit(RUNTIME, mods[2].total.program({})[0], "schedule", Options())[".txt"]
        src = pipeline.emit(RUNTIME, mods[2].total.program({})[0], "source", Options())[".ll"]
    assert "outer [R] on up to 2 threads" in sm, sm
    assert "thread partials in" in tot and "call i32 @pthread_create(" in src, tot


def test_pool_through_idle_exits_and_concurrent_callers(mods):
    """The module's worker pool: workers exit after 1-2 s without work and start again; callers
    on several Python threads share it (one loop at a time; the others run their iterations
    themselves). Every result must stay exact."""
    import concurrent.futures
    import time

    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 1000), dtype=np.float32)
    v = rng.random((1 << 20) + 7, dtype=np.float32)
    want_sm, want_total = mods[2].sm(x).copy(), mods[2].total(v).copy()
    for pause in (0.0, 0.25, 0.0, 2.5):  # (the last one outlasts the workers)
        time.sleep(pause)
        for _ in range(5):
            np.testing.assert_array_equal(mods[2].sm(x), want_sm)
            np.testing.assert_array_equal(mods[2].total(v), want_total)

    def work(i: int) -> bool:
        ok = True
        for _ in range(20):
            ok &= bool(np.array_equal(mods[2].sm(x), want_sm)) and bool(np.array_equal(mods[2].total(v), want_total))
        return ok

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))
