"""caten.pipeline: one back half for every compiling runtime, one cache key, `--emit loops`, `-v`."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten import pipeline, target
from caten import plugin as R
from caten.cli.main import cli
from caten.ir import dims as D
from caten.plugin import Options

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCALE = "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf Y (exp (* X 1.4375))))"  # a structure no other test compiles


def _program(src: str):
    mod = caten.loads(src, runtime="numpy")
    return mod.f.elaborate({})


def _key(src: str, rt: str = "llvm") -> str:
    runtime = R.get(rt)
    t = target.host()
    lw = pipeline.lower_program(_program(src), pipeline.PLACEHOLDER, t, 1)
    return pipeline.cache_key(runtime, [lw], t, Options())


def test_key_ignores_names_but_not_code():
    base = _key(SCALE)
    renamed = SCALE.replace("X", "A").replace("Y", "B").replace("[N]", "[M]")
    assert _key(renamed) == base  # tensor and dim names are not code
    assert _key(SCALE.replace("1.4375", "3.0")) != base  # a constant is
    assert _key(SCALE, "c") != base  # and so is the runtime


def test_same_code_shares_one_compiled_object(tmp_path, monkeypatch):
    """Two composites differing only in names: one cache entry, both compute right."""
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(-1, 1, 37, dtype=np.float32)
    for rt in ("llvm", "c"):
        a = caten.loads(SCALE, runtime=rt).f(x)
        b = caten.loads(SCALE.replace("X", "Q").replace("[N]", "[K]"), runtime=rt).f(x)
        np.testing.assert_allclose(a, np.exp(x.astype(np.float64) * 1.4375), rtol=1e-6)
        np.testing.assert_array_equal(a, b)
    kinds = [p.suffix for p in (tmp_path / "cache").rglob("*") if p.suffix in (".llvmobj", ".c-so")]
    assert sorted(kinds) == [".c-so", ".llvmobj"], kinds


def test_loops_text_of_a_dag_is_linear():
    """A chain of flips shares every index term: the text numbers shared terms instead of
    repeating them, so it grows linearly with the chain (a tree print doubles per flip)."""
    def text(n: int) -> str:
        body = "".join("(setf y (flip y :axis 0))" for _ in range(n))
        src = f"(composite f ((x{{f32}}[N]) -> (y{{f32}}[N])) (setf y (+ x 1.0)) {body} (setf y (* y 2.0)))"
        lw = pipeline.lower_program(_program(src), "f", target.host(), 1)
        return lw.loops()

    small, big = len(text(20)), len(text(40))
    assert big < 2.6 * small, (small, big)


@pytest.mark.parametrize("rt", ["llvm", "c", "numpy"])
def test_emit_loops_and_verbose_stage_timings(rt, tmp_path):
    f = tmp_path / "s.lisp"
    f.write_text("(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N])) (setf Y (softmax X :axis 1)))")
    r = CliRunner().invoke(cli, [str(f), "-r", rt, "--emit", "loops", "-o", "-"])
    assert r.exit_code == 0, r.output
    assert "kernel f__k0(in f32 *in0" in r.output and "entry f(in0 f32, out0 f32, i64 B, i64 N)" in r.output
    assert "for " in r.output and "exp2:f32" in r.output
    if rt != "numpy":
        r = CliRunner().invoke(cli, [str(f), "-r", rt, "-v", "-S", "-o", str(tmp_path / "out")])
        assert r.exit_code == 0, r.output
        line = next(ln for ln in r.output.splitlines() if ln.startswith("[pipeline]"))
        named = [part.split()[0] for part in line.split(": ", 1)[1].split(", ")]
        # every pass that ran, named and ordered as the pass list
        assert named == ["read", "elaborate", "rewrite", "schedule", "lower", "decompose", "render", "compile"], line
        assert named == [p.name for p in pipeline.PASSES if p.name in named]


def test_architecture_table_is_the_pass_list():
    """docs/architecture.md's table of passes is caten.pipeline.PASSES, row for row, and each
    pass's module exists."""
    import importlib.util

    lines = (ROOT / "docs" / "architecture.md").read_text().splitlines()
    start = lines.index("| pass | module | what it makes |") + 2
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        rows.append(tuple(c.strip() for c in ln.strip("|").split(" | ")))
    assert rows == [(p.name, f"`{p.module}`", p.what) for p in pipeline.PASSES]
    for p in pipeline.PASSES:
        assert importlib.util.find_spec(p.module) is not None, p.module


def test_where_dims_for_tools():
    """The `where` dims that -D sizes determine, as `caten profile`/`caten tune` make inputs, in
    clause order; a clause over an unbound dim is left out, not an error."""
    from caten.elaborate.evaluate import where_dims
    from caten.read.source import read_text

    src = read_text("(composite f ((X{f32}[NP]) (Y{f32}[Q]) -> (Z{f32}[NP]) where NP = (+ (* 32 P) 1), "
                    "M = (idiv NP 3), R = (* Q 2)) (+ X 1.0))", "<t>")
    cdef = src.entry("f")
    assert where_dims(cdef, {"P": 4}) == {"P": 4, "NP": 129, "M": 43}
    assert where_dims(cdef, {"P": 1, "Q": 5, "M": 7}) == {"P": 1, "Q": 5, "M": 7, "NP": 33, "R": 10}


def test_runtimes_import_neither_schedule_nor_lower():
    """A runtime plugin gets lowered programs from the pipeline; it never drives the back end."""
    for path in sorted((ROOT / "runtimes").glob("*.py")):
        tree = ast.parse(path.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        bad = {m for m in mods if m.startswith(("caten.schedule", "caten.lower"))}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_loop_ir_verifier_finds_malformed_kernels():
    from caten import loopir as L
    from caten.ir import dtypes as T
    from caten.ir.ops import Op
    from caten.lower.verify import problems

    i = L.var("i")
    good = L.Kernel("k", [L.BufParam("in0", T.f32, "in"), L.BufParam("out0", T.f32, "out")], ["N"],
                    [L.Loop("i", L.dim(D.sym("N")), [L.Store("out0", i, L.load("in0", i, T.f32))])])
    assert problems(good) == []
    bad = L.Kernel("k", good.params, ["N"], [
        L.Store("out0", i, L.load("in0", i, T.f32)),  # i outside its loop
        L.Loop("j", L.const(4), [L.Store("t9", L.var("j"), L.const(1.0, T.f32)),  # not a parameter
                                 L.Store("in0", L.var("j"), L.const(1.0, T.f32)),  # writes an input
                                 L.Store("out0", L.var("j"), L.alu(Op.ADD, T.f32, L.const(1, T.i32),
                                                                   L.const(1.0, T.f32)))])])
    found = "\n".join(problems(bad))
    for what in ("reads variable i outside its loop", "stores to t9, not a parameter", "stores to input in0",
                 "operands [i32] for a f32 result"):
        assert what in found, found


@pytest.mark.parametrize("rt", ["cuda", "opencl"])
def test_device_code_does_not_follow_the_host_cpu(rt):
    """Device kernels are shaped for the device: the CPU target (host or --cpu) changes nothing."""
    mod = caten.loads("(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))",
                      runtime="numpy")
    prog = mod.mm.elaborate({})
    avx2, avx512 = (pipeline.emit(R.get(rt), prog, "source", Options(target=cpu))
                    for cpu in ("znver3", "rocketlake"))
    assert avx2 == avx512
