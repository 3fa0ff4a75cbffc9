"""The target option (`--cpu` / CATEN_CPU / `target=`): both of the project's CPU kinds are compiled
and inspected on either host, and run where the host has the instructions."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import pipeline, target
from caten.errors import Error
from caten.plugin import Options
from tests.test_llvm_aot import axpy_program

MM = """
(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
"""

HOST = target.host()


@pytest.mark.parametrize("spec,bits", [("znver3", 256), ("znver1", 256), ("rocketlake", 512), ("x86-64", 128),
                                       ("x86-64-v3", 256), ("znver3,+avx512f", 512), ("rocketlake,-avx512f", 256),
                                       ("skylake-avx512,-avx2", 128)])
def test_vector_width_of_a_spec(spec, bits):
    assert target.parse(spec).vector_bits == bits


def test_host_spec_and_env(monkeypatch):
    assert target.parse("host") is HOST and target.parse("") is HOST and HOST.native
    monkeypatch.setenv("CATEN_CPU", "rocketlake")
    assert target.resolve().cpu == "rocketlake"
    assert target.resolve("znver3").cpu == "znver3"  # an explicit spec beats the environment


@pytest.mark.parametrize("spec", ["bad name", "znver3,avx2", "host,+avx2", "x" * 200])
def test_bad_specs_are_diagnostics(spec):
    with pytest.raises(Error):
        target.parse(spec)


def test_gemm_tile_follows_the_vector_width():
    """The micro-tile is two vector registers wide: 6x16 f32 on AVX2 (12 of 16 ymm), 14x32 on
    AVX-512 (28 of 32 zmm)."""
    from caten.ir.graph import toposort
    from caten.ir.ops import Op
    from caten.schedule.plan import gemm_plan

    prog = caten.loads(MM, runtime="numpy").mm.elaborate({})
    (red,) = [n for n in toposort(prog.nodes) if n.op is Op.REDUCE]
    for spec, mr, nr in (("znver3", 6, 16), ("rocketlake", 14, 32), ("x86-64", 6, 8)):
        with target.use(target.parse(spec)):
            plan = gemm_plan(red)
        assert (plan.mr, plan.nr) == (mr, nr)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
@pytest.mark.parametrize("spec", ["znver3", "rocketlake", "x86-64"])
def test_run_where_the_host_can(runtime, spec):
    """Code for a CPU this host can run gives numpy's answer; one it cannot is refused, not run."""
    rng = np.random.default_rng(0)
    a, b = rng.random((37, 50), dtype=np.float32), rng.random((50, 45), dtype=np.float32)
    mod = caten.loads(MM, runtime=runtime, target=spec)
    t = target.parse(spec)
    if t.vector_bits > HOST.vector_bits:
        with pytest.raises(Error, match="cannot run on this host"):
            mod.mm(a, b)
    else:
        np.testing.assert_allclose(mod.mm(a, b), a @ b, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("spec,reg", [("rocketlake", "%zmm"), ("znver3", "%ymm")])
def test_c_runtime_compiles_for_a_named_cpu(spec, reg):
    from caten.runtimes.c_rt import RUNTIME as C

    asm = pipeline.emit(C, axpy_program(), "asm", Options(target=spec))[".s"]
    assert reg in asm or "%ymm" in asm  # gcc may prefer 256-bit vectors even where AVX-512 exists
    if spec == "znver3":
        assert "%zmm" not in asm


def test_cli_cpu_option(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from caten.cli.main import cli

    monkeypatch.setenv("CATEN_CPU", "")  # `--cpu` sets it for the process: restored after the test
    f = tmp_path / "mm.lisp"
    f.write_text(MM)
    r = CliRunner().invoke(cli, ["--cpu", "rocketlake", "--emit", "asm", str(f), "-o", str(tmp_path / "mm.s")])
    assert r.exit_code == 0, r.output
    assert "%zmm" in (tmp_path / "mm.s").read_text()
    r = CliRunner().invoke(cli, ["--cpu", "no such", "--emit", "asm", str(f)])
    assert r.exit_code == 2 and "not a cpu name" in r.output
