"""The roofline's ceilings (caten.compile.roofline): an FMA loop and a read stream, JIT-compiled.

What they compute is checked against float64 references: the FMA loop's result is the sum of its
chains' recurrences, so a loop that ran fewer chains, lanes or iterations than `fma_flops`
counts would not match; the read stream's result is its slice's sum. Their code is checked on
both kinds of the project's machines (compiled for each): as many FMAs per iteration as chains,
and no chain spilled to the stack (a spill would turn the peak into a measure of loads).
Timings are not asserted (benchmarks/ and `caten profile` show them)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from caten import target
from caten.compile import llvmobj
from caten.compile import roofline as R


@pytest.fixture(scope="module")
def kernels() -> R.Kernels:
    return R.Kernels()


def _chain(n: int) -> float:
    a = 0.0
    for _ in range(n):
        a = a * R.FMA_X + R.FMA_Y
    return a


@pytest.mark.parametrize("iters", [1, 2, 37, 100, 1000])
def test_fma_loop_runs_every_chain_lane_and_iteration(kernels, iters):
    got = kernels.fma(iters, R.FMA_X, R.FMA_Y)
    want = kernels.accs * kernels.lanes * _chain(iters)
    assert got == pytest.approx(want, rel=2e-5), (got, want)
    assert kernels.fma_flops(iters) == 2 * iters * kernels.accs * kernels.lanes
    assert kernels.lanes == target.host().vector_bits // 32


def test_fma_of_other_operands(kernels):
    """x and y are arguments, not folded constants: other values give the recurrence's value."""
    a = 0.0
    for _ in range(50):
        a = a * 0.5 + 2.0
    assert kernels.fma(50, 0.5, 2.0) == pytest.approx(kernels.accs * kernels.lanes * a, rel=1e-6)


@pytest.mark.parametrize("offset_steps,steps", [(0, 1), (0, 5), (3, 7), (11, 2)])
def test_read_stream_sums_its_slice(kernels, offset_steps, steps):
    step = kernels.lanes * R.READ_UNROLL
    rng = np.random.default_rng(offset_steps * 31 + steps)
    buf = rng.random((offset_steps + steps + 1) * step, dtype=np.float32)
    got = kernels.read(buf.ctypes.data + 4 * offset_steps * step, steps * step)
    part = buf[offset_steps * step:(offset_steps + steps) * step].astype(np.float64)
    assert got == pytest.approx(part.sum(), rel=1e-5)


def test_read_stream_of_ones_counts_exactly(kernels):
    step = kernels.lanes * R.READ_UNROLL
    buf = np.ones(4096 * step, np.float32)
    assert kernels.read(buf.ctypes.data, buf.size) == buf.size


@pytest.mark.parametrize("cpu", ["znver3", "rocketlake"])
def test_fma_loop_code_keeps_its_chains_in_registers(cpu):
    t = target.parse(cpu)
    lanes, accs = t.vector_bits // 32, R.fma_accumulators(t.vector_bits)
    assert accs + 2 <= target.vector_registers(t.vector_bytes)  # the chains and x, y in registers
    ir = R._ir(lanes, accs, t.cpu, t.features)
    mod = llvmobj.optimize(ir, t.cpu, t.features, 3)
    asm = llvmobj.target_machine(t.cpu, t.features, 3).emit_assembly(mod)
    body = asm.split("caten_peak_fma:")[1].split("caten_peak_read:")[0]
    loop = re.findall(r"^\.LBB0_\d+:.*?^\s+j\w+\s+\.LBB0_\d+$", body, re.M | re.S)
    assert loop, body
    reg = "zmm" if t.vector_bits >= 512 else "ymm"
    fmas = [ln for ln in loop[0].splitlines() if "vfmadd" in ln]
    assert len(fmas) == accs and all(reg in ln for ln in fmas), loop[0]
    assert "rsp" not in loop[0], loop[0]  # no spill or reload in the loop


def test_roofline_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path))
    made = []

    class Fake:
        def __init__(self):
            made.append(1)

        def peak_gflops(self):
            return 123.0

        def read_gbs(self):
            return 45.0

    monkeypatch.setattr(R, "Kernels", Fake)
    monkeypatch.setattr(R, "_copy_gbs", lambda: 40.0)
    r = R.roofline()
    assert (r.peak_gflops, r.bandwidth_gbs) == (123.0, 45.0) and made == [1]
    assert list(tmp_path.rglob("*.roofline"))  # in this cache, not the user's
    assert R.roofline().peak_gflops == 123.0 and made == [1]
    R.roofline(refresh=True)
    assert made == [1, 1]
