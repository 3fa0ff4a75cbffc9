"""Fuzzing the front end: whatever the input, caten either compiles it or raises `caten.Error`
with a location (DESIGN.md "Diagnostics": internal errors are bugs).

Inputs: random bytes (decoded, and raw in a file), random soups of the language's tokens,
random mutations of a valid program, and random well-formed expressions inside a valid
signature (those that compile are also run and must give the declared dtype and shape).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caten

# CI (CI=true, unless CATEN_FULL_SUITE=1) draws 400 fixed examples a fuzzer, as the slow suites' slices do
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes") and os.environ.get("CATEN_FULL_SUITE") != "1"
FUZZ = settings(max_examples=400 if _CI else 1000, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example,
                                       HealthCheck.function_scoped_fixture])


def check_error(e: caten.Error, src: str | None = None):
    """A diagnostic must carry a usable location and print without failing."""
    assert isinstance(e, ValueError)
    assert isinstance(e.file, str) and e.file, repr(e.file)
    assert isinstance(e.line, int) and e.line >= 1, repr(e.line)
    assert isinstance(e.col, int) and e.col >= 1, repr(e.col)
    if src is not None:
        lines = src.split("\n")
        assert e.line <= len(lines) + 1, (e.line, len(lines))
    assert str(e)


def compile_or_diagnose(src: str):
    """caten.loads(src) compiles, or raises caten.Error with a location; nothing else."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return caten.loads(src, runtime="numpy")
    except caten.Error as e:
        check_error(e, src)
        return None


# ---------------------------------------------------------------------------------------------
# random bytes


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_decoded(data: bytes):
    compile_or_diagnose(data.decode("utf-8", errors="replace"))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".lisp", ".yaml"]))
def test_random_bytes_in_a_file(fuzz_dir: Path, data: bytes, suffix: str):
    p = fuzz_dir / f"input{suffix}"
    p.write_bytes(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            caten.load(str(p), runtime="numpy")
    except caten.Error as e:
        check_error(e)
        assert e.file.endswith(p.name), e.file


# ---------------------------------------------------------------------------------------------
# token soups

TOKENS = [
    "(", "(", "(", ")", ")", ")", "[", "]", "{", "}",
    "composite", "defcomposite", "defoptimizer", "import", "setf", "let", "return", "dotimes", "where",
    "=", "->", "=>", ":when", "+", "-", "*", "/", "<", "<=", "neg", "exp", "log", "sqrt", "max", "sum",
    "mean", "softmax", "log-softmax", "matmul", "reshape", "permute", "transpose", "expand", "slice",
    "pad", "concat", "full", "zeros", "arange", "cast", "where", "relu", "layernorm", "conv2d", "rank",
    "X", "Y", "Z", "N", "M", "K", "B", "f", "g", "h", "i", "?x", "?y", "f32", "i32", "bool", "T",
    "X{f32}[N]", "Y{f32}[N]", "A{f32}[N, M]", "B{f32}[M, K]", "C{T}[(* 2 M), N]", "S{f32}", "I{i32}[3]",
    "Q{bool}[N]", "W{f33}[N]", "E{}[N]", "V{f32}[]", "X{f32}[", "{f32}", "[N, M]", "(* 2 M)",
    "0", "1", "2", "3", "-3", "1.5", "-2.0e-3", "1e9", "inf", "-inf", "nan", "0.5",
    ":axis", ":keepdims", ":dtype", ":eps", ":value", "true", "false", "t", "nil",
    '"doc"', '"a \\" quote"', '"unterminated', '"nofile.lisp"', '""',
    ";", "; comment\n", "#|", "|#", "#| c |#", ",", "\n", "\t", "@", "#", "'", "`", "\\",
]

_SEP = st.sampled_from([" ", " ", " ", "", "\n", ","])


@st.composite
def token_soup(draw) -> str:
    toks = draw(st.lists(st.tuples(st.sampled_from(TOKENS), _SEP), max_size=60))
    return "".join(t + s for t, s in toks)


@FUZZ
@given(token_soup())
def test_token_soup(src: str):
    compile_or_diagnose(src)


@FUZZ
@given(token_soup())
def test_token_soup_inside_a_composite(body: str):
    src = "(composite f ((X{f32}[N] A{f32}[N, M]) -> (Y{f32}[N]))\n  " + body + ")\n"
    compile_or_diagnose(src)


# ---------------------------------------------------------------------------------------------
# mutations of a valid program

VALID = """\
;; a valid program to mutate
#| with a block comment |#
(composite shifted-exp ((X{f32}[B, N]) -> (E{f32}[B, N]))
  "exp(x - max(x)) along each row"
  (setf m (max X :axis 1 :keepdims true))
  (return (exp (- X m))))

(composite softmax-rows ((X{f32}[B, N]) -> (Y{f32}[B, N]))
  (setf e (shifted-exp X))
  (return (/ e (sum e :axis 1 :keepdims true))))

(composite twice ((A{T}[M, N]) -> (C{T}[K, N]) where K = (* 2 M))
  (let ((z (concat A A :axis 0)))
    (return z)))
"""

_INSERTS = ["(", ")", "[", "]", " ", "\n", "{", "}", "\"", ";", "#|", "|#", ":", "-", "1", "X", "K", "f64",
            "i32", "->", "where", "=", ",", "?", "\u00e9", "\x00"]


@st.composite
def mutated(draw) -> str:
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "swap-word"]))
        if kind == "insert":
            text = text[:pos] + draw(st.sampled_from(_INSERTS)) + text[pos:]
        elif kind == "delete":
            n = draw(st.integers(1, 8))
            text = text[:pos] + text[pos + n:]
        elif kind == "replace":
            text = text[:pos] + draw(st.sampled_from(_INSERTS)) + text[pos + 1:]
        else:
            words = ["X", "N", "B", "f32", "i32", "max", "sum", "exp", "1", "0", "-1", "true", "setf", "return",
                     "let", "composite", "where", "concat", "A", "K", "M"]
            old, new = draw(st.sampled_from(words)), draw(st.sampled_from(words))
            count = text.count(old)
            if count:
                k = draw(st.integers(0, count - 1))
                idx = -1
                for _ in range(k + 1):
                    idx = text.index(old, idx + 1)
                text = text[:idx] + new + text[idx + len(old):]
    return text


@FUZZ
@given(mutated())
def test_mutated_valid_program(src: str):
    mod = compile_or_diagnose(src)
    if mod is None:
        return
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    for name in ("softmax_rows", "shifted_exp", "twice"):
        fn = getattr(mod, name, None)
        if fn is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(x)
        except caten.Error:
            pass


def test_valid_program_itself_runs():
    mod = caten.loads(VALID, runtime="numpy")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(mod.softmax_rows(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mod.twice(x), np.concatenate([x, x]))


# ---------------------------------------------------------------------------------------------
# well-formed random expressions in a valid signature: compile-or-diagnose, then run-or-diagnose

_LEAVES = ["X", "A", "X", "A", "1.5", "2", "-1", "0.0", "N", "true", "inf", "(arange 4)", "(ones [3 4])"]
_UNARY = ["neg", "exp", "log", "sqrt", "abs", "relu", "sigmoid", "tanh", "not", "sum", "max", "mean", "prod",
          "transpose", "contiguous", "softmax", "log-softmax", "argmax", "recip", "sign", "gelu", "erf",
          "softplus", "flip"]
_BINARY = ["+", "-", "*", "/", "max", "min", "<", "=", "!=", "and", "or", "matmul", "pow", "mod", "idiv"]
_KWARGS = ["", ":axis 0", ":axis -1", ":axis 1", ":axis 2", ":keepdims true", ":axis [0 1]", ":axis []",
           ":axis [1 0] :keepdims true"]
_DTYPES = ["f32", "i32", "bool", "f64", "i64", "f16"]


def _exprs():
    leaves = st.sampled_from(_LEAVES)

    def extend(c):
        return st.one_of(
            st.tuples(st.sampled_from(_UNARY), c).map(lambda t: f"({t[0]} {t[1]})"),
            st.tuples(st.sampled_from(_BINARY), c, c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(st.sampled_from(["sum", "max", "mean", "min", "softmax", "argmin"]), c,
                      st.sampled_from(_KWARGS)).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(c, st.sampled_from(_DTYPES)).map(lambda t: f"(cast {t[0]} {t[1]})"),
            st.tuples(c, c, c).map(lambda t: f"(where {t[0]} {t[1]} {t[2]})"),
            st.tuples(c, st.sampled_from(["[12]", "[N M]", "[4 3]", "[M N]", "[2 2 3]", "[]", "[-1]"]))
            .map(lambda t: f"(reshape {t[0]} {t[1]})"),
            st.tuples(c, st.sampled_from(["[1 0]", "[0 1]", "[0]", "[2 0 1]"]))
            .map(lambda t: f"(permute {t[0]} {t[1]})"),
            st.tuples(c, st.sampled_from(["[0 2 1]", "[0 (- N 1) 1] [1 3]", "[-2 100 1]", "[0 3 0]"]))
            .map(lambda t: f"(slice {t[0]} {t[1]})"),
            st.tuples(c, st.sampled_from(["[[1 1] [0 2]]", "[[0 0]]", "[[-1 0] [0 0]]"]))
            .map(lambda t: f"(pad {t[0]} {t[1]})"),
            st.tuples(c, c, st.sampled_from(["0", "1", "-1"])).map(lambda t: f"(concat {t[0]} {t[1]} :axis {t[2]})"),
            st.tuples(c, st.sampled_from(["[3 4]", "[2 3 4]", "[N M]", "[5]"]))
            .map(lambda t: f"(expand {t[0]} {t[1]})"),
            st.tuples(c, c).map(lambda t: f"(let ((h {t[0]})) (+ h {t[1]}))"),
        )

    return st.recursive(leaves, extend, max_leaves=10)


_OUTS = ["Y{f32}[N, M]", "Y{f32}[N]", "Y{f32}", "Y{i32}[N, M]", "Y{bool}[N, M]", "Y{f32}[M]", "Y{i64}"]


@FUZZ
@given(body=_exprs(), out=st.sampled_from(_OUTS), use_return=st.booleans())
def test_random_expressions(body: str, out: str, use_return: bool):
    ret = f"(return {body})" if use_return else body
    src = f"(composite f ((X{{f32}}[N, M] A{{f32}}[M]) -> ({out}))\n  (setf tmp X)\n  {ret})\n"
    mod = compile_or_diagnose(src)
    if mod is None:
        return
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    a = np.linspace(0.5, 1.5, 4, dtype=np.float32)
    xc, ac = x.copy(), a.copy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = mod.f(x, a)
    except caten.Error:
        return
    np.testing.assert_array_equal(x, xc)  # inputs are never modified
    np.testing.assert_array_equal(a, ac)
    # the result has exactly the declared dtype and shape
    name_dtype = out.split("{")[1].split("}")[0]
    expect_dtype = {"f32": np.float32, "i32": np.int32, "bool": np.bool_, "i64": np.int64}[name_dtype]
    assert isinstance(y, np.ndarray), type(y)
    assert y.dtype == np.dtype(expect_dtype), (y.dtype, out, src)
    dims = out.split("}")[1]
    shape = () if not dims else tuple({"N": 3, "M": 4}[d.strip()] for d in dims.strip("[]").split(","))
    assert y.shape == shape, (y.shape, shape, src)


# ---------------------------------------------------------------------------------------------
# a few deterministic nasty inputs


@pytest.mark.parametrize("src", [
    "", " ", "\n\n", ";", "#||#", "#| #| |# |#", "()", "[]", "(())", ")", "]", "(", "[", "\"", "#|", "|#",
    "(composite)", "(composite f)", "(composite f ())", "(composite f (->))", "(composite f (() -> ()))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])))", "(composite 1 ((X{f32}[N]) -> (Y{f32}[N])) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return))", "(defoptimizer)", "(defoptimizer r)",
    "(defoptimizer r ?x => ?x)", "(import)", "(import 1)", "(import \"/nonexistent/x.lisp\")",
    "(import \".\")", "X{f32}[N]", "X{f32}", "42", ":axis", "\"str\"", "(setf x 1)", "(return X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (dotimes))", "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (let))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (let (x) x))", "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf 1 X))", "(composite f ((X{f32}[(/ N 0)]) -> (Y{f32}[N])) X)",
    "(composite f ((X{f32}[-1]) -> (Y{f32}[-1])) X)", "(composite f ((X{f32}[0]) -> (Y{f32}[0])) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (+ X 1e999))",
    "(composite f ((X{i32}[N]) -> (Y{i32}[N])) (+ X 99999999999999999999999))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (reshape X [99999999999999999999999]))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (slice X [0 N 0]))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (f X))",
    "(composite f ((X{f32}[N] X{f32}[N]) -> (Y{f32}[N])) X)",
    "(composite f ((X{f32}[N]) -> (X{f32}[N])) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N]) where) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N]) where N = N) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[K]) where K = (* K 2)) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (dotimes (i -1) X) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (dotimes (i 1.5) X) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (dotimes (i N) X) X)",
    "\ufeff(composite f ((X{f32}[N]) -> (Y{f32}[N])) X)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) X)\x00",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) \u00e9)",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N]))\r\n  (return X))\r\n",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (argmin 2 :axis 0))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (concat X 1.5 :axis 0))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (concat 1.5 X :axis 0))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (concat N N :axis 0))",
    "(composite f (() -> (Y{i64})) (idiv 99999999999999999999 1))",
    "(composite f (() -> (Y{i64})) (+ 99999999999999999999 1))",
    "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (reshape X [99999999999999999999]))",
    "(composite f ((X{f32}[99999999999999999999]) -> (Y{f32}[N])) X)",
    "(composite f (() -> (Y{f32}[3])) (full [-1] 1.0))",
])
def test_nasty_inputs(src: str):
    mod = compile_or_diagnose(src)
    if mod is not None and hasattr(mod, "f"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod.f(np.ones(3, np.float32))
        except caten.Error:
            pass


@pytest.mark.parametrize("text", [
    "",
    "---\n...\n",
    "a: 1\n---\nb: 2\n",
    "f: &x [*x]\n",
    "f:\n  in: &x [*x]\n  out: [\"Y{f32}[N]\"]\n  impl: X\n",
    "? [a, b]\n: {in: [], out: [], impl: X}\n",
    "f:\n  in: {X: f32}\n  out: [\"Y{f32}[N]\"]\n  impl: X\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: 42\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: [X]\n",
    "f:\n  in: [1, 2]\n  out: [\"Y{f32}[N]\"]\n  impl: X\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: X\nf:\n  in: []\n  out: []\n  impl: X\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  bogus: 1\n  impl: X\n",
    "f:\n\tin: [\"X{f32}[N]\"]\n",
    "\ufefff:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: X\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  impl: \"(exp \\\"X\\\" \\u00e9)\"\n",
    "f:\n  in: [\"X{f32}[N]\"]\n  out: [\"Y{f32}[N]\"]\n  where: \"K = \"\n  impl: X\n",
    "f: !!python/object:os.system [echo]\n",
    "[" * 5000 + "]" * 5000 + "\n",
    "f:\n  in: " + "[" * 5000 + "]" * 5000 + "\n  out: []\n  impl: X\n",
    "{" * 3000 + "}" * 3000 + "\n",
], ids=lambda t: repr(t[:30]))
def test_nasty_yaml(fuzz_dir: Path, text: str):
    p = fuzz_dir / "nasty.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        mod = caten.load(str(p), runtime="numpy")
    except caten.Error as e:
        check_error(e)
        return
    if hasattr(mod, "f"):
        try:
            mod.f(np.ones(3, np.float32))
        except caten.Error:
            pass
