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
        feats["padded window"] += any(s.op == "window" and s.p["pad"] and s.p["k"] > 1 for s in p.stmts)
    from caten.fuzz.gen import OPS

    assert set(OPS) <= set(ops), set(OPS) - set(ops)
    assert {"f32", "f64", "i32", "i64", "i8", "u8", "bool"} <= dtypes
    wanted = ("symbolic", "where", "outputs>1", "view output", "multi-axis reduce", "empty dim", "padded window")
    assert all(feats[k] >= 10 for k in wanted), feats


def test_no_jump_is_drawn_on_an_order_dependent_value():
    """Seed 102779 compared `(<= (mean X) 0.0)` where the mean was 0 in real arithmetic: the sign
    of the rounding decided, so two correct runtimes disagreed; seed 4003876 took sin of a squared
    sum of 2,730 values, where summation-order rounding moved the result by 0.003. Comparisons,
    casts to integers, argmax, sin and cos must not be drawn on a value computed from a float
    reduction (independent re-check of the lineage here)."""
    jumps = 0
    for seed in list(range(400)) + [102779, 4003876]:
        prog = generate(seed)
        env = infer(prog)
        floats = {n for n, t in env.items() if t.dtype in ("f32", "f64")}
        derived: set[str] = set()
        for s in prog.stmts:
            if any(a in derived for a in s.args):
                jump = (s.op == "bin" and s.p.get("f") in ("<", "<=", "=", "!=", ">")) or \
                    (s.op == "cast" and s.p["to"] not in ("f32", "f64")) or \
                    (s.op == "red" and s.p.get("f") == "argmax") or \
                    (s.op == "un" and s.p.get("f") in ("sin", "cos") and env[s.args[0]].dtype in ("f32", "f64")) or \
                    (s.op == "if" and env[s.args[0]].dtype in ("f32", "f64"))
                assert not jump, (seed, s)
            if s.name in floats and (s.op in ("red", "matmul", "dotimes", "loop", "if") or
                                     any(a in derived for a in s.args)):
                derived.add(s.name)
            jumps += s.op == "bin" and s.p.get("f") in ("<", "<=", "=", "!=", ">")
    assert jumps > 50  # comparisons are still drawn elsewhere


def test_the_reference_accepts_generated_programs():
    # (120067, 120391, 121145: a loop body's, or a scan's first carry's, max over an empty axis)
    for seed in list(range(40)) + [120067, 120391, 121145]:
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


# The trust issue's "slice store" reproducer (a slice of a computed tensor as an output), buried
# in noise. Before the fix the checked targets reported `buffer out0 ... extent 250` and the
# unchecked llvm code wrote into the guard bytes; now every target agrees with the reference.
def _slice_case() -> Prog:
    return Prog([("X0", "f32", (1000,)), ("X1", "f32", (3, 4))], {}, {}, [
        Stmt("v0", "un", ["X1"], {"f": "exp"}),
        Stmt("v1", "bin", ["X0"], {"f": "*", "lit": 2.0}),
        Stmt("v2", "flip", ["X1"], {"axis": 0}),
        Stmt("v3", "slice", ["v1"], {"bounds": [(0, 250, 1)]}),
    ], ["v3", "v0", "v2"])


def test_slice_store_reproducer_agrees_everywhere():
    prog = _slice_case()
    w = Worker()
    try:
        outs = check(render(prog), ENTRY, make_inputs(prog, 0), parse_targets("llvm+bounds,c+bounds,llvm"), w)
    finally:
        w.stop()
    assert [o.kind for o in outs] == ["ok"] * 3, outs


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_temp_written_by_one_kernel_and_read_by_the_next(rt):
    """caten fuzz seed 3002096: an i8 prod into a temp, then abs in a second kernel. GCC 12.2 at
    -O3 -march=native, with both kernels inlined into the entry and each holding a `restrict`
    pointer to the temp, loaded the temp before the first kernel's last stores (got 5 for -58's
    abs); the C kernels are now noinline."""
    src = "(composite fz ((X{i8}[1, 4, 8]) -> (Y{i8}[1, 8])) (abs (prod X :axis [1])))"
    x = np.random.default_rng(0).integers(-20, 20, (1, 4, 8)).astype(np.int8)
    want = np.abs(np.prod(x.astype(np.int64), axis=1).astype(np.int8))  # wraps: abs(-128) = -128
    np.testing.assert_array_equal(caten.loads(src, runtime=rt).fz(x), want)


def test_shrinker_keeps_only_what_the_failure_needs():
    """Delta debugging down to the two bindings a failure depends on (here: a slice of a product)."""
    def fails(q: Prog) -> bool:
        made = {s.name: s.op for s in q.stmts}
        return any(s.op == "slice" and made.get(s.args[0]) == "bin" for s in q.stmts)

    prog = _slice_case()
    small = shrink(prog, fails, budget=15)
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
