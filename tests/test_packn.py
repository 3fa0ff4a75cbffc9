"""The straight copy of a GEMM's column panels (`loopir.PackN`, caten.lower.gemm.panel_copy and
caten.render.llvm.pack): a b whose columns are contiguous (row-major: the Mixer's weights) is
packed whole rows at a time by one function shared by every GEMM of a module, with masked loads
for a panel short of columns, where each GEMM rendered its own copy loops (a tenth of the
Mixer's LLVM time).

The claims: the copy is chosen exactly for a row-major b (not for a transposed one, whose k is
contiguous); the values are numpy's at every column tail (panels of 1 to width + 1 columns) and
k tail, for both ISAs' code (compiled for each, run where the host has it), in f32 and f64,
and on the C runtime (its plain loops); a short panel reads nothing past its columns."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import loopir as L
from caten import pipeline, target
from caten.options import Options
from tests.llvm_util import ISA_CASES, isa_module

SRC = """
(composite mm ((A{T}[M, K]) (B{T}[K, N]) -> (C{T}[M, N])) (matmul A B))
(composite mt ((A{T}[M, K]) (B{T}[N, K]) -> (C{T}[M, N])) (matmul A (transpose B)))
"""


def _kernels(name: str, cpu: str) -> list[L.Kernel]:
    mod = caten.loads(SRC.replace("{T}", "{f32}"), runtime="numpy")
    prog = getattr(mod, name).elaborate({})
    return pipeline.lower_program(prog, name, target.parse(cpu), 2).kernels


def _packs(kernels: list[L.Kernel]) -> list[L.PackN]:
    out, stack = [], [s for k in kernels for s in k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, L.PackN):
            out.append(s)
        stack.extend(getattr(s, "body", []) if isinstance(getattr(s, "body", None), list) else [])
    return out


@pytest.mark.parametrize("cpu", ["rocketlake", "znver3"])
def test_chosen_for_a_row_major_b_only(cpu):
    packs = _packs(_kernels("mm", cpu))
    assert packs and all(p.src == "in1" for p in packs)  # B, whole rows of its columns
    assert _packs(_kernels("mt", cpu)) == []


@pytest.mark.parametrize("cpu,masked", [("rocketlake", "{%k"), ("znver3", "vmaskmov")])
def test_both_isas_compile_one_shared_copy(cpu, masked):
    """Code for either ISA compiles on any host: one copy function per width, its short panels
    loaded under a mask (AVX-512's k registers, AVX2's vmaskmov)."""
    mod = caten.loads(SRC.replace("{T}", "{f32}"), runtime="llvm")
    asm = next(iter(pipeline.emit(mod.runtime, mod.mm.elaborate({}), "asm", Options(target=cpu)).values()))
    copies = [ln for ln in asm.splitlines() if ln.startswith("caten_packn_") and ln.endswith(":")]
    assert len(copies) == 1, copies
    body = asm[asm.index(copies[0]):]
    assert masked in body[:body.index("\t.size")]


@pytest.mark.parametrize("rt,cpu,dt", ISA_CASES)
def test_values_at_every_column_tail(rt, cpu, dt, monkeypatch):
    mod = isa_module(SRC, rt, cpu, dt, monkeypatch)
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 130):
        for m, k in ((1, 1), (14, 17), (29, 300)):
            a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
            want = a.astype(np.float64) @ b
            tol = 1e-4 if dt == np.float32 else 1e-12
            np.testing.assert_allclose(mod.mm(a, b), want, rtol=tol, atol=tol * np.sqrt(k), err_msg=f"{m}x{k}x{n}")
            np.testing.assert_allclose(mod.mt(a, np.ascontiguousarray(b.T)), want, rtol=tol, atol=tol * np.sqrt(k))


GUARDED = r"""
import ctypes, mmap, sys
import numpy as np
import caten

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def at_guard(a):
    # a copy of `a` whose last byte is the last before a page that cannot be read
    size = -(-a.nbytes // PAGE) * PAGE
    mm = mmap.mmap(-1, size + PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    assert libc.mprotect(base + size, PAGE, 0) == 0  # PROT_NONE
    out = np.frombuffer(mm, a.dtype, a.size, size - a.nbytes).reshape(a.shape)
    out[...] = a
    return out, mm


mod = caten.loads(sys.argv[1], runtime="llvm", use_cache=False, target=sys.argv[2])
rng = np.random.default_rng(1)
for n in (1, 7, 17, 33, 65, 130):
    a = rng.standard_normal((29, 300)).astype(np.float32)
    b = rng.standard_normal((300, n)).astype(np.float32)
    gb, keep = at_guard(b)
    np.testing.assert_allclose(mod.mm(a, gb), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
print("ok")
"""


@pytest.mark.parametrize("cpu", ["rocketlake", "znver3"])
def test_a_short_panel_reads_nothing_past_its_columns(cpu):
    """b's last row ends at a page that cannot be read: a copy that loaded whole vectors of a
    panel short of columns would read into it and die (the masked loads read nothing there)."""
    import subprocess
    import sys

    if target.parse(cpu).vector_bits > target.host().vector_bits:
        pytest.skip(f"{cpu}'s vectors are wider than this host's")
    src = SRC.replace("{T}", "{f32}")
    r = subprocess.run([sys.executable, "-c", GUARDED, src, cpu], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_a_transposed_a_packs_full_rows_in_constant_length_loops():
    """An a whose rows are contiguous (a weight gradient's activations, x^T in dW = x^T dy) is
    packed k row by k row; a full panel's row is a loop of constant length mr, which the renderer
    turns into vector moves, where a count of the rows left became a call of memcpy per k row
    (56 bytes each: 4.5% of a Mixer training step). The partial panel keeps its variable count."""
    src = "(composite tn ((X{f32}[K, M]) (Y{f32}[K, N]) -> (Z{f32}[M, N])) (matmul (transpose X) Y))"
    mod = caten.loads(src, runtime="numpy")
    kernels = pipeline.lower_program(mod.tn.elaborate({}), "tn", target.parse("rocketlake"), 2).kernels
    full, stack = [], [s for k in kernels for s in k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, L.Loop) and s.var.endswith("_full") and "ar_" in s.var:
            full.append(s)
        stack.extend(s.body if isinstance(getattr(s, "body", None), list) else [])
    assert full, "no constant-length row copy in the A pack"
    (row,) = full[0].body
    assert row.extent.op == "const" and row.extent.arg == 14  # mr on AVX-512
    rng = np.random.default_rng(5)
    for k, m, n in [(37, 29, 40), (5, 14, 33), (64, 1, 7)]:
        x, y = rng.standard_normal((k, m), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        got = caten.loads(src, runtime="llvm").tn(x, y)
        np.testing.assert_allclose(got, x.T.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)
