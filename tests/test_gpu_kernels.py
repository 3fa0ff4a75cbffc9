"""Kernels shaped for a GPU (`Capabilities.gpu`): GEMMs as thread-block tiles
(caten.render.cstyle.gemm: matmuls, batched and transposed ones, convolutions as implicit GEMMs,
fused epilogues) on odd shapes, full sums over many work-groups, row reductions whose blocks a
work-group shares, transcendentals recomputed rather than stored, a GEMM a kernel of its own;
against numpy/torch in float64. They run here on PoCL (OpenCL on the CPU) mapped as for a GPU
(`CATEN_OPENCL_GEMM=1`, work-groups of 256 sharing inner loops: the same renderer, barriers and
work-groups), and on the CUDA runtime where a GPU is present (marked gpu)."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.plugin import Options

MM = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))"
LIN = "(composite lin ((X{f32}[M, K]) (W{f32}[K, N]) (B{f32}[N]) -> (Y{f32}[M, N])) (relu (+ (matmul X W) B)))"
BMM = "(composite bmm ((A{f32}[B, M, K]) (X{f32}[B, K, N]) -> (C{f32}[B, M, N])) (matmul A X))"
MT = "(composite mt ((A{f32}[K, M]) (X{f32}[N, K]) -> (C{f32}[M, N])) (matmul (transpose A) (transpose X)))"
CONV = ("(composite conv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, H, W])) "
        "(conv2d X Wt :padding 1))")
SHAPES = [(1, 1, 1), (7, 13, 127), (127, 1025, 13), (1000, 7, 1023), (1025, 127, 129), (13, 1, 1000), (130, 300, 1)]


def _runtime(name: str, monkeypatch) -> str:
    from test_backends import _usable

    _usable(name)  # (skips when it is not)
    if name == "opencl":  # mapped as for a GPU
        for k, v in {"GEMM": "1", "COOP": "1", "LOCAL": "256", "CHUNK": "1"}.items():
            monkeypatch.setenv(f"CATEN_OPENCL_{k}", v)
    return name


@pytest.fixture(params=["opencl", pytest.param("cuda", marks=pytest.mark.gpu)])
def rt(request, monkeypatch) -> str:
    return _runtime(request.param, monkeypatch)


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _source(rt: str, src: str) -> str:
    m = caten.loads(src, runtime=rt, use_cache=False)
    prog, _ = getattr(m, m.names[0]).program({})
    out = pipeline.emit(R.get(rt), prog, "source", Options(runtime=rt))
    return next(v for k, v in out.items() if k in (".cl", ".cu"))


def _tiled(rt: str, src: str) -> bool:
    """Whether the device source of `src` holds the GEMM tile (its shared operand tiles)."""
    return "f32 sx[" in _source(rt, src)


@pytest.mark.parametrize("mkn", SHAPES)
def test_matmul_with_fused_epilogue(rt, mkn):
    M, K, N = mkn
    rng = np.random.default_rng(M * 7 + K * 3 + N)
    x, w, b = (rng.standard_normal(s, dtype=np.float32) for s in [(M, K), (K, N), (N,)])
    got = caten.loads(LIN, runtime=rt, use_cache=False).lin(x, w, b)
    assert _rel(got, np.maximum(x.astype(np.float64) @ w + b, 0)) < 1e-5


def test_batched_transposed_and_conv(rt):
    torch = pytest.importorskip("torch")

    rng = np.random.default_rng(3)
    for B, M, K, N in [(3, 7, 13, 127), (2, 129, 64, 5)]:
        a, x = rng.standard_normal((B, M, K), dtype=np.float32), rng.standard_normal((B, K, N), dtype=np.float32)
        assert _rel(caten.loads(BMM, runtime=rt, use_cache=False).bmm(a, x), a.astype(np.float64) @ x) < 1e-5
    a, x = rng.standard_normal((33, 65), dtype=np.float32), rng.standard_normal((130, 33), dtype=np.float32)
    assert _rel(caten.loads(MT, runtime=rt, use_cache=False).mt(a, x), a.T.astype(np.float64) @ x.T) < 1e-5
    conv = caten.loads(CONV, runtime=rt, use_cache=False)
    for N, C, H, W, CO in [(1, 1, 1, 1, 1), (2, 3, 7, 13, 5), (1, 16, 9, 9, 130)]:
        x, w = rng.standard_normal((N, C, H, W), dtype=np.float32), rng.standard_normal((CO, C, 3, 3), dtype=np.float32)
        ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=1)
        assert _rel(conv.conv(x, w), ref.numpy()) < 1e-5
    for src in (MM, LIN, BMM, MT, CONV):
        assert _tiled(rt, src), src


MM64 = "(composite mm ((A{f64}[M, K]) (B{f64}[K, N]) -> (C{f64}[M, N])) (matmul A B))"


def test_f64_matmul_tiles(rt):
    """f64 GEMMs are tiles too (f64 shared tiles and accumulators), against a long-double sum."""
    assert "f64 sx[" in _source(rt, MM64)
    m = caten.loads(MM64, runtime=rt, use_cache=False)
    rng = np.random.default_rng(9)
    for M, K, N in [(1, 1, 1), (7, 13, 127), (130, 1000, 65)]:
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
        ref = np.einsum("ik,kj->ij", a.astype(np.longdouble), b.astype(np.longdouble)).astype(np.float64)
        assert _rel(m.mm(a, b), ref) < 1e-13


SUM = "(composite total ((X{f32}[N]) -> (Y{f32}[1])) (sum X :axis 0 :keepdims true))"
SM = "(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))"
LN = "(composite ln ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N])) (layernorm X G B :axis -1 :eps 1e-5))"


def test_full_sum_over_work_groups(rt):
    """A full sum is two launches: each work-group's partial of its blocks, then their total."""
    src = _source(rt, SUM)
    assert src.count("total__k0_0") >= 1 and src.count("total__k0_1") >= 1
    m = caten.loads(SUM, runtime=rt, use_cache=False)
    rng = np.random.default_rng(5)
    for n in (1, 1000, 2048 * 1024 + 77, 3_000_001):
        x = rng.random(n, dtype=np.float32)
        ref = x.astype(np.float64).sum()
        assert abs(float(m.total(x)[0]) - ref) <= 1e-6 * ref, n


def test_row_reductions(rt):
    """Softmax (its exp computed twice, no scratch row) and layernorm, rows of one to three
    2048-element blocks and odd lengths."""
    assert "b_t0" not in _source(rt, SM)  # no scratch buffer
    sm, ln = (caten.loads(s, runtime=rt, use_cache=False) for s in (SM, LN))
    rng = np.random.default_rng(6)
    for r, n in [(1, 1), (3, 7), (5, 2049), (2, 4099), (33, 129)]:
        x = rng.standard_normal((r, n), dtype=np.float32) * 4
        e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        assert _rel(sm.sm(x), e / e.sum(1, keepdims=True)) < 1e-5
        g, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
        x64 = x.astype(np.float64)
        mu, var = x64.mean(1, keepdims=True), x64.var(1, keepdims=True)
        assert _rel(ln.ln(x, g, b), (x64 - mu) / np.sqrt(var + 1e-5) * g + b) < 1e-4


def test_mixer_block_gemms_each_a_kernel(rt):
    """The Mixer block's four GEMMs are four tiled kernels of their own, and the block is right."""
    from test_examples import mixer_params, np_mixer_block

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "mlp_mixer.lisp")
    mod = caten.load(path, runtime=rt, use_cache=False)
    args = mixer_params(b=2, t=7, c=12, dt=10, dc=20)
    assert _rel(mod.mixer_block(*args), np_mixer_block(*args)) < 1e-4
    prog, _ = mod.mixer_block.program({})
    src = pipeline.emit(R.get(rt), prog, "source", Options(runtime=rt))
    src = next(v for k, v in src.items() if k in (".cl", ".cu"))
    assert src.count("f32 sx[") == 4


def test_non_gemm_reductions_keep_the_generic_mapping(monkeypatch):
    """A sum of squares (both factors read every grid loop) and a row sum are no GEMM."""
    rt = _runtime("opencl", monkeypatch)
    sq = "(composite sq ((X{f32}[R, N]) -> (Y{f32}[R, 1])) (sum (* X X) :axis 1 :keepdims true))"
    assert not _tiled(rt, sq)
    x = np.random.default_rng(0).standard_normal((37, 129), dtype=np.float32)
    got = caten.loads(sq, runtime=rt, use_cache=False).sq(x)
    assert _rel(got, (x.astype(np.float64) ** 2).sum(1, keepdims=True)) < 1e-5


def test_cuda_gemm_tile_assembles_without_spills(tmp_path):
    """The CUDA GEMM kernel keeps its 8x8 accumulators in registers: ptxas reports no local
    memory (no GPU needed)."""
    from caten.runtimes import cuda_rt

    if shutil.which("ptxas") is None or (cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None):
        pytest.skip("needs ptxas and NVRTC or nvcc (the cuda extra)")
    src = _source("cuda", LIN)
    assert "fmaf(xr[r], yr[c], acc[r][c])" in src
    ptx = cuda_rt.to_ptx(src, "sm_90")
    (tmp_path / "k.ptx").write_text(ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90", "-v", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in r.stderr


def test_cuda_reductions_use_warp_shuffles_and_assemble(tmp_path):
    """CUDA combines a work-group's partials by warp shuffles (two barriers) and spells exp as
    exp2f; the sum's two launches and the softmax assemble (no GPU needed)."""
    from caten.runtimes import cuda_rt

    if cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None:
        pytest.skip("needs NVRTC or nvcc (the cuda extra)")
    total, sm = _source("cuda", SUM), _source("cuda", SM)
    assert "__shfl_xor_sync(0xffffffffU" in total and "total__k0_1" in total
    assert "exp2f(" in sm and "__shfl_xor_sync" in sm and " red_f32[" not in sm
    if shutil.which("ptxas") is None:
        return
    for name, src in (("sum", total), ("sm", sm)):
        (tmp_path / f"{name}.ptx").write_text(cuda_rt.to_ptx(src, "sm_90"))
        cmd = ["ptxas", "-arch=sm_90", "-o", str(tmp_path / f"{name}.cubin"), str(tmp_path / f"{name}.ptx")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("spec", ["64,64", "a,b,c,d,e", "128,128,8,6,8", "0,128,8,8,8", "256,256,8,4,4"])
def test_bad_tile_shape_is_a_diagnostic(monkeypatch, spec):
    """A bad CATEN_GPU_GEMM is an error that names it and says what a shape is, not a traceback."""
    monkeypatch.setenv("CATEN_GPU_GEMM", spec)
    with pytest.raises(caten.Error, match="CATEN_GPU_GEMM=.* is not a tile shape"):
        caten.loads(MM, runtime="cuda", use_cache=False).mm.program({})
