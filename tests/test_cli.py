"""Black-box tests of the `caten` command line (LANGUAGE.md sections 7 and 8).

Every test runs `python -m caten ...` in a fresh temporary directory, so the tests do not depend
on the console script being on PATH (one test checks the script when it is there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

SOFTMAX_LISP = """\
;; a helper and the entry point; the last composite is the default entry
(composite shifted-exp ((X{f32}[B, N]) -> (E{f32}[B, N]))
  "exp(x - max(x)) along each row"
  (setf m (max X :axis 1 :keepdims true))
  (return (exp (- X m))))

(composite softmax-rows ((X{f32}[B, N]) -> (Y{f32}[B, N]))
  "row softmax"
  (setf e (shifted-exp X))
  (return (/ e (sum e :axis 1 :keepdims true))))
"""

SOFTMAX_YAML = """\
shifted-exp:
  in: ["X{f32}[B, N]"]
  out: ["E{f32}[B, N]"]
  doc: "exp(x - max(x)) along each row"
  impl: |
    (setf m (max X :axis 1 :keepdims true))
    (return (exp (- X m)))

softmax-rows:
  in: ["X{f32}[B, N]"]
  out: ["Y{f32}[B, N]"]
  where: []
  doc: "row softmax"
  impl: |
    (setf e (shifted-exp X))
    (return (/ e (sum e :axis 1 :keepdims true)))
"""

STATS_LISP = """\
(composite stats ((X{f32}[B, N]) -> (S{f32}[B] M{f32}[B]))
  "row sums and row maxima"
  (return (sum X :axis 1) (max X :axis 1)))
"""

FILL_LISP = """\
(composite fill ((X{f32}[M]) -> (Y{f32}[N]))
  (return (full [N] 2.0)))
"""

AXPY_LISP = """\
(composite axpy ((A{f32}) (X{f32}[N]) (Y{f32}[N]) -> (Z{f32}[N]))
  (return (+ (* A X) Y)))
"""


def caten_cli(args, cwd, timeout=180):
    env = dict(os.environ)
    env["CATEN_CACHE_DIR"] = str(Path(cwd) / ".caten-cache")
    env["XDG_CACHE_HOME"] = str(Path(cwd) / ".xdg-cache")
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def ok(args, cwd):
    rc, out, err = caten_cli(args, cwd)
    assert rc == 0, f"caten {' '.join(map(str, args))} exited {rc}:\n{out}\n{err}"
    assert "Traceback" not in out + err
    return out, err


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---------------------------------------------------------------------------------------------
# information commands


def test_help(tmp_path):
    out, err = ok(["--help"], tmp_path)
    text = out + err
    for word in ("run", "ops", "runtimes"):
        assert re.search(rf"\b{word}\b", text), f"--help does not mention {word!r}:\n{text}"
    assert "usage" in text.lower()


def test_run_help(tmp_path):
    out, err = ok(["run", "--help"], tmp_path)
    text = out + err
    for opt in ("-e", "-r", "-o", "-D"):
        assert opt in text, f"`caten run --help` does not mention {opt}:\n{text}"


def test_version(tmp_path):
    out, err = ok(["--version"], tmp_path)
    assert metadata.version("caten") in out + err


def test_console_script_if_installed(tmp_path):
    exe = shutil.which("caten")
    if exe is None:
        pytest.skip("the caten console script is not on PATH")
    p = subprocess.run([exe, "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert metadata.version("caten") in p.stdout + p.stderr


def test_ops_lists_principal_ops_and_library(tmp_path):
    out, _ = ok(["ops"], tmp_path)
    for op in ("ADD", "MUL", "EXP2", "LOG2", "REDUCE", "WHERE", "CAST", "VIEW"):
        assert re.search(rf"\b{op}\b", out), f"`caten ops` does not list {op}:\n{out}"
    for name in ("softmax", "log-softmax", "matmul", "exp", "gelu", "layernorm", "conv2d", "sum"):
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", out), f"`caten ops` does not list {name}"
    # each listed op comes with a doc line: some words after the name on its line
    for name in ("ADD", "EXP2", "REDUCE", "softmax", "matmul"):
        lines = [ln for ln in out.splitlines() if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", ln)]
        assert any(len(re.findall(r"[A-Za-z]", ln.split(name, 1)[1])) >= 5 for ln in lines), \
            f"no doc line for {name}: {lines}"


def test_runtimes_lists_numpy(tmp_path):
    out, _ = ok(["runtimes"], tmp_path)
    assert re.search(r"\bnumpy\b", out), out


# ---------------------------------------------------------------------------------------------
# compiling: --emit ir


def _ir_text(tmp_path, out, before):
    """The dump: stdout, or else whatever new file the command wrote."""
    if out.strip():
        return out
    new = [p for p in tmp_path.iterdir() if p.name not in before and p.is_file()]
    return "\n".join(p.read_text(errors="replace") for p in new)


def test_emit_ir_prints_readable_dump(tmp_path):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    before = {p.name for p in tmp_path.iterdir()}
    out, err = ok(["softmax.lisp", "-r", "numpy", "--emit", "ir", "-e", "softmax-rows"], tmp_path)
    text = _ir_text(tmp_path, out, before)
    assert re.search(r"EXP2", text, re.IGNORECASE), text
    assert re.search(r"REDUCE", text, re.IGNORECASE), text
    assert "f32" in text, text
    assert len(text.splitlines()) >= 3


def test_emit_ir_to_file(tmp_path):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    ok(["softmax.lisp", "-r", "numpy", "--emit", "ir", "-o", "soft.ir"], tmp_path)
    text = (tmp_path / "soft.ir").read_text()
    assert re.search(r"EXP2", text, re.IGNORECASE), text


@pytest.mark.parametrize("args,marker", [(["-r", "c", "-S"], "#include <stdint.h>"),
                                         (["-r", "numpy", "--emit", "ir"], "EXP2")])
def test_output_dash_is_standard_output(tmp_path, args, marker):
    """`-o -` writes to standard output, as cc's does (it wrote a file named `-` and `-.h`)."""
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    before = {p.name for p in tmp_path.iterdir()}
    out, _ = ok(["softmax.lisp", *args, "-o", "-"], tmp_path)
    assert marker in out, out[:500]
    assert {p.name for p in tmp_path.iterdir()} - {".caten-cache"} == before


def test_emit_ir_of_yaml(tmp_path):
    (tmp_path / "softmax.yaml").write_text(SOFTMAX_YAML)
    before = {p.name for p in tmp_path.iterdir()}
    out, _ = ok(["softmax.yaml", "-r", "numpy", "--emit", "ir", "-e", "softmax-rows"], tmp_path)
    assert re.search(r"EXP2", _ir_text(tmp_path, out, before), re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# caten run


def test_run_single_output(tmp_path, rng):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-e", "softmax-rows", "-r", "numpy", "X=x.npy", "-o", "out.npy"], tmp_path)
    y = np.load(tmp_path / "out.npy")
    assert y.dtype == np.float32 and y.shape == (5, 7)
    np.testing.assert_allclose(y, np_softmax(x), rtol=1e-5, atol=1e-6)


def test_run_default_entry_is_last_composite(tmp_path, rng):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-r", "numpy", "X=x.npy", "-o", "out.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), np_softmax(x), rtol=1e-5, atol=1e-6)


def test_run_other_entry(tmp_path, rng):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-e", "shifted-exp", "-r", "numpy", "X=x.npy", "-o", "e.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), np.exp(x - x.max(1, keepdims=True)), rtol=1e-5)


def test_run_several_inputs_and_scalar(tmp_path, rng):
    (tmp_path / "axpy.lisp").write_text(AXPY_LISP)
    a = np.array(2.5, dtype=np.float32)
    x = rng.standard_normal(9).astype(np.float32)
    y = rng.standard_normal(9).astype(np.float32)
    for name, arr in (("a", a), ("x", x), ("y", y)):
        np.save(tmp_path / f"{name}.npy", arr)
    # inputs are matched by name, not by position
    ok(["run", "axpy.lisp", "-r", "numpy", "Y=y.npy", "A=a.npy", "X=x.npy", "-o", "z.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "z.npy"), a * x + y, rtol=1e-6)


def test_run_several_outputs_npz(tmp_path, rng):
    (tmp_path / "stats.lisp").write_text(STATS_LISP)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "stats.lisp", "-e", "stats", "-r", "numpy", "X=x.npy", "-o", "out.npz"], tmp_path)
    with np.load(tmp_path / "out.npz") as z:
        assert sorted(z.files) == ["M", "S"]
        np.testing.assert_allclose(z["S"], x.sum(axis=1), rtol=1e-5)
        np.testing.assert_array_equal(z["M"], x.max(axis=1))
        assert z["S"].dtype == np.float32 and z["M"].dtype == np.float32


def test_run_define_binds_dim(tmp_path):
    (tmp_path / "fill.lisp").write_text(FILL_LISP)
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    ok(["run", "fill.lisp", "-e", "fill", "-r", "numpy", "-D", "N=4", "X=x.npy", "-o", "y.npy"], tmp_path)
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (4,) and y.dtype == np.float32
    np.testing.assert_array_equal(y, np.full(4, 2.0, np.float32))


def test_run_without_define_is_a_diagnostic(tmp_path):
    (tmp_path / "fill.lisp").write_text(FILL_LISP)
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    rc, out, err = caten_cli(["run", "fill.lisp", "-e", "fill", "-r", "numpy", "X=x.npy", "-o", "y.npy"], tmp_path)
    assert rc == 1, out + err
    assert re.search(r"fill\.lisp:\d+:\d+: error: ", out + err), out + err
    assert "Traceback" not in out + err


def test_run_define_fixes_input_dim(tmp_path, rng):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-r", "numpy", "-D", "N=4", "-D", "B=2", "X=x.npy", "-o", "y.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np_softmax(x), rtol=1e-5, atol=1e-6)
    # an input that contradicts -D is an error, not a crash
    np.save(tmp_path / "x5.npy", rng.standard_normal((2, 5)).astype(np.float32))
    rc, out, err = caten_cli(["run", "softmax.lisp", "-r", "numpy", "-D", "N=4", "X=x5.npy", "-o", "z.npy"],
                             tmp_path)
    assert rc == 1, out + err
    assert "Traceback" not in out + err


def test_yaml_runs_like_lisp(tmp_path, rng):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    (tmp_path / "softmax.yaml").write_text(SOFTMAX_YAML)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-e", "softmax-rows", "-r", "numpy", "X=x.npy", "-o", "a.npy"], tmp_path)
    ok(["run", "softmax.yaml", "-e", "softmax-rows", "-r", "numpy", "X=x.npy", "-o", "b.npy"], tmp_path)
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(b, np_softmax(x), rtol=1e-5, atol=1e-6)
    # the default entry of a YAML file is its last composite too
    ok(["run", "softmax.yaml", "-r", "numpy", "X=x.npy", "-o", "c.npy"], tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a)


def test_yml_extension(tmp_path, rng):
    (tmp_path / "softmax.yml").write_text(SOFTMAX_YAML)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.yml", "-r", "numpy", "X=x.npy", "-o", "y.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np_softmax(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opts", [["-O0"], ["-O3"], ["--no-cache"], ["-O2", "--no-cache"]])
def test_run_accepts_compile_options(tmp_path, rng, opts):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "softmax.lisp", "-r", "numpy", *opts, "X=x.npy", "-o", "y.npy"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np_softmax(x), rtol=1e-5, atol=1e-6)


def test_run_with_rules_file(tmp_path, rng):
    (tmp_path / "rules.lisp").write_text("(defoptimizer neg-neg (neg (neg ?x)) => ?x)\n")
    (tmp_path / "nn.lisp").write_text("(composite nn ((X{f32}[N]) -> (Y{f32}[N]))\n  (return (neg (neg X))))\n")
    x = rng.standard_normal(7).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ok(["run", "nn.lisp", "-r", "numpy", "--rules", "rules.lisp", "X=x.npy", "-o", "y.npy"], tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x)


def test_run_repository_examples(tmp_path, rng):
    examples = Path(__file__).resolve().parent.parent / "examples"
    if not (examples / "softmax.lisp").exists():
        pytest.skip("no examples/softmax.lisp")
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for name in ("softmax.lisp", "softmax.yaml"):
        if not (examples / name).exists():
            continue
        ok(["run", examples / name, "-r", "numpy", "X=x.npy", "-o", "y.npy"], tmp_path)
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np_softmax(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# usage errors exit 2


@pytest.mark.parametrize("argv", [
    ["--no-such-option"],
    ["run"],
    ["run", "softmax.lisp", "--no-such-option"],
    ["softmax.lisp", "--no-such-option"],
    ["softmax.lisp", "--emit", "no-such-stage"],
    ["runtimes", "--no-such-option"],
], ids=["unknown-option", "run-without-file", "run-unknown-option", "compile-unknown-option", "bad-emit",
        "runtimes-unknown-option"])
def test_usage_errors_exit_2(tmp_path, argv):
    (tmp_path / "softmax.lisp").write_text(SOFTMAX_LISP)
    rc, out, err = caten_cli(argv, tmp_path)
    assert rc == 2, f"caten {' '.join(argv)} exited {rc}:\n{out}\n{err}"
    assert "Traceback" not in out + err
    assert (out + err).strip(), "a usage error must say what is wrong"


def test_diagnostic_exits_1_and_is_gcc_style(tmp_path):
    src = "(composite f ((X{f32}[N]) -> (Y{f32}[N]))\n  (return (softmx X)))\n"
    (tmp_path / "bad.lisp").write_text(src)
    rc, out, err = caten_cli(["bad.lisp", "-r", "numpy", "--emit", "ir"], tmp_path)
    assert rc == 1, out + err
    text = out + err
    m = re.search(r"bad\.lisp:2:(\d+): error: .*softmx", text)
    assert m and int(m.group(1)) in (11, 12), text
    assert "  (return (softmx X)))" in text
    assert "Traceback" not in text


def test_graph_writes_dot(tmp_path):
    """`caten graph FILE -e NAME -o g.dot` draws the principal-op graph."""
    src = tmp_path / "g.lisp"
    src.write_text("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (exp X))\n")
    r = subprocess.run([sys.executable, "-m", "caten", "graph", str(src), "-e", "f", "-o", str(tmp_path / "g.dot")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith('digraph "f"') and "EXP2" in dot and "BUFFER" in dot and "->" in dot
