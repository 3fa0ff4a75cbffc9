"""Fusion counts through the schedule API and the CLI (`--emit schedule`), GEMM planning,
and `-S` output that llvmlite parses and verifies."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from caten.lower.trial import check_group
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.schedule import schedule
from caten.schedule.plan import gemm_plan

SRC = """
(composite ew ((A{f32}[N]) (B{f32}[N]) (C{f32}[N]) -> (Y{f32}[N])) (* (exp (+ (* A B) C)) 0.5))
(composite sm ((X{f32}[R, N]) -> (Y{f32}[R, N])) (softmax X :axis -1))
(composite ln ((X{f32}[R, N]) (G{f32}[N]) (B{f32}[N]) -> (Y{f32}[R, N])) (layernorm X G B :axis -1 :eps 1e-5))
(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
"""


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "caten", *args], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def src_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("sched") / "k.lisp"
    p.write_text(SRC)
    return p


def sched(name):
    src = read_text(SRC, "<test>", False)
    return schedule(compile_program(src, src.entry(name), {}, {}, Options(runtime="llvm")), check=check_group)


@pytest.mark.parametrize("name,most", [("ew", 1), ("sm", 3), ("ln", 3)])
def test_kernel_counts(name, most):
    s = sched(name)
    assert 1 <= len(s.kernels) <= most, s.dump()
    if name == "ew":
        assert len(s.kernels) == 1 and not [b for b in s.buffers.values() if b.role == "temp"]


def test_matmul_is_a_packed_gemm():
    s = sched("mm")
    (k,) = s.kernels
    (st,) = k.stages
    assert st.mode == "tiled" and len(st.scratch) == 2
    plan = gemm_plan(st.node)
    assert plan is not None and plan.mr * plan.nr >= 96 and plan.red == (2,)
    assert "packed via" in s.dump()


def test_emit_schedule_cli(src_file):
    r = cli(str(src_file), "--emit", "schedule")
    assert r.returncode == 0, r.stderr
    blocks = {b.split(":")[0].split()[1]: b for b in r.stdout.split("\n\n") if b.startswith("schedule ")}
    counts = {name: int(re.search(r": (\d+) kernel", b).group(1)) for name, b in blocks.items()}
    assert counts["ew"] == 1 and counts["sm"] <= 3 and counts["ln"] <= 3, counts
    assert counts == {n: len(sched(n).kernels) for n in counts}
    assert "kernel ew__k0: outer" in blocks["ew"] and "store MUL f32 [N]" in blocks["ew"]
    assert "reduce-max" in blocks["sm"] and "reduce-add" in blocks["sm"]
    assert re.search(r"\(tiled \d+x\d+ kc \d+ mc \d+ nc \d+\)", blocks["mm"]), blocks["mm"]


def test_dash_S_parses_and_verifies(src_file, tmp_path):
    out = tmp_path / "x.ll"
    r = cli("-r", "llvm", "-S", str(src_file), "-o", str(out))
    assert r.returncode == 0, r.stderr
    import llvmlite.binding as llvm

    text = out.read_text()
    mod = llvm.parse_assembly(text)
    mod.verify()
    names = {f.name for f in mod.functions}
    assert {"ew", "sm", "ln", "mm"} <= names
    assert "fma.v" in text  # the GEMM micro-kernel


PLANNED = """
(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
(composite colsum ((A{f32}[M, K]) -> (C{f32}[K])) (sum A :axis 0))
(composite rowsum ((A{f32}[M, K]) -> (C{f32}[M])) (sum A :axis 1))
"""


def _planned(name):
    src = read_text(PLANNED, "<test>", False)
    return schedule(compile_program(src, src.entry(name), {}, {}, Options(runtime="llvm")), check=check_group)


@pytest.mark.parametrize("name,mode", [("mm", "tiled"), ("colsum", "tiled"), ("rowsum", "register")])
def test_lowering_reads_the_plan_the_schedule_recorded(monkeypatch, name, mode):
    """Each reduction's plan (mode, GEMM blocks, register tile, block cut) is decided once, by the
    schedule: with every planning function broken the lowering gives the same loop IR."""
    import caten.lower.kernel_lowerer as lowering
    import caten.schedule.plan as P
    import caten.schedule.reduce_plan as R
    from caten.lower.text import kernel_text

    s = _planned(name)
    (st,) = [st for k in s.kernels for st in k.stages if st.kind == "reduce"]
    assert st.plan.mode == mode and (st.plan.gemm is not None) == (name == "mm")
    want = [kernel_text(k) for k in lowering.lower(s)]

    def broken(*a, **k):
        raise AssertionError("the lowering planned a reduction again")

    monkeypatch.setattr(P, "gemm_plan", broken)
    for f in ("gemm_plan", "reduce_mode", "plan_reduce", "block_plan", "tiled", "max_outer"):
        monkeypatch.setattr(R, f, broken)
    assert [kernel_text(k) for k in lowering.lower(s)] == want


def test_an_edited_plan_is_what_gets_lowered():
    """The register tile of a column sum comes from the recorded plan, not from the lowering."""
    import dataclasses

    import caten.lower.kernel_lowerer as lowering
    from caten.lower.text import kernel_text

    s = _planned("colsum")
    (st,) = s.kernels[0].stages
    nr = st.plan.tile[1]
    text = "\n".join(kernel_text(k) for k in lowering.lower(s))
    assert f"in 0..{nr}:" in text
    st.plan = dataclasses.replace(st.plan, tile=(1, 8))
    text = "\n".join(kernel_text(k) for k in lowering.lower(s))
    assert "in 0..8:" in text and f"in 0..{nr}:" not in text
