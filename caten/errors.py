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


class Error(ValueError, RuntimeError, IndexError):
    """A diagnostic: bad source, a bad call of a compiled composite, or a failed constraint. It is
    also a RuntimeError and an IndexError, the classes torch raises for the same mistakes (a shape
    that does not fit, an index out of range), so code written against torch catches it."""

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


def nearby_file(path: str) -> str | None:
    """The existing file a mistyped path most likely meant (its folder's entries, or the folder
    itself misspelt one level up), as a path to show in a hint; None if nothing is close."""
    import os

    folder, name = os.path.split(path)
    if folder and not os.path.isdir(folder):
        up, fname = os.path.split(folder)
        fixed = _closest_entry(up or ".", fname)
        return nearby_file(os.path.join(up, fixed, name)) if fixed else None
    if os.path.exists(path):
        return path
    entry = _closest_entry(folder or ".", name)
    return os.path.join(folder, entry) if entry else None


def _closest_entry(folder: str, name: str) -> str | None:
    import os

    try:
        with os.scandir(folder) as it:
            names = [e.name for _, e in zip(range(2000), it)]  # a huge folder is not read whole
    except OSError:
        return None
    ext = os.path.splitext(name)[1]
    alike = [n for n in names if ext and n.endswith(ext)]  # x.npy meant another .npy first
    return closest(name, alike) or closest(name, names)

