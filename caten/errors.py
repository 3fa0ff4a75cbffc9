"""The one error type users see: a message pinned to a source span.

`caten.Error` is a ValueError so that Python callers can catch it the usual way; the CLI
prints `format()`: `file:line:col: error: message`, the source line, a caret, a hint. `str()` is
the same text, so a traceback or a logged error in Python shows what the CLI would; code that
builds a new message from an error reads `.message` and `.hint`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    file: str
    line: int  # 1-based
    col: int  # 1-based
    end_line: int = 0
    end_col: int = 0
    text: str | None = None  # the whole source, for printing the line

    def source_line(self) -> str | None:
        if self.text is None:
            return None
        lines = self.text.splitlines()
        return lines[self.line - 1] if 0 < self.line <= len(lines) else None


class Error(ValueError):
    """A diagnostic: bad source, a bad call of a compiled composite, or a failed constraint."""

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.span, self.hint = message, span, hint

    @property
    def file(self) -> str | None:
        return self.span.file if self.span else None

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def col(self) -> int | None:
        return self.span.col if self.span else None

    def __str__(self) -> str:
        """The CLI's rendering where a place is known; else the message (and hint) alone."""
        if self.span:
            return self.format()
        return f"{self.message}\nhint: {self.hint}" if self.hint else self.message

    def format(self) -> str:
        """The gcc-style diagnostic the CLI prints."""
        s = self.span
        head = f"{s.file}:{s.line}:{s.col}: error: {self.message}" if s else f"caten: error: {self.message}"
        out = [head]
        line = s.source_line() if s else None
        if line is not None:
            out.append(line.replace("\t", " "))
            width = 1
            if s.end_line == s.line and s.end_col > s.col:
                width = s.end_col - s.col
            out.append(" " * (s.col - 1) + "^" + "~" * (width - 1))
        if self.hint:
            out.append(f"hint: {self.hint}")
        return "\n".join(out)


def closest(name: str, candidates) -> str | None:
    """The candidate a typo most likely meant, for "did you mean" hints."""
    import difflib

    m = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return m[0] if m else None
