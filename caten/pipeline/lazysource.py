"""A text read before is not read again until a body is needed: its composites' signatures come
from the compile cache.

`caten.loads` cannot keep a text's parse (decoding the forms costs what reading them does), but a
warm load needs none of them: the elaborated program and its machine code come from the cache by
the text's hash, and the module asks only for each composite's signature (parameters, outputs,
doc) and the names its body calls. So the first read stores those (GPT-2 small's 58 KB text: a
few KB, against 9,400 forms), and a later load of the same text is a `LazySource` of `Deferred`
definitions: every field from the entry but the body and the gradient body, which read the whole
text on first use (a miss of the program cache elaborates the definitions read from it). The key
holds the text and the code of this module, the reader and the codec (their fingerprints): an
edit to any of them reads afresh.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from importlib import resources

from caten.cache import codec, default_cache, key_of
from caten.cache.fingerprint import fingerprint
from caten.read.program import CompositeDef
from caten.read.sexpr import SList, head
from caten.read.source import Source, read_text
from caten.version import __version__

KIND = "sigs"
FORMAT = "caten-sigs/1"


def read(text: str, file: str, yaml: bool, text_key: str) -> Source:
    """The Source of `text` (whose cache key is `text_key`): a LazySource where its signatures are
    cached, else read (and its signatures stored)."""
    store = default_cache()
    key = key_of(FORMAT, __version__, fingerprint((__name__,), store), _grammar(), file, str(yaml), text_key)
    blob = store.get(key, KIND)
    src = _lazy(blob, text, file, yaml) if blob is not None else None
    if src is None:
        src = read_text(text, file, yaml)
        if not all(c.span and c.span.file == file for c in src.unit.composites):
            return src  # (an `import`ed file's composites: its text is not in the key)
        try:
            store.put(key, KIND, codec.dumps({"format": FORMAT, "defs": [dataclasses.replace(
                c, body=[], vjp=None) for c in src.unit.composites], "calls": [sorted(calls(c)) for c in
                                                                              src.unit.composites]}))
        except codec.CodecError:  # something the cache cannot hold: read it every time
            pass
    return src


@functools.cache
def _grammar() -> bytes:
    """The grammar the reader parses with. The reader's code is in this module's fingerprint (its
    import closure holds caten.read.source and what `read_text` imports): a warm load need not
    import the reader (caten.read.cached.reader_fingerprint would) to key its text."""
    return resources.files("caten.grammar").joinpath("caten.lark").read_bytes()


def calls(c: CompositeDef) -> set[str]:
    """The names of the forms in `c`'s body (what caten.run.module looks for callees among)."""
    out: set[str] = set()
    stack = list(c.body)
    while stack:
        f = stack.pop()
        if isinstance(f, SList):
            h = head(f)
            if h is not None:
                out.add(h)
            stack.extend(f.items)
    return out


def _lazy(blob: bytes, text: str, file: str, yaml: bool) -> LazySource | None:
    try:
        e = codec.loads(blob)
        defs, names = e["defs"], e["calls"]
    except (codec.CodecError, KeyError, TypeError):
        return None
    if e.get("format") != FORMAT or not isinstance(defs, list) or not isinstance(names, list) \
            or len(defs) != len(names) or not all(type(d) is CompositeDef for d in defs) \
            or not all(isinstance(n, list) and all(isinstance(s, str) for s in n) for n in names):
        return None
    src = LazySource(text, file, yaml)
    for i, (d, n) in enumerate(zip(defs, names)):
        stub = object.__new__(Deferred)
        stub.__dict__.update({k: v for k, v in d.__dict__.items() if k not in ("body", "vjp")})
        stub.__dict__.update(_source=src, _at=i, calls=frozenset(n))
        src.stubs.setdefault(stub.name, []).append(stub)
    return src


class Deferred(CompositeDef):
    """A composite's definition from the cache: its body and gradient body are read from the
    text on first use; `calls`: the names of its body's forms (`calls`)."""

    @property
    def body(self):  # type: ignore[override]
        return self._deferred("body")

    @body.setter
    def body(self, value) -> None:
        self.__dict__["body"] = value

    @property
    def vjp(self):  # type: ignore[override]
        return self._deferred("vjp")

    @vjp.setter
    def vjp(self, value) -> None:
        self.__dict__["vjp"] = value

    def _deferred(self, name: str):
        d = self.__dict__
        if name not in d:
            d[name] = getattr(d["_source"].definition(self), name)
        return d[name]


class LazySource(Source):
    """A Source whose forms are read on first use: until then `names` and `entry` answer from the
    cached signatures (`Deferred`); `unit`, `by_name` and `definition` read the text."""

    def __init__(self, text: str, file: str, yaml: bool) -> None:  # (not the dataclass's: no unit yet)
        self.file, self._text, self._yaml = file, text, yaml
        self.stubs: dict[str, list[Deferred]] = {}
        self._read: Source | None = None
        self._lock = threading.Lock()

    @property
    def unit(self):  # type: ignore[override]
        return self.source().unit

    @property
    def by_name(self):  # type: ignore[override]
        return self.source().by_name

    @property
    def names(self) -> list[str]:
        return list(self.stubs)

    def entry(self, name: str) -> CompositeDef:
        return self.stubs[name][-1] if name in self.stubs else self.source().entry(name)

    def source(self) -> Source:
        """The text read (once)."""
        with self._lock:
            if self._read is None:
                self._read = read_text(self._text, self.file, self._yaml)
            return self._read

    def definition(self, cdef: CompositeDef) -> CompositeDef:
        """The definition read from the text that `cdef` stands for (itself if it was read)."""
        return self.source().unit.composites[cdef._at] if isinstance(cdef, Deferred) else cdef
