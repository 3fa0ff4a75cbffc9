"""Text -> S-expression forms with spans.

A hand-written pre-pass strips nesting block comments (keeping positions), matches
brackets and bounds the nesting depth, so that the commonest mistakes get exact
locations; then a one-regex tokenizer and a bracket stack read the tokens of
`grammar/caten.lark` (`_fast`: the grammar's terminals, tried in lark's order). Anything that
path does not accept as it stands (a character no terminal matches, a bracket that closes the
wrong form, a literal over its limit) is read again by lark's LALR parser, whose diagnostics
are the reader's: the fast path never reports an error of its own, and a valid text gives the
same forms and spans either way (tests/test_compile_speed_reader.py compares them).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from bisect import bisect_right
from importlib import resources

from caten.errors import Error, Span, nearby_file
from caten.read import delims
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym

MAX_DEPTH = 200
_CLOSE = {"(": ")", "[": "]"}


MAX_NAME_CHARS = 200  # composite names become C symbols and cache file names
MAX_NUMBER_CHARS = 400  # longer literals cannot be an i64 or an f64; Python refuses ints over 4300 digits


@functools.lru_cache(maxsize=1)
def _parser():
    """lark's LALR parser for grammar/caten.lark (imported on first use: warm runs never need it),
    building caten's forms as it reduces (no parse tree, no second pass over one)."""
    import lark

    text = resources.files("caten.grammar").joinpath("caten.lark").read_text(encoding="utf-8")
    builder = _Builder()
    cache = _grammar_cache()
    parser = lark.Lark(text, parser="lalr", keep_all_tokens=True, maybe_placeholders=False, transformer=builder,
                       cache=cache)
    if cache:  # lark created it with the umask's mode: make it private, or a group-writable umask voids it
        from caten.cache import default_cache

        default_cache().seal(os.path.basename(cache))
    return parser, builder


def _grammar_cache() -> str | bool:
    """Where lark keeps its analysis of the grammar (a pickle, which lark loads itself): only in
    the user's own checked cache folder, with nothing planted at that name (no foreign file, no
    symlink to write through), else nowhere."""
    from caten.cache import default_cache
    from caten.cache.store import GRAMMAR_FILE

    return default_cache().private_file(GRAMMAR_FILE) or False


_parse_lock = threading.Lock()


class _Src:
    def __init__(self, text: str, file: str, display_text: str | None = None):
        self.text, self.file, self.shown = text, file, display_text if display_text is not None else text
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def span(self, pos: int, end: int | None = None) -> Span:
        line = bisect_right(self._starts, pos)
        col = pos - self._starts[line - 1] + 1
        if end is None:
            return Span(self.file, line, col, line, col + 1, self.shown)
        eline = bisect_right(self._starts, end)
        return Span(self.file, line, col, eline, end - self._starts[eline - 1] + 1, self.shown)


_NEWLINE = re.compile("\n")
_SPECIAL = re.compile(r'[;"#()\[\]]')  # the characters the prescan looks at; it skips the rest


def _prescan(src: _Src) -> str:
    """Blank out block comments; check strings, brackets and depth; return the text for lark.
    Unbalanced brackets are explained by `delims` from the whole text."""
    t = src.text
    out: list[str] | None = None  # the text as a list, once a block comment is blanked
    stack: list[tuple[str, int]] = []
    unbalanced = False
    i, n = 0, len(t)
    find = _SPECIAL.search
    while i < n:
        m = find(t, i)
        if m is None:
            break
        i = m.start()
        ch = t[i]
        if ch == ";":
            i = t.find("\n", i)
            i = n if i < 0 else i
            continue
        if ch == '"':
            j = i + 1
            while j < n and t[j] != '"':
                j += 2 if t[j] == "\\" else 1
            if j >= n:
                raise Error("unterminated string", src.span(i), "close it with \"")
            i = j + 1
            continue
        if t.startswith("#|", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if t.startswith("#|", j):
                    depth, j = depth + 1, j + 2
                elif t.startswith("|#", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise Error("unterminated block comment", src.span(i, i + 2), "close it with |#")
            out = list(t) if out is None else out
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if ch in "([":
            stack.append((ch, i))
            if len(stack) > MAX_DEPTH:
                raise Error(f"forms nest deeper than {MAX_DEPTH} levels", src.span(i),
                            "split the expression with setf")
        elif ch in ")]":
            if not stack or _CLOSE[stack.pop()[0]] != ch:
                unbalanced, stack = True, []
        i += 1
    clean = t if out is None else "".join(out)
    if unbalanced or stack:
        err = delims.diagnose(src, clean)
        if err is not None:
            raise err
    return clean


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"n": "\n", "t": "\t"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


class _Builder:
    """lark callbacks, one per grammar rule, run as the parser reduces; `src` is the text being
    read (set under `_parse_lock`). Bracket tokens are kept, so a form's span runs from its
    opening token to its closing one."""

    src: _Src

    def _span(self, first, last) -> Span:
        return self.src.span(first.start_pos, last.end_pos)

    def start(self, children: list) -> list[Form]:
        return children

    def list(self, c: list) -> SList:
        return SList(c[1:-1], self._span(c[0], c[-1]))

    def vector(self, c: list) -> SList:
        return SList(c[1:-1], self._span(c[0], c[-1]), True)

    def annot(self, c: list) -> Annot:
        tok = c[0]
        text = str(tok)
        name, rest = text.split("{", 1)
        dtype = rest.split("}", 1)[0]
        span = self._span(tok, c[-1])
        if not dtype:
            raise Error("empty dtype in annotation", span, "write NAME{f32}[...] or NAME{T}[...]")
        dims = c[1:-1] if tok.type == "ANNOT_OPEN" else None
        return Annot(name, dtype, dims, span)

    def atom(self, c: list) -> Form:
        tok = c[0]
        span = self._span(tok, tok)
        s = str(tok)
        if tok.type in ("INT", "FLOAT") and len(s) > MAX_NUMBER_CHARS:
            raise Error(f"a number literal of {len(s)} characters (at most {MAX_NUMBER_CHARS})", span,
                        "an i64/u64 needs at most 20 digits; write large floats with an exponent (1e300)")
        if tok.type == "SYMBOL" and len(s) > MAX_NAME_CHARS:
            raise Error(f"a name of {len(s)} characters (at most {MAX_NAME_CHARS})", span,
                        "names become file and C symbol names, which have length limits")
        if tok.type == "INT":
            return Num(int(s), span)
        if tok.type in ("FLOAT", "SPECIAL"):
            return Num(float(s), span)
        if tok.type == "STRING":
            return Str(_unescape(s[1:-1]), span)
        if tok.type == "KEYWORD":
            return Kw(s[1:], span)
        return Sym(s, span)


# the grammar's terminals in the order lark's lexer tries them (priority, then width), so that the
# first alternative that matches is the token lark reads; whitespace, commas and line comments apart
_TOKENS = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx in (
    ("IGNORE", r"[ \t\r\n\f,]+|;[^\n]*"),
    ("OPEN", r"[(\[]"),
    ("CLOSE", r"[)\]]"),
    ("ANNOT_OPEN", r"[A-Za-z_?][A-Za-z0-9_\-?]*\{[^{}\s()\[\]]*\}\["),
    ("ANNOT", r"[A-Za-z_?][A-Za-z0-9_\-?]*\{[^{}\s()\[\]]*\}"),
    ("FLOAT", r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))([eE][+-]?[0-9]+)?(?![A-Za-z0-9_+\-*\/<>=!?&%$^~.@{])"),
    ("SPECIAL", r"(-?inf|nan)(?![A-Za-z0-9_+\-*\/<>=!?&%$^~.@{])"),
    ("INT", r"[+-]?[0-9]+(?![A-Za-z0-9_+\-*\/<>=!?&%$^~.@{])"),
    ("KEYWORD", r":[A-Za-z_][A-Za-z0-9_\-]*"),
    ("SYMBOL", r"[A-Za-z_+\-*\/<>=!?&%$^~.@][A-Za-z0-9_+\-*\/<>=!?&%$^~.@]*"),
    ("STRING", r'"(\\.|[^"\\])*"'),
)))


class _Slow(Exception):
    """The fast path met something only lark's parser explains: read the text with it."""


def _fast(src: _Src, clean: str) -> list[Form]:
    """The forms of `clean` (prescanned text) as lark's parser and `_Builder` make them, or _Slow."""
    top: list[Form] = []
    stack: list[tuple[str, int, list[Form], str]] = []  # (opener kind, its position, items, annot text)
    items, pos, n, match = top, 0, len(clean), _TOKENS.match
    while pos < n:
        m = match(clean, pos)
        if m is None:
            raise _Slow
        kind, end, s = m.lastgroup, m.end(), m.group()
        if kind == "IGNORE":
            pos = end
            continue
        if kind == "OPEN" or kind == "ANNOT_OPEN":
            stack.append((kind if kind == "ANNOT_OPEN" else s, pos, items, s))
            items = []
        elif kind == "CLOSE":
            if not stack:
                raise _Slow
            opener, start, outer, text = stack.pop()
            if (opener == "(") != (s == ")"):
                raise _Slow
            span = src.span(start, end)
            if opener == "ANNOT_OPEN":
                form: Form = _annot(text, items, span)
            else:
                form = SList(items, span, opener == "[")
            items = outer
            items.append(form)
        elif kind == "ANNOT":
            items.append(_annot(s, None, src.span(pos, end)))
        else:
            items.append(_atom(kind, s, src.span(pos, end)))  # type: ignore[arg-type]
        pos = end
    if stack:
        raise _Slow
    return top


def _annot(text: str, dims: list[Form] | None, span: Span) -> Annot:
    name, rest = text.split("{", 1)
    dtype = rest.split("}", 1)[0]
    if not dtype:
        raise _Slow
    return Annot(name, dtype, dims, span)


def _atom(kind: str, s: str, span: Span) -> Form:
    if kind in ("INT", "FLOAT") and len(s) > MAX_NUMBER_CHARS or kind == "SYMBOL" and len(s) > MAX_NAME_CHARS:
        raise _Slow
    if kind == "SYMBOL":
        return Sym(s, span)
    if kind == "INT":
        return Num(int(s), span)
    if kind == "FLOAT" or kind == "SPECIAL":
        return Num(float(s), span)
    if kind == "STRING":
        return Str(_unescape(s[1:-1]), span)
    return Kw(s[1:], span)


def read(text: str, file: str = "<string>", display_text: str | None = None) -> list[Form]:
    """Parse source text into top-level forms; bad input raises caten.Error.

    `display_text` is the text diagnostics quote (the YAML reader passes the whole file)."""
    src = _Src(text, file, display_text)
    clean = _prescan(src)
    try:
        return _fast(src, clean)
    except _Slow:
        return read_lark(src, clean)


def read_lark(src: _Src, clean: str) -> list[Form]:
    """`clean` read by lark's LALR parser: the reference the fast path matches, and the one that
    explains bad input."""
    import lark

    parser, builder = _parser()
    try:
        with _parse_lock:
            builder.src = src
            return parser.parse(clean)
    except lark.UnexpectedCharacters as e:
        ch = clean[e.pos_in_stream] if e.pos_in_stream < len(clean) else ""
        hint = "tensor annotations are written NAME{DTYPE}[DIM, ...]" if ch in "{}" else None
        raise Error(f"unexpected character {ch!r}", src.span(e.pos_in_stream), hint) from None
    except lark.UnexpectedToken as e:
        tok = e.token
        pos = tok.start_pos if tok.start_pos is not None else len(clean)
        what = "end of input" if tok.type == "$END" else f"{str(tok)!r}"
        raise Error(f"unexpected {what}", src.span(pos)) from None
    except lark.UnexpectedInput as e:  # UnexpectedEOF and relatives
        pos = getattr(e, "pos_in_stream", None) or len(clean)
        raise Error("unexpected end of input", src.span(max(0, min(pos, len(clean) - 1)))) from None


def read_file(path: str) -> list[Form]:
    """Read a .lisp file, turning I/O and encoding problems into diagnostics."""
    text = load_text(path)
    return read(text, path)


MAX_SOURCE_BYTES = 64 << 20  # a source (or import) larger than this is refused, not read until memory runs out


def read_bytes(path: str) -> bytes:
    """A source file's bytes. Only regular files are read (opening a FIFO would block forever and
    /dev/zero never ends), and at most MAX_SOURCE_BYTES of them."""
    import stat

    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        raise Error(f"{path} is not a regular file (a device, FIFO or socket)", Span(path, 1, 1),
                    "caten reads sources from regular files only")
    with open(path, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise Error(f"{path} is larger than {MAX_SOURCE_BYTES >> 20} MiB", Span(path, 1, 1),
                    "split it into files that import each other")
    return data


def load_text(path: str) -> str:
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        near = nearby_file(path)
        raise Error(f"no such file: {path}", Span(path, 1, 1), f"did you mean {near}?" if near else None) from None
    except IsADirectoryError:
        raise Error(f"{path} is a directory, not a source file", Span(path, 1, 1)) from None
    except OSError as e:
        raise Error(f"cannot read {path}: {e.strerror}", Span(path, 1, 1)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start].decode("utf-8", "replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        raise Error(f"invalid UTF-8 (byte 0x{data[e.start]:02x})", Span(path, line, col, line, col + 1,
                    data.decode("utf-8", "replace")), "save the file as UTF-8") from None
