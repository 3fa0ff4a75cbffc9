"""A cache is code that will run: files planted in it by another user must never be executed,
loaded, written through or deleted through (llvm and c runtimes).

Every planted payload is live: a pickle whose __reduce__ writes a marker file, a shared object
whose constructor writes one, a lark grammar cache whose pickle does. Each is wrapped in a valid
entry header, so the code before the fix would have run it (the `payloads_are_live` test shows
they do run when loaded the old way). Another user is uid 65534 (nobody): as root the planting
happens in a child process that setuid()s to it, or files are chown()ed to it; as a normal user,
the planted files are made writable by others instead, which must be refused just the same.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from caten.cache import codec
from caten.cache.store import GRAMMAR_FILE, MAGIC, Cache, key_of

NOBODY = 65534
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
HAVE_CC = shutil.which(os.environ.get("CC", "cc")) is not None

SRC = """(composite shift_cols ((X{f32}[N, M]) -> (Y{f32}[N, M]))
  (- X (max X :axis 0 :keepdims true)))
"""
# bad input: the reader's fast path hands it to lark, which reads (or builds) its grammar tables
BAD_SRC = "(composite f ((X{f32}[N]) -> (Y{f32}[N])) (+ X 1x))\n"
RUN = """
import sys, numpy as np, caten
mod = caten.load(sys.argv[1], runtime=sys.argv[2])
x = np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.5) - np.float32(2)
np.save(sys.argv[3], mod.shift_cols(x))
"""


def oracle() -> np.ndarray:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.5) - np.float32(2)
    return x - x.max(axis=0, keepdims=True)


class _Payload:
    """Unpickling this runs code: it writes `marker`."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


def evil_pickle(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker))


def evil_so(marker: Path, work: Path) -> bytes:
    """A shared object whose constructor writes `marker` as soon as it is loaded."""
    c = work / "evil.c"
    c.write_text('#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n'
                 f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("pwned", f); fclose(f); }}\n}}\n')
    so = work / "evil.so"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(so), str(c)], check=True)
    return so.read_bytes()


def entry(payload: bytes) -> bytes:
    """A well-formed cache entry (header with the payload's true checksum)."""
    return MAGIC + f"{hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload


def evil_file(name: str, marker: Path, work: Path) -> bytes:
    """What an attacker plants under `name`: an entry of that kind, or lark's file format."""
    if name == GRAMMAR_FILE:  # lark reads a line (its hash), then pickle.load()s, before comparing
        return b"0" * 64 + b"\n" + evil_pickle(marker)
    if name.endswith(".c-so"):
        return entry(evil_so(marker, work))
    return entry(evil_pickle(marker))


def run(src: Path, rt: str, cache: Path, home: Path, out: Path,
        umask: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", RUN, str(src), rt, str(out)], capture_output=True, text=True,
                          env=env, timeout=300, umask=-1 if umask is None else umask)


def warm_cache(tmp: Path, rt: str) -> tuple[Path, Path]:
    """A source file and a private cache filled by compiling it once (every kind of entry)."""
    src = tmp / "f.lisp"
    src.write_text(SRC)
    warm = tmp / "warm"
    r = run(src, rt, warm, tmp / "home-warm", tmp / "warm.npy")
    assert r.returncode == 0, r.stderr
    names = {p.name for p in warm.rglob("*") if p.is_file()}
    kinds = {n.rsplit(".", 1)[-1] for n in names}
    obj = "llvmobj" if rt == "llvm" else "c-so"
    assert {"src", "lib", "prog", obj} <= kinds, kinds  # (lark's tables: only where lark reads, see below)
    return src, warm


def plans(warm: Path, markers: Path, work: Path) -> dict[str, bytes]:
    """Relative path -> planted bytes, one per file the warm cache holds (same names: same keys)."""
    out = {}
    for p in sorted(warm.rglob("*")):
        if p.is_file():
            rel = str(p.relative_to(warm))
            out[rel] = evil_file(p.name, markers / rel.replace("/", "_"), work)
    return out


_WRITE_ALL = """
import json, os, sys
from pathlib import Path
spec = json.loads(sys.stdin.read())
if spec["as"] is not None:  # the other user (root may drop to it; nobody cannot run root's python)
    os.setgid(spec["as"])
    os.setuid(spec["as"])
root = Path(spec["root"])
os.umask(0)
for rel, data in spec["files"].items():
    p = root / rel
    p.parent.mkdir(mode=0o777, parents=True, exist_ok=True)
    p.write_bytes(bytes.fromhex(data))
    p.chmod(0o666)
for rel, target in spec["links"].items():
    p = root / rel
    p.parent.mkdir(mode=0o777, parents=True, exist_ok=True)
    p.symlink_to(target)
"""


def plant(root: Path, files: dict[str, bytes], links: dict[str, Path] | None = None, other: bool = True) -> None:
    """Write `files` (and symlinks `links`) under `root`, world-writable, from another user's
    process (`other`, needs root: a child that drops to nobody), else from our own. A fresh
    interpreter, not a fork: forking the multi-threaded test process can deadlock the child."""
    spec = {"root": str(root), "files": {k: v.hex() for k, v in files.items()},
            "links": {k: str(v) for k, v in (links or {}).items()}, "as": NOBODY if other else None}
    r = subprocess.run([sys.executable, "-c", _WRITE_ALL], input=json.dumps(spec), text=True, capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    if other:
        assert all((root / k).stat().st_uid == NOBODY for k in files)


def assert_no_marker(markers: Path) -> None:
    fired = sorted(p.name for p in markers.iterdir())
    assert not fired, f"planted code ran: {fired}"


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler for the planted shared object")
def test_payloads_are_live(tmp_path):
    """The planted payloads do run when loaded the way the cache used to load them."""
    (tmp_path / "m").mkdir()
    pickle.loads(evil_pickle(tmp_path / "m" / "p"))
    so = tmp_path / "x.so"
    so.write_bytes(evil_so(tmp_path / "m" / "s", tmp_path))
    ctypes.CDLL(str(so))
    assert sorted(os.listdir(tmp_path / "m")) == ["p", "s"]


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("planter", ["other-user", "self"])
def test_shared_folder_is_refused_and_plants_never_run(tmp_path, rt, planter):
    if planter == "other-user" and not ROOT:
        pytest.skip("acting as another user needs root (the planted-by-self case runs instead)")
    src, warm = warm_cache(tmp_path, rt)
    markers = tmp_path / "markers"
    markers.mkdir()
    # a folder shared by every user, like /tmp itself (reachable by the other user's process)
    shared = Path(tempfile.mkdtemp(prefix="caten-shared-"))
    try:
        shared.chmod(0o1777)
        vdir, vfile = _victims(tmp_path)
        k = key_of("linked")
        planted = plans(warm, markers, tmp_path)
        plant(shared, planted, {"zz": vdir, f"{k[:2]}/{k}.prog": vfile}, other=planter == "other-user")
        home = tmp_path / "home"
        r = run(src, rt, shared, home, tmp_path / "out.npy")
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), oracle())
        assert_no_marker(markers)
        assert f"cache folder {shared} is writable by group or others" in r.stderr
        assert f"caching in {home / 'caten'} instead" in r.stderr
        private = home / "caten"
        assert (private.stat().st_mode & 0o077) == 0 and any(private.rglob("*.prog"))
        # a second run is served from the private folder, still without running anything planted
        r = run(src, rt, shared, home, tmp_path / "out2.npy")
        assert r.returncode == 0, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "out2.npy"), oracle())
        assert_no_marker(markers)
        # clearing clears the private folder: nothing in the shared one is deleted, or through it
        env = {**os.environ, "CATEN_CACHE_DIR": str(shared), "XDG_CACHE_HOME": str(home)}
        r = subprocess.run([sys.executable, "-m", "caten", "cache", "clear"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0 and f"from {private}" in r.stdout, r.stdout + r.stderr
        assert not any(private.rglob("*.prog"))
        assert all((shared / rel).read_bytes() == data for rel, data in planted.items())
        _intact(vdir, vfile)
        assert_no_marker(markers)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("how", ["other-owner", "world-writable"])
def test_foreign_entries_in_own_folder_are_ignored(tmp_path, rt, how):
    """Entries the user did not write (another owner, or writable by anyone) are never loaded."""
    if how == "other-owner" and not ROOT:
        pytest.skip("making a file owned by another user needs root (the world-writable case runs instead)")
    src, warm = warm_cache(tmp_path, rt)
    markers = tmp_path / "markers"
    markers.mkdir()
    for rel, data in plans(warm, markers, tmp_path).items():
        p = warm / rel
        p.write_bytes(data)
        if how == "other-owner":
            os.chown(p, NOBODY, NOBODY)
        else:
            p.chmod(0o666)
    r = run(src, rt, warm, tmp_path / "home", tmp_path / "out.npy")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), oracle())
    assert_no_marker(markers)
    assert "warning" not in r.stderr  # the folder itself is fine: no fallback


@pytest.mark.skipif(not ROOT, reason="a folder owned by another user can only be made by root")
def test_folder_owned_by_another_user_is_refused(tmp_path, monkeypatch, capsys):
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, NOBODY, NOBODY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    c = Cache(other)
    c.put(key_of("k"), "obj", b"data")
    assert c.root == tmp_path / "home" / "caten" and c.get(key_of("k"), "obj") == b"data"
    assert not list(other.iterdir())
    assert "owned by uid 65534" in capsys.readouterr().err


def test_unsafe_fallback_turns_caching_off(tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    home = tmp_path / "home"
    (home / "caten").mkdir(parents=True)
    (home / "caten").chmod(0o775)  # the private folder is group-writable too: nowhere safe
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    c = Cache(shared)
    c.put(key_of("k"), "obj", b"data")
    assert c.get(key_of("k"), "obj") is None and not c.enabled
    assert not list(shared.iterdir()) and not list((home / "caten").iterdir())
    assert "going on without caching" in capsys.readouterr().err


def _victims(tmp: Path) -> tuple[Path, Path]:
    """A folder and a file outside the cache, named like cache content."""
    vdir = tmp / "victim-dir"
    vdir.mkdir()
    (vdir / (key_of("v") + ".prog")).write_bytes(b"precious")
    vfile = tmp / "victim-file"
    vfile.write_bytes(b"precious")
    return vdir, vfile


def _plant_links(root: Path, vdir: Path, vfile: Path) -> str:
    """A symlinked entry folder and a symlinked entry file inside an otherwise genuine cache."""
    (root / "zz").symlink_to(vdir, target_is_directory=True)
    k = key_of("linked")
    (root / k[:2]).mkdir(exist_ok=True)
    (root / k[:2] / f"{k}.prog").symlink_to(vfile)
    return k


def _intact(vdir: Path, vfile: Path) -> None:
    assert vfile.read_bytes() == b"precious"
    assert [p.read_bytes() for p in vdir.iterdir()] == [b"precious"]


def test_clear_never_follows_symlinks(tmp_path):
    vdir, vfile = _victims(tmp_path)
    root = tmp_path / "cache"
    c = Cache(root)
    for i in range(5):
        c.put(key_of(str(i)), "prog", b"x" * 100)
    k = _plant_links(root, vdir, vfile)
    (root / GRAMMAR_FILE).symlink_to(vfile)
    assert c.get(k, "prog") is None  # never read through the link
    env = {**os.environ, "CATEN_CACHE_DIR": str(root)}
    r = subprocess.run([sys.executable, "-m", "caten", "cache", "clear"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "removed 5 entries" in r.stdout
    _intact(vdir, vfile)
    assert Cache(root).entries() == []


def test_eviction_never_follows_symlinks(tmp_path):
    vdir, vfile = _victims(tmp_path)
    root = tmp_path / "cache"
    c = Cache(root, cap_bytes=2000)
    c.put(key_of("first"), "prog", b"x" * 100)
    _plant_links(root, vdir, vfile)
    for i in range(40):  # far past the cap: eviction runs many times
        c.put(key_of(str(i)), "prog", b"x" * 500)
    _intact(vdir, vfile)
    assert c.size() <= 2000


def test_grammar_cache_is_never_written_through_a_symlink(tmp_path):
    vdir, vfile = _victims(tmp_path)
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / GRAMMAR_FILE).symlink_to(vfile)
    src = tmp_path / "f.lisp"
    src.write_text(BAD_SRC)
    r = run(src, "numpy", root, tmp_path / "home", tmp_path / "out.npy")  # lark builds its tables to explain it
    assert r.returncode != 0 and "unexpected" in r.stderr, r.stderr
    _intact(vdir, vfile)
    g = root / GRAMMAR_FILE
    assert not g.is_symlink() and g.stat().st_size > 1000  # lark wrote its own file in its place


def test_cache_payloads_are_data_not_pickles(tmp_path):
    """Programs, units and the library go through a codec that names only caten's classes;
    compiled code is stored as the compiler's own bytes (ELF objects), never as a pickle."""
    from caten.runtimes import llvm_rt

    src, warm = warm_cache(tmp_path, "llvm")
    for p in warm.rglob("*"):
        if p.suffix in (".prog", ".src", ".lib"):
            payload = p.read_bytes().split(b"\n", 1)[1]
            assert payload[:1] == b"[", p.name  # the string table line of the JSON codec
            assert codec.loads(payload) is not None
        elif p.suffix == ".llvmobj" and sys.platform.startswith("linux"):  # a program's objects
            objs = llvm_rt.unbundle(p.read_bytes().split(b"\n", 1)[1])
            assert objs and all(o[:4] == b"\x7fELF" for _, o in objs), p.name
        elif p.suffix == ".llvmunit" and sys.platform.startswith("linux"):  # one unit's object
            assert p.read_bytes().split(b"\n", 1)[1][:4] == b"\x7fELF", p.name
    for bad in ([b"[]", b'{"@":"os:system"}'], [b"[]", b'{"@":"builtins:eval"}'],
                [b"[]", b'{"@":"caten.ir.dims:Atom","op":"sym"}'], [b"", evil_pickle(tmp_path / "m")]):
        with pytest.raises(codec.CodecError):
            codec.loads(b"\n".join(bad))
    assert not (tmp_path / "m").exists()


def test_codec_round_trips_programs_and_units(tmp_path):
    """What the cache now stores as data comes back equal: programs (same graph, same key, same
    results), parsed units (same definitions, spans with their source text)."""
    import caten
    from caten.cache import programs as serialize
    from caten.read.program import load_unit_file

    src = tmp_path / "f.lisp"
    src.write_text(SRC)
    mod = caten.load(str(src), runtime="numpy", use_cache=False)
    prog = mod.shift_cols.elaborate({})
    back = serialize.loads(serialize.dumps(prog))
    assert back.dump() == prog.dump() and back.key() == prog.key() and back.inputs == prog.inputs
    unit = load_unit_file(str(src), seen=set())
    again = codec.loads(codec.dumps({"unit": unit, "deps": [(str(src), "h")]}))
    assert again["deps"] == [(str(src), "h")]
    (c,) = again["unit"].composites
    assert c.name == "shift_cols" and c.span == unit.composites[0].span and c.span.text == SRC
    assert [p.name for p in c.params] == ["X"] and repr(c.body) == repr(unit.composites[0].body)


def test_a_group_writable_umask_still_caches(tmp_path):
    """With umask 002 (user-private groups) everything caten leaves in its folder is still private,
    so the next run trusts and uses it instead of refusing it."""
    src = tmp_path / "f.lisp"
    src.write_text(SRC)
    root = tmp_path / "cache"
    for _ in range(2):
        r = run(src, "llvm", root, tmp_path / "home", tmp_path / "out.npy", umask=0o002)
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), oracle())
    bad = tmp_path / "bad.lisp"
    bad.write_text(BAD_SRC)
    r = run(bad, "llvm", root, tmp_path / "home", tmp_path / "bad.npy", umask=0o002)  # lark writes its tables
    assert r.returncode != 0 and "warning" not in r.stderr, r.stderr
    modes = {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}
    assert all(m & 0o022 == 0 for m in modes.values()), modes
    assert GRAMMAR_FILE in modes and any(k.endswith(".llvmobj") for k in modes)
