"""GEMMs too small to split by rows or columns still use every thread. Kernels whose GEMMs are
each too small to share (caten.schedule.split.small_gemms) split their outer loop over the
threads instead; each thread runs whole iterations, GEMMs included, in a packed-panel slot of its
own. And a GEMM with few rows and columns but a long K (a weight gradient: K merges the batch and
the tokens) shares its K blocks (GemmPlan.splits_k): each thread sums its own into a partial
output, and the partials are added after.

The claims: such a kernel is split (a digits classifier's per-image GEMMs ran on one core); the
values are numpy's at every batch size, with two threads; and -- the race the first version had
-- two GEMMs of one kernel with different packing sizes, which the threads run at the same time,
never share a slot (a property test over shapes; the classifier's logits were off by 0.3)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten

ROOT = Path(__file__).resolve().parent.parent

TWO = """
(composite f ((X{f32}[B, M, K]) (W1{f32}[K, N]) (W2{f32}[N, Q]) -> (Y{f32}[B, M, Q]))
  (matmul (relu (matmul X W1)) W2))
"""


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")


def _ref(x, w1, w2):
    return np.maximum(x.astype(np.float64) @ w1, 0) @ w2


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_two_gemms_of_different_sizes(rt):
    src = TWO.replace("[B, M, K]", "[B, 64, 9]").replace("[K, N]", "[9, 32]").replace("[N, Q]", "[32, 64]") \
        .replace("[B, M, Q]", "[B, 64, 64]")
    m = caten.loads(src, runtime=rt)
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((9, 32), dtype=np.float32), rng.standard_normal((32, 64), dtype=np.float32)
    for b in (1, 2, 37, 64):
        x = rng.standard_normal((b, 64, 9), dtype=np.float32)
        for _ in range(3):  # a race shows as a different answer from one call to the next
            np.testing.assert_allclose(m.f(x, w1, w2), _ref(x, w1, w2), rtol=1e-4, atol=1e-4)


def test_the_kernel_is_split(tmp_path):
    from click.testing import CliRunner

    from caten.cli.main import cli

    src = TWO.replace("[B, M, K]", "[B, 64, 9]").replace("[K, N]", "[9, 32]").replace("[N, Q]", "[32, 64]") \
        .replace("[B, M, Q]", "[B, 64, 64]")
    f = tmp_path / "two.lisp"
    f.write_text(src)
    r = CliRunner().invoke(cli, ["-r", "llvm", str(f), "--emit", "schedule"])
    assert r.exit_code == 0, r.output
    kernels = re.findall(r"^kernel \S+: outer \[([^\]]*)\]( on up to \d+ threads)?", r.output, re.M)
    gemm_kernel = [k for k in kernels if k[0] == "B"]
    assert gemm_kernel and gemm_kernel[0][1], r.output[:600]


@settings(max_examples=10, deadline=None)
@given(dims=st.tuples(st.integers(1, 9), st.integers(1, 70), st.integers(1, 70), st.integers(1, 70),
                      st.integers(1, 70)))
def test_property_small_gemm_kernels_match_numpy(dims):
    b, m_, k, n, q = dims
    src = TWO.replace("[B, M, K]", f"[B, {m_}, {k}]").replace("[K, N]", f"[{k}, {n}]") \
        .replace("[N, Q]", f"[{n}, {q}]").replace("[B, M, Q]", f"[B, {m_}, {q}]")
    rng = np.random.default_rng(b * 7 + m_ + k + n + q)
    x = rng.standard_normal((b, m_, k), dtype=np.float32)
    w1, w2 = rng.standard_normal((k, n), dtype=np.float32), rng.standard_normal((n, q), dtype=np.float32)
    got = caten.loads(src, runtime="llvm").f(x, w1, w2)
    np.testing.assert_allclose(got, _ref(x, w1, w2), rtol=1e-4, atol=1e-3)


def test_digits_classifier_logits():
    """The example's classifier: embedding, mixer block, head; two threads against numpy."""
    sys.path.insert(0, str(ROOT / "examples"))
    import train_mixer as tm

    theta = tm.init()
    src = (ROOT / "examples" / "train_mixer.lisp").read_text().replace(
        '(import "mlp_mixer.lisp")', (ROOT / "examples" / "mlp_mixer.lisp").read_text()) + """
(composite logits ((X{f32}[B, T, P]) (Theta{f32}[NP]) -> (Y{f32}[B, 10]))
  (mixer-classifier X Theta 10))
"""
    d = {"T": tm.T, "P": tm.P, "K": tm.K, "NP": theta.size}
    x = np.random.default_rng(3).random((37, tm.T, tm.P), dtype=np.float32)
    ref = caten.loads(src, runtime="numpy", defines=d).logits(x, theta)
    m = caten.loads(src, runtime="llvm", defines=d)
    for _ in range(3):
        np.testing.assert_allclose(m.logits(x, theta), ref, rtol=1e-4, atol=1e-4)


DW = """
(composite dw ((H{f32}[B, T, M]) (G{f32}[B, T, N]) -> (W{f32}[M, N]))
  (sum (* (reshape H [B T M 1]) (reshape G [B T 1 N])) :axis [0 1]))
"""


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_split_k_weight_gradient(rt):
    """A 32x48 dW over B x 64 examples: every batch size (0: the output keeps its zeros; 1: K
    shorter than one thread's blocks) against numpy, three calls each (a race would differ)."""
    src = DW.replace("T, M]", "64, 32]").replace("T, N]", "64, 48]").replace("[M, N]", "[32, 48]") \
        .replace("[B T M 1]", "[B 64 32 1]").replace("[B T 1 N]", "[B 64 1 48]")
    m = caten.loads(src, runtime=rt)
    rng = np.random.default_rng(1)
    for b in (0, 1, 3, 64, 200):
        h, g = rng.standard_normal((b, 64, 32), dtype=np.float32), rng.standard_normal((b, 64, 48), dtype=np.float32)
        ref = np.einsum("bti,btj->ij", h.astype(np.float64), g)
        for _ in range(3):
            np.testing.assert_allclose(m.dw(h, g), ref, rtol=1e-4, atol=1e-3)


def test_split_k_is_planned(tmp_path):
    """The dW's schedule shows three scratch buffers: A's and B's packed panels and the partials."""
    from click.testing import CliRunner

    from caten.cli.main import cli

    f = tmp_path / "dw.lisp"
    f.write_text(DW)
    r = CliRunner().invoke(cli, ["-r", "llvm", str(f), "--emit", "schedule"])
    assert r.exit_code == 0, r.output
    assert re.search(r"packed via t\d+ t\d+ t\d+ REDUCE f32 \[1 1 M N\]", r.output) is None  # (M, N symbolic)
    f.write_text(DW.replace("T, M]", "T, 32]").replace("T, N]", "T, 48]").replace("[M, N]", "[32, 48]")
                 .replace("[B T M 1]", "[B T 32 1]").replace("[B T 1 N]", "[B T 1 48]"))
    r = CliRunner().invoke(cli, ["-r", "llvm", str(f), "--emit", "schedule"])
    assert r.exit_code == 0, r.output
    assert re.search(r"packed via t\d+ t\d+ t\d+ REDUCE f32 \[1 1 32 48\]", r.output), r.output[:800]


@settings(max_examples=10, deadline=None)
@given(dims=st.tuples(st.integers(0, 90), st.integers(1, 40), st.integers(1, 40), st.integers(1, 60)))
def test_property_split_k_matches_numpy(dims):
    b, m_, n, t = dims
    src = DW.replace("T, M]", f"{t}, {m_}]").replace("T, N]", f"{t}, {n}]").replace("[M, N]", f"[{m_}, {n}]") \
        .replace("[B T M 1]", f"[B {t} {m_} 1]").replace("[B T 1 N]", f"[B {t} 1 {n}]")
    rng = np.random.default_rng(b + m_ * 3 + n * 5 + t * 7)
    h, g = rng.standard_normal((b, t, m_), dtype=np.float32), rng.standard_normal((b, t, n), dtype=np.float32)
    ref = np.einsum("bti,btj->ij", h.astype(np.float64), g)
    np.testing.assert_allclose(caten.loads(src, runtime="llvm").dw(h, g), ref, rtol=1e-4, atol=2e-3)
