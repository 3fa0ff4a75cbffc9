"""The transposing copy of a GEMM's row panels (`loopir.PackT`, caten.lower.panels and
caten.render.llvm.pack): a row-major a is packed a vector of k at a time, transposed in
registers by a perfect-shuffle network, where the plain loops moved a float at a time (the
Mixer's channel GEMMs: 0.9 ms a call; the block went 22.1-23.2 -> 21.3-21.8 ms on the AVX-512 host).

The claims: the network's shuffle masks transpose every power-of-two vector length; the copy is
chosen exactly for a row-major a (not for a transposed one, which has no contiguous k); the
values are numpy's at every k tail and row count, for both ISAs' code (AVX-512's 16 lanes and
14-row panels, AVX2's 8 lanes and 6-row panels), in f32 and f64, and on the C runtime."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import loopir as L
from caten import pipeline, target
from caten.render.llvm.pack import interleave
from tests.llvm_util import ISA_CASES, isa_module

SRC = """
(composite mm ((A{T}[M, K]) (B{T}[K, N]) -> (C{T}[M, N])) (matmul A B))
(composite tm ((A{T}[K, M]) (B{T}[K, N]) -> (C{T}[M, N])) (matmul (transpose A) B))
"""


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_the_shuffle_network_transposes(lanes):
    rows = [np.arange(lanes) + 100 * r for r in range(lanes)]
    lo, hi = interleave(lanes, False), interleave(lanes, True)
    for _ in range(lanes.bit_length() - 1):
        out = []
        for i in range(lanes // 2):
            both = np.concatenate([rows[i], rows[i + lanes // 2]])
            out += [both[lo], both[hi]]
        rows = out
    np.testing.assert_array_equal(np.array(rows), np.array([np.arange(lanes) + 100 * r for r in range(lanes)]).T)


def _kernels(name: str, cpu: str) -> list[L.Kernel]:
    mod = caten.loads(SRC.replace("{T}", "{f32}"), runtime="numpy")
    prog = getattr(mod, name).elaborate({})
    return pipeline.lower_program(prog, name, target.parse(cpu), 2).kernels


def _packs(kernels: list[L.Kernel]) -> int:
    n, stack = 0, [s for k in kernels for s in k.body]
    while stack:
        s = stack.pop()
        n += isinstance(s, L.PackT)
        stack.extend(getattr(s, "body", []) if isinstance(getattr(s, "body", None), list) else [])
    return n


def test_chosen_for_a_row_major_a_only():
    assert _packs(_kernels("mm", "rocketlake")) >= 1
    assert _packs(_kernels("tm", "rocketlake")) == 0


@pytest.mark.parametrize("rt,cpu,dt", ISA_CASES)
def test_values_at_every_tail(rt, cpu, dt, monkeypatch):
    mod = isa_module(SRC, rt, cpu, dt, monkeypatch)
    rng = np.random.default_rng(0)
    for m in (1, 6, 13, 14, 15, 29, 130):
        for k in (1, 7, 8, 15, 16, 17, 33, 300):
            a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, 19)).astype(dt)
            want = a.astype(np.float64) @ b
            tol = 1e-4 if dt == np.float32 else 1e-12
            np.testing.assert_allclose(mod.mm(a, b), want, rtol=tol, atol=tol * np.sqrt(k), err_msg=f"{m}x{k}")
            np.testing.assert_allclose(mod.tm(np.ascontiguousarray(a.T), b), want, rtol=tol, atol=tol * np.sqrt(k))
