"""A kernel with GEMMs whose outer (batch) loop is symbolic chooses at run time how its threads
share it (caten.schedule.split.outer_either): when the batch shares out evenly (a multiple of the
thread count, or 8 images a thread or more) each thread runs whole images, GEMMs included, with
no join inside one; otherwise the GEMMs split their rows and the stages their first loops. The
operands no image changes (the weights) are packed once, in one parallel loop before the
threads start. An activation stage that alone reads its GEMM's output writes over it in place
(caten.schedule._overwritable), but never a buffer that a later stage still reads.

The claims, on the llvm and C runtimes with two threads: numpy's values at every batch size on
both sides of the choice, in repeated calls (a race between the threads' slots shows as a
different answer); the lowered kernel has both splits and the packing before them; the in-place
write happens exactly where it may."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten
from caten import pipeline, target
from caten.lower.text import dump

MLP = """
(composite f ((X{f32}[B, M, K]) (W1{f32}[K, N]) (b1{f32}[N]) (W2{f32}[N, K]) -> (Y{f32}[B, M, K]))
  (+ X (matmul (gelu (+ (matmul X W1) b1)) W2)))
"""
# the GEMM's output h is read again after the activation: it must keep its own buffer
REUSED = """
(composite g ((X{f32}[B, M, K]) (W1{f32}[K, N]) -> (Y{f32}[B, M, N]))
  (let ((h (matmul X W1)))
    (* (gelu h) (+ h 1))))
"""


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")


def _gelu(x):
    from math import erf, sqrt
    return 0.5 * x * (1 + np.vectorize(erf)(x / sqrt(2)))


def _data(b, m, k, n, seed=0):
    r = np.random.default_rng(seed)
    f = lambda *s: r.standard_normal(s, dtype=np.float32)  # noqa: E731
    return f(b, m, k), f(k, n) / np.float32(k ** 0.5), f(n) * np.float32(0.1), f(n, k) / np.float32(n ** 0.5)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_values_at_every_batch_size(rt):
    mod = caten.loads(MLP, runtime=rt)
    for b in (1, 2, 3, 4, 8, 17):
        x, w1, b1, w2 = _data(b, 70, 96, 130, seed=b)
        x64 = x.astype(np.float64)
        want = x64 + _gelu(x64 @ w1 + b1) @ w2
        first = mod.f(x, w1, b1, w2)
        np.testing.assert_allclose(first, want, rtol=2e-4, atol=2e-4)
        for _ in range(2):
            np.testing.assert_array_equal(mod.f(x, w1, b1, w2), first)


def _lowered(src: str, name: str) -> str:
    prog = caten.loads(src, runtime="llvm").__getattr__(name).elaborate({})
    lw = pipeline.lower_program(prog, name, target.host(), 2)
    return "\n".join(dump(k) for k in lw.kernels)


def test_the_kernel_has_both_splits_and_packs_first():
    text = _lowered(MLP, "f")
    lines = text.splitlines()
    outer = next(i for i, ln in enumerate(lines) if re.search(r"for tid_\d+ in .*\(parallel", ln))
    pack = next(i for i, ln in enumerate(lines) if re.search(r"for ptid_\d+ in .*\(parallel", ln))
    assert pack < outer  # the weights are packed before the threads take their images
    inner = [ln for ln in lines[outer + 1:] if "(parallel" in ln]
    assert inner and all("(where" in ln for ln in inner)  # each inner split: on, or off while the outer runs
    assert "wonce" not in text  # nothing is packed inside an image's iteration


def test_activation_writes_over_its_gemm_output_only_when_nothing_reads_it_later():
    sched = caten.loads(MLP, runtime="llvm").f
    from caten.schedule import schedule
    prog = sched.elaborate({})
    s = schedule(prog, None, threads=2)
    stages = [st for k in s.kernels for st in k.stages]
    gemm = [st for st in stages if st.mode == "tiled"]
    act = [st for st in stages if st.kind == "store" and st.node.shape == gemm[0].node.shape[:-1]]
    assert act and act[0].buffer == gemm[0].buffer
    s2 = schedule(caten.loads(REUSED, runtime="llvm").g.elaborate({}), None, threads=2)
    st2 = [st for k in s2.kernels for st in k.stages]
    bufs = [st.buffer for st in st2 if st.buffer]
    assert len(bufs) == len(set(bufs))
    x, w1, _, _ = _data(3, 40, 24, 72)
    h = x.astype(np.float64) @ w1
    got = caten.loads(REUSED, runtime="llvm").g(x, w1)
    np.testing.assert_allclose(got, _gelu(h) * (h + 1), rtol=2e-4, atol=2e-4)


def test_elementwise_chains_keep_their_buffers():
    """A chain of elementwise stages in one kernel (pow's f64 special cases) never writes over
    an earlier stage's buffer: a later stage's load of it would be shared with an earlier one
    (the first version gave pow(-2, 3) = -0.5)."""
    src = "(composite p ((A{f64}[N]) (B{f64}[N]) -> (C{f64}[N])) (pow A B))"
    from caten.schedule import schedule
    s = schedule(caten.loads(src, runtime="llvm").p.elaborate({}), None, threads=2)
    bufs = [st.buffer for k in s.kernels for st in k.stages if st.buffer]
    assert len(bufs) == len(set(bufs))
    x = np.array([-2.0, -0.5, -3.0, 2.5], np.float64)
    y = np.array([3.0, 5.0, -3.0, 0.5], np.float64)
    np.testing.assert_allclose(caten.loads(src, runtime="llvm").p(x, y), np.power(x, y), rtol=1e-15)
