"""The compile cache end to end: what hits, what misses, and that bad entries are never trusted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = """(composite f ((X{f32}[N, M]) (Y{f32}[N, M]) -> (Z{f32}[N, M]))
  (setf s (* X Y))
  (return (exp (- s (max s :axis 1 :keepdims true)))))
"""
# the same program, renamed and reformatted
RENAMED = """; a comment
(composite g
   ((A{f32}[R, C]) (B{f32}[R, C]) -> (Out{f32}[R, C]))
     (setf prod (* A B))   (return (exp (- prod (max prod :axis 1 :keepdims true)))))
"""

RUN = """
import sys, numpy as np, caten
src, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
rt = sys.argv[4] if len(sys.argv) > 4 else "llvm"
opt = int(sys.argv[5]) if len(sys.argv) > 5 else 2
mod = caten.load(src, runtime=rt, opt_level=opt)
rng = np.random.default_rng(0)
x, y = (rng.standard_normal((5, 7)).astype(np.float32) for _ in range(2))
np.save(out, getattr(mod, name)(x, y))
"""


def oracle() -> np.ndarray:
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((5, 7)).astype(np.float32) for _ in range(2))
    s = x * y
    return np.exp(s - s.max(axis=1, keepdims=True))


def run(tmp: Path, cache: Path, src: str, name: str, *extra: str) -> np.ndarray:
    f = tmp / f"{name}.lisp"
    f.write_text(src)
    out = tmp / f"{name}-out.npy"
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", RUN, str(f), name, str(out), *extra], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def kinds(cache: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in cache.rglob("*"):
        if f.is_file() and not f.name.startswith(".tmp-"):
            out.setdefault(f.suffix.lstrip("."), set()).add(f.name)
    return out


def test_renaming_and_reformatting_hit_the_same_code(tmp_path):
    cache = tmp_path / "cache"
    np.testing.assert_allclose(run(tmp_path, cache, SRC, "f"), oracle(), rtol=1e-5)
    objs = kinds(cache)["llvmobj"]
    np.testing.assert_allclose(run(tmp_path, cache, RENAMED, "g"), oracle(), rtol=1e-5)
    assert kinds(cache)["llvmobj"] == objs  # no new object code: the renamed program hit


@pytest.mark.parametrize("change", ["dim", "dtype", "opt", "runtime"])
def test_changes_that_must_miss(tmp_path, change):
    cache = tmp_path / "cache"
    run(tmp_path, cache, SRC, "f")
    before = {k: set(v) for k, v in kinds(cache).items()}
    if change == "dim":
        src = SRC.replace("[N, M]", "[N, 7]")
    elif change == "dtype":
        src = SRC.replace("{f32}", "{T}")  # bound to f32 at call: another graph (type variables), still a miss
    else:
        src = SRC
    extra = {"opt": ("llvm", "0"), "runtime": ("numpy",)}.get(change, ())
    np.testing.assert_allclose(run(tmp_path, cache, src, "f", *extra), oracle(), rtol=1e-5)
    after = kinds(cache)
    new_progs = after.get("prog", set()) - before.get("prog", set())
    assert new_progs, "a changed binding, option or runtime must not reuse the old program entry"
    if change in ("dim", "opt"):
        assert after["llvmobj"] - before["llvmobj"], "new code must be compiled"


@pytest.mark.parametrize("kind", ["lib", "src", "prog", "llvmobj"])
@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_entries_are_rebuilt(tmp_path, kind, damage):
    cache = tmp_path / "cache"
    run(tmp_path, cache, SRC, "f")
    files = [f for f in cache.rglob(f"*.{kind}")]
    assert files
    for f in files:
        data = bytearray(f.read_bytes())
        if damage == "truncate":
            data = data[: len(data) // 2]
        elif damage == "flip":
            for i in range(len(data) // 3, len(data), 97):
                data[i] ^= 0x5A
        else:
            data = bytearray(os.urandom(len(data)))
        f.write_bytes(bytes(data))
    np.testing.assert_allclose(run(tmp_path, cache, SRC, "f"), oracle(), rtol=1e-5)
    # a renamed copy needs the library and the object code again, whatever the first run skipped
    np.testing.assert_allclose(run(tmp_path, cache, RENAMED, "g"), oracle(), rtol=1e-5)
    rebuilt = [f for f in cache.rglob(f"*.{kind}")]
    assert rebuilt and all(f.read_bytes().startswith(b"caten-cache 1 ") for f in rebuilt)
    from caten.cache.store import _unwrap

    assert all(_unwrap(f.read_bytes()) is not None for f in rebuilt)


def test_four_cold_processes_at_once(tmp_path):
    cache = tmp_path / "cache"
    f = tmp_path / "f.lisp"
    f.write_text(SRC)
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", RUN, str(f), "f", str(tmp_path / f"o{i}.npy")], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for i in range(4):
        np.testing.assert_allclose(np.load(tmp_path / f"o{i}.npy"), oracle(), rtol=1e-5)


def test_unwritable_cache_folder_still_runs(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    f = tmp_path / "f.lisp"
    f.write_text(SRC)
    env = {**os.environ, "CATEN_CACHE_DIR": str(blocker)}
    r = subprocess.run([sys.executable, "-c", RUN, str(f), "f", str(tmp_path / "o.npy")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("not writable") == 1
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), oracle(), rtol=1e-5)


def test_no_cache_flag_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "f.lisp").write_text(SRC)
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-m", "caten", "run", "f.lisp", "X=x.npy", "Y=x.npy", "-o", "o.npy",
                        "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not kinds(cache).get("prog") and not kinds(cache).get("llvmobj")
