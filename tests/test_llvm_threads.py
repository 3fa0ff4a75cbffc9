"""GEMMs split over threads (llvm runtime): rows divided in multiples of the micro-tile over
the worker threads of the generated code's pool (caten.render.llvm.pool), each thread with its
own packed panels. Checked against numpy at several thread counts, including uneven splits and
a C program linked against the AOT library."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import caten
from caten import pipeline
from caten.plugin import Options

MM = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))"
BATCHED = """
(composite bmm ((X{f32}[Q, M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[Q, M, N]))
  (relu (+ (matmul X W) b)))
"""


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.fixture
def threads(monkeypatch):
    def set_threads(n: int) -> None:
        monkeypatch.setenv("CATEN_NUM_THREADS", str(n))
    return set_threads


@pytest.mark.parametrize("nthreads", [1, 2, 3, 5])
def test_matmul_split_over_threads(threads, nthreads):
    threads(nthreads)
    mod = caten.loads(MM, runtime="llvm", use_cache=False)
    rng = np.random.default_rng(nthreads)
    # large enough for the threaded path, with ragged edges in every blocked dimension; then
    # one small call through the same compiled code (it stays on one thread)
    for m, k, n in [(301, 257, 190), (1000, 70, 97), (7, 5, 3)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(mod.mm(a, b), _ref(a, b), rtol=2e-4, atol=2e-4 * np.sqrt(k))


def test_threaded_code_and_schedule(threads):
    threads(3)
    from caten.runtimes.llvm_rt import RUNTIME

    prog = caten.loads(MM, runtime="llvm", use_cache=False).mm.program({})[0]
    ir = pipeline.emit(RUNTIME, prog, "source", Options())[".ll"]
    assert "call i32 @pthread_create(" in ir and "call void @caten_pool_run(" in ir
    sched = pipeline.emit(RUNTIME, prog, "schedule", Options())[".txt"]
    assert "GEMMs on up to 3 threads" in sched
    threads(1)
    ir1 = pipeline.emit(RUNTIME, prog, "source", Options())[".ll"]
    assert "pthread_create" not in ir1


def test_batched_matmul_with_epilogue(threads):
    threads(2)
    mod = caten.loads(BATCHED, runtime="llvm", use_cache=False)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 200, 64), dtype=np.float32)
    w = rng.standard_normal((64, 150), dtype=np.float32)
    b = rng.standard_normal(150, dtype=np.float32)
    want = np.maximum(_ref(x, w) + b, 0)
    np.testing.assert_allclose(mod.bmm(x, w, b), want, rtol=2e-4, atol=2e-3)


def test_bad_thread_count(threads):
    threads("many")
    with pytest.raises(caten.Error, match="CATEN_NUM_THREADS"):
        caten.loads(MM, runtime="llvm", use_cache=False).mm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_threaded_library_from_c(threads, tmp_path):
    threads(2)
    from caten.runtimes.llvm_rt import RUNTIME

    prog = caten.loads(MM, runtime="llvm", use_cache=False).mm.program({})[0]
    art = pipeline.emit(RUNTIME, prog, "lib", Options())
    (tmp_path / "libmm.so").write_bytes(art[".so"])
    (tmp_path / "mm.h").write_text(art[".h"])
    m, k, n = 250, 130, 190
    (tmp_path / "main.c").write_text(rf"""
#include <stdio.h>
#include <stdlib.h>
#include "mm.h"
int main(void) {{
    float *a = malloc(sizeof(float) * {m * k}), *b = malloc(sizeof(float) * {k * n});
    float *c = malloc(sizeof(float) * {m * n});
    for (int i = 0; i < {m * k}; i++) a[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < {k * n}; i++) b[i] = (float)((i * 5) % 11) - 5.0f;
    if (mm(a, b, c, {m}, {k}, {n}) != 0) return 2;
    fwrite(c, sizeof(float), {m * n}, stdout);
    return 0;
}}
""")
    exe = tmp_path / "main"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(tmp_path / "main.c"), f"-L{tmp_path}", "-lmm",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.float32).reshape(m, n)
    a = ((np.arange(m * k) * 7) % 13 - 6).astype(np.float32).reshape(m, k)
    b = ((np.arange(k * n) * 5) % 11 - 5).astype(np.float32).reshape(k, n)
    np.testing.assert_array_equal(got, a.astype(np.float64) @ b)  # small integers: exact in f32


@pytest.mark.parametrize("runtime", ["llvm", "c", "opencl"])
def test_concurrent_calls_from_python_threads(threads, runtime):
    # llvm and c: every calling thread has its own arena (packed panels, temporaries) and
    # output pool; opencl: calls on one executable take turns
    import concurrent.futures

    from caten import plugin as R

    ok, why = R.get(runtime).available()
    if not ok:
        pytest.skip(why)
    threads(1)
    src = "(composite f ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (softmax (matmul A B) :axis -1))"
    mod = caten.loads(src, runtime=runtime, use_cache=False)
    rng = np.random.default_rng(7)
    cases = [(rng.standard_normal((384, 256), dtype=np.float32), rng.standard_normal((256, 320), dtype=np.float32))
             for _ in range(4)]

    def ref(a, b):
        z = a.astype(np.float64) @ b
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def work(i: int) -> float:
        a, b = cases[i]
        want = ref(a, b)
        return max(float(np.abs(mod.f(a, b) - want).max()) for _ in range(8))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        errs = list(pool.map(work, range(4)))
    assert max(errs) < 1e-4, errs  # f32 rounding of the logits; a shared arena gives O(1) errors


def test_results_do_not_depend_on_the_thread_count(threads):
    # each output element is summed by one thread in the same k order: bit-identical results
    rng = np.random.default_rng(11)
    a = rng.standard_normal((333, 300), dtype=np.float32)
    b = rng.standard_normal((300, 200), dtype=np.float32)
    outs = []
    for n in (1, 2, 3):
        threads(n)
        outs.append(caten.loads(MM, runtime="llvm", use_cache=False).mm(a, b).copy())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


SHORT_M = """
(composite wide ((A{f32}[5, 3000]) (B{f32}[3000, 400]) -> (C{f32}[5, 400])) (matmul A B))
(composite shared ((W{f32}[7, 3000]) (X{f32}[9, 3000, 40]) -> (Y{f32}[9, 7, 40])) (matmul W X))
"""


@pytest.mark.parametrize("nthreads", [1, 2, 3, 5])
def test_short_m_splits_columns_or_batches(threads, nthreads):
    """Too few rows to share (a weight gradient's output channels, a convolution's): the
    threads take whole column panels, or the batch loop when the weights are batch-free."""
    threads(nthreads)
    mod = caten.loads(SHORT_M, runtime="llvm", use_cache=False)
    rng = np.random.default_rng(nthreads)
    a, b = rng.standard_normal((5, 3000), dtype=np.float32), rng.standard_normal((3000, 400), dtype=np.float32)
    np.testing.assert_allclose(mod.wide(a, b), _ref(a, b), rtol=2e-4, atol=2e-4 * np.sqrt(3000))
    w, x = rng.standard_normal((7, 3000), dtype=np.float32), rng.standard_normal((9, 3000, 40), dtype=np.float32)
    np.testing.assert_allclose(mod.shared(w, x), np.einsum("mk,qkn->qmn", w.astype(np.float64), x),
                               rtol=2e-4, atol=2e-4 * np.sqrt(3000))
    if nthreads > 1:
        from caten.runtimes.llvm_rt import RUNTIME

        for name in ("wide", "shared"):
            prog = getattr(mod, name).program({})[0]
            assert "call i32 @pthread_create(" in pipeline.emit(RUNTIME, prog, "source", Options())[".ll"], name
