"""The differential program fuzzer (caten.fuzz, `caten fuzz`): its programs are deterministic,
well-typed and varied; it catches out-of-bounds accesses, guard overwrites, crashes and wrong
values and shrinks them; and a fixed-seed slice of it runs here against llvm and c."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten.cli.main import cli
from caten.fuzz.check import Target, Worker, check, compare, make_inputs, parse_targets
from caten.fuzz.driver import fuzz
from caten.fuzz.gen import ENTRY, generate, render
from caten.fuzz.shrink import shrink
from caten.fuzz.types import Prog, Stmt, infer


def test_programs_are_deterministic_per_seed():
    assert render(generate(7)) == render(generate(7))
    assert len({render(generate(s)) for s in range(20)}) == 20
    p = generate(11)
    assert all(np.array_equal(a, b) for a, b in zip(make_inputs(p, 11), make_inputs(p, 11)))


def test_programs_cover_the_language():
    """Over a few hundred seeds: every op kind, symbolic and literal dims, where-dims, every
    dtype, several outputs and outputs that are views of an input."""
    ops, dtypes, feats = collections.Counter(), set(), collections.Counter()
    for seed in range(400):
        p = generate(seed)
        ops.update(s.op for s in p.stmts)
        dtypes.update(t.dtype for t in infer(p).values())
        feats["symbolic"] += bool(p.sizes)
        feats["where"] += bool(p.wheres)
        feats["outputs>1"] += len(p.outputs) > 1
        feats["view output"] += any(o.startswith("w") for o in p.outputs)
        feats["multi-axis reduce"] += any(s.op == "red" and len(s.p["axes"]) > 1 for s in p.stmts)
        feats["empty dim"] += any(0 in t.shape for t in infer(p).values())
    from caten.fuzz.gen import OPS

    assert set(OPS) <= set(ops), set(OPS) - set(ops)
    assert {"f32", "f64", "i32", "i64", "i8", "u8", "bool"} <= dtypes
    wanted = ("symbolic", "where", "outputs>1", "view output", "multi-axis reduce", "empty dim")
    assert all(feats[k] >= 10 for k in wanted), feats


def test_the_reference_accepts_generated_programs():
    for seed in range(40):
        p = generate(seed)
        src = render(p)
        m = caten.loads(src, runtime="numpy", use_cache=False)
        outs = getattr(m, ENTRY)(*make_inputs(p, seed))
        outs = outs if isinstance(outs, tuple) else (outs,)
        env = infer(p)
        assert [o.shape for o in outs] == [env[n].shape for n in p.outputs], src


def test_compare_tolerates_rounding_but_not_errors():
    r = [np.array([1.0, 2.0, np.nan], np.float32), np.array([3, 4], np.int32)]
    assert compare(r, [np.array([1.0001, 2.0, np.nan], np.float32), np.array([3, 4], np.int32)]) is None
    assert "output 0 differs at [1]" in compare(r, [np.array([1.0, 2.5, np.nan], np.float32), r[1]])
    assert "output 1 differs" in compare(r, [r[0], np.array([3, 5], np.int32)])
    assert "expected float32[3]" in compare(r, [np.zeros(2, np.float32), r[1]])


def test_a_crash_in_the_worker_is_a_result():
    w = Worker("ctypes:string_at")  # reading address 0: SIGSEGV in the child
    try:
        kind, why = w(0)
        assert kind == "crash" and "SIGSEGV" in why
        assert w(0) == ("crash", why)  # a fresh worker took over, and crashed the same way
    finally:
        w.stop()


# The known "slice store" bug (being fixed on another branch), as a fuzz program buried in noise:
# the fuzzer must flag it on every target and shrink it to the two bindings that matter. KNOWN
# BUG: when the fix lands, these targets agree and this test flips to asserting "ok".
def _slice_bug() -> Prog:
    return Prog([("X0", "f32", (1000,)), ("X1", "f32", (3, 4))], {}, {}, [
        Stmt("v0", "un", ["X1"], {"f": "exp"}),
        Stmt("v1", "bin", ["X0"], {"f": "*", "lit": 2.0}),
        Stmt("v2", "flip", ["X1"], {"axis": 0}),
        Stmt("v3", "slice", ["v1"], {"bounds": [(0, 250, 1)]}),
    ], ["v3", "v0", "v2"])


def test_known_bug_slice_store_is_found_and_shrunk():
    prog = _slice_bug()
    targets = parse_targets("llvm+bounds,c+bounds,llvm")
    w = Worker()
    try:
        outs = check(render(prog), ENTRY, make_inputs(prog, 0), targets, w)
        kinds = {str(o.target): o.kind for o in outs}
        assert kinds["llvm+bounds"] == "oob" and kinds["c+bounds"] == "oob", outs
        assert "buffer out0" in outs[0].detail and "extent 250" in outs[0].detail
        assert kinds["llvm"] in ("guard", "crash"), outs  # the unchecked code writes past the output

        def fails(q: Prog) -> bool:
            return check(render(q), ENTRY, make_inputs(q, 0), [Target("c", True)], w)[0].kind == "oob"

        small = shrink(prog, fails, budget=15)
    finally:
        w.stop()
    assert [s.op for s in small.stmts] == ["bin", "slice"], render(small)
    assert small.outputs != prog.outputs and len(small.inputs) == 1


# The CI slice: fixed seeds on llvm and c (checked and unchecked), about a minute on 2 cores.
# Seeds that hit a bug listed in /work/notes/fuzz-findings.md stay out until it is fixed.
CI_SEEDS = range(0, 40)  # 32, 35 and 39 have empty dims


def test_fixed_seed_slice_agrees_with_the_reference():
    summary = fuzz(CI_SEEDS, parse_targets("llvm+bounds,c+bounds,llvm"), shrink_budget=20)
    assert not summary.rejected, summary.rejected
    assert summary.programs == len(CI_SEEDS)
    assert not summary.findings, "\n".join(f.report() for f in summary.findings)


def test_cli(tmp_path):
    r = CliRunner().invoke(cli, ["fuzz", "--seed", "3", "--show"])
    assert r.exit_code == 0 and "(composite fz" in r.output
    r = CliRunner().invoke(cli, ["fuzz", "--seed", "0", "--count", "2", "--targets", "c+bounds"])
    assert r.exit_code == 0, r.output
    assert "all agree with the reference" in r.output


@pytest.mark.parametrize("text,want", [("llvm+bounds,c", [Target("llvm", True), Target("c", False)])])
def test_parse_targets(text, want):
    assert parse_targets(text) == want
