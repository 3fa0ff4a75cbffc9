"""The front fingerprint's hash of the library (caten.pipeline.front._library_hash) is remembered
with the status of the library's files (caten.cache.fingerprint.remembered): a warm load stats
them instead of reading them all, and an edited, added or removed file is read again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from caten.cache.fingerprint import remembered
from caten.cache.store import Cache
from caten.pipeline import front


def _digest(paths: list[str], calls: list[int]):
    def compute() -> str:
        calls.append(1)
        return "|".join(open(p).read() for p in paths)
    return compute


def test_remembered_while_no_file_changes(tmp_path):
    store = Cache(tmp_path / "cache")
    a, b = tmp_path / "a.lisp", tmp_path / "b.lisp"
    a.write_text("(a)")
    b.write_text("(b)")
    paths, calls = [str(a), str(b)], []
    assert remembered(store, "lib", paths, _digest(paths, calls)) == "(a)|(b)"
    assert remembered(store, "lib", paths, _digest(paths, calls)) == "(a)|(b)" and len(calls) == 1
    a.write_text("(a 2)")  # an edit: another size and mtime
    assert remembered(store, "lib", paths, _digest(paths, calls)) == "(a 2)|(b)" and len(calls) == 2
    os.utime(b, ns=(1, 1))  # the same text, another status: read again, the same value
    assert remembered(store, "lib", paths, _digest(paths, calls)) == "(a 2)|(b)" and len(calls) == 3
    c = tmp_path / "c.lisp"
    c.write_text("(c)")
    more = paths + [str(c)]  # a new file: another list, another entry
    assert remembered(store, "lib", more, _digest(more, calls)) == "(a 2)|(b)|(c)" and len(calls) == 4
    c.unlink()
    assert remembered(store, "lib", paths, _digest(paths, calls)) == "(a 2)|(b)" and len(calls) == 4
    assert remembered(store, "other", paths, _digest(paths, calls)) == "(a 2)|(b)" and len(calls) == 5


def test_the_watched_files_cover_what_the_library_reads():
    from importlib import resources

    from caten.elaborate.library import library_sources

    files = front._package_files("caten.ops", "caten.grammar")
    assert files is not None and not any("__pycache__" in f for f in files)
    names = {os.path.relpath(f, str(resources.files("caten.ops"))) for f in files}
    read = {n for n, _ in library_sources() if n != "<grammar>"}
    assert read and read <= names and any(n.startswith("rules/") for n in read)
    assert str(resources.files("caten.grammar").joinpath("caten.lark")) in files


PROBE = r"""
import json
from caten.elaborate import library
from caten.pipeline import front
read = []
real = library.library_sources
library.library_sources = lambda: read.append(1) or real()
print(json.dumps({"fp": front.front_fingerprint(), "read": len(read)}))
"""


def test_a_second_process_does_not_read_the_library(tmp_path):
    env = {**os.environ, "CATEN_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["read"] == 1 and second["read"] == 0 and first["fp"] == second["fp"]
