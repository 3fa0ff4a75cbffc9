"""The reader's fast path (caten.read.reader._fast) reads every valid text into the same forms,
with the same spans, as lark's LALR parser over the grammar; whatever it does not accept goes
to lark, so bad input gets lark's diagnostics."""

from __future__ import annotations

import glob
import os
import random

import pytest

from caten.errors import Error
from caten.read import reader
from caten.read.sexpr import Annot, SList

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _dump(f) -> object:
    """A form as plain data, spans included (the types themselves compare by identity)."""
    sp = f.span
    where = None if sp is None else (sp.file, sp.line, sp.col, sp.end_line, sp.end_col)
    if isinstance(f, SList):
        return ("list", f.bracket, where, [_dump(x) for x in f.items])
    if isinstance(f, Annot):
        return ("annot", f.name, f.dtype, where, None if f.dims is None else [_dump(x) for x in f.dims])
    return (type(f).__name__, repr(getattr(f, "value", getattr(f, "name", None))), where)


def _both(text: str) -> tuple[object, object]:
    """(fast path's forms or its _Slow, lark's forms or its Error message)."""
    src = reader._Src(text, "t.lisp")
    try:
        clean = reader._prescan(src)
    except Error as e:
        return ("prescan", str(e)), ("prescan", str(e))
    try:
        fast: object = [_dump(f) for f in reader._fast(src, clean)]
    except reader._Slow:
        fast = "slow"
    try:
        slow: object = [_dump(f) for f in reader.read_lark(src, clean)]
    except Error as e:
        slow = ("error", e.message if hasattr(e, "message") else str(e))
    return fast, slow


SOURCES = sorted(glob.glob(os.path.join(ROOT, "ops", "**", "*.lisp"), recursive=True)
                 + glob.glob(os.path.join(ROOT, "examples", "*.lisp")))


@pytest.mark.parametrize("path", SOURCES[:40], ids=lambda p: os.path.relpath(p, ROOT))
def test_every_shipped_source_reads_the_same(path):
    with open(path, encoding="utf-8") as f:
        fast, slow = _both(f.read())
    assert fast == slow


PIECES = ["(", ")", "[", "]", " ", "\n", ",", "; c\n", "x", "foo-bar", "+", "-", "*", "1", "-2", "+3", "1.5",
          "1e3", "2.", ".5", "-.5e-2", "inf", "-inf", "nan", "infx", "1x", "1.5.2", ":k", ":", '"s"', '"a\\"b"',
          "X{f32}", "X{f32}[", "X{}[", "Y{T}", "a?", "?b{i64}[", "{", "}", "#|b|#", "1e", "e1", "..", "@", "~x",
          "a{f32}x", "3-", "-3a", "_", "1_000", "\t", "é", "x" * 201, "9" * 401]


@pytest.mark.parametrize("seed", range(6))
def test_random_token_soups_read_the_same_or_go_to_lark(seed):
    rng = random.Random(seed)
    for _ in range(300):
        text = "".join(rng.choice(PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(1, 14)))
        fast, slow = _both(text)
        if fast != "slow":
            assert fast == slow, text
        else:
            assert isinstance(slow, tuple) or isinstance(slow, list), text


def test_bad_input_keeps_lark_diagnostics():
    with pytest.raises(Error, match="unexpected"):
        reader.read("(a 1x)")
    with pytest.raises(Error, match="empty dtype"):
        reader.read("(f X{}[3])")
    assert [type(f).__name__ for f in reader.read("(f X{f32}[N, 3] :k 1.5 \"s\")")[0].items] == \
        ["Sym", "Annot", "Kw", "Num", "Str"]
