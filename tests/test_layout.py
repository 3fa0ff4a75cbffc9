"""Contractions computed in the layout they are read in (caten.schedule.layout.orient).

A GEMM whose result is read only through a permutation (the Mixer's token MLP transposes its
output back) runs transposed, so its tiles store where the value lands. The claims: the
schedule shows the contraction in the reader's order; the values stay those of numpy on every
compiled runtime, for static and symbolic dims; a result with a second reader, or read through
a view that is not a pure permutation, is left as it is; and a property test over random
permutations, batch shapes and elementwise epilogues that compares against numpy."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent

SRC = """
(composite tmm ((H{f32}[B, C, K]) (W{f32}[K, T]) (b{f32}[T]) (X{f32}[B, T, C]) -> (Y{f32}[B, T, C]))
  (+ X (transpose (+ (matmul H W) b))))
(composite two ((H{f32}[C, K]) (W{f32}[K, T]) -> (Y{f32}[T, C]) (Z{f32}[C, T]))
  (setf r (matmul H W))
  (return (transpose r) (* r 2.0)))
(composite flipped ((H{f32}[C, K]) (W{f32}[K, T]) -> (Y{f32}[T, C]))
  (flip (transpose (matmul H W)) :axis 0))
"""


def _reduces(file: Path, entry: str, *defs: str) -> list[str]:
    args = ["-r", "llvm", str(file), "-e", entry, "--emit", "schedule"] + [f"-D{d}" for d in defs]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    return re.findall(r"REDUCE f32 \[([^\]]*)\]", r.output)


@pytest.fixture(scope="module")
def src_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("layout") / "layout.lisp"
    p.write_text(SRC)
    return p


def test_the_mixer_token_gemm_runs_in_its_output_order():
    """Its second GEMM's result [B C T] is read transposed: it is computed as [B T C]."""
    red = _reduces(ROOT / "examples" / "mlp_mixer.lisp", "token-mixing")
    assert red == ["B C DT 1", "B T C 1"], red


def test_a_second_reader_or_a_flip_keeps_the_layout(src_file):
    """r has two readers (transposing it would compute it twice); a flip is not a permutation of
    the contraction's rows and columns that a GEMM can take (the view is left to read it)."""
    assert _reduces(src_file, "two") == ["C T 1"]
    assert _reduces(src_file, "flipped") == ["C T 1"]


def _tmm_ref(h, w, b, x):
    return x + np.swapaxes(h.astype(np.float64) @ w + b, 1, 2)


@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("shape", [(2, 37, 13, 29), (3, 64, 70, 33), (1, 5, 1, 7)])
def test_values(src_file, rt, shape):
    B, C, K, T = shape
    rng = np.random.default_rng(sum(shape))
    h, w = rng.standard_normal((B, C, K), dtype=np.float32), rng.standard_normal((K, T), dtype=np.float32)
    b, x = rng.standard_normal(T, dtype=np.float32), rng.standard_normal((B, T, C), dtype=np.float32)
    m = caten.load(str(src_file), runtime=rt)
    np.testing.assert_allclose(m.tmm(h, w, b, x), _tmm_ref(h, w, b, x), rtol=1e-4, atol=1e-4)
    y, z = m.two(h[0], w)
    r = h[0].astype(np.float64) @ w
    np.testing.assert_allclose(y, r.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(z, 2 * r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m.flipped(h[0], w), r.T[::-1], rtol=1e-4, atol=1e-4)


def test_static_dims_and_threads(src_file, monkeypatch):
    """Static dims (the planner sizes every block from them) and two threads splitting the
    columns of the transposed GEMM (each packs only its own share of B)."""
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")
    B, C, K, T = 3, 200, 96, 61
    src = (f"(composite tmm ((H{{f32}}[{B}, {C}, {K}]) (W{{f32}}[{K}, {T}]) (b{{f32}}[{T}]) "
           f"(X{{f32}}[{B}, {T}, {C}]) -> (Y{{f32}}[{B}, {T}, {C}]))\n  (+ X (transpose (+ (matmul H W) b))))")
    rng = np.random.default_rng(5)
    h, w = rng.standard_normal((B, C, K), dtype=np.float32), rng.standard_normal((K, T), dtype=np.float32)
    b, x = rng.standard_normal(T, dtype=np.float32), rng.standard_normal((B, T, C), dtype=np.float32)
    got = caten.loads(src, runtime="llvm").tmm(h, w, b, x)
    np.testing.assert_allclose(got, _tmm_ref(h, w, b, x), rtol=1e-4, atol=1e-4)


EPILOGUES = ["(+ r 1.5)", "(* (exp (* r 0.01)) r)", "(relu r)"]


@settings(max_examples=12, deadline=None)
@given(perm=st.permutations([0, 1, 2]), dims=st.tuples(*[st.integers(1, 40)] * 4),
       epi=st.sampled_from(EPILOGUES), rt=st.sampled_from(["llvm", "c"]))
def test_permuted_contractions_match_numpy(perm, dims, epi, rt):
    """Any permutation of a batched contraction's result, through an elementwise epilogue, reads
    the values numpy computes (whether or not the GEMM is reoriented for it)."""
    B, M, K, N = dims
    out = ", ".join("BMN"[p] for p in perm)
    src = (f"(composite f ((A{{f32}}[B, M, K]) (W{{f32}}[K, N]) -> (Y{{f32}}[{out}]))\n"
           f"  (setf r (matmul A W))\n  (permute {epi} [{' '.join(map(str, perm))}]))")
    rng = np.random.default_rng(B * 1000 + M * 100 + K * 10 + N)
    a, w = rng.standard_normal((B, M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    r = a.astype(np.float64) @ w
    ref = {"(+ r 1.5)": r + 1.5, "(* (exp (* r 0.01)) r)": np.exp(r * 0.01) * r,
           "(relu r)": np.maximum(r, 0.0)}[epi].transpose(perm)
    got = caten.loads(src, runtime=rt).f(a, w)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_the_rewrite_computes_nothing_twice():
    """Every contraction of the Mixer's training step is in the rewritten graph once: a rewrite
    built from old nodes that another rewrite replaced once kept the old forward alive, and the
    backward kernel recomputed six of its GEMMs (fwd+bwd 104 -> 160 ms)."""
    from caten.ir.graph import toposort
    from caten.ir.ops import Op
    from caten.schedule.layout import orient

    mixer = (ROOT / "examples" / "mlp_mixer.lisp").read_text()
    src = mixer + """
(composite loss ((X{f32}[B, T, C]) (g1{f32}[C]) (e1{f32}[C]) (W1{f32}[T, DT]) (b1{f32}[DT])
                 (W2{f32}[DT, T]) (b2{f32}[T]) (g2{f32}[C]) (e2{f32}[C]) (W3{f32}[C, DC]) (b3{f32}[DC])
                 (W4{f32}[DC, C]) (b4{f32}[C]) -> (L{f32}[]))
  (sum (* (mixer-block X g1 e1 W1 b1 W2 b2 g2 e2 W3 b3 W4 b4) 0.5)))
(composite step ((X{f32}[B, T, C]) (g1{f32}[C]) (e1{f32}[C]) (W1{f32}[T, DT]) (b1{f32}[DT])
                 (W2{f32}[DT, T]) (b2{f32}[T]) (g2{f32}[C]) (e2{f32}[C]) (W3{f32}[C, DC]) (b3{f32}[DC])
                 (W4{f32}[DC, C]) (b4{f32}[C]) -> (dX{f32}[B, T, C]) (dW2{f32}[DT, T]))
  (setf g (grad loss X g1 e1 W1 b1 W2 b2 g2 e2 W3 b3 W4 b4 :wrt [X W2]))
  (return (nth g 0) (nth g 1)))
"""
    prog = caten.loads(src, runtime="llvm", defines={"B": 2, "T": 6, "C": 8, "DT": 5, "DC": 16}).step.elaborate({})
    outs = list(prog.nodes)
    before = [n for n in toposort(outs) if n.op is Op.REDUCE]
    after = [n for n in toposort(orient(outs)) if n.op is Op.REDUCE]
    assert len(after) == len(before), (len(before), len(after))
    assert {n.shape for n in after} != {n.shape for n in before}  # (and something was reoriented)
