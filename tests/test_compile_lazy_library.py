"""The composite library's cache entry decodes one composite at a time (caten.cache.codec.Lazy):
a cold start elaborates a model with the few composites it calls, not all of them. The entry is
keyed by the code that wrote it (the reader's and the codec's fingerprint) besides the library's
sources, so a decode deferred to first use never meets another layout; a damaged value fails
where it is read, with a CodecError, never as another value."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import caten
from caten.cache import codec
from caten.elaborate import library


def test_a_lazy_mapping_round_trips_and_decodes_on_first_use(monkeypatch):
    long = "s" * 100  # (in the string table the values share)
    values = {"a": (1, 2.5, None), "b": [long, {"k": long, 3: frozenset({4})}], "c": []}
    lazy = codec.loads(codec.dumps([codec.Lazy(values), long]))[0]
    assert isinstance(lazy, codec.Lazy) and list(lazy) == ["a", "b", "c"] and len(lazy) == 3
    decoded = []
    real = codec._dec
    monkeypatch.setattr(codec, "_dec", lambda d, t: decoded.append(d.get(codec.TAG)) or real(d, t))
    assert "b" in lazy and "z" not in lazy and decoded == []  # membership decodes nothing
    assert lazy["a"] == (1, 2.5, None) and lazy["a"] is lazy["a"]  # decoded once, then kept
    assert lazy.get("z") is None
    assert dict(lazy.items()) == values
    assert dict(codec.loads(codec.dumps(lazy))) == values
    with pytest.raises(KeyError):
        lazy["z"]


def test_a_damaged_lazy_value_fails_where_it_is_read():
    blob = codec.dumps(codec.Lazy({"ok": [1], "bad": [2]}))
    head, _, body = blob.partition(b"\n")
    entry = json.loads(body)
    entry["v"][1][1] = '{"@":"caten.nowhere:Thing"}'  # another layout, or a planted class name
    lazy = codec.loads(head + b"\n" + json.dumps(entry).encode())
    assert lazy["ok"] == [1]
    with pytest.raises(codec.CodecError):
        lazy["bad"]
    for junk in ('{"@":"L","v":[["a",1]]}', '{"@":"L","v":"x"}', '{"@":"L","v":[["a"]]}'):
        with pytest.raises(codec.CodecError):
            codec.loads(b"[]\n" + junk.encode())


def test_the_library_key_holds_the_reader_s_and_the_codec_s_code(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    library._load.cache_clear()
    try:
        parsed = library.composites()  # parsed, stored
        library._load.cache_clear()
        cached = library.composites()  # read back: lazy
        assert isinstance(cached, codec.Lazy) and list(cached) == list(parsed)
        assert repr(cached["softmax"]) == repr(parsed["softmax"])
        libs = sorted((tmp_path / "cache").rglob("*.lib"))
        assert len(libs) == 1
        import caten.cache.fingerprint as fp

        real = fp.fingerprint
        monkeypatch.setattr(fp, "fingerprint", lambda roots, store=None: "edited" if "caten.cache.codec" in roots
                            else real(roots, store))
        library._load.cache_clear()
        library.composites()
        assert len(sorted((tmp_path / "cache").rglob("*.lib"))) == 2  # another key: parsed afresh
    finally:
        library._load.cache_clear()


CHILD = r"""
import json, sys
import numpy as np
import caten
from caten.elaborate import library
m = caten.loads(sys.argv[1], runtime="llvm")
x = np.linspace(-3, 3, 40, dtype=np.float32).reshape(5, 8)
lib = library.composites()
print(json.dumps({"y": m.f(x).tolist(), "lazy": type(lib).__name__,
                  "decoded": len(getattr(lib, "_done", lib)), "all": len(lib)}))
"""
SRC = "(composite f ((X{f32}[N, 8]) -> (Y{f32}[N, 8])) (softmax (gelu X) :axis 1))"


def test_a_second_process_elaborates_with_a_few_composites_decoded(tmp_path):
    env = {**os.environ, "CATEN_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for src in (SRC, SRC.replace("gelu", "tanh")):  # the second one elaborates afresh, library cached
        r = subprocess.run([sys.executable, "-c", CHILD, src], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    x = np.linspace(-3, 3, 40).reshape(5, 8)
    from scipy.special import erf

    for run, h in zip(runs, (0.5 * x * (1 + erf(x / np.sqrt(2))), np.tanh(x))):
        e = np.exp(h - h.max(1, keepdims=True))
        np.testing.assert_allclose(np.array(run["y"]), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert runs[1]["lazy"] == "Lazy" and 0 < runs[1]["decoded"] < runs[1]["all"] / 4, runs[1]
    assert caten.loads(SRC, runtime="numpy").f(x.astype(np.float32)).shape == (5, 8)
