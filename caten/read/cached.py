"""Reading sources through the compile cache: a warm run skips lark entirely.

A cached entry holds the parsed definitions of a file together with the content hashes of
every file it imported; it is used only while all of them are unchanged.
"""

from __future__ import annotations

import hashlib
import os

from caten.cache import codec, default_cache, key_of
from caten.errors import Error
from caten.read.reader import read_bytes
from caten.version import __version__


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(read_bytes(path)).hexdigest()
    except (OSError, Error):
        return None


def source_key(path: str, data: bytes) -> str:
    return key_of("source", __version__, os.path.abspath(path), data)


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
