"""A text `caten.loads` read before is not read again until a body is needed
(caten.pipeline.lazysource): its composites' signatures come from the cache, a warm load runs
without reading the text, a miss of the program cache elaborates the definitions read from it,
and each computes what the first load computed; a changed text, a damaged entry or a text that
imports a file is read afresh; an elaboration error reads as it did."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.pipeline import lazysource
from caten.run.module import _called_names

pytest.importorskip("llvmlite")

SRC = """
(composite twice ((X{f32}[...]) -> (Y{f32}[...])) (* X 2.0))
(composite f ((X{f32}[N]) (W{T}[N]) -> (Y{f32}[N]))
  "Doubled X plus W."
  (+ (twice X) (cast W f32)))
(composite g ((X{f32}[N, K]) (B{f32}[K]) -> (Y{f32}[N, K]))
  (relu (+ (twice X) B)))
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    R.get("llvm").__dict__.pop("_pipeline_memo", None)  # (only the caches on disk skip work)
    return tmp_path / "cache"


def _run(m):
    x = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    w = np.array([1, -2, 7], dtype=np.int32)
    xs = np.arange(-6, 6, dtype=np.float32).reshape(3, 4) / 4
    b = np.array([0.25, -0.5, 0.0, 1.0], dtype=np.float32)
    return m.f(x, w), m.g(xs, b), x * 2 + w, np.maximum(xs * 2 + b, 0)


def test_a_warm_load_reads_no_text_and_computes_what_the_first_did(cache):
    first = caten.loads(SRC, runtime="llvm")
    assert type(first.source).__name__ == "Source"
    want = _run(first)
    warm = caten.loads(SRC, runtime="llvm")
    assert isinstance(warm.source, lazysource.LazySource)
    got = _run(warm)
    assert warm.source._read is None  # (programs and code from the cache: no body was needed)
    for a, b in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(got[0], got[2], rtol=1e-6)
    np.testing.assert_allclose(got[1], got[3], rtol=1e-6)
    assert warm.names == first.names and warm.f.__doc__ == "Doubled X plus W."
    stubs = [warm.source.entry(n) for n in warm.names]
    real = [first.source.entry(n) for n in first.names]
    assert _called_names(stubs) == _called_names(real) == {"twice"}
    assert [(p.name, p.dtype) for p in stubs[1].params] == [(p.name, p.dtype) for p in real[1].params]


def test_a_miss_of_the_program_cache_elaborates_the_definitions_read_from_the_text(cache):
    caten.loads(SRC, runtime="llvm")
    m = caten.loads(SRC, runtime="llvm", opt_level=1)  # (another program-cache key)
    assert isinstance(m.source, lazysource.LazySource)
    got = _run(m)
    assert m.source._read is not None
    np.testing.assert_allclose(got[0], got[2], rtol=1e-6)
    np.testing.assert_allclose(got[1], got[3], rtol=1e-6)
    assert m.f.cdef.body and m.source.definition(m.f.cdef).body is m.f.cdef.body
    ref = caten.loads(SRC, runtime="numpy")  # (the reference interpreter, on the cached signatures too)
    for a, b in zip(_run(ref)[:2], got[:2]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_changed_text_or_a_damaged_entry_is_read_afresh(cache):
    caten.loads(SRC, runtime="llvm")
    edited = caten.loads(SRC.replace("(* X 2.0)", "(* X 3.0)"), runtime="llvm")
    assert type(edited.source).__name__ == "Source"
    x = np.array([1.0, 2.0], dtype=np.float32)
    np.testing.assert_allclose(edited.f(x, np.zeros(2, np.int32)), x * 3)
    for path in glob.glob(os.path.join(cache, "*", f"*.{lazysource.KIND}")):
        with open(path, "r+b") as f:
            f.write(b"{not json")
    again = caten.loads(SRC, runtime="llvm")
    assert type(again.source).__name__ == "Source"
    np.testing.assert_allclose(again.f(x, np.zeros(2, np.int32)), x * 2)


def test_a_text_that_imports_a_file_is_read_every_time(cache, tmp_path, monkeypatch):
    (tmp_path / "lib.lisp").write_text("(composite twice ((X{f32}[N]) -> (Y{f32}[N])) (* X 2.0))\n")
    monkeypatch.chdir(tmp_path)
    text = '(import "lib.lisp")\n(composite f ((X{f32}[N]) -> (Y{f32}[N])) (twice X))\n'
    for _ in range(2):
        m = caten.loads(text, runtime="llvm")
        assert type(m.source).__name__ == "Source"
    np.testing.assert_allclose(m.f(np.ones(3, np.float32)), np.full(3, 2, np.float32))


def test_an_elaboration_error_reads_as_it_did(cache):
    bad = "(composite f ((X{f32}[N, K]) (Y{f32}[M, K]) -> (Z{f32}[N, K]))\n  (+ X Y))\n"
    msgs = []
    for _ in range(2):
        with pytest.raises(caten.Error) as e:
            caten.loads(bad, runtime="llvm")
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
