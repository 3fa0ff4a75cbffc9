"""Unbalanced brackets, explained as rustc does: which delimiter is wrong, and where the fix goes.

Runs only after the reader's pre-scan found a bracket problem. A missing `)` leaves the outermost
form open at the end of the file, but the form that lost it is usually another one: the first
whose indentation says it ended before its bracket did (a later line starts at or left of its
column). An extra `)` is found at the end, but the one to delete is usually the `)` that closed a
form while the lines after it are still indented inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from caten.errors import Error, Span

_CLOSE = {"(": ")", "[": "]"}
# strings, line comments, brackets, other code (block comments are already blanked out)
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"?|;[^\n]*|[()\[\]]|[^\s()\[\]";]+')


class _SpanOf(Protocol):
    def span(self, pos: int, end: int | None = None) -> Span: ...


@dataclass
class _Scan:
    """The tolerant matching of every bracket, and each line's indentation."""

    starts: list[int]  # offset of each line
    indent: dict[int, int]  # line -> column of its first code token, for lines that do not start with a closer
    last_code: dict[int, int]  # line -> offset just past its last code token
    pairs: list[tuple[int, int]]  # (open, close) offsets, closed by the right kind
    mismatched: list[tuple[int, int]]  # (open, close) closed by the wrong kind
    extra: list[int]  # closers with nothing open
    unclosed: list[int]  # opens still open at the end, outermost first

    def line_of(self, pos: int) -> int:
        import bisect

        return bisect.bisect_right(self.starts, pos)

    def col_of(self, pos: int) -> int:
        return pos - self.starts[self.line_of(pos) - 1] + 1


def _scan(text: str) -> _Scan:
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    s = _Scan(starts, {}, {}, [], [], [], [])
    first: dict[int, str] = {}
    stack: list[int] = []
    for m in _TOKEN.finditer(text):
        tok, pos = m.group(), m.start()
        if tok.startswith(";"):
            continue
        line = s.line_of(pos)
        if line not in first:
            first[line] = tok
            if tok not in (")", "]"):
                s.indent[line] = s.col_of(pos)
        s.last_code[s.line_of(m.end() - 1)] = m.end()
        if tok in ("(", "["):
            stack.append(pos)
        elif tok in (")", "]"):
            if not stack:
                s.extra.append(pos)
                continue
            o = stack.pop()
            (s.pairs if _CLOSE[text[o]] == tok else s.mismatched).append((o, pos))
    s.unclosed = stack
    return s


def _threshold(s: _Scan, o: int) -> tuple[int, bool]:
    """The column a line must start right of to belong to the form opened at `o`, and whether
    the form opens its line (only then does indentation say much about the form itself)."""
    line = s.line_of(o)
    col = s.col_of(o)
    own = s.indent.get(line) == col
    return (col if own else s.indent.get(line, 1)), own


def _limit(s: _Scan, o: int) -> int | None:
    """The first line after the one of `o` that indentation puts outside its form."""
    k, _ = _threshold(s, o)
    line = s.line_of(o)
    return next((ln for ln in sorted(s.indent) if ln > line and s.indent[ln] <= k), None)


def _end_of_code_before(s: _Scan, line: int | None) -> int:
    """The offset just past the last code token before `line` (None: the end of the file)."""
    lines = [ln for ln in s.last_code if line is None or ln < line]
    return s.last_code[max(lines)] if lines else 0


def _where(s: _Scan, pos: int) -> str:
    return f"line {s.line_of(pos)}, column {s.col_of(pos)}"


def _unclosed(src: _SpanOf, text: str, s: _Scan) -> tuple[int, Error] | None:
    """The open bracket whose `)` is missing: the first (innermost on ties) that runs past where its
    indentation ends, else the innermost one still open at the end of the file."""
    if not s.unclosed:
        return None
    over = []
    for o, c in s.pairs + [(o, len(text)) for o in s.unclosed]:
        lim = _limit(s, o)
        if lim is not None and s.line_of(c) >= lim:
            over.append((lim, -o))
    if over:
        lim, neg = min(over)
        o = -neg
        at = _end_of_code_before(s, lim)
        why = (f"by its indentation the form ends before line {lim}, which starts at column {s.indent[lim]}, "
               f"{'under' if s.indent[lim] == _threshold(s, o)[0] else 'left of'} it")
    else:
        o = s.unclosed[-1]
        at = _end_of_code_before(s, None)
        why = "the file ends before it is closed"
    close = _CLOSE[text[o]]
    return o, Error(f"unclosed '{text[o]}': {why}", src.span(o),
                    f"insert '{close}' at {_where(s, at)} (after `{_last_token(text, at)}`)")


def _last_token(text: str, end: int) -> str:
    tok = re.search(r"[^\s]+$", text[:end])
    return tok.group()[-20:] if tok else ""


def _extra(src: _SpanOf, text: str, s: _Scan) -> tuple[int, Error] | None:
    """The closer to delete: the one that ended a form while the next line is still indented
    inside it, else the one with nothing open."""
    if not s.extra:
        return None
    bad = s.extra[0]
    ch = text[bad]
    for o, c in sorted(s.pairs, key=lambda p: -p[1]):
        if c > bad:
            continue
        k, own = _threshold(s, o)
        nxt = next((ln for ln in sorted(s.indent) if ln > s.line_of(c)), None)
        if own and nxt is not None and s.line_of(c) < nxt <= s.line_of(bad) and s.indent[nxt] > k:
            return c, Error(f"extra '{text[c]}': it closes the '{text[o]}' opened at {_where(s, o)}, but line {nxt} "
                            f"is still indented inside that form", src.span(c),
                            f"delete this '{text[c]}' (the '{ch}' at {_where(s, bad)} closes the form)")
    before = [p for p in s.pairs if p[1] < bad]
    last = f" (the '{text[before[-1][0]]}' at {_where(s, before[-1][0])} is already closed at " \
           f"{_where(s, before[-1][1])})" if before else ""
    return bad, Error(f"unexpected '{ch}': nothing is open here{last}", src.span(bad), "delete it")


def _mismatch(src: _SpanOf, text: str, s: _Scan) -> tuple[int, Error] | None:
    if not s.mismatched:
        return None
    o, c = min(s.mismatched, key=lambda p: p[1])
    want, got = _CLOSE[text[o]], text[c]
    return c, Error(f"'{got}' closes the '{text[o]}' opened at {_where(s, o)}", src.span(c),
                    f"did you mean '{want}'? (or a '{want}' is missing before it)")


def diagnose(src: _SpanOf, text: str) -> Error | None:
    """The diagnostic for unbalanced brackets in `text` (block comments blanked); None if they
    balance. `src.span(offset)` gives a Span. A wrong kind of closer comes first (it also leaves
    the forms around it unbalanced); else the missing or extra bracket met first in the file."""
    s = _scan(text)
    wrong = _mismatch(src, text, s)
    if wrong:
        return wrong[1]
    found = [d for d in (_unclosed(src, text, s), _extra(src, text, s)) if d]
    return min(found, key=lambda d: d[0])[1] if found else None
