"""Diagnostics a newcomer meets in the first hour (issue 44): each must point at the cause and say
how to fix it, from Python (`str(err)` is the CLI's rendering) and from the CLI (exit 1 for a
diagnostic, 2 for a usage error), never with a Python traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caten

SIG = "(composite f ((X{f32}[N]) -> (Y{f32}[N]))\n"
ROOT = Path(__file__).resolve().parent.parent


def run_cli(args, cwd: Path):
    env = dict(os.environ, CATEN_CACHE_DIR=str(cwd / ".caten-cache"), XDG_CACHE_HOME=str(cwd / ".xdg"))
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def error_of(src: str) -> caten.Error:
    with pytest.raises(caten.Error) as ei:
        caten.loads(src, runtime="numpy")
    return ei.value


def fixed(src: str, err: caten.Error) -> str:
    """`src` with the hint's `insert 'C' at line L, column K` applied."""
    import re

    m = re.search(r"insert '(.)' at line (\d+), column (\d+)", err.hint or "")
    assert m, err.hint
    lines = src.split("\n")
    line, col = int(m[2]), int(m[3])
    lines[line - 1] = lines[line - 1][: col - 1] + m[1] + lines[line - 1][col - 1:]
    return "\n".join(lines)


# --- 1. brackets: the delimiter at fault, and where the fix goes

MISSING = [
    # the `(setf` on line 2 lost its `)`: the next line starts under it
    (SIG + "  (setf y (exp X)\n  (return y))\n", (2, 3), 2),
    # the first composite lost its last `)`: the next top-level form starts under it
    (SIG + "  (return (exp X))\n\n(composite g ((X{f32}[N]) -> (Y{f32}[N]))\n  (return X))\n", (1, 1), 2),
    # nothing after it: the form ends with the file
    (SIG + "  (return (exp X))\n", (1, 1), 2),
    # comments and a line of only a closer say nothing about indentation
    (SIG + "  (setf y (exp X) ; (\n  ;; ((\n  (return y)\n)\n", (2, 3), 2),
]


@pytest.mark.parametrize("src,at,line", MISSING)
def test_a_missing_paren_points_at_the_unclosed_one_and_the_fix_compiles(src, at, line):
    e = error_of(src)
    assert (e.line, e.col) == at, str(e)
    assert "unclosed '('" in e.message
    assert f"insert ')' at line {line}," in e.hint
    mod = caten.loads(fixed(src, e), runtime="numpy")  # the hint's fix is the right one
    x = np.array([0.5, -1.0], np.float32)
    np.testing.assert_allclose(mod.f(x), np.exp(x), rtol=1e-6)


def test_an_extra_paren_that_closed_a_form_early_is_the_one_reported():
    src = SIG + "  (setf y (exp X)))\n  (return y))\n"
    e = error_of(src)
    assert (e.line, e.col) == (2, 19), str(e)
    assert "opened at line 1, column 1" in e.message and "delete this ')'" in e.hint


def test_an_extra_paren_at_the_end_names_the_form_already_closed():
    e = error_of(SIG + "  (return (exp X))))\n")
    assert (e.line, e.col) == (2, 20), str(e)
    assert "nothing is open" in e.message and "'(' at line 1, column 1 is already closed" in e.message


def test_a_wrong_closer_names_the_bracket_it_meets():
    e = error_of(SIG + "  (return (permute X [0 1)))\n")
    assert (e.line, e.col) == (2, 26), str(e)
    assert "closes the '[' opened at line 2, column 22" in e.message and "']'" in e.hint


def test_cli_reports_the_unclosed_paren_with_a_caret(tmp_path: Path):
    (tmp_path / "bad.lisp").write_text(SIG + "  (setf y (exp X)\n  (return y))\n")
    rc, out = run_cli(["bad.lisp", "--emit", "ir", "-r", "numpy"], tmp_path)
    assert rc == 1, out
    assert out.startswith("bad.lisp:2:3: error: unclosed '('"), out
    assert "\n  (setf y (exp X)\n  ^\nhint: insert ')' at line 2, column 18" in out, out
    assert "Traceback" not in out


# --- 4. str(err) is what the CLI prints


def test_str_of_an_error_is_the_cli_rendering():
    src = SIG + "  (return (exp2x X)))\n"
    e = error_of(src)
    assert (e.file, e.line, e.col) == ("<string>", 2, 12)
    assert str(e) == e.format()
    assert str(e).split("\n") == ["<string>:2:12: error: unknown function `exp2x`", "  (return (exp2x X)))",
                                  "           ^~~~~", "hint: did you mean `exp2`?"]
    with pytest.raises(caten.Error, match=r"unknown function `exp2x`"):
        caten.loads(src, runtime="numpy")


def test_str_of_an_error_without_a_place_is_its_message_and_hint():
    assert str(caten.Error("bad call")) == "bad call"
    assert str(caten.Error("bad call", hint="pass two arrays")) == "bad call\nhint: pass two arrays"


# --- 2. a mistyped command or path


@pytest.mark.parametrize("argv,cmd", [(["rnu", "x.lisp"], "run"), (["tset-runtime"], "test-runtime"),
                                      (["grpah", "f.lisp"], "graph")])
def test_a_mistyped_command_is_a_usage_error_naming_the_command(tmp_path: Path, argv, cmd):
    rc, out = run_cli(argv, tmp_path)
    assert rc == 2, out
    assert f"did you mean `{cmd}`?" in out and "Traceback" not in out


def test_a_missing_source_suggests_the_file_nearby(tmp_path: Path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "softmax.lisp").write_text(SIG + "  (exp X))\n")
    for typo in ("examples/sofmax.lisp", "exmples/softmax.lisp"):
        rc, out = run_cli(["run", typo], tmp_path)
        assert rc == 1, out
        assert f"error: no such file: {typo}" in out and "did you mean examples/softmax.lisp?" in out, out


# --- 3. array files on the command line


def _files(d: Path) -> None:
    (d / "f.lisp").write_text(SIG + "  (exp X))\n")
    np.save(d / "x.npy", np.array([0.5, 1.5], np.float32))
    (d / "notes.txt").write_text("1 2 3\n")
    (d / "text.npy").write_text("1 2 3\n")
    (d / "empty.npy").write_bytes(b"")
    np.savez(d / "w.npz", X=np.zeros(2, np.float32), Z=np.ones(2, np.float32))
    (d / "cut.npy").write_bytes((d / "x.npy").read_bytes()[:40])
    np.save(d / "obj.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    np.save(d / "x64.npy", np.array([0.5, 1.5]))
    (d / "dir.npy").mkdir()


BAD_INPUTS = [
    ("X=notes.txt", r"input X: notes\.txt is not a \.npy array file \(it holds text: '1 2 3'\)", "np.save"),
    ("X=text.npy", r"input X: text\.npy is not a \.npy array file", "np.save"),
    ("text.npy", r"input #1: text\.npy is not a \.npy array file", "np.save"),
    ("X=empty.npy", r"input X: empty\.npy is not a \.npy array file \(it is empty\)", "np.save"),
    ("X=tex.npy", r"input X: no such file: tex\.npy", "did you mean text.npy?"),
    ("X=w.npz", r"input X: w\.npz is an \.npz archive \(arrays X, Z\), not a \.npy array file", "--weights"),
    ("X=cut.npy", r"input X: cut\.npy is a damaged or unsupported \.npy file", "np.save"),
    ("X=obj.npy", r"input X: obj\.npy is a damaged or unsupported \.npy file: it holds Python objects", "np.save"),
    ("X=dir.npy", r"input X: dir\.npy is a directory", "np.save"),
    ("X=x64.npy", r"argument `X` of `f` has dtype f64, but declared f32", None),
    ("--weights=notes.txt", r"--weights: notes\.txt is not a \.npz archive file", "np.savez"),
    ("--weights=x.npy", r"--weights: x\.npy is a single \.npy array", "NAME=PATH.npy"),
]


def test_each_bad_array_file_is_a_one_line_diagnostic(tmp_path: Path):
    import re

    _files(tmp_path)
    for arg, message, hint in BAD_INPUTS:
        rc, out = run_cli(["run", "f.lisp", "-r", "numpy", arg], tmp_path)
        assert rc == 1, (arg, out)
        first = out.split("\n")[0]
        assert re.fullmatch(r"caten: error: " + message + r".*", first), (arg, out)
        assert "Traceback" not in out and "pickle" not in out, (arg, out)
        if hint:
            assert out.split("\n")[1].startswith("hint: ") and hint in out.split("\n")[1], (arg, out)
    rc, out = run_cli(["run", "f.lisp", "-r", "numpy", "X=x.npy", "-o", "y.npy"], tmp_path)
    assert rc == 0, out
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.exp(np.array([0.5, 1.5], np.float32)), rtol=1e-6)
