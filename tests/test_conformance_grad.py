"""Gradient cases of `caten test-runtime` (issue #14): derived from the op table and the library,
checked against f64 finite differences (and torch.autograd where installed), in the reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.cli.testrt import run_conformance
from caten.conformance import cases as C
from caten.conformance import gradcases as G
from caten.conformance import gradrun as GR
from caten.conformance.runner import target_case
from caten.elaborate import elaborator as elab_mod
from caten.elaborate import library
from caten.ir.ops import TABLE
from caten.read.program import parse_forms
from caten.read.reader import read


def _row(name: str) -> C.Row:
    return next(r for r in C.rows(name) if r.name == name)


def _with_extra(monkeypatch, src: str) -> None:
    """The library plus the composites of src, as if they were in ops/extra.lisp."""
    extra = parse_forms(read(src, "<ops>/extra.lisp"), "extra.lisp", True).composites
    comps = dict(library.composites())
    for c in extra:
        comps[c.name] = [c]
    monkeypatch.setattr(library, "composites", lambda: comps)
    monkeypatch.setattr(elab_mod, "library_composites", lambda: comps)


def test_a_new_composite_adds_a_gradient_case_and_a_wrong_vjp_fails(monkeypatch, tmp_path):
    """No edit but the composite: its gradient row appears in the report; a :vjp that gives the
    wrong derivative (3x^2 expected, x given) fails against the finite differences."""
    _with_extra(monkeypatch, '(composite cube-plus-one ((X{T}[...]) -> (Y{T}[...])) "x^3 + 1"'
                             ' (ADD (MUL X (MUL X X)) 1))\n'
                             '(composite bad-cube ((X{T}[...]) -> (Y{T}[...])) "x^3, wrong :vjp" :vjp ((dY) (* dY X))'
                             ' (MUL X (MUL X X)))')
    md = tmp_path / "x.md"
    assert run_conformance("numpy", str(md), False, "cube-plus-one", None) == 0
    data = json.loads(md.with_suffix(".json").read_text())
    got = {r["dtype"]: r for r in data["gradients"]}
    assert set(got) == {"f32", "f64"} and all(r["status"] == "pass" for r in got.values())
    assert got["f32"]["max_err"] < GR.RTOL["f32"] and got["f64"]["max_err"] < GR.RTOL["f64"]
    assert "## Gradients" in md.read_text() and "| `cube-plus-one` | pass" in md.read_text()
    assert run_conformance("numpy", str(md), False, "bad-cube", None) == 1
    data = json.loads(md.with_suffix(".json").read_text())
    assert {r["status"] for r in data["gradients"]} == {"fail"}
    assert "finite differences" in md.read_text()


def test_rows_are_derived_from_dtype_facts():
    """Principal rows: exactly those with a vjp get variants (or are dropped by a dtype fact);
    comparisons, integer-only ops and fixed-f32 composites get a note instead of a case."""
    for op, info in TABLE.items():
        g = G.derive(_row(op.value))
        if info.vjp is None:
            assert not g.variants and "no vjp" in g.note
    assert G.derive(_row("ADD")).variants
    assert G.derive(_row("<")).note == "no float output"
    assert G.derive(_row("argmax")).note == "no float output"
    assert G.derive(_row("zeros")).note == "no float tensor parameter"
    assert "fixed below f64" in G.derive(_row("round-to-e8m0")).note
    # a cast to f16 rounds: no f64 reference; the cast to f64 stays
    labels = [gv.v.label for gv in G.derive(_row("CAST")).variants]
    assert labels and all("->f64" in x for x in labels)
    # broadcasting and the strided view are among the layouts
    labels = {gv.v.label for gv in G.derive(_row("MUL")).variants}
    assert {"bcast", "bcast2", "view", "mat literal"} <= labels


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_gradient_cells_pass_on_each_runtime(runtime):
    rows = [_row(n) for n in ("MAX", "REDUCE", "softmax", "layernorm")]
    cells, grows = GR.run_grads(R.get(runtime), rows, False, target_case)
    assert len(cells) == 8, [(c.op, c.dtype) for c in cells]
    for c in cells:
        assert c.status == "pass", (c.op, c.dtype, c.reason)


def test_error_measure_catches_wrong_gradients():
    want = np.array([[1.0, -2.0], [0.5, 4.0]])
    assert GR.err(want * (1 + 1e-7), want) < 1e-6
    assert GR.err(want * 2, want) > 0.1
    assert GR.err(want.T, want) > 0.1  # transposed
    assert GR.err(np.zeros(3), np.zeros(3)) == 0.0
    assert GR.err(np.array([np.nan, 0, 0]), np.zeros(3)) == float("inf")
    assert GR.err(np.ones((2, 3)), np.ones((3, 2))) == float("inf")


def test_a_kink_is_avoided_not_compared():
    """abs: the reference point keeps |x| away from 0, so finite differences are exact there."""
    g = G.derive(_row("abs"))
    ref = GR.reference(g, torch_ok=False)
    for pts in ref.points.values():
        for pt in pts.values():
            assert not pt.unstable
            x = next(a for n, a in pt.arrays.items() if n.startswith("x"))
            assert np.abs(x).min() >= 0.1


def test_torch_is_a_second_oracle():
    pytest.importorskip("torch")
    cells, _ = GR.run_grads(R.get("numpy"), [_row("log-softmax")], False, target_case)
    assert cells and all(c.status == "pass" and c.torch_err is not None for c in cells)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_gradient_of_a_contiguous_prefix_view(runtime):
    """Regression: a VIEW reading a contiguous prefix of fewer elements than its source (a
    rank-dropping shrink: one element of a [5 3] tensor; the first 4 of its flat form) was
    transposed as a reshape of the whole source and failed to elaborate."""
    src = """
(composite f ((X{f32}[5, 3], R{f32}[1], S{f32}[4]) -> (L{f32}))
  (+ (sum (MUL (VIEW X :shrink [[0 1]]) R)) (sum (MUL (VIEW (VIEW X :reshape [-1]) :shrink [[0 4]]) S))))
(composite g ((X{f32}[5, 3], R{f32}[1], S{f32}[4]) -> (G{f32}[5, 3]))
  (grad f X R S :wrt X))
"""
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    r = np.array([2.5], dtype=np.float32)
    s = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
    got = np.asarray(caten.loads(src, runtime=runtime, use_cache=False).g(x, r, s))
    want = np.zeros(15, dtype=np.float32)
    want[:4] = s
    want[0] += 2.5
    np.testing.assert_array_equal(got, want.reshape(5, 3))


def test_a_composite_with_several_outputs(monkeypatch, tmp_path):
    """The loss sums every float output (an optimizer step gives W', M', V'); an integer
    parameter (a step count) is an input, not differentiated. Regression: the forward case of a
    composite with several outputs returned the call as one value and did not load."""
    _with_extra(monkeypatch, '(composite two-outs ((X{T}[...] S{T}[...] k{i64}) -> (Y{T}[...] Z{T}[...]))'
                             ' "x*s*k, -x" (return (MUL (MUL X S) (CAST k (dtype X))) (NEG X)))')
    g = G.derive(_row("two-outs"))
    assert g.variants and all(gv.outs == [0, 1] and [p.name[-1] for p in gv.wrt] == ["0", "1"]
                              for gv in g.variants)
    md = tmp_path / "y.md"
    assert run_conformance("numpy", str(md), False, "two-outs", None) == 0
    data = json.loads(md.with_suffix(".json").read_text())
    assert {r["dtype"]: r["status"] for r in data["gradients"]} == {"f32": "pass", "f64": "pass"}
    # the forward cases of a composite with several outputs load too (their source spreads the call)
    assert {r["status"] for r in data["results"] if r["op"] == "two-outs"} == {"pass"}
