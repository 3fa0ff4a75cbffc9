"""Black-box tests of caten's diagnostics (LANGUAGE.md sections 2-5, 8, 10; DESIGN.md "Diagnostics").

Every class of bad input must give one `caten.Error` (a ValueError) pinned to the right place in
the user's source: from Python, `.file`, `.line`, `.col`; from the CLI, exit status 1 and

    FILE:LINE:COL: error: MESSAGE
    <the source line>
    <a caret line, the caret under COL>

and never a Python traceback.  Each case is checked both ways.  A case lists the places it
may point at: where the contract leaves the exact token open (the `(` of a call or its
head symbol, say), any of them is accepted, but the line and column must be exactly one of them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import caten

# ---------------------------------------------------------------------------------------------
# helpers


def position(src: str, needle: str, nth: int = 1) -> tuple[int, int]:
    """1-based (line, col) of the nth occurrence of `needle` in `src`."""
    idx = -1
    for _ in range(nth):
        idx = src.index(needle, idx + 1)
    line = src.count("\n", 0, idx) + 1
    col = idx - (src.rfind("\n", 0, idx) + 1) + 1
    return line, col


def resolve(src: str, at) -> set[tuple[int, int]]:
    """`at` items: "needle" (first occurrence), ("needle", n) (nth), ("needle", n, k) (k chars
    into the nth occurrence), or (line, col)."""
    out = set()
    for a in at:
        if isinstance(a, str):
            out.add(position(src, a))
        elif isinstance(a[0], str):
            line, col = position(src, a[0], a[1])
            out.add((line, col + (a[2] if len(a) > 2 else 0)))
        else:
            out.add((a[0], a[1]))
    return out


def full_text(e: BaseException) -> str:
    """Message plus hint, whatever attribute the hint lives in."""
    return f"{e} {getattr(e, 'hint', '') or ''}"


def pyname(name: str) -> str:
    return name.replace("-", "_")


def run_cli(args, cwd, timeout=120):
    env = dict(os.environ)
    env["CATEN_CACHE_DIR"] = str(Path(cwd) / ".caten-cache")
    env["XDG_CACHE_HOME"] = str(Path(cwd) / ".xdg-cache")
    env.pop("PYTHONWARNINGS", None)
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


HEADER_RE = re.compile(r"^(?P<file>.*?bad\.(?:lisp|yaml)):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$",
                       re.MULTILINE)


def check_cli_diagnostic(out: str, src: str, places: set[tuple[int, int]], patterns=()):
    """The gcc-style block: header, the source line, a caret under the column."""
    assert "Traceback" not in out, out
    m = HEADER_RE.search(out)
    assert m, f"no 'bad.lisp:LINE:COL: error: ...' line in:\n{out}"
    line, col = int(m["line"]), int(m["col"])
    assert (line, col) in places, f"diagnostic at {line}:{col}, expected one of {sorted(places)}:\n{out}"
    for pat in patterns:
        assert re.search(pat, out, re.IGNORECASE), f"{pat!r} not in:\n{out}"
    lines = out[m.end():].split("\n")[1:]
    src_lines = src.splitlines()
    if line <= len(src_lines) and src_lines[line - 1].strip():
        src_line = src_lines[line - 1].replace("\t", " ").rstrip()
        assert len(lines) >= 2, f"no source and caret lines after the header:\n{out}"
        shown = lines[0].rstrip()
        assert shown.endswith(src_line), f"source line {src_line!r} not shown, got {shown!r}:\n{out}"
        prefix = len(shown) - len(src_line)
        caret = lines[1]
        assert "^" in caret, f"no caret line:\n{out}"
        assert caret.index("^") == prefix + col - 1, f"caret not under column {col}:\n{out}"


# ---------------------------------------------------------------------------------------------
# the cases: bad source that must be diagnosed by loads() or, at the latest, by the first call


@dataclass
class Case:
    id: str
    src: str
    at: list  # acceptable places, see resolve()
    patterns: tuple = ()  # regexes (case-insensitive) that the message (+ hint) must match
    entry: str = "f"
    args: dict = field(default_factory=dict)
    hint: str | None = None  # a name the "did you mean" hint must suggest


def f32(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7 + 0.5


def i32(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)


SIG = "(composite f ((X{f32}[N]) -> (Y{f32}[N]))\n"
X4 = {"X": f32(4)}

_unclosed = SIG + "  (return (exp X))\n"
_extra = SIG + "  (return (exp X))))\n"
_mismatched = SIG + "  (return (exp X]))\n"
_unexpected = SIG + "  (return (exp } X)))\n"
_string = SIG + '  "the doc string\n  (return (exp X)))\n'
_block = "#| outer #| inner |# still the outer comment\n" + SIG + "  (return (exp X)))\n"
_softmx = "(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N]))\n  (return (softmx X :axis -1)))\n"
_local = SIG + "  (setf hidden (exp X))\n  (return (+ hiden 1.0)))\n"
_compsite = "(compsite f ((X{f32}[N]) -> (Y{f32}[N]))\n  (return (exp X)))\n"
_kw = "(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N]))\n  (return (softmax X :axsi -1)))\n"
_arity = SIG + "  (return (exp X X)))\n"
_arity_user = ("(composite g ((A{f32}[N] B{f32}[N]) -> (C{f32}[N]))\n  (+ A B))\n"
               + SIG + "  (return (g X)))\n")
_add_shape = "(composite f ((A{f32}[3, 4] B{f32}[5]) -> (C{f32}[3, 4]))\n  (return (+ A B)))\n"
_matmul = "(composite f ((A{f32}[3, 4] B{f32}[5, 6]) -> (C{f32}[3, 6]))\n  (return (matmul A B)))\n"
_symbols = "(composite f ((A{f32}[N] B{f32}[M]) -> (C{f32}[N]))\n  (return (+ A B)))\n"
_mixed = "(composite f ((A{f32}[N] B{i32}[N]) -> (C{f32}[N]))\n  (return (+ A B)))\n"
_exp_int = "(composite f ((X{i32}[N]) -> (Y{i32}[N]))\n  (return (exp X)))\n"
_float_lit = "(composite f ((X{i32}[N]) -> (Y{i32}[N]))\n  (return (+ X 1.5)))\n"
_f33_in = "(composite f ((X{f33}[N]) -> (Y{f32}[N]))\n  (return X))\n"
_f33_out = "(composite f ((X{f32}[N]) -> (Y{f33}[N]))\n  (return X))\n"
_f33_cast = SIG + "  (return (cast X f33)))\n"
_count = "(composite f ((X{f32}[N]) -> (Y{f32}[N] Z{f32}[N]))\n  (return (exp X)))\n"
_ret_dtype = "(composite f ((X{f32}[N]) -> (Y{i32}[N]))\n  (return (exp X)))\n"
_ret_shape = "(composite f ((X{f32}[N, M]) -> (Y{f32}[N]))\n  (return (sum X :axis 0)))\n"
_ret_rank = "(composite f ((X{f32}[N]) -> (Y{f32}[N, N]))\n  (return X))\n"
_permute = "(composite f ((X{f32}[N, M]) -> (Y{f32}[N, M]))\n  (return (permute X [0 5])))\n"
_dup = "(composite f ((X{f32}[N] X{f32}[N]) -> (Y{f32}[N]))\n  (return X))\n"
_unbound = "(composite f ((X{f32}[N]) -> (Y{f32}[K]))\n  (return (full [K] 1.0)))\n"

CASES = [
    # --- syntax
    Case("unclosed-paren", _unclosed, [(1, 1), (2, len("  (return (exp X))") + 1), (3, 1)],
         (r"never closed|unclosed|unbalanced|unmatched|missing|end of (input|file)",)),
    Case("extra-close-paren", _extra, [(2, len("  (return (exp X))))"))],
         (r"unbalanced|unmatched|unexpected|nothing is open|extra",)),
    Case("mismatched-bracket", _mismatched, [("X]))", 1, 1)], (r"\]",)),
    Case("unexpected-token", _unexpected, [("} X", 1)], (r"unexpected|invalid|not allowed",)),
    Case("unterminated-string", _string, ['"'],
         (r"string", r"unterminated|unclosed|never closed|missing|end of")),
    Case("unterminated-block-comment", _block, ["#|"],
         (r"comment", r"unterminated|unclosed|never closed|missing|end of")),
    # --- names
    Case("unknown-op-softmx", _softmx, ["softmx", "(softmx"], (r"softmx",), hint="softmax"),
    Case("misspelled-local", _local, ["hiden"], (r"hiden",), hint="hidden"),
    Case("misspelled-composite-keyword", _compsite, ["compsite", "(compsite"], (r"compsite",),
         hint="composite"),
    Case("unknown-keyword-argument", _kw, [":axsi", "(softmax", "softmax X"], (r"axsi",),
         args={"X": f32(2, 3)}),
    # --- arity
    Case("arity-library-op", _arity, ["(exp X X)", "exp X X", "X)))"],
         (r"argument|arity|expects|takes",)),
    Case("arity-user-composite", _arity_user, ["(g X)", "g X)"], (r"argument|arity|expects|takes",)),
    # --- shapes
    Case("shape-add-3x4-5", _add_shape, ["(+ A B)", "+ A B", "B)"],
         (r"shape|broadcast|dim|mismatch|incompatible",), args={"A": f32(3, 4), "B": f32(5)}),
    Case("shape-matmul-inner", _matmul, ["(matmul A B)", "matmul A B", "B)"],
         (r"shape|broadcast|dim|mismatch|incompatible|inner",), args={"A": f32(3, 4), "B": f32(5, 6)}),
    Case("shape-two-symbols", _symbols, ["(+ A B)", "+ A B", "B)"],
         (r"shape|broadcast|dim|mismatch|incompatible",), args={"A": f32(3), "B": f32(3)}),
    # --- dtypes
    Case("dtype-f32-plus-i32", _mixed, ["(+ A B)", "+ A B", "B)"], (r"dtype|f32.*i32|i32.*f32",),
         args={"A": f32(3), "B": i32(3)}),
    Case("dtype-exp-of-i32", _exp_int, ["(exp X)", "exp X"], (r"float|dtype|i32",), args={"X": i32(3)}),
    Case("dtype-float-literal-int-tensor", _float_lit, ["(+ X 1.5)", "+ X 1.5", "1.5"],
         (r"float|literal|dtype|i32|1\.5",), args={"X": i32(3)}),
    Case("bad-dtype-name-input", _f33_in, ["X{f33}", "f33"], (r"f33",), args=X4),
    Case("bad-dtype-name-output", _f33_out, ["Y{f33}", "f33"], (r"f33",), args=X4),
    Case("bad-dtype-name-cast", _f33_cast, ["f33", "(cast", "cast X"], (r"f33",), args=X4),
    # --- outputs
    Case("return-count", _count, ["(return", "return (exp", "(exp X)"], (r"return|output|value",), args=X4),
    Case("return-dtype", _ret_dtype, ["(return", "return (exp", "(exp X)"], (r"dtype|f32|i32",), args=X4),
    Case("return-shape", _ret_shape, ["(return", "return (sum", "(sum X"], (r"shape|dim|\bM\b|rank|declared",),
         args={"X": f32(3, 4)}),
    Case("return-rank", _ret_rank, ["(return", "return X", "X))"], (r"shape|dim|rank|declared",), args=X4),
    Case("permute-axis-out-of-range", _permute, ["(permute", "permute X", "[0 5]"], (r"axis|axes|permut|range",),
         args={"X": f32(3, 4)}),
    Case("duplicate-input-name", _dup, [("X{f32}[N]", 2), ("X{f32}[N]", 1)], (r"\bX\b",), args=X4),
    Case("unbound-output-dim", _unbound, ["Y{f32}[K]", "K]))", "(full", "K] 1.0"], (r"\bK\b",), args=X4),
]


def _raise(case: Case) -> caten.Error:
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(case.src, runtime="numpy")
        getattr(mod, pyname(case.entry))(*case.args.values())
    return ei.value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_python_api_diagnostic(case: Case):
    e = _raise(case)
    assert isinstance(e, ValueError)
    text = full_text(e)
    for pat in case.patterns:
        assert re.search(pat, text, re.IGNORECASE), f"{pat!r} not in {text!r}"
    if case.hint:
        assert case.hint in text, f"no hint suggesting {case.hint!r} in {text!r}"
    assert isinstance(e.file, str) and e.file, e.file
    assert "ops/" not in e.file and not e.file.endswith(".lisp"), \
        f"error points into {e.file}, not the user's source: {text}"
    assert isinstance(e.line, int) and isinstance(e.col, int), (e.line, e.col)
    places = resolve(case.src, case.at)
    assert (e.line, e.col) in places, f"error at {e.line}:{e.col}, expected one of {sorted(places)}: {text}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_diagnostic(case: Case, tmp_path: Path):
    (tmp_path / "bad.lisp").write_text(case.src, encoding="utf-8")
    inputs = []
    for name, arr in case.args.items():
        np.save(tmp_path / f"{name}.npy", arr)
        inputs.append(f"{name}={name}.npy")
    rc, out, err = run_cli(["run", "bad.lisp", "-e", case.entry, "-r", "numpy", *inputs, "-o", "out.npy"],
                           tmp_path)
    both = out + err
    assert rc == 1, f"exit {rc}:\n{both}"
    patterns = tuple(case.patterns)
    if case.hint:
        patterns += (r"did you mean", re.escape(case.hint))
    check_cli_diagnostic(err + "\n" + out, case.src, resolve(case.src, case.at), patterns)
    assert "Traceback" not in both
    assert not (tmp_path / "out.npy").exists()


def test_error_is_a_value_error():
    assert issubclass(caten.Error, ValueError)


def test_loads_error_names_a_placeholder_file():
    with pytest.raises(caten.Error) as ei:
        caten.loads(_softmx, runtime="numpy")
    e = ei.value
    assert isinstance(e.file, str) and e.file.startswith("<"), e.file
    assert (e.line, e.col) == position(_softmx, "softmx")


def test_load_error_names_the_file(tmp_path: Path):
    p = tmp_path / "bad.lisp"
    p.write_text(_local, encoding="utf-8")
    with pytest.raises(caten.Error) as ei:
        caten.load(str(p), runtime="numpy")
    e = ei.value
    assert e.file is not None and e.file.endswith("bad.lisp"), e.file
    assert (e.line, e.col) == position(_local, "hiden")


def test_error_in_second_composite_points_there():
    src = SIG + "  (return (exp X)))\n\n" + "(composite g ((X{f32}[N]) -> (Y{f32}[N]))\n  (return (lgo X)))\n"
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(src, runtime="numpy")
        mod.g(f32(3))
    assert (ei.value.line, ei.value.col) in resolve(src, ["lgo", "(lgo"])
    assert "log" in full_text(ei.value)



def test_error_in_called_helper_is_reported_at_load():
    # the helper is checked as part of its caller (not elaborated alone): the error still
    # surfaces at load time, at the helper's own source position
    src = ("(composite helper ((X{f32}[N]) -> (Y{f32}[N]))\n  (+ X (undefined-thing X)))\n\n"
           "(composite main ((A{f32}[N]) -> (B{f32}[N]))\n  (helper A))\n")
    with pytest.raises(caten.Error) as ei:
        caten.loads(src, runtime="numpy")
    assert (ei.value.line, ei.value.col) == (2, 9)
    assert "undefined-thing" in str(ei.value)

def test_error_inside_block_comment_lines_keeps_positions():
    src = "#| a comment\n   over two lines |#\n" + SIG + "  ; a line comment\n  (return (softmx X)))\n"
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(src, runtime="numpy")
        mod.f(f32(3))
    assert (ei.value.line, ei.value.col) in resolve(src, ["softmx", "(softmx"])


# ---------------------------------------------------------------------------------------------
# positive controls: the fixed versions of some cases compile, so the cases fail for their reason


@pytest.mark.parametrize("src,args,expect", [
    (SIG + "  (return (exp X)))\n", (f32(4),), lambda x: np.exp(x)),
    ("(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N]))\n  (return (softmax X :axis -1)))\n", (f32(2, 3),),
     lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    (SIG + "  (setf hidden (exp X))\n  (return (+ hidden 1.0)))\n", (f32(4),), lambda x: np.exp(x) + 1),
    ("(composite f ((X{i32}[N]) -> (Y{i32}[N]))\n  (return (+ X 2)))\n", (i32(3),), lambda x: x + 2),
    ("(composite f ((X{i32}[N]) -> (Y{f32}[N]))\n  (return (exp (cast X f32))))\n", (i32(3),),
     lambda x: np.exp(x.astype(np.float32))),
], ids=["exp", "softmax", "local", "int-literal", "cast-then-exp"])
def test_fixed_versions_compile(src, args, expect):
    mod = caten.loads(src, runtime="numpy")
    y = mod.f(*args)
    np.testing.assert_allclose(y, expect(*args), rtol=1e-5, atol=1e-6)


def test_unbound_output_dim_is_fine_with_defines():
    mod = caten.loads(_unbound, runtime="numpy", defines={"K": 4})
    y = mod.f(f32(3))
    assert y.shape == (4,) and y.dtype == np.float32
    np.testing.assert_array_equal(y, np.ones(4, np.float32))


# ---------------------------------------------------------------------------------------------
# `where` constraints fail at call time, before anything runs


_WHERE = ("(composite twice ((A{f32}[M, N]) -> (C{f32}[M, N]) where N = (* 2 M))\n"
          "  (return (+ A 1.0)))\n")
_HALVE = ("(composite halve ((X{f32}[N]) -> (Y{f32}[K]) where K = (/ N 2))\n"
          "  (return (sum (reshape X [K 2]) :axis 1)))\n")


def test_where_constraint_holds():
    mod = caten.loads(_WHERE, runtime="numpy")
    a = f32(3, 6)
    np.testing.assert_allclose(mod.twice(a), a + 1)
    mod = caten.loads(_HALVE, runtime="numpy")
    np.testing.assert_allclose(mod.halve(f32(6)), f32(6).reshape(3, 2).sum(1), rtol=1e-6)


def test_where_dim_as_slice_stop():
    """K = N/2 <= N, so slicing [0 K 1] gives exactly K elements."""
    src = ("(composite first-half ((X{f32}[N]) -> (Y{f32}[K]) where K = (/ N 2))\n"
           "  (return (slice X [0 K 1])))\n")
    mod = caten.loads(src, runtime="numpy")
    np.testing.assert_array_equal(mod.first_half(f32(6)), f32(6)[:3])
    with pytest.raises(caten.Error):
        mod.first_half(f32(7))


@pytest.mark.parametrize("src,name,arg", [(_WHERE, "twice", f32(3, 5)), (_HALVE, "halve", f32(5))],
                         ids=["N=2M", "exact-division"])
def test_where_constraint_fails_in_python(src, name, arg):
    mod = caten.loads(src, runtime="numpy")
    before = arg.copy()
    with pytest.raises(caten.Error) as ei:
        getattr(mod, name)(arg)
    assert isinstance(ei.value, ValueError)
    np.testing.assert_array_equal(arg, before)


@pytest.mark.parametrize("src,name,arg", [(_WHERE, "twice", f32(3, 5)), (_HALVE, "halve", f32(5))],
                         ids=["N=2M", "exact-division"])
def test_where_constraint_fails_in_cli(tmp_path: Path, src, name, arg):
    (tmp_path / "w.lisp").write_text(src, encoding="utf-8")
    np.save(tmp_path / "a.npy", arg)
    inp = "A=a.npy" if name == "twice" else "X=a.npy"
    rc, out, err = run_cli(["run", "w.lisp", "-e", name, "-r", "numpy", inp, "-o", "out.npy"], tmp_path)
    assert rc == 1, out + err
    assert "error" in (out + err).lower()
    assert "Traceback" not in out + err
    assert not (tmp_path / "out.npy").exists()


# ---------------------------------------------------------------------------------------------
# bad calls of a compiled composite


_ADD = ("(composite add2 ((A{f32}[N] B{f32}[N]) -> (C{f32}[N]))\n  (return (+ A B)))\n"
        "(composite fixed ((A{f32}[3, 4]) -> (C{f32}[3, 4]))\n  (return (* A 2.0)))\n")


@pytest.fixture(scope="module")
def add_mod():
    return caten.loads(_ADD, runtime="numpy")


def test_good_calls(add_mod):
    a, b = f32(5), f32(5) * 3
    np.testing.assert_allclose(add_mod.add2(a, b), a + b)
    np.testing.assert_allclose(add_mod.fixed(f32(3, 4)), f32(3, 4) * 2)


@pytest.mark.parametrize("call", [
    lambda m: m.add2(f32(5)),
    lambda m: m.add2(f32(5), f32(5), f32(5)),
    lambda m: m.add2(),
    lambda m: m.add2(f32(5), f32(5).astype(np.float64)),
    lambda m: m.add2(f32(5).astype(np.int32), f32(5).astype(np.int32)),
    lambda m: m.add2(f32(5, 1), f32(5, 1)),
    lambda m: m.add2(np.float32(1.0), np.float32(2.0)),
    lambda m: m.add2(f32(5), f32(6)),
    lambda m: m.fixed(f32(3, 5)),
    lambda m: m.fixed(f32(4, 3)),
    lambda m: m.fixed(f32(12)),
    lambda m: m.fixed(f32(3, 4).astype(np.float16)),
], ids=["too-few", "too-many", "none", "f64-for-f32", "i32-for-f32", "rank-2-for-rank-1", "scalar-for-rank-1",
        "N-disagrees", "fixed-dim-3x5", "fixed-dim-4x3", "fixed-rank", "f16-for-f32"])
def test_bad_call_raises_before_running(add_mod, call):
    with pytest.raises(caten.Error) as ei:
        call(add_mod)
    assert isinstance(ei.value, ValueError)


# ---------------------------------------------------------------------------------------------
# bad files


def test_missing_file_python(tmp_path: Path):
    with pytest.raises(caten.Error) as ei:
        caten.load(str(tmp_path / "missing.lisp"), runtime="numpy")
    assert "missing.lisp" in str(ei.value)


def test_directory_python(tmp_path: Path):
    d = tmp_path / "dir.lisp"
    d.mkdir()
    with pytest.raises(caten.Error) as ei:
        caten.load(str(d), runtime="numpy")
    assert "dir.lisp" in str(ei.value)


_UTF8_PREFIX = SIG + "  (return (exp X))) ; caf"


def _write_bad_utf8(p: Path):
    p.write_bytes(_UTF8_PREFIX.encode() + b"\xe9 au lait\n")


def test_invalid_utf8_python(tmp_path: Path):
    p = tmp_path / "bad.lisp"
    _write_bad_utf8(p)
    with pytest.raises(caten.Error) as ei:
        caten.load(str(p), runtime="numpy")
    e = ei.value
    assert re.search(r"utf-?8|encod|decod|byte", full_text(e), re.IGNORECASE), str(e)
    assert e.file.endswith("bad.lisp")
    assert (e.line, e.col) == (2, len(_UTF8_PREFIX.split("\n")[-1]) + 1)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_bad_file_cli(tmp_path: Path, kind):
    if kind == "directory":
        (tmp_path / "dir.lisp").mkdir()
        name = "dir.lisp"
    else:
        name = "missing.lisp"
    for argv in (["run", name, "-r", "numpy"], [name, "-r", "numpy", "--emit", "ir"]):
        rc, out, err = run_cli(argv, tmp_path)
        both = out + err
        assert rc == 1, f"{argv}: exit {rc}\n{both}"
        assert "Traceback" not in both
        assert "error" in both and name in both, both


def test_invalid_utf8_cli(tmp_path: Path):
    _write_bad_utf8(tmp_path / "bad.lisp")
    np.save(tmp_path / "X.npy", f32(3))
    rc, out, err = run_cli(["run", "bad.lisp", "-e", "f", "-r", "numpy", "X=X.npy", "-o", "out.npy"], tmp_path)
    both = out + err
    assert rc == 1, both
    assert "Traceback" not in both
    m = HEADER_RE.search(both)
    assert m, both
    assert (int(m["line"]), int(m["col"])) == (2, len(_UTF8_PREFIX.split("\n")[-1]) + 1), both


# ---------------------------------------------------------------------------------------------
# very deep nesting: a diagnostic, never a RecursionError


DEPTH = 5000


def _deep_sources():
    return {
        "parens": SIG + "  " + "(" * DEPTH + "X" + ")" * DEPTH + ")\n",
        "brackets": SIG + "  (reshape X " + "[" * DEPTH + "]" * DEPTH + "))\n",
        "unclosed-parens": SIG + "  " + "(" * DEPTH + "\n",
        "dim-expr": "(composite f ((X{f32}[" + "(+ " * DEPTH + "N" + " 1)" * DEPTH + "]) -> (Y{f32}[N]))\n  X)\n",
    }


@pytest.mark.parametrize("kind", list(_deep_sources()))
def test_deep_nesting_python(kind):
    src = _deep_sources()[kind]
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(src, runtime="numpy")
        mod.f(f32(3))
    e = ei.value
    assert isinstance(e.line, int) and isinstance(e.col, int)
    assert e.line in (1, 2)


def test_deep_neg_chain_compiles_or_diagnoses():
    src = SIG + "  " + "(neg " * DEPTH + "X" + ")" * DEPTH + ")\n"
    try:
        mod = caten.loads(src, runtime="numpy")
        y = mod.f(f32(3))
    except caten.Error as e:
        assert e.line is not None and e.col is not None
    else:
        np.testing.assert_array_equal(y, f32(3))


def test_long_setf_chain_compiles():
    """5000 dependent statements: deep in the graph, flat in the source; must not hit recursion."""
    body = "".join("  (setf h (+ h 1))\n" for _ in range(DEPTH))
    src = "(composite f ((X{i32}[N]) -> (Y{i32}[N]))\n  (setf h X)\n" + body + "  (return h))\n"
    mod = caten.loads(src, runtime="numpy")
    np.testing.assert_array_equal(mod.f(i32(4)), i32(4) + DEPTH)


@pytest.mark.parametrize("kind", ["parens", "unclosed-parens"])
def test_deep_nesting_cli(tmp_path: Path, kind):
    (tmp_path / "bad.lisp").write_text(_deep_sources()[kind], encoding="utf-8")
    np.save(tmp_path / "X.npy", f32(3))
    rc, out, err = run_cli(["run", "bad.lisp", "-e", "f", "-r", "numpy", "X=X.npy", "-o", "out.npy"], tmp_path)
    both = out + err
    assert rc == 1, both[-3000:]
    assert "Traceback" not in both and "RecursionError" not in both
    assert HEADER_RE.search(both), both[-3000:]


# ---------------------------------------------------------------------------------------------
# YAML form: errors point into the .yaml file


_YAML_BAD = """\
f:
  in: ["X{f32}[B, N]"]
  out: ["Y{f32}[B, N]"]
  doc: "row softmax"
  impl: |
    (setf m (max X :axis 1 :keepdims true))
    (return (softmx X :axis -1))
"""


def test_yaml_error_points_into_yaml_file(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text(_YAML_BAD, encoding="utf-8")
    with pytest.raises(caten.Error) as ei:
        mod = caten.load(str(p), runtime="numpy")
        mod.f(f32(2, 3))
    e = ei.value
    assert e.file.endswith("bad.yaml"), e.file
    assert (e.line, e.col) in resolve(_YAML_BAD, ["softmx", "(softmx"]), (e.line, e.col)
    assert "softmax" in full_text(e)


def test_yaml_error_cli(tmp_path: Path):
    (tmp_path / "bad.yaml").write_text(_YAML_BAD, encoding="utf-8")
    np.save(tmp_path / "X.npy", f32(2, 3))
    rc, out, err = run_cli(["run", "bad.yaml", "-e", "f", "-r", "numpy", "X=X.npy", "-o", "out.npy"], tmp_path)
    assert rc == 1, out + err
    check_cli_diagnostic(err + "\n" + out, _YAML_BAD, resolve(_YAML_BAD, ["softmx", "(softmx"]), (r"softmx",))


@pytest.mark.parametrize("text", [
    "f:\n  in: [\"X{f32}[N]\"\n  out: [\"Y{f32}[N]\"]\n  impl: X\n",  # unclosed flow sequence
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n",  # no impl
    "- just\n- a list\n",  # not a mapping
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: \"(return (exp X)\"\n",  # unclosed paren in impl
], ids=["yaml-syntax", "no-impl", "not-a-mapping", "impl-syntax"])
def test_bad_yaml_is_a_diagnostic(tmp_path: Path, text):
    p = tmp_path / "bad.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(caten.Error) as ei:
        mod = caten.load(str(p), runtime="numpy")
        mod.f(f32(3))
    e = ei.value
    assert e.file.endswith("bad.yaml")
    assert isinstance(e.line, int) and 1 <= e.line <= text.count("\n") + 1


# ---------------------------------------------------------------------------------------------
# rewrite rules (LANGUAGE.md section 6)

_GROW = "(defoptimizer grow (neg ?x) => (neg (neg (neg ?x))))\n"
_NEG = SIG + "  (return (neg X)))\n"


def test_non_converging_rules_are_a_diagnostic_naming_them():
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(_GROW + _NEG, runtime="numpy")
        mod.f(f32(3))
    assert "grow" in full_text(ei.value)


def test_non_converging_rules_file(tmp_path: Path):
    (tmp_path / "rules.lisp").write_text(_GROW, encoding="utf-8")
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(_NEG, runtime="numpy", rules=[str(tmp_path / "rules.lisp")])
        mod.f(f32(3))
    assert "grow" in full_text(ei.value)
    (tmp_path / "prog.lisp").write_text(_NEG, encoding="utf-8")
    np.save(tmp_path / "X.npy", f32(3))
    rc, out, err = run_cli(["run", "prog.lisp", "-r", "numpy", "--rules", "rules.lisp", "X=X.npy", "-o", "y.npy"],
                           tmp_path)
    assert rc == 1, out + err
    assert "grow" in out + err and "Traceback" not in out + err


def test_rule_with_unbound_replacement_variable():
    src = "(defoptimizer bad (neg ?x) => ?y)\n" + _NEG
    with pytest.raises(caten.Error) as ei:
        mod = caten.loads(src, runtime="numpy")
        mod.f(f32(3))
    e = ei.value
    assert "?y" in full_text(e)
    assert (e.line, e.col) in resolve(src, ["?y", "(defoptimizer", "defoptimizer bad"])


def test_rules_apply():
    """Positive control for the rule tests: a converging rule changes nothing observable."""
    src = "(defoptimizer neg-neg (neg (neg ?x)) => ?x)\n" + SIG + "  (return (neg (neg X))))\n"
    mod = caten.loads(src, runtime="numpy")
    np.testing.assert_array_equal(mod.f(f32(3)), f32(3))
