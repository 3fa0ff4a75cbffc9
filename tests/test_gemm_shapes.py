"""GEMMs and convolutions on odd shapes, on both kinds of the project's CPUs and on the C runtime.

Every dim takes the sizes 1, 7, 13, 127, 1000, 1023 and 1025 (edge tiles in every blocked
dimension: micro-tiles of 6 rows and 16 or 32 columns, K blocks of 256, M blocks of 120), with
batch dims and grouped, strided, padded convolutions. The code is compiled for AVX2 (znver3)
and AVX-512 (rocketlake) tiles, and runs where the host has the ISA (the other one is compiled
to assembly, so both code paths are built on either host); the C runtime's register-tile helper
and its OpenMP threads are checked the same way. References: numpy and torch in f64."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import caten
from caten import pipeline, target
from caten.plugin import Options

SIZES = (1, 7, 13, 127, 1000, 1023, 1025)
SRC = """
(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
(composite bmm ((A{f32}[Q, M, K]) (B{f32}[Q, K, N]) -> (C{f32}[Q, M, N])) (matmul A B))
(composite lin ((X{f32}[Q, M, K]) (W{f32}[K, N]) -> (C{f32}[Q, M, N])) (matmul X W))
"""


def _triples() -> list[tuple[int, int, int]]:
    """Each size in each position, the others moderate, plus the large corners (at most ~1.1e9
    multiply-adds a case, so that the whole runs in seconds)."""
    out = set()
    for pos, s in itertools.product(range(3), SIZES):
        t = [13, 127, 7]
        t[pos] = s
        out.add(tuple(t))
    out |= {(1023, 1025, 1000), (1025, 1000, 1023), (1000, 1, 1025), (1, 1023, 1025), (1025, 7, 1)}
    return sorted(out)


def _modules(rt: str, cpu: str | None, threads: int, monkeypatch) -> caten.Module:
    monkeypatch.setenv("CATEN_NUM_THREADS", str(threads))
    return caten.loads(SRC, runtime=rt, use_cache=False, **({"target": cpu} if cpu else {}))


def _runnable(cpu: str) -> bool:
    return target.parse(cpu).vector_bits <= target.host().vector_bits


def _check(mod) -> None:
    rng = np.random.default_rng(0)
    for m, k, n in _triples():
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(mod.mm(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k),
                                   err_msg=f"{m}x{k}x{n}")
    for q, m, k, n in [(3, 7, 1025, 13), (2, 127, 13, 1023), (5, 1, 127, 7), (1, 1000, 7, 127)]:
        a = rng.standard_normal((q, m, k), dtype=np.float32)
        b = rng.standard_normal((q, k, n), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(mod.bmm(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        np.testing.assert_allclose(mod.lin(a, w), a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("cpu", ["znver3", "rocketlake"])
def test_gemm_odd_shapes_on_each_isa(cpu, monkeypatch):
    from caten.runtimes.llvm_rt import RUNTIME

    prog = _modules("llvm", None, 2, monkeypatch).mm.program({})[0]
    asm = pipeline.emit(RUNTIME, prog, "asm", Options(target=cpu))[".s"]
    assert ("%zmm" in asm) == (cpu == "rocketlake") and "vfmadd231ps" in asm
    if not _runnable(cpu):
        pytest.skip(f"this host cannot run {cpu} code (compiled to assembly above)")
    _check(_modules("llvm", cpu, 2, monkeypatch))


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_odd_shapes_on_c(threads, monkeypatch):
    mod = _modules("c", None, threads, monkeypatch)
    from caten.runtimes.c_rt import RUNTIME

    src = pipeline.emit(RUNTIME, mod.mm.program({})[0], "source", Options())[".c"]
    mr = 14 if target.resolve(None).vector_bits >= 512 else 6  # the target's tile (CATEN_CPU, else the host)
    assert f"caten_tile_f32_{mr}x" in src and ("#pragma omp parallel for" in src) == (threads > 1)
    _check(mod)


CONVS = [  # n, c, h, w, o, k, stride, padding, dilation, groups
    (1, 1, 1, 1, 1, 1, 1, 0, 1, 1), (2, 3, 13, 7, 5, 3, 1, 1, 1, 1), (3, 6, 7, 13, 9, 3, 2, 1, 1, 3),
    (1, 4, 127, 7, 8, 3, 1, 2, 2, 2), (2, 13, 9, 9, 7, 1, 1, 0, 1, 1), (1, 8, 33, 31, 16, 5, 2, 2, 1, 4),
]


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_conv_odd_shapes(rt, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")
    rng = np.random.default_rng(1)
    for n, c, h, w, o, k, s, p, d, g in CONVS:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((o, c // g, k, k), dtype=np.float32)
        want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(wt, dtype=torch.float64),
                                          stride=s, padding=p, dilation=d, groups=g).numpy()
        ys = ", ".join(map(str, want.shape))
        src = (f"(composite cv ((X{{f32}}[{n}, {c}, {h}, {w}]) (Wt{{f32}}[{o}, {c // g}, {k}, {k}]) "
               f"-> (Y{{f32}}[{ys}])) (conv2d X Wt :stride {s} :padding {p} :dilation {d} :groups {g}))")
        got = caten.loads(src, runtime=rt, use_cache=False).cv(x, wt)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(c * k * k), err_msg=str((n, c, h, w)))


SAME = [  # n, c, h, w, o, k, dilation: stride 1, "same" padding, at symbolic dims (groups need static C)
    (1, 1, 1, 1, 1, 1, 1), (2, 3, 5, 7, 5, 3, 1), (1, 4, 9, 31, 8, 3, 2), (2, 16, 33, 70, 24, 3, 1),
    (1, 8, 3, 130, 6, 5, 1), (3, 5, 17, 33, 7, 3, 1),
]


@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_conv_symbolic_dims(rt, threads, monkeypatch):
    """Symbolic image sizes merge the output rows and columns into the GEMM's columns: the
    packing copies one run per output row a panel touches (a panel may span several short rows,
    or part of a long one), and the threads split the columns or the rows."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("CATEN_NUM_THREADS", threads)
    src = ("(composite cv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, K, K]) -> (Y{f32}[N, O, H, W])) "
           "(conv2d X Wt :padding P :dilation D))")
    rng = np.random.default_rng(2)
    for n, c, h, w, o, k, d in SAME:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((o, c, k, k), dtype=np.float32)
        p = (k - 1) // 2 * d
        want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(wt, dtype=torch.float64),
                                          padding=p, dilation=d).numpy()
        text = src.replace(":padding P", f":padding {p}").replace(":dilation D", f":dilation {d}")
        got = caten.loads(text, runtime=rt, use_cache=False).cv(x, wt)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(c * k * k), err_msg=str((n, c, h, w)))


def test_gemm_blocks_follow_the_target_cache():
    """The packed B block fills one core's L2: the target's size (a table for named cpus, sysfs
    for the host) picks nc, and mc is a whole number of micro-panels."""
    from caten import target
    from caten.lower.trial import check_group
    from caten.options import Options
    from caten.pipeline import compile_program
    from caten.read.source import read_text
    from caten.schedule import schedule
    from caten.schedule.plan import gemm_plan

    assert target.parse("znver3").l2_bytes == 512 << 10 and target.parse("znver4").l2_bytes == 1 << 20
    assert target.host().l2_bytes >= 64 << 10
    src = read_text("(composite mm ((A{f32}[1024, 1024]) (B{f32}[1024, 1024]) -> (C{f32}[1024, 1024])) (matmul A B))",
                    "<t>", False)
    ncs = {}
    for cpu in ("znver3", "znver4"):
        with target.use(target.parse(cpu)):
            s = schedule(compile_program(src, src.entry("mm"), {}, {}, Options(runtime="llvm")), check=check_group)
            (plan,) = [gemm_plan(st.node) for k in s.kernels for st in k.stages if st.mode == "tiled"]
        assert plan.mc % plan.mr == 0 and plan.nc % plan.nr == 0
        assert plan.kc * plan.nc * 4 <= target.parse(cpu).l2_bytes
        ncs[cpu] = plan.nc
    assert ncs["znver4"] > ncs["znver3"], ncs
