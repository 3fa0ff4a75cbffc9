"""A plain GEMM whose columns take several N blocks packs each thread's rows of A once per K
block, for all the column blocks, in slabs of at most ~2048 rows (`GemmPlan.slab`), where it
packed each M block once per column block. Checked: which plans take it, the slot it needs (a
thread's share of the rows, at most a slab, and the threads' slots together when one thread
runs the GEMM alone), and values against numpy in float64 in
the bounds-checked mode (every packed-panel access checked), on shapes with edges in every
block (rows past a thread's share and past an M block, columns past an N block, several K
blocks with an epilogue that may run only after the last), on one and two threads, with
static and symbolic dims; a property test over random shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import caten
from caten import target
from caten.lower.trial import check_group
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.schedule import schedule
from caten.schedule.plan import gemm_plan

MM = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))"
LIN = "(composite lin ((X{f32}[M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[M, N])) (relu (linear X W b)))"
BMM = "(composite bmm ((A{f32}[Q, M, K]) (B{f32}[Q, K, N]) -> (C{f32}[Q, M, N])) (matmul A B))"


def _plan(src: str, entry: str, cpu: str = "znver4"):
    prog = read_text(src, "<t>", False)
    with target.use(target.parse(cpu)):
        s = schedule(compile_program(prog, prog.entry(entry), {}, {}, Options(runtime="llvm")), check=check_group)
        (plan,) = [gemm_plan(st.node) for k in s.kernels for st in k.stages if st.mode == "tiled"]
    return plan


def _static(src: str, **dims: int) -> str:
    for name, v in dims.items():
        src = src.replace(f"{name},", f"{v},").replace(f"{name}]", f"{v}]")
    return src


def test_which_gemms_pack_a_slab():
    """Several column blocks and several M blocks: a slab; one column block, one M block, batch
    loops (a per-image a), or a symbolic shape that may be either: as planned below."""
    big = _plan(_static(MM, M=2048, K=2048, N=2048), "mm")
    assert big.slab(2, False) and big.slab(1, False)
    assert not _plan(_static(MM, M=2048, K=2048, N=big.nc), "mm").slab(2, False)  # one column block
    assert not _plan(_static(MM, M=big.mc, K=2048, N=2048), "mm").slab(2, False)  # one M block
    assert _plan(MM, "mm").slab(2, False)  # symbolic: N may take several blocks
    assert not _plan(BMM, "bmm").slab(2, True)


def test_a_slab_holds_a_threads_rows():
    """One thread's packed A: its share of the rows in whole micro-panels for every column block
    (a slab), at most `slab_rows` of them (whole M blocks, ~2048), so that the two threads' slots
    together hold a lone thread's slab (one thread runs a GEMM too small to share)."""
    plan = _plan(_static(MM, M=2049, K=2048, N=2048), "mm")
    assert plan.slab_rows % plan.mc == 0 and 1024 < plan.slab_rows <= 2048
    a, _ = plan.thread_packs(2, False)
    share = 1025  # (2049 rows over two threads, rounded up)
    rows = -(-share // plan.mr) * plan.mr
    assert a == rows * plan.kc
    assert 2 * rows >= min(plan.slab_rows, -(-2049 // plan.mr) * plan.mr)
    assert plan.thread_packs(1, False)[0] == plan.slab_rows * plan.kc  # (2049 rows: more than a slab)
    assert plan.pack_sizes(2)[0] == plan.mc * plan.kc  # (without the slab: one M block)
    tall = _plan(_static(MM, M=100000, K=2048, N=2048), "mm")
    assert tall.thread_packs(2, False)[0] == tall.slab_rows * tall.kc  # (not 50000 rows a thread)


def _ref_lin(x, w, b):
    return np.maximum(x.astype(np.float64) @ w + b, 0.0)


# (M, K, N): rows past a thread's share and an M block, columns past an N block, K past a K
# block; the first two small enough (under GEMM_THREAD_MIN multiply-adds) that one thread runs
# them whole in the two threads' slots; the last with several slabs a thread (a K short enough
# for static dims to take N blocks of 2048 columns, which its 2100 exceed)
SHAPES = [(130, 3, 700), (300, 5, 1200), (1025, 700, 1100), (241, 1300, 1537), (4500, 3, 2100)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("static", [False, True])
def test_slab_gemm_values_in_bounds(threads, static, monkeypatch):
    monkeypatch.setenv("CATEN_NUM_THREADS", str(threads))
    rng = np.random.default_rng(threads)
    for m, k, n in SHAPES:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        mm = _static(MM, M=m, K=k, N=n) if static else MM
        lin = _static(LIN, M=m, K=k, N=n) if static else LIN
        got = caten.loads(mm, use_cache=False, check_bounds=True).mm(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k),
                                   err_msg=f"{m}x{k}x{n}")
        got = caten.loads(lin, use_cache=False, check_bounds=True).lin(a, b, bias)
        np.testing.assert_allclose(got, _ref_lin(a, b, bias), rtol=1e-4, atol=1e-4 * np.sqrt(k),
                                   err_msg=f"relu linear {m}x{k}x{n}")


def test_slab_gemm_fast_code_values(monkeypatch):
    """The same shapes in the unchecked (fast) code, two threads."""
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")
    mod = caten.loads(MM + LIN, use_cache=False)
    rng = np.random.default_rng(7)
    for m, k, n in SHAPES:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        np.testing.assert_allclose(mod.mm(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        np.testing.assert_allclose(mod.lin(a, b, bias), _ref_lin(a, b, bias), rtol=1e-4, atol=1e-4 * np.sqrt(k))


_CHECKED = {}


@settings(max_examples=12, deadline=None)
@given(dims=st.tuples(st.integers(1, 4600), st.integers(0, 700), st.integers(1, 1500)))
def test_property_symbolic_gemm_in_bounds(dims):
    """Random shapes through one symbolic, bounds-checked module: the slab, or not, as each
    shape falls (M and N across their block sizes, K across a K block and empty)."""
    m, k, n = dims
    assume(m * max(k, 1) * n <= 300_000_000)  # (seconds, not minutes, of checked code)
    if "mod" not in _CHECKED:
        _CHECKED["mod"] = caten.loads(MM + LIN, use_cache=False, check_bounds=True)
    mod = _CHECKED["mod"]
    rng = np.random.default_rng(m * 7 + k * 11 + n)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_allclose(mod.mm(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k + 1))
    np.testing.assert_allclose(mod.lin(a, b, bias), _ref_lin(a, b, bias), rtol=1e-4, atol=1e-4 * np.sqrt(k + 1))
