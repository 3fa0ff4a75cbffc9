"""The cache store: atomic entries, verified reads, LRU cap, unwritable folders."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from caten.cache.store import Cache, default_dir, key_of


def test_round_trip_and_stats(tmp_path):
    c = Cache(tmp_path)
    k = key_of("kernel-ir", "llvm", "O2")
    assert c.get(k, "obj") is None
    c.put(k, "obj", b"\x7fELF payload")
    assert c.get(k, "obj") == b"\x7fELF payload"
    assert (c.stats.hits, c.stats.misses, c.stats.writes) == (1, 1, 1)


def test_key_parts_do_not_collide_by_concatenation():
    assert key_of("ab", "c") != key_of("a", "bc")
    assert key_of("x") == key_of(b"x")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entries_are_removed_and_missed(tmp_path, damage, capsys):
    c = Cache(tmp_path)
    k = key_of("k")
    c.put(k, "src", b"x" * 1000)
    p = c.path(k, "src")
    data = bytearray(p.read_bytes())
    if damage == "truncate":
        data = data[:-10]
    elif damage == "flip":
        data[-5] ^= 0xFF
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    else:
        data = bytearray()
    p.write_bytes(bytes(data))
    assert c.get(k, "src") is None
    assert not p.exists()
    assert "corrupt cache entry" in capsys.readouterr().err
    c.put(k, "src", b"rebuilt")
    assert c.get(k, "src") == b"rebuilt"


def test_lru_eviction_keeps_recent_entries(tmp_path):
    c = Cache(tmp_path, cap_bytes=3 * 1100)
    keys = [key_of(str(i)) for i in range(3)]
    for i, k in enumerate(keys):
        c.put(k, "obj", bytes(1000))
        os.utime(c.path(k, "obj"), (time.time() - 100 + i, time.time() - 100 + i))
    c.get(keys[0], "obj")  # touch the oldest: now the most recent
    c.put(key_of("new"), "obj", bytes(1000))
    assert c.get(keys[0], "obj") is not None
    assert c.get(keys[1], "obj") is None  # the least recently used went
    assert c.size() <= 3 * 1100


def test_unwritable_folder_warns_once_and_goes_on(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    # root writes through permission bits; /proc refuses everyone
    root = ro if not os.access(ro, os.W_OK) else "/proc/self/caten-cache"
    try:
        c = Cache(root)
        c.put(key_of("a"), "obj", b"1")
        c.put(key_of("b"), "obj", b"2")
        assert c.get(key_of("a"), "obj") is None
        assert capsys.readouterr().err.count("not writable") == 1
    finally:
        ro.chmod(0o700)


def test_file_in_place_of_folder_warns_and_goes_on(tmp_path, capsys):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    c = Cache(blocker)
    c.put(key_of("a"), "obj", b"1")
    assert c.get(key_of("a"), "obj") is None
    assert "not writable" in capsys.readouterr().err


def _writer(root: str, i: int, q) -> None:
    c = Cache(root)
    k = key_of("shared")
    for _ in range(50):
        c.put(k, "obj", b"same content" * 100)
        got = c.get(k, "obj")
        assert got is None or got == b"same content" * 100
    q.put(i)


def test_concurrent_writers_of_one_key(tmp_path):
    ctx = mp.get_context("spawn")  # not fork: forking the multi-threaded test process can deadlock the child
    q = ctx.Queue()
    ps = [ctx.Process(target=_writer, args=(str(tmp_path), i, q)) for i in range(4)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
    assert all(p.exitcode == 0 for p in ps)
    assert Cache(tmp_path).get(key_of("shared"), "obj") == b"same content" * 100
    assert not [f for f in tmp_path.rglob(".tmp-*")]


def test_location_honours_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("CATEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == tmp_path / "xdg" / "caten"
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "mine"))
    assert default_dir() == tmp_path / "mine"
