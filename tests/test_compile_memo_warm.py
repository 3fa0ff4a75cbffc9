"""The warm path's keys: a second load of the same text, options and target takes the elaborated
program and the code from the cache (no elaborate, no lower), and computes the oracle's values; a
changed text, option, target or compiler code misses where it must (caten.pipeline.front's and
caten.pipeline.restore's keys) and computes the new program's values, never the cached one's."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.pipeline import codekey, front
from caten.target import host

pytest.importorskip("llvmlite")

SRC = """
(composite f ((X{f32}[N, 8]) (W{f32}[8, 5]) -> (Y{f32}[N, 5]))
  (relu (+ (matmul X W) 0.8125)))
"""


def _load(text: str = SRC, **kw) -> tuple[np.ndarray, set[str]]:
    """f's values on fixed data and the passes the load ran, with the in-process memo cleared
    (only the caches on disk can skip work)."""
    R.get("llvm").__dict__.pop("_pipeline_memo", None)
    m = caten.loads(text, runtime="llvm", **kw)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((9, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    y = m.f(x, w)
    return y, set(m.f._timings[()].passes)


def _oracle(c: float) -> np.ndarray:
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((9, 8)), rng.standard_normal((8, 5))
    return np.maximum(x.astype(np.float32).astype(np.float64) @ w.astype(np.float32) + c, 0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))  # (caten.cache.default_cache follows it)
    y, passes = _load()
    assert {"elaborate", "lower"} <= passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)


def test_the_same_text_loads_from_the_cache(cache):
    y, passes = _load()
    assert "elaborate" not in passes and "lower" not in passes and "load" in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)


def test_a_changed_text_misses(cache):
    y, passes = _load(SRC.replace("0.8125", "0.25"))
    assert {"elaborate", "lower"} <= passes
    np.testing.assert_allclose(y, _oracle(0.25), rtol=1e-5, atol=1e-5)
    y, passes = _load(SRC + "\n")  # any other text: elaborated afresh (the same program: its code is cached)
    assert "elaborate" in passes and "lower" not in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [{"opt_level": 1}, {"fast_math": True}])
def test_a_changed_option_misses(cache, kw):
    y, passes = _load(**kw)
    assert "elaborate" in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)


def test_bounds_checking_and_another_target_miss_the_code(cache):
    y, passes = _load(check_bounds=True)
    assert "lower" in passes and "bounds" in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)
    y, passes = _load(target=f"{host().cpu},-avx512f")  # other features: other code, same values
    assert "lower" in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)


def test_changed_compiler_code_misses(cache, monkeypatch):
    """The fingerprints of caten's code are in the keys: the front's (elaborator, rules, library)
    and the back's (scheduler, lowerer, renderers)."""
    monkeypatch.setattr(front, "front_fingerprint", lambda: "edited front")
    y, passes = _load()
    assert "elaborate" in passes and "lower" not in passes
    real = codekey.code_fingerprint
    monkeypatch.setattr(codekey, "code_fingerprint", lambda rt, store=None: real(rt, store) + " edited back")
    y, passes = _load()
    assert "elaborate" not in passes and "lower" in passes
    np.testing.assert_allclose(y, _oracle(0.8125), rtol=1e-5, atol=1e-5)
