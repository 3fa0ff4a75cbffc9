"""caten.ir.verify: the graph checker run between stages (CATEN_VERIFY=1, `caten --debug`; the
suite turns it on in conftest.py). It must accept every graph the stages build, and catch the
malformed ones a buggy stage would build, with a message naming the node and the problem."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.elaborate.library import composites
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.ir.verify import VerifyError, enabled, problems, verify
from caten.ir.view import View


def _x(dt=T.f32, shape=(3,)):
    return B.buffer(dt, shape, 0, "x")


def test_the_suite_runs_with_the_verifier_on():
    assert enabled()


def test_well_formed_graphs_pass():
    x, y = _x(), B.buffer(T.f32, (3,), 1, "y")
    s = B.reduce(B.alu(Op.EXP2, B.alu(Op.ADD, x, y)), "add", (0,))
    w = B.alu(Op.WHERE, B.alu(Op.CMPLT, x, y), x, B.expand(B.const(1.5, T.f32), (3,)))
    idx = B.cast(B.index((3, 4), 1, T.i32), T.f64)
    verify([s, w, idx, B.rand_bits((2, 2), 7), B.copy(B.permute(B.reshape(x, (3, 1)), (1, 0)))], "a test")


@pytest.mark.parametrize("name,build,want", [
    ("operand dtype", lambda: Node.make(Op.ADD, T.f32, (3,), (_x(), _x(T.i32)), None),
     "operands have different dtypes"),
    ("float op on ints", lambda: Node.make(Op.SQRT, T.i32, (3,), (_x(T.i32),), None), "SQRT needs a float operand"),
    ("result dtype", lambda: Node.make(Op.CMPLT, T.f32, (3,), (_x(), _x()), None), "dtype should be bool"),
    ("arity", lambda: Node.make(Op.ADD, T.f32, (3,), (_x(),), None), "ADD takes 2 operands, this node has 1"),
    ("arity of WHERE", lambda: Node.make(Op.WHERE, T.f32, (3,), (_x(T.bool_), _x()), None), "takes 3 operands"),
    ("unbroadcast operand", lambda: Node.make(Op.MUL, T.f32, (3,), (_x(), _x(shape=(1,))), None),
     "an elementwise operand has shape [1], the node [3]"),
    ("reduce shape", lambda: Node.make(Op.REDUCE, T.f32, (3,), (_x(shape=(3, 4)),), ("add", (1,))),
     "a reduction keeps its rank"),
    ("reduce kept axis", lambda: Node.make(Op.REDUCE, T.f32, (3, 4), (_x(shape=(3, 4)),), ("add", (1,))),
     "shape should be [3, 1]"),
    ("reduce op", lambda: Node.make(Op.REDUCE, T.f32, (1,), (_x(),), ("min", (0,))), "its arg should be (op, axes)"),
    ("cast arg", lambda: Node.make(Op.CAST, T.f64, (3,), (_x(),), "f64"), "its arg should be the target dtype"),
    ("cast dtype", lambda: Node.make(Op.CAST, T.f64, (3,), (_x(),), T.i32), "dtype should be i32"),
    ("alu arg", lambda: Node.make(Op.NEG, T.f32, (3,), (_x(),), 5), "its arg should be nothing"),
    ("view shape", lambda: Node.make(Op.VIEW, T.f32, (4,), (_x(),), View.of((3,))), "the view's shape [3]"),
    ("const shape", lambda: Node.make(Op.CONST, T.f32, (3,), (), 1.0), "a CONST is a scalar"),
    ("const value", lambda: Node.make(Op.CONST, T.i8, (), (), 300), "does not fit i8"),
    ("const kind", lambda: Node.make(Op.CONST, T.bool_, (), (), 1), "a bool constant holds 1"),
    ("index dtype", lambda: Node.make(Op.INDEX, T.f32, (3,), (), (T.f32, 0)), "INDEX gives i32, i64, not f32"),
    ("index axis", lambda: Node.make(Op.INDEX, T.i64, (3,), (), (T.i64, 2)), "axis 2 out of range"),
    ("negative dim", lambda: Node.make(Op.NEG, T.f32, (-1,), (_x(shape=(-1,)),), None), "dimension -1 is not a size"),
])
def test_malformed_graphs_are_caught(name, build, want):
    bad = build()
    found = problems([bad])
    assert any(want in p for p in found), found
    with pytest.raises(VerifyError) as e:
        verify([bad], "a buggy stage")
    msg = e.value.message
    assert "after a buggy stage is malformed" in msg and want in msg and f"{bad!r}" in msg
    assert "compiler bug" in e.value.hint


def test_a_malformed_replacement_is_caught_when_the_graph_leaves_the_rewriter(monkeypatch):
    """A rewrite that builds an ADD over an f32 and an f64 operand (its own dtype and shape are
    right, so the engine's conformance check lets it through) is named when the graph leaves."""
    from caten.rewrite import replace

    real = replace._alu

    def broken(op, vals, sp):
        n = real(op, vals, sp)
        return Node.make(Op.ADD, n.dtype, n.shape, (n.src[0], B.cast(n.src[1], T.f64))) if n.op is Op.ADD else n
    monkeypatch.setattr(replace, "_alu", broken)
    src = ("(defoptimizer twice (MUL ?a 2) => (ADD ?a ?a))\n"
           "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (* X 2.0)))\n")
    with pytest.raises(VerifyError, match=r"after the rewrite rules \(`f`\) is malformed") as e:
        caten.loads(src, runtime="numpy", opt_level=0, use_cache=False).f(np.ones(3, np.float32))
    assert "operands have different dtypes (f32, f64)" in e.value.message
    monkeypatch.delenv("CATEN_VERIFY")
    caten.loads(src, runtime="numpy", opt_level=0, use_cache=False).f(np.ones(3, np.float32))  # off: unchecked


def test_debug_flag_turns_the_verifier_on_for_its_compile(monkeypatch, tmp_path):
    """`--debug` is `Options.debug`: the graph is checked during that compile (the elaborator's
    and the rewrite engine's checks run), without it not, and the environment is left alone."""
    import os

    from click.testing import CliRunner

    from caten.cli.main import cli
    from caten.ir import verify as V

    monkeypatch.delenv("CATEN_VERIFY")
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    stages: list[str] = []
    real = V.verify
    monkeypatch.setattr(V, "verify", lambda nodes, stage: (stages.append(stage), real(nodes, stage)))
    (tmp_path / "p.lisp").write_text("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (exp X)))\n")
    r = CliRunner().invoke(cli, ["compile", str(tmp_path / "p.lisp"), "-r", "numpy", "--emit", "ir", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert stages == []
    r = CliRunner().invoke(cli, ["compile", str(tmp_path / "p.lisp"), "-r", "numpy", "--debug", "--emit", "ir",
                                 "--no-cache"])
    assert r.exit_code == 0, r.output
    assert any("elaborating `f`" in s for s in stages), stages
    assert not enabled() and "CATEN_VERIFY" not in os.environ


def test_every_library_composite_of_one_tensor_builds_a_well_formed_graph():
    """Each library composite taking one tensor, on f32 and i32 inputs: the graph it elaborates to,
    before and after the -O2 rules, passes the verifier (a dtype a composite rejects is skipped)."""
    from caten.elaborate.elaborator import Elaborator, Frame, Scope
    from caten.elaborate.values import Tensor
    from caten.read.reader import read
    from caten.rewrite import Engine, builtin_rules

    lib = composites()
    names = [n for n, ds in sorted(lib.items())
             if any(d.arity == 1 and d.rest is None and d.params and d.params[0].tensor for d in ds)]
    assert len(names) > 40
    checked = 0
    for name in names:
        for dt in (T.f32, T.i32):
            elab = Elaborator({})
            elab.frames.append(Frame(None, False))
            x = Tensor(B.buffer(dt, (4, 3), 0, "x"))
            try:
                v = elab.eval(read(f"({name} ?x)")[0], Scope(None, {"?x": x}))
            except caten.Error:
                continue
            if not isinstance(v, Tensor):
                continue
            verify([v.node], f"elaborating ({name} x{{{dt}}})")
            engine = Engine(list(builtin_rules(2)))
            engine.elab = elab
            verify(engine.rewrite([v.node], name), f"rewriting ({name} x{{{dt}}})")
            checked += 1
    assert checked > 40


@pytest.mark.parametrize("sig,defines,where", [
    ("((X{f32}[-1]) -> (Y{f32}[-1]))", None, "dimension -1 of `X` is -1"),
    ("((X{f32}[(- 2 5)]) -> (Y{f32}[(- 2 5)]))", None, "of `X` is -3"),
    ("((X{f32}[N]) -> (Y{f32}[N]))", {"N": -3}, "dimension N of `X` is -3"),
])
def test_a_negative_signature_dimension_is_a_diagnostic(sig, defines, where):
    """Found by the verifier (a BUFFER of shape [-1] used to compile): now the signature is refused
    where it is written."""
    with pytest.raises(caten.Error) as e:
        caten.loads(f"(composite f {sig} (return X))\n", runtime="numpy", defines=defines).f(np.ones(1, np.float32))
    assert not isinstance(e.value, VerifyError)
    assert where in e.value.message and "cannot be negative" in e.value.message and e.value.line == 1
