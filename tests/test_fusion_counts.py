"""Fusion claims as kernel counts: softmax is one kernel, layernorm one, the MLP-Mixer block of
examples/ one, and so on. Each count is what `caten -r llvm --emit schedule` prints for the
program, on both kinds of the project's machines (`CATEN_CPU=znver3`, AVX2; `CATEN_CPU=rocketlake`,
AVX-512), so a change to the scheduler that fuses less fails here by name.

A claim whose count is above what the program obviously needs says so in `ideal` (the count a
scheduler fusing it fully would reach): those are known weaknesses, written down so that an
improvement shows up here too (lower `kernels` to the new count when it does).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from caten.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent

SRC = """
(composite softmax-rows ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))
(composite softmax-cols ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis 0))
(composite log-softmax-rows ((X{f32}[R, N]) -> (Y{f32}[R, N])) (log-softmax X :axis -1))
(composite layernorm-rows ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N]))
  (layernorm X G B :axis -1 :eps 1e-5))
(composite rmsnorm-rows ((X{f32}[R, N]) (G{f32}[N]) -> (Y{f32}[R, N])) (rmsnorm X G :axis -1))
(composite elementwise ((A{f32}[N]) (B{f32}[N]) (C{f32}[N]) -> (Y{f32}[N])) (* (exp (+ (* A B) C)) 0.5))
(composite total ((A{f32}[N]) -> (Y{f32}[])) (sum A))
(composite row-mean ((A{f32}[R, N]) -> (Y{f32}[R])) (mean A :axis 1))
(composite matmul-2d ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
(composite matmul-bias-relu ((A{f32}[M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (C{f32}[M, N])) (relu (linear A W b)))
(composite batched-matmul-bias-relu ((A{f32}[B, M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (C{f32}[B, M, N]))
  (relu (linear A W b)))
(composite matmul-softmax ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (softmax (matmul A B) :axis -1))
(composite conv-relu ((X{f32}[N, C, H, W]) (K{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, (- H 2), (- W 2)]))
  (relu (conv2d X K)))
(composite conv-relu-static ((X{f32}[8, 64, 56, 56]) (K{f32}[64, 64, 3, 3]) -> (Y{f32}[8, 64, 54, 54]))
  (relu (conv2d X K)))
(composite conv-pad-relu ((X{f32}[N, C, H, W]) (K{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, H, W]))
  (relu (conv2d X K :padding 1)))
(composite conv-bias-pad-relu ((X{f32}[N, C, H, W]) (K{f32}[O, C, 3, 3]) (b{f32}[O]) -> (Y{f32}[N, O, H, W]))
  (relu (conv2d X K b :padding 1)))
(composite max-pool ((X{f32}[N, C, H, W]) -> (Y{f32}[N, C, (/ H 2), (/ W 2)])) (max-pool2d X :kernel 2))
(composite cross-entropy-mean ((L{f32}[B, K]) (Y{f32}[B, K]) -> (Z{f32}[])) (cross-entropy L Y))
(composite attention-core ((Q{f32}[B, H, T, E]) (K{f32}[B, H, T, E]) (V{f32}[B, H, T, E]) -> (O{f32}[B, H, T, E]))
  (matmul (softmax (/ (matmul Q (transpose K)) 8.0) :axis -1) V))
"""


@dataclass(frozen=True)
class Claim:
    entry: str
    kernels: int
    file: str = ""  # a file of examples/, else the composite is in SRC
    ideal: int | None = None  # the count full fusion would give, where it is lower
    why: str = ""  # what keeps the count above `ideal`


CLAIMS = [
    Claim("softmax-rows", 1),
    Claim("log-softmax-rows", 1),
    Claim("layernorm-rows", 1),
    Claim("rmsnorm-rows", 1),
    Claim("elementwise", 1),
    Claim("total", 1),
    Claim("row-mean", 1),
    Claim("matmul-2d", 1),
    Claim("matmul-bias-relu", 1),
    Claim("mlp2", 2, "examples/mlp.lisp"),
    Claim("batched-matmul-bias-relu", 1),
    Claim("conv-pad-relu", 1),
    Claim("conv-bias-pad-relu", 1),
    Claim("conv-relu-static", 1),
    Claim("max-pool", 1),
    Claim("attention-core", 1),
    Claim("softmax-rows", 1, "examples/softmax.lisp"),
    Claim("shifted-exp", 1, "examples/softmax.lisp"),
    Claim("mixer-block", 1, "examples/mlp_mixer.lisp"),
    Claim("token-mixing", 1, "examples/mlp_mixer.lisp"),
    Claim("channel-mixing", 1, "examples/mlp_mixer.lisp"),
    # known weaknesses
    Claim("matmul-softmax", 2, ideal=1, why="a 2-D GEMM (outer []) is not fused with the row softmax after it"),
    Claim("conv-relu", 2, ideal=1,
          why="with symbolic H, W and no padding the relu is not fused (static sizes or :padding 1 fuse)"),
    Claim("softmax-cols", 4, ideal=1, why="reductions over axis 0 run as whole-tensor kernels, one per stage"),
    Claim("cross-entropy-mean", 3, ideal=2, why="the final division by B is a scalar kernel of its own"),
    Claim("causal-attend", 3, "examples/attention.lisp", ideal=1,
          why="sqrt(E) of a dim is a scalar kernel of its own, which splits QK^T from the softmax"),
    Claim("causal-attention", 3, "examples/attention.lisp", ideal=1, why="the same sqrt(E) scalar kernel"),
    Claim("causal-mha", 5, "examples/attention.lisp", ideal=1,
          why="the sqrt(E) scalar kernel, and the sum over heads (axis 1) then the residual add, one kernel each"),
]


@pytest.fixture(scope="module")
def src_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("fusion") / "claims.lisp"
    p.write_text(SRC)
    return p


def kernel_count(file: Path, entry: str, cpu: str) -> tuple[int, str]:
    """The kernel count `CATEN_CPU=CPU caten -r llvm FILE -e ENTRY --emit schedule` prints. (In this
    process: the runner restores CATEN_CPU afterwards, where `--cpu` would set it for good.)"""
    res = CliRunner().invoke(cli, ["-r", "llvm", str(file), "-e", entry, "--emit", "schedule"], env={"CATEN_CPU": cpu})
    assert res.exit_code == 0, res.output
    m = re.match(rf"schedule {re.escape(entry)}: (\d+) kernel\(s\)", res.output)
    assert m, res.output
    return int(m.group(1)), res.output


@pytest.mark.parametrize("cpu", ["znver3", "rocketlake"])
@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{Path(c.file).stem or 'src'}:{c.entry}")
def test_fusion_claim(src_file, claim, cpu):
    file = ROOT / claim.file if claim.file else src_file
    n, dump = kernel_count(file, claim.entry, cpu)
    if n > claim.kernels:
        pytest.fail(f"{claim.entry} takes {n} kernels, the claim is {claim.kernels}: fusion regressed\n{dump}")
    if n < claim.kernels:
        pytest.fail(f"{claim.entry} takes {n} kernels, fewer than the claim {claim.kernels}: fusion improved; "
                    f"lower `kernels` (and `ideal`) in tests/test_fusion_counts.py\n{dump}")


def test_the_target_does_not_leak():
    """Counting for rocketlake leaves this process compiling for the host (or its own CATEN_CPU)."""
    before = os.environ.get("CATEN_CPU")
    kernel_count(ROOT / "examples" / "softmax.lisp", "softmax-rows", "rocketlake")
    assert os.environ.get("CATEN_CPU") == before


def test_claims_name_programs_that_exist_once(src_file):
    """Every composite of SRC has a claim, and a weakness always says what it would take."""
    names = re.findall(r"^\(composite (\S+)", SRC, re.M)
    claimed = [c.entry for c in CLAIMS if not c.file]
    assert sorted(names) == sorted(claimed)
    for c in CLAIMS:
        assert (c.ideal is None) == (c.why == ""), c
        assert c.ideal is None or c.ideal < c.kernels, c
