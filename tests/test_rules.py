"""The rewrite engine (LANGUAGE.md section 6, docs/rules.md): matching, guards, both rule levels,
built-in rule sets and -O levels, non-termination, explain, `caten rules check`, the BLAS rule."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import caten
from caten.ir.interpret import evaluate
from caten.ir.ops import Op
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.rewrite import LEVELS, Explain, builtin_rules

ROOT = Path(__file__).resolve().parents[1]
BLAS = ROOT / "examples" / "rules" / "blas_matmul.lisp"
SIG = "(composite f ((X{f32}[N]) -> (Y{f32}[N]))\n"


def x32(n: int = 5) -> np.ndarray:
    return (np.arange(n, dtype=np.float32) - 2) / 3


def program(text: str, opt: int = 2, rules=None, runtime: str = "numpy", entry: str = "f", explain=None,
            types=None, dims=None):
    src = read_text(text, "prog.lisp")
    return compile_program(src, src.entry(entry), types or {}, dims or {},
                           Options.of(opt_level=opt, rules=rules, runtime=runtime, explain=explain))


def ops_of(prog) -> list[str]:
    from caten.ir.graph import toposort

    return [n.op.value for n in toposort(prog.nodes)]


def run_cli(args, cwd, timeout=120):
    env = dict(os.environ)
    env["CATEN_CACHE_DIR"] = str(Path(cwd) / ".caten-cache")
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# ------------------------------------------------------------------------------------------
# acceptance 1: user rules change results at every -O level; -O0 turns built-ins off

def test_user_rule_changes_what_is_computed(tmp_path):
    (tmp_path / "r.lisp").write_text("(defoptimizer e (exp ?x) => ?x)\n")
    src = SIG + "  (return (exp X)))\n"
    x = x32()
    plain = caten.loads(src, runtime="numpy").f(x)
    np.testing.assert_allclose(plain, np.exp(x), rtol=1e-6)
    for opt in (0, 1, 2, 3):
        ruled = caten.loads(src, runtime="numpy", rules=[str(tmp_path / "r.lisp")], opt_level=opt).f(x)
        np.testing.assert_array_equal(ruled, x)


def test_user_rule_through_the_cli(tmp_path):
    (tmp_path / "r.lisp").write_text("(defoptimizer e (exp ?x) => ?x)\n")
    (tmp_path / "p.lisp").write_text(SIG + "  (return (exp X)))\n")
    np.save(tmp_path / "x.npy", x32())
    for extra in ([], ["-O0"]):
        rc, out, err = run_cli(["run", "p.lisp", "-r", "numpy", "--rules", "r.lisp", *extra, "x.npy", "-o", "y.npy"],
                               tmp_path)
        assert rc == 0, out + err
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x32())
    rc, out, err = run_cli(["run", "p.lisp", "-r", "numpy", "x.npy", "-o", "y.npy"], tmp_path)
    assert rc == 0, out + err
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.exp(x32()), rtol=1e-6)


def test_O0_runs_no_builtin_rules():
    src = SIG + "  (return (- (NEG (NEG X)) (* 2 0))))\n"
    assert ops_of(program(src, opt=0)).count("NEG") == 3  # two, and the one of `-`
    assert ops_of(program(src, opt=2)) == ["BUFFER"]
    assert builtin_rules(0) == ()
    for opt in (1, 2, 3):
        sets = {r.ruleset for r in builtin_rules(opt)}
        assert sets == {s for s, lvl in LEVELS.items() if lvl <= opt}


def test_O1_folds_constants_only():
    src = SIG + "  (return (+ (NEG (NEG X)) (* (CONST 2 :dtype f32) (CONST 3 :dtype f32)))))\n"
    p1 = program(src, opt=1)
    assert ops_of(p1).count("NEG") == 2 and "MUL" not in ops_of(p1)
    np.testing.assert_allclose(evaluate(p1.nodes, [x32()], {"N": 5})[0], x32() + 6)


@pytest.mark.parametrize("rule", [r for r in builtin_rules(3)], ids=lambda r: r.name)
def test_each_builtin_rule_fires_and_preserves_results(rule):
    """Each built-in rule, on random programs of several dtypes and shapes: it fires, and the
    rewritten graph computes what the original does on the numpy reference."""
    from caten.elaborate.library import composites
    from caten.rewrite.check import check_rule

    out = check_rule(rule, composites())
    assert out.status == "ok", "\n".join(out.details) or str(out.error)
    assert out.cases >= 3


@pytest.mark.parametrize("expr,gone", [
    ("(- X 0)", "ADD"), ("(+ X -0.0)", "ADD"), ("(* 1 X)", "MUL"),
    ("(neg (neg X))", "NEG"), ("(where (NOT (NOT (< X 1))) X 0)", "NOT"),
    ("(where true X (exp X))", "WHERE"), ("(where (not (< X 0)) X (neg X))", "NOT"),
    ("(cast (cast X f64) f32)", "CAST"), ("(max X X)", "MAX"), ("(transpose (transpose (reshape X [1 N])))", None),
])
def test_builtin_rules_end_to_end(expr, gone):
    src = SIG + f"  (return {expr}))\n" if "reshape" not in expr else \
        SIG + f"  (return (reshape {expr} [N])))\n"
    x = x32()
    want = caten.loads(src, runtime="numpy", opt_level=0).f(x)
    got = caten.loads(src, runtime="numpy", opt_level=2).f(x)
    np.testing.assert_array_equal(got, want)
    if gone:
        assert gone not in ops_of(program(src, opt=2))
        assert gone in ops_of(program(src, opt=0))


def test_fold_uses_the_op_table():
    src = "(composite f ((X{i8}[N]) -> (Y{i8}[N])) (return (+ X (+ (CONST 100 :dtype i8) (CONST 100 :dtype i8)))))\n"
    p = program(src)
    assert ops_of(p).count("ADD") == 1  # 100 + 100 folded, wrapping like the interpreter
    x = np.arange(3, dtype=np.int8)
    np.testing.assert_array_equal(evaluate(p.nodes, [x], {"N": 3})[0], x + np.int8(-56))


def test_fastmath_only_on_request():
    """No -O level changes a result's bits; `--fast-math` (the builtin:fastmath set) does."""
    src = SIG + "  (return (RECIP (RECIP X))))\n"
    assert "RECIP" in ops_of(program(src, opt=2))
    assert "RECIP" in ops_of(program(src, opt=3))
    assert ops_of(program(src, opt=3, rules=["builtin:fastmath"])) == ["BUFFER"]


def test_adding_zero_keeps_the_sign_of_zero():
    """x + 0.0 is not x for floats (-0.0 + 0.0 is +0.0), so it is not folded; x + -0.0, x - 0 and
    an integer x + 0 are."""
    src = SIG + "  (return (+ X 0.0)))\n"
    assert "ADD" in ops_of(program(src))
    x = np.array([-0.0, 0.0, 1.5], np.float32)
    for rt in ("numpy", "llvm", "c"):
        y = caten.loads(src, runtime=rt).f(x)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(x + np.float32(0.0)))
    assert ops_of(program("(composite f ((X{i32}[N]) -> (Y{i32}[N])) (return (+ X 0)))\n")) == ["BUFFER"]


def test_cse_survives_rewriting():
    src = SIG + "  (return (* (- (neg (neg X)) 0) (- X 0))))\n"
    p = program(src)
    assert ops_of(p) == ["BUFFER", "MUL"]  # both operands became the one node X


# ------------------------------------------------------------------------------------------
# matching and guards

def test_repeated_variables_must_match_the_same_value():
    rules = "(defoptimizer sq (* ?x ?x) => (abs ?x))\n"
    same = rules + SIG + "  (return (* X X)))\n"
    other = rules + "(composite f ((X{f32}[N] Z{f32}[N]) -> (Y{f32}[N])) (return (* X Z)))\n"
    assert "MUL" not in ops_of(program(same))
    assert "MUL" in ops_of(program(other))


def test_literal_matches_an_equal_constant_only():
    rules = "(defoptimizer m2 (MUL ?x 2) => (ADD ?x ?x))\n"
    assert "ADD" in ops_of(program(rules + SIG + "  (return (* X 2)))\n"))
    assert "ADD" not in ops_of(program(rules + SIG + "  (return (* X 3)))\n"))
    assert "ADD" in ops_of(program(rules + SIG + "  (return (* X 2.0)))\n"))


@pytest.mark.parametrize("guard,fires", [
    ("(= (dtype ?x) f32)", True), ("(= (dtype ?x) f64)", False), ("(= (rank ?x) 1)", True),
    ("(> (rank ?x) 1)", False), ("(= (shape ?x) [5])", True), ("(const? ?x)", False), ("(not (const? ?x))", True),
    ("(and (float? ?x) (or (= (rank ?x) 3) (= (dim ?x 0) 5)))", True), ("(lossless? (dtype ?x) f64)", True),
])
def test_guards(guard, fires):
    src = f"(defoptimizer r (exp ?x) => ?x :when {guard})\n" + SIG + "  (return (exp X)))\n"
    assert ("EXP2" not in ops_of(program(src, dims={"N": 5}))) == fires


def test_keyword_patterns_and_defaults():
    rules = "(defoptimizer sm (softmax ?x :axis -1) => (neg ?x))\n"
    sig = "(composite f ((X{f32}[M, N]) -> (Y{f32}[M, N]))\n"
    x = np.ones((2, 3), np.float32)
    for call, fires in (("(softmax X)", True), ("(softmax X :axis -1)", True), ("(softmax X :axis 0)", False)):
        y = caten.loads(rules + sig + f"  (return {call}))\n", runtime="numpy").f(x)
        assert np.array_equal(y, -x) == fires, call


def test_nested_library_and_principal_patterns():
    rules = "(defoptimizer r (exp (ADD ?a ?b)) => (* (exp ?a) (exp ?b)))\n"
    src = rules + "(composite f ((X{f32}[N] Z{f32}[N]) -> (Y{f32}[N])) (return (exp (+ X Z))))\n"
    x, z = x32(), x32() * 2
    y = caten.loads(src, runtime="numpy").f(x, z)
    np.testing.assert_allclose(y, np.exp(x) * np.exp(z), rtol=1e-6)


def test_runtime_option_restricts_a_rule():
    src = "(defoptimizer e (exp ?x) => ?x :runtime llvm)\n" + SIG + "  (return (exp X)))\n"
    assert "EXP2" in ops_of(program(src, runtime="numpy"))
    assert "EXP2" not in ops_of(program(src, runtime="llvm"))


def test_rules_match_inside_library_composites():
    src = "(defoptimizer e (exp ?x) => ?x)\n" + SIG + "  (return (sigmoid X)))\n"
    x = x32()
    np.testing.assert_allclose(caten.loads(src, runtime="numpy").f(x), 1 / (1 - x), rtol=1e-6)


# ------------------------------------------------------------------------------------------
# acceptance 2: non-termination is a diagnostic naming the rules, at the rule

@pytest.mark.parametrize("rule", ["(defoptimizer swap (+ ?a ?b) => (+ ?b ?a))",
                                  "(defoptimizer swap (ADD ?a ?b) => (ADD ?b ?a))"])
def test_swap_rule_stops_quickly_with_a_diagnostic(rule):
    src = rule + "\n(composite f ((X{f32}[N] Z{f32}[N]) -> (Y{f32}[N])) (return (+ X Z)))\n"
    t0 = time.perf_counter()
    with pytest.raises(caten.Error) as ei:
        program(src)
    assert time.perf_counter() - t0 < 1.0
    e = ei.value
    assert "swap" in str(e) and "converge" in str(e)
    assert (e.file, e.line, e.col) == ("prog.lisp", 1, 1)


def test_two_rules_undoing_each_other_are_both_named():
    src = ("(defoptimizer to-mul (ADD ?x ?x) => (MUL ?x 2))\n(defoptimizer to-add (MUL ?x 2) => (ADD ?x ?x))\n"
           + SIG + "  (return (+ X X)))\n")
    with pytest.raises(caten.Error) as ei:
        program(src)
    assert "to-mul" in str(ei.value) and "to-add" in str(ei.value)


def test_growing_rule_at_graph_level_stops():
    src = "(defoptimizer grow (NEG ?x) => (NEG (ADD (NEG (NEG ?x)) 0)))\n" + SIG + "  (return (neg X)))\n"
    with pytest.raises(caten.Error) as ei:
        program(src, opt=0)
    assert "grow" in str(ei.value)


def test_swap_rule_cli_exit_1(tmp_path):
    (tmp_path / "swap.lisp").write_text("(defoptimizer swap (+ ?a ?b) => (+ ?b ?a))\n")
    (tmp_path / "p.lisp").write_text("(composite f ((X{f32}[N] Z{f32}[N]) -> (Y{f32}[N])) (return (+ X Z)))\n")
    np.save(tmp_path / "x.npy", x32())
    t0 = time.perf_counter()
    rc, out, err = run_cli(["run", "p.lisp", "-r", "numpy", "--rules", "swap.lisp", "X=x.npy", "Z=x.npy",
                            "-o", "y.npy"], tmp_path)
    assert rc == 1 and "swap.lisp:1:1: error:" in err and "swap" in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------------------
# rules checked at load

@pytest.mark.parametrize("rule,needle,at", [
    ("(defoptimizer bad (neg ?x) => ?y)", "?y", "?y"),
    ("(defoptimizer bad (neg ?x) => ?x :when (> (rank ?z) 0))", "?z", "?z"),
    ("(defoptimizer bad (nge ?x) => ?x)", "nge", "nge"),
    ("(defoptimizer bad (neg X) => X)", "X", "X)"),
    ("(defoptimizer bad (neg ?x) => ?x :when (rnak ?x))", "rnak", "rnak"),
    ("(defoptimizer bad (neg ?x) => ?x :speed 3)", ":speed", "3)"),
    ("(defoptimizer bad (ADD ?x) => ?x)", "ADD", "(ADD"),
])
def test_bad_rules_are_load_errors(rule, needle, at):
    with pytest.raises(caten.Error) as ei:
        program(rule + "\n" + SIG + "  (return (neg X)))\n")
    e = ei.value
    assert needle in f"{e} {e.hint}"
    assert (e.file, e.line, e.col) == ("prog.lisp", 1, rule.index(at) + 1)


def test_replacement_changing_shape_or_dtype_is_rejected_at_the_rule():
    sig = "(composite f ((X{f32}[M, N]) -> (Y{f32}[M]))\n"
    src = "\n(defoptimizer flat (sum ?x :axis 1) => (sum ?x))\n" + sig + "  (return (sum X :axis 1)))\n"
    with pytest.raises(caten.Error) as ei:
        program(src)
    assert "shape" in str(ei.value) and ei.value.line == 2
    src = "(defoptimizer tocast (NEG ?x) => (CAST ?x f64))\n" + SIG + "  (return (neg X)))\n"
    with pytest.raises(caten.Error) as ei:
        program(src)
    assert "dtype" in str(ei.value) and ei.value.line == 1


def test_missing_rule_file_is_a_diagnostic(tmp_path):
    with pytest.raises(caten.Error):
        program(SIG + "  (return (neg X)))\n", rules=[str(tmp_path / "nope.lisp")])


# ------------------------------------------------------------------------------------------
# acceptance 3: caten rules check

def test_rules_check_finds_the_sqrt_counterexample(tmp_path):
    (tmp_path / "bad.lisp").write_text("(defoptimizer bad (sqrt (* ?x ?x)) => ?x)\n")
    rc, out, err = run_cli(["rules", "check", "bad.lisp"], tmp_path)
    assert rc == 1, out + err
    text = out + err
    assert "bad.lisp:1:1: error: rule `bad` is unsound" in text
    assert "counterexample" in text and "?x =" in text and "pattern" in text and "replacement" in text


def test_rules_check_passes_every_builtin_file(tmp_path):
    files = sorted(str(p) for p in (ROOT / "ops" / "rules").glob("*.lisp")) + [str(BLAS)]
    rc, out, err = run_cli(["rules", "check", *files, "-v"], tmp_path, timeout=300)
    assert rc == 0, out + err
    assert "0 unsound" in out and "warning" not in out


def test_rules_check_nan_is_equal_to_nan(tmp_path):
    # x * 1 keeps nan and inf: both sides nan must count as agreement
    (tmp_path / "ok.lisp").write_text("(defoptimizer ok (MUL ?x 1) => ?x)\n(defoptimizer z (MUL ?x 0) => 0)\n")
    from caten.cli.rules import check_files

    assert check_files([str(tmp_path / "ok.lisp")], False) == 1  # the second rule: nan * 0 is nan


# ------------------------------------------------------------------------------------------
# acceptance 4: the BLAS rule

def test_blas_rule_routes_f32_matmul_to_extern():
    src = "(composite mm ((A{f32}[M, K] B{f32}[K, N]) -> (C{f32}[M, N])) (return (matmul A B)))\n"
    p = program(src, rules=[str(BLAS)], runtime="llvm", entry="mm")
    assert ops_of(p) == ["BUFFER", "BUFFER", "EXTERN"]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    got = evaluate(p.nodes, [a, b], {"M": 3, "K": 4, "N": 5})[0]
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-6)
    # not for other runtimes, other dtypes or batched operands
    assert "EXTERN" not in ops_of(program(src, rules=[str(BLAS)], runtime="numpy", entry="mm"))
    f64 = src.replace("f32", "f64")
    assert "EXTERN" not in ops_of(program(f64, rules=[str(BLAS)], runtime="llvm", entry="mm"))
    bat = "(composite mm ((A{f32}[B, M, K] W{f32}[K, N]) -> (C{f32}[B, M, N])) (return (matmul A W)))\n"
    assert "EXTERN" not in ops_of(program(bat, rules=[str(BLAS)], runtime="llvm", entry="mm"))


def test_blas_rule_inside_linear():
    src = "(composite lin ((X{f32}[M, K] W{f32}[K, N] b{f32}[N]) -> (Y{f32}[M, N])) (return (linear X W b)))\n"
    p = program(src, rules=[str(BLAS)], runtime="llvm", entry="lin")
    assert "EXTERN" in ops_of(p)
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 4), (4,)))
    np.testing.assert_allclose(evaluate(p.nodes, [x, w, b], {"M": 2, "K": 3, "N": 4})[0], x @ w + b, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# explain

def test_explain_reports_rules_places_counts_and_time():
    ex = Explain()
    src = "(defoptimizer e (exp ?x) => ?x)\n" + SIG + "  (setf a (exp X))\n  (return (- (neg (neg a)) 0)))\n"
    program(src, explain=ex)
    rep = ex.report()
    assert "e  [prog.lisp" in rep and "at prog.lisp:3:11" in rep
    assert "neg-neg-call" in rep and "add-zero" in rep and "fired 1 time" in rep
    assert "time per rule set:" in rep and "fold" in rep and "algebra" in rep and " ms" in rep


def test_explain_rules_cli(tmp_path):
    (tmp_path / "p.lisp").write_text(SIG + "  (return (neg (neg X))))\n")
    np.save(tmp_path / "x.npy", x32())
    rc, out, err = run_cli(["run", "p.lisp", "-r", "numpy", "--explain-rules", "x.npy", "-o", "y.npy"], tmp_path)
    assert rc == 0, out + err
    assert "neg-neg-call" in out + err and "p.lisp:2:11" in out + err


# ------------------------------------------------------------------------------------------
# acceptance 5: near-linear cost

def test_ten_thousand_nodes_fifty_rules_is_fast():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_rules
    finally:
        sys.path.pop(0)
    size, after, ms, _ = bench_rules.bench(10000, 1)
    assert size == 10000 and after < size
    assert ms < 2000  # the benchmark's target is 200 ms; this bound leaves room for loaded CI machines


def test_graph_rules_keep_outputs_and_reduce_nodes():
    src = SIG + "  (return (+ (* (- X 0) 1) (NEG (NEG (CONST -0.0 :dtype f32))))))\n"
    p = program(src)
    assert ops_of(p) == ["BUFFER"] and p.nodes[0].op is Op.BUFFER


@pytest.mark.parametrize("rule", [
    "(defoptimizer r (neg ?x) => (neg ?x ?x))", "(defoptimizer r (neg ?x) => [?x])",
    "(defoptimizer r (neg ?x) => (fold ?x))", '(defoptimizer r (NEG ?x) => "s")',
    "(defoptimizer r (NEG ?x) => (fold (EXP2 ?x)))", "(defoptimizer r (neg ?x) => (cast ?x i32))",
    "(defoptimizer r (REDUCE ?x :op ?o :axis ?a) => (REDUCE ?x :op ?o :axis ?a))",
    "(defoptimizer r (sum ?x :axis ?a) => (sum ?x :axis ?a :keepdims true))",
    "(defoptimizer r (neg ?x) => (unknown-fn ?x))", "(defoptimizer r (neg ?x) => (return ?x))",
    "(defoptimizer r (neg ?x) => nil)", "(defoptimizer r (neg ?x) => f32)",
])
def test_broken_rules_are_diagnostics_not_crashes(rule):
    src = rule + "\n(composite f ((X{f32}[M, N]) -> (Y{f32}[M])) (return (sum (neg (neg X)) :axis 1)))\n"
    try:
        p = program(src)
    except caten.Error as e:
        assert e.line is not None
        return
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(evaluate(p.nodes, [x], {"M": 2, "N": 3})[0], x.sum(1))


def test_harmless_rules_leave_results_alone():
    rules = ["(defoptimizer r (CAST ?x ?t) => (CAST ?x ?t))", "(defoptimizer r (neg ?x) => ?x :when (dim ?x 7))"]
    for r in rules:
        src = r + "\n" + SIG + "  (return (neg (cast X f32))))\n"
        np.testing.assert_array_equal(caten.loads(src, runtime="numpy").f(x32()), -x32())
