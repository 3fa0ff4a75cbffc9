"""`caten test-runtime`: the op-coverage suite and its reports (LANGUAGE.md section 9)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from caten.cli.main import cli
from caten.cli.testrt import run_conformance
from caten.conformance import cases as C
from caten.elaborate import elaborator as elab_mod
from caten.elaborate import library
from caten.ir.ops import TABLE
from caten.read.program import parse_forms
from caten.read.reader import read

PLUGINS = Path(__file__).parent / "plugins"
INTS = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i4", "u4"]
FLOATS = ["f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"]


def _load(md: Path) -> dict:
    return json.loads(md.with_suffix(".json").read_text())


def test_rows_are_every_principal_op_and_every_composite():
    names = {r.name for r in C.rows()}
    assert {op.value for op in TABLE} <= names
    for name, defs in library.composites().items():
        if len(defs) == 1:
            assert name in names
        else:
            assert {f"{name}/{d.arity}" for d in defs} <= names
    assert len(names) == len(TABLE) + sum(len(d) for d in library.composites().values())


def test_every_row_has_cases():
    for row in C.rows():
        C.build(row)
        assert row.variants, f"{row.name}: {row.note}"
        assert all(v.outs for v in row.variants)


def test_numpy_subset_writes_both_files(tmp_path):
    md = tmp_path / "reports" / "numpy.md"
    assert run_conformance("numpy", str(md), False, "ADD", None) == 0
    data = _load(md)
    assert set(data) == {"runtime", "device", "results", "gradients"} and data["runtime"] == "numpy"
    got = {r["dtype"]: r for r in data["results"] if r["op"] == "ADD"}
    assert set(got) == set(INTS + FLOATS)  # ADD needs numbers: no bool
    for r in data["results"]:
        assert set(r) == {"op", "dtype", "status", "max_abs_err", "max_rel_err"}
        assert r["status"] == "pass"
    text = md.read_text()
    assert "| `ADD` |" in text and "18 passed, 0 failed, 0 unsupported" in text
    readme = (tmp_path / "reports" / "README.md").read_text()
    assert "[numpy](numpy.md) | 18 | 0 | 0 |" in readme


def test_integer_and_bool_columns_where_they_apply(tmp_path):
    md = tmp_path / "r.md"
    # abs, and, cast, cos (forward columns only: the gradients are test_conformance_grad.py's; the
    # whole suite runs in CI's test-runtime step)
    assert run_conformance("numpy", str(md), False, "[ac][abno][dsts]*", None, gradients=False) == 0
    res = {(r["op"], r["dtype"]): r["status"] for r in _load(md)["results"]}
    assert res[("and", "bool")] == "pass" and res[("and", "u16")] == "pass" and ("and", "f32") not in res
    assert all(res[("cast", d)] == "pass" for d in ["bool", *INTS, *FLOATS])
    assert ("cos", "i32") not in res and res[("cos", "bf16")] == "pass"
    assert res[("abs", "i8")] == "pass"
    assert not (tmp_path / "README.md").exists()  # only a reports/ folder gets the summary page


def test_cli_exit_status_and_summary(tmp_path):
    out = tmp_path / "n.md"
    r = CliRunner().invoke(cli, ["test-runtime", "-r", "numpy", "--ops", "CMP*", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "38 passed, 0 failed, 0 unsupported" in r.output
    statuses = {(x["op"], x["dtype"]) for x in _load(out)["results"]}
    assert ("CMPLT", "bool") in statuses and ("CMPNE", "u64") in statuses


def test_broken_plugin_fails_with_footnotes(tmp_path):
    md = tmp_path / "broken.md"
    rc = run_conformance("broken-add", str(md), False, "[A+]*", str(PLUGINS / "broken_add.py"))
    assert rc == 1
    data = _load(md)
    assert data["runtime"] == "broken-add"
    st = {(r["op"], r["dtype"]): r["status"] for r in data["results"]}
    assert st[("ADD", "f32")] == "fail" and st[("ADD", "i8")] == "fail" and st[("+", "u32")] == "fail"
    assert st[("AND", "bool")] == "pass"  # AND has no ADD in it
    text = md.read_text()
    assert "FAIL[^1]" in text and "\n[^1]: `" in text and "expected" in text
    r = CliRunner().invoke(cli, ["test-runtime", "-r", "broken-add", "--plugin", str(PLUGINS / "broken_add.py"),
                                 "--ops", "ADD", "-o", str(tmp_path / "b2.md")])
    assert r.exit_code == 1 and "0 passed, 18 failed" in r.output


def test_jobs_give_the_same_report(tmp_path):
    """`-j 2`: rows on two worker processes (each loading the plugin), the same cells in the same
    order, failures and their reasons included."""
    one, two = tmp_path / "one.md", tmp_path / "two.md"
    plugin = str(PLUGINS / "broken_add.py")
    assert run_conformance("broken-add", str(one), False, "[A+W]*", plugin, gradients=False) == 1
    assert run_conformance("broken-add", str(two), False, "[A+W]*", plugin, gradients=False, jobs=2) == 1
    a, b = _load(one)["results"], _load(two)["results"]
    assert len(a) > 20 and any(x["status"] == "fail" for x in a) and any(x["status"] == "pass" for x in a)
    assert [(x["op"], x["dtype"], x["status"], x.get("reason")) for x in a] == \
        [(x["op"], x["dtype"], x["status"], x.get("reason")) for x in b]


def test_declared_unsupported_and_compile_only(tmp_path):
    plugin = tmp_path / "nof16.py"
    plugin.write_text(
        "from caten.runtimes.numpy_rt import NumpyRuntime\n"
        "class NoF16(NumpyRuntime):\n"
        "    name = 'no-f16'\n"
        "    def supports(self, op, dtype):\n"
        "        return dtype.name != 'f16'\n"
        "RUNTIME = NoF16()\n")
    md = tmp_path / "u.md"
    assert run_conformance("no-f16", str(md), False, "sqrt", str(plugin)) == 0
    st = {r["dtype"]: r["status"] for r in _load(md)["results"]}
    assert st == {"f16": "unsupported", **{d: "pass" for d in FLOATS if d != "f16"}}
    assert "| `sqrt` |" in md.read_text() and " - |" in md.read_text()
    assert run_conformance("no-f16", str(md), True, "NEG", None) == 0
    st = {r["dtype"]: r["status"] for r in _load(md)["results"]}
    assert st["f16"] == "unsupported" and st["i32"] == "compile-only" and "bool" not in st
    assert "compile-only" in md.read_text()


def test_a_new_composite_adds_a_row(monkeypatch, tmp_path):
    src = '(composite cube-plus-one ((X{T}[...]) -> (Y{T}[...])) "x*x*x + 1" (ADD (MUL X (MUL X X)) 1))'
    extra = parse_forms(read(src, "<ops>/extra.lisp"), "extra.lisp", True).composites
    comps = dict(library.composites())
    comps["cube-plus-one"] = extra
    monkeypatch.setattr(library, "composites", lambda: comps)
    monkeypatch.setattr(elab_mod, "library_composites", lambda: comps)
    assert "cube-plus-one" in {r.name for r in C.rows()}
    md = tmp_path / "x.md"
    assert run_conformance("numpy", str(md), False, "cube-plus-one", None) == 0
    st = {r["dtype"]: r["status"] for r in _load(md)["results"]}
    assert set(st) == set(INTS + FLOATS) and set(st.values()) == {"pass"}
    assert "| `cube-plus-one` |" in md.read_text()


@pytest.mark.skipif(os.environ.get("CATEN_TEST_CONFORMANCE_FULL") != "1", reason="the full suite takes a minute")
def test_full_numpy_suite(tmp_path):
    md = tmp_path / "reports" / "numpy.md"
    assert run_conformance("numpy", str(md), False, None, None) == 0
    ops = {r["op"] for r in _load(md)["results"]}
    assert ops == {r.name for r in C.rows()}


def _sum_in_order(x: np.ndarray, lanes: int) -> np.floating:
    """x summed as `lanes` interleaved partial sums, then the partials in turn: the order a vector
    unit of that many lanes uses (8 f32 on AVX2, 16 on AVX-512)."""
    acc = np.zeros(lanes, dtype=x.dtype)
    for i in range(0, x.size - x.size % lanes, lanes):
        acc += x[i:i + lanes]
    tot = x.dtype.type(0)
    for v in [*acc, *x[x.size - x.size % lanes:]]:
        tot += v
    return tot


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_reduction_bound_admits_every_summation_order_and_rejects_wrong_sums(dt):
    """A cancelling sum computed in the orders of either CPU kind passes (the bound scales with
    n eps sum|x|, not with the ULPs of a result near 0); a dropped element or an error of 1e-3 sum|x|
    fails (in f64 even a dropped element of ordinary size)."""
    from caten.conformance.values import compare
    from caten.ir import dtypes as T

    rng = np.random.default_rng(1)
    x = (rng.standard_normal(33153) * 100).astype(T.lookup(dt).np)
    x[-1] -= x.sum(dtype=np.float64)  # the exact sum is near 0: hundreds of ULPs apart between orders
    want = np.asarray(np.sum(x))  # numpy's pairwise order
    mag = np.asarray(np.sum(np.abs(x)))
    for lanes in (1, 4, 8, 16, 32):
        got = np.asarray(_sum_in_order(x, lanes))
        assert compare(got, want, T.lookup(dt), "reduce", mag=mag, n_reduced=x.size).ok, lanes
    wrongs = [want - x[-1], want + 1e-3 * mag] + ([want - x[123]] if dt == "f64" else [])
    for wrong in wrongs:
        assert not compare(np.asarray(wrong, dtype=x.dtype), want, T.lookup(dt), "reduce", mag=mag,
                           n_reduced=x.size).ok


def test_product_bound_is_relative_and_grows_with_sqrt_n():
    from caten.conformance.values import compare
    from caten.ir import dtypes as T

    rng = np.random.default_rng(2)
    x = rng.uniform(0.999, 1.001, 33153)
    want = np.asarray(np.prod(x))
    for lanes in (1, 8, 16):
        acc = np.ones(lanes)
        for i in range(0, x.size - x.size % lanes, lanes):
            acc *= x[i:i + lanes]
        got = np.asarray(np.prod(acc) * np.prod(x[x.size - x.size % lanes:]))
        assert compare(got, want, T.f64, "reduce", mag=np.abs(want), n_reduced=x.size).ok
    assert not compare(want * (1 + 1e-9), want, T.f64, "reduce", mag=np.abs(want), n_reduced=x.size).ok


def test_product_inputs_leave_no_order_dependent_overflow():
    """A product's inputs (NEAR_ONE; EDGES_PRODUCT at the edges call) make every partial product,
    in any order, stay inside f16's range: a GPU's tree order then gives the reference's
    specials (a 33153-factor bf16 product overflowed in numpy's sequential order only, and a
    tiny x tiny underflow met an inf as nan in one order of a cumprod)."""
    from caten.conformance.values import EDGES_PRODUCT, NEAR_ONE, generate
    from caten.ir import dtypes as T

    x = generate(T.f32, (257, 129), 7, NEAR_ONE).astype(np.float64).ravel()
    logs = np.log(np.abs(x))
    # every contiguous run (sequential, reversed, a tree's halves) and a work-item's strided share
    runs = [logs] + [logs[t::256] for t in range(0, 256, 17)]
    for r in runs:
        walk = np.concatenate([[0.0], np.cumsum(r)])
        assert walk.max() - walk.min() < np.log(65504.0)
    e = generate(T.f32, (64, 64), 3, EDGES_PRODUCT).ravel()
    finite = np.abs(e[np.isfinite(e) & (e != 0)])
    assert finite.size and finite.min() >= 0.25 and np.isinf(e).any() and (e == 0).any()
