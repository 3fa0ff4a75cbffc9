"""Vector-times-matrix products summed in the order their matrix is stored
(caten.schedule.dots.outward) and without packing a one-row GEMM's b (caten.schedule.plan).

`(matmul x W)` of one row x and W [K N] summed K innermost walks W a row apart for every
output (13.5 ms for 768 x 3072, 30x slower than reading W once). The claims: the schedule sums
with the columns innermost and no packed panels; values equal numpy's on every runtime for odd,
tiny, empty and batched shapes and for a matrix stored transposed (left alone)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten.cli.main import cli

SRC = """
(composite vm ((X{T}[B 1 K]) (W{T}[K N]) -> (Y{T}[B 1 N])) (matmul X W))
(composite vmt ((X{T}[1 K]) (W{T}[N K]) -> (Y{T}[1 N])) (matmul X (transpose W)))
"""
CHAIN = """
(composite chain ((X{f32}[1 K]) (W{f32}[K K]) (V{f32}[K K]) -> (Y{f32}[1 K]) (Z{f32}[1 K]))
  (setf h (matmul X W))
  (setf y (matmul (tanh h) V))
  (return y (matmul (+ y h) W)))
"""


def _schedule(tmp_path: Path, *defs: str, entry: str = "vm") -> str:
    p = tmp_path / "vm.lisp"
    p.write_text(CHAIN if entry == "chain" else SRC)
    r = CliRunner().invoke(cli, ["-r", "llvm", str(p), "-e", entry, "--emit", "schedule"] + [f"-D{d}" for d in defs])
    assert r.exit_code == 0, r.output
    return r.output


def test_the_sum_runs_along_the_stored_columns(tmp_path):
    out = _schedule(tmp_path, "T=f32", "B=1", "K=768", "N=3072")
    assert re.search(r"REDUCE f32 \[1 1 1 3072\]", out), out  # the summed K moved out, the columns innermost
    assert "packed" not in out, out


def test_a_transposed_matrix_keeps_its_dot_products(tmp_path):
    out = _schedule(tmp_path, "T=f32", "K=768", "N=300", entry="vmt")
    assert re.search(r"REDUCE f32 \[1 300 1\]", out), out


def test_a_chain_of_products_is_computed_once(tmp_path):
    """Each product feeds the next: a rewritten one is rebuilt on its rewritten operands (a
    rebuild from the old ones kept the old cone alive as well: every product twice, and a
    decoder's in-place cache update written to a temporary, refused as a compiler bug)."""
    out = _schedule(tmp_path, "K=64", entry="chain")
    assert len(re.findall(r"REDUCE f32", out)) == 3, out
    mod = caten.loads(CHAIN, defines={"K": 64}, runtime="llvm")
    rng = np.random.default_rng(1)
    x, w, v = (rng.standard_normal(s).astype(np.float32) / 8 for s in ((1, 64), (64, 64), (64, 64)))
    h = x @ w
    y = np.tanh(h) @ v
    got = mod.chain(x, w, v)
    np.testing.assert_allclose(got[0], y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], (y + h) @ w, rtol=1e-5, atol=1e-6)


def test_a_two_layer_decoder_keeps_its_caches_in_place():
    """The decoding benchmark's model (two layers, small): its cache updates stay in place."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_decode import model

    m = model(2, 16, width=64, heads=2, vocab=50)
    ref = model(2, 16, width=64, heads=2, vocab=50)
    cm = caten.from_torch(m, (torch.tensor([[0]]), torch.tensor([0])))
    tok = torch.tensor([[0]])
    for p in range(4):
        got = cm(tok.numpy(), np.array([p]))
        with torch.no_grad():
            want = ref(tok, torch.tensor([p]))
        np.testing.assert_array_equal(np.asarray(got).reshape(1, 1), want.numpy())
        tok = want


@pytest.mark.ci_slice(3)
@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("dt", ["f32", "f64", "i32"])
def test_values_match_numpy(runtime, dt):
    rng = np.random.default_rng(0)
    npd = {"f32": np.float32, "f64": np.float64, "i32": np.int32}[dt]
    for b, k, n in [(1, 768, 300), (3, 17, 13), (1, 1, 8), (2, 5, 5), (1, 0, 9), (0, 4, 16), (1, 33, 1)]:
        mod = caten.loads(SRC, defines={"T": dt, "B": b, "K": k, "N": n}, runtime=runtime)
        x = rng.integers(-9, 9, (b, 1, k)).astype(npd)
        w = rng.integers(-9, 9, (k, n)).astype(npd)
        want = (x.astype(np.float64) @ w.astype(np.float64)).astype(npd)
        np.testing.assert_array_equal(mod.vm(x, w), want, err_msg=str((b, k, n)))
