"""Op classes in rule patterns (docs/rules.md "Op classes"): `(?op{binary} ?a ?b)` matches any op
of a class derived from the op table and binds ?op for the replacement. Folding is written with
them (ops/rules/fold.lisp); user rule files get the same power. Values are checked against numpy
on the numpy, llvm and c runtimes."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caten
from caten.errors import Error
from caten.ir.graph import toposort
from caten.ir.ops import TABLE, Op
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.rewrite import guard as G
from caten.rewrite.opclass import CLASSES, _classes

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ["numpy", "llvm", "c"]


def program(text: str, opt: int, rules=None):
    src = read_text(text, "prog.lisp")
    return compile_program(src, src.entry("f"), {}, {}, Options.of(opt_level=opt, rules=rules, runtime="numpy"))


def ops_of(prog) -> list[str]:
    return [n.op.value for n in toposort(prog.nodes)]


# every op folding goes through: (constants as source, their dtype, numpy's result)
_C = {"f32": ("(CONST 2.5 :dtype f32)", "(CONST -0.75 :dtype f32)", "(CONST 0.5 :dtype f32)"),
      "i32": ("(CONST 13 :dtype i32)", "(CONST -5 :dtype i32)", "(CONST 6 :dtype i32)")}
_NP = {
    Op.NEG: ("f32", np.negative), Op.RECIP: ("f32", np.reciprocal), Op.SQRT: ("f32", np.sqrt),
    Op.EXP2: ("f32", np.exp2), Op.LOG2: ("f32", np.log2), Op.SIN: ("f32", np.sin), Op.NOT: ("i32", np.invert),
    Op.ADD: ("f32", np.add), Op.MUL: ("i32", np.multiply), Op.FDIV: ("f32", np.divide),
    Op.IDIV: ("i32", np.floor_divide), Op.MOD: ("i32", np.mod), Op.MAX: ("f32", np.maximum),
    Op.AND: ("i32", np.bitwise_and), Op.OR: ("i32", np.bitwise_or), Op.XOR: ("i32", np.bitwise_xor),
    Op.CMPLT: ("f32", np.less), Op.CMPNE: ("i32", np.not_equal),
    Op.WHERE: ("f32", None),
}
_VALS = {"f32": np.array([2.5, -0.75, 0.5], np.float32), "i32": np.array([13, -5, 6], np.int32)}


def test_every_foldable_op_is_covered():
    assert set(_NP) == CLASSES["unary"] | CLASSES["binary"] | CLASSES["ternary"]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("op", list(_NP), ids=lambda o: o.value)
def test_class_fold_rules_fold_every_op(rt, op):
    """At -O1 the class rules of fold.lisp leave no `op` node, and the folded value is numpy's."""
    dt, fn = _NP[op]
    n = TABLE[op].arity
    if op is Op.WHERE:
        expr = f"(WHERE (CMPLT {_C['f32'][1]} {_C['f32'][0]}) {_C['f32'][0]} {_C['f32'][2]})"
        want = np.float32(2.5)
    else:
        expr = f"({op.value} {' '.join(_C[dt][:n])})"
        with np.errstate(all="ignore"):
            want = fn(*_VALS[dt][:n])
    src = f"(composite f ((X{{f32}}[N]) -> (Y{{f32}}[N])) (return (+ X (cast {expr} f32))))\n"
    before = ops_of(program(src, opt=0)).count(op.value)
    assert before >= 1 and ops_of(program(src, opt=1)).count(op.value) == before - 1  # folded
    x = np.arange(4, dtype=np.float32)
    got = caten.loads(src, runtime=rt, opt_level=1).f(x)
    np.testing.assert_allclose(got, x + np.float32(want), rtol=2e-7)


RULES = """
;; a constant chain of one associative op folds into one constant: (x op c1) op c2 = x op (c1 op c2)
(defoptimizer reassoc (?op{associative} (?op ?x ?c1) ?c2) => (?op ?x (?op ?c1 ?c2))
  :when (and (const? ?c1) (const? ?c2)))
;; constants to the right of a commutative op
(defoptimizer const-right (?op{commutative} ?c ?x) => (?op ?x ?c) :when (and (const? ?c) (not (const? ?x))))
"""

PROG = """(composite f ((X{i32}[N]) -> (A{i32}[N]) (M{i32}[N]) (B{i32}[N]) (K{i32}[N]) (Q{i32}[N]) (E{bool}[N]))
  (return (+ (+ X 1000000000) 2000000000) (* (* X 3) 5) (max (max X -3) 7) (AND (AND X 12) 10)
          (+ (* X 3) 4) (CMPNE 4 X)))
"""


def _numpy_prog(x: np.ndarray) -> list[np.ndarray]:
    with np.errstate(over="ignore"):
        return [x + np.int32(1000000000) + np.int32(2000000000), x * np.int32(15), np.maximum(x, 7), x & 8,
                x * np.int32(3) + np.int32(4), x != 4]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_user_rule_file_with_op_classes(rt, tmp_path):
    (tmp_path / "r.lisp").write_text(RULES)
    rules = [str(tmp_path / "r.lisp")]
    x = np.array([-7, 0, 3, 2147483000, -2147483000, 9], np.int32)
    got = caten.loads(PROG, runtime=rt, opt_level=1, rules=rules).f(x)
    for g, w in zip(got, _numpy_prog(x)):
        np.testing.assert_array_equal(g, w)
    p = program(PROG, opt=1, rules=rules)
    a, m, b, k, q, e = p.nodes
    for out, op in ((a, Op.ADD), (m, Op.MUL), (b, Op.MAX), (k, Op.AND)):
        assert out.op is op and out.src[0].op is Op.BUFFER, out  # one op over x and one constant
    assert q.op is Op.ADD and q.src[0].op is Op.MUL  # a chain of two ops is left alone
    assert e.op is Op.CMPNE and e.src[0].op is Op.BUFFER  # the constant moved right
    plain = program(PROG, opt=1)
    assert len(ops_of(plain)) > len(ops_of(p))


def test_classes_are_derived_from_the_table(monkeypatch):
    from caten.ir import ops as O

    for name in ("commutative", "associative"):
        assert CLASSES[name] == {o for o in CLASSES["elementwise"] if getattr(TABLE[o], name)}
    assert Op.CAST not in CLASSES["elementwise"]  # its node holds a dtype besides its operand
    monkeypatch.setitem(O.TABLE, Op.XOR, dataclasses.replace(TABLE[Op.XOR], commutative=False))
    assert Op.XOR not in _classes()["commutative"] and Op.XOR in _classes()["associative"]


def test_class_table_in_the_docs_is_the_table_s():
    rows = {}
    section = (ROOT / "docs" / "rules.md").read_text().split("## Op classes")[1].split("\n## ")[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows[cells[0].strip("`")] = {Op[w] for w in cells[1].strip("`").split()}
    assert set(rows) | {"elementwise"} == set(CLASSES)
    for name, ops in rows.items():
        assert ops == CLASSES[name], name


@pytest.mark.parametrize("text,msg", [
    ("(defoptimizer r (?op{binari} ?a ?b) => ?a)", "unknown op class `binari`"),
    ("(defoptimizer r (?op{unary} ?a ?b) => ?a)", "no op of class `unary` takes 2 operand(s)"),
    ("(defoptimizer r (?op{binary} ?op ?b) => ?b)", "`?op` names an op"),
    ("(defoptimizer r (ADD ?x (?x{unary} ?y)) => ?y)", "`?x` stands for an operand"),
    ("(defoptimizer r (?op{unary} ?a) => ?op)", "`?op` names an op: in the replacement"),
    ("(defoptimizer r (NEG ?a) => (?a ?a))", "`?a` heads a call in the replacement"),
    ("(defoptimizer r (?op{binary} ?a ?b :axis 1) => ?a)", "operands only"),
])
def test_class_pattern_diagnostics(tmp_path, text, msg):
    (tmp_path / "r.lisp").write_text(text + "\n")
    src = "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (NEG X)))\n"
    with pytest.raises(Error) as e:
        caten.loads(src, runtime="numpy", rules=[str(tmp_path / "r.lisp")])
    assert msg in e.value.message and e.value.span is not None and e.value.span.line == 1


def _cli(args, cwd):
    env = dict(os.environ, CATEN_CACHE_DIR=str(Path(cwd) / ".cache"))
    return subprocess.run([sys.executable, "-m", "caten", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_rules_check_runs_a_class_rule_on_each_op(tmp_path):
    (tmp_path / "good.lisp").write_text(RULES)
    p = _cli(["rules", "check", "good.lisp", "-v"], tmp_path)
    assert p.returncode == 0 and "2 rules checked, 0 unsound" in p.stdout, p.stdout + p.stderr
    # 0 is a right identity of ADD, not of AND: the check must find AND's counterexample
    (tmp_path / "bad.lisp").write_text("(defoptimizer zero (?op{associative} ?a 0) => ?a :when (int? ?a))\n")
    p = _cli(["rules", "check", "bad.lisp"], tmp_path)
    assert p.returncode == 1 and "is unsound" in p.stdout and "?op = AND" in p.stdout, p.stdout + p.stderr


def _rewrite_imports(module: str) -> set[str]:
    """The caten.rewrite modules `module` imports, followed transitively (module level and local)."""
    import ast

    seen: set[str] = set()
    todo = [module]
    while todo:
        tree = ast.parse((ROOT / "caten" / "rewrite" / f"{todo.pop()}.py").read_text())
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module == "caten.rewrite":
                names = [f"caten.rewrite.{a.name}" for a in node.names]
            for n in names:
                if n.startswith("caten.rewrite.") and n.split(".")[2] not in seen:
                    seen.add(n.split(".")[2])
                    todo.append(n.split(".")[2])
    return seen


def test_guard_names_live_in_guard_and_rule_does_not_import_back():
    assert "guard" in _rewrite_imports("rule")
    assert "rule" not in _rewrite_imports("guard")
    from caten.rewrite import rule

    assert not [n for n in vars(rule) if n.startswith("GUARD_")]


@pytest.mark.parametrize("name", sorted(G.ARITY))
def test_every_guard_name_compiles_with_its_arity(tmp_path, name):
    n = G.ARITY[name]
    good = 2 if n in ("+", "*") else n
    bad = 0 if n == "+" else None if n == "*" else n + 1
    src = "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (NEG X)))\n"
    for count, ok in ((good, True), (bad, False)):
        if count is None:
            continue
        guard = f"({name} {' '.join(['1'] * count)})"
        (tmp_path / "r.lisp").write_text(f"(defoptimizer r (NEG ?x) => ?x :when (not {guard}))\n")
        if ok:
            caten.loads(src, runtime="numpy", rules=[str(tmp_path / "r.lisp")])
        else:
            with pytest.raises(Error, match=re.escape(f"`{name}` takes")):
                caten.loads(src, runtime="numpy", rules=[str(tmp_path / "r.lisp")])


@pytest.mark.parametrize("rt", RUNTIMES)
def test_class_pattern_inside_a_call_pattern_with_an_elaborated_replacement(rt, tmp_path):
    """A call-level rule whose argument pattern names a class; its replacement calls the library
    (elaborated, not built directly), with the matched op substituted for ?op."""
    (tmp_path / "r.lisp").write_text("(defoptimizer neg-op (neg (?op{unary} ?a)) => (- 0 (?op ?a)))\n")
    src = "(composite f ((X{f32}[N]) -> (Y{f32}[N]) (Z{f32}[N])) (return (neg (SQRT X)) (neg (EXP2 X))))\n"
    rules = [str(tmp_path / "r.lisp")]
    p = program(src, opt=0, rules=rules)
    assert [n.op for n in p.nodes] == [Op.ADD, Op.ADD]  # both rewritten: (- 0 v) is (ADD 0 (NEG v))
    x = np.array([0.0, 0.25, 4.0, 9.0], np.float32)
    y, z = caten.loads(src, runtime=rt, opt_level=0, rules=rules).f(x)
    np.testing.assert_array_equal(y, -np.sqrt(x))
    np.testing.assert_allclose(z, -np.exp2(x), rtol=1e-6)
