"""Reading sources through the compile cache: a warm run skips lark entirely.

A cached entry holds the parsed definitions of a file together with the content hashes of
every file it imported; it is used only while all of them are unchanged. Its key holds the
fingerprint of the reader's code and the grammar, so an edit to either (an editable install that
pulls a parser fix) reads afresh.
"""

from __future__ import annotations

import functools
import hashlib
import os
from importlib import resources

from caten.cache import codec, default_cache, key_of
from caten.cache.fingerprint import fingerprint
from caten.errors import Error
from caten.read.reader import read_bytes
from caten.version import __version__


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except (OSError, Error):
        return None


@functools.cache
def reader_fingerprint() -> str:
    """The code that turns a file into definitions (caten.read.program and what it imports) and
    the grammar it parses with."""
    grammar = resources.files("caten.grammar").joinpath("caten.lark").read_bytes()
    return key_of(fingerprint(("caten.read.program",), default_cache()), grammar)


def source_key(path: str, data: bytes) -> str:
    return key_of("source", __version__, reader_fingerprint(), os.path.abspath(path), data)


def read_source_cached(path: str):
    """The `Source` of a file, from the cache when it and its imports are unchanged."""
    from caten.read.source import Source

    try:
        data = read_bytes(path)
    except (OSError, Error):
        data = None
    if data is None:  # let the reader produce the diagnostic
        from caten.read.source import read_source

        return read_source(path)
    key = source_key(path, data)
    store = default_cache()
    blob = store.get(key, "src")
    if blob is not None:
        try:
            entry = codec.loads(blob)
            if all(_digest(p) == h for p, h in entry["deps"]):
                src = Source(entry["unit"], path)
                src.key = key
                return src
        except Exception:  # an entry from an incompatible build: read afresh
            pass
    from caten.read.program import load_unit_file

    seen: set[str] = set()
    unit = load_unit_file(path, seen=seen)
    try:
        store.put(key, "src", codec.dumps({"unit": unit, "deps": [(p, _digest(p)) for p in sorted(seen)]}))
    except codec.CodecError:  # something the cache cannot hold: read afresh next time
        pass
    src = Source(unit, path)
    src.key = key
    return src

