"""Identical layers compile once (caten.render.llvm.units, caten.compile.jobs): a model of N equal
layers (a transformer's blocks, each with its own weights) is split into the units of one layer
plus its entry, so LLVM compiles each layer's code once; a program of three layers, compiled
where the one-layer program was, compiles only its entry. Each computes what the numpy runtime
(the reference interpreter) and a float64 oracle compute."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.cache.store import default_cache
from caten.compile import jobs, llvmobj
from caten.render.llvm import units

pytest.importorskip("llvmlite")
pytest.importorskip("scipy")


def layers(n: int) -> str:
    """n residual blocks y + gelu(layernorm(y W_i + b_i)), each with its own weights."""
    params = " ".join(f"(W{i}{{f32}}[D, D]) (B{i}{{f32}}[D])" for i in range(n))
    body = "\n".join(f"  (setf y (+ y (gelu (layernorm (+ (matmul y W{i}) B{i}) 1.0 0.0))))" for i in range(n))
    return f"(composite f ((X{{f32}}[N, D]) {params} -> (Y{{f32}}[N, D]))\n  (setf y X)\n{body}\n  y)\n"


def oracle(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    from scipy.special import erf

    y = x.astype(np.float64)
    for w, b in zip(weights[::2], weights[1::2]):
        h = y @ w.astype(np.float64) + b
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
        y = y + 0.5 * h * (1 + erf(h / np.sqrt(2)))
    return y


def module_text(src: str) -> str:
    from caten.pipeline import emit

    mod = caten.loads(src, runtime="llvm")
    return next(iter(emit(mod.runtime, mod.f.elaborate({}), "source").values()))


def test_three_equal_layers_split_into_the_units_of_one_plus_their_entry():
    one, three = units.split(module_text(layers(1))), units.split(module_text(layers(3)))
    assert len(one) > 2 and len(three) == len(one)  # (a unit per stage, GEMM tile and pool; then the entry)
    assert [u.key for u in three[:-1]] == [u.key for u in one[:-1]]
    assert three[-1].key != one[-1].key  # (the entry calls the layers' code three times)


def test_after_one_layer_three_layers_compile_only_their_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CATEN_COMPILE_JOBS", "1")  # (every unit compiled here, where it is counted:
    monkeypatch.setattr(jobs, "_workers", [])  # no worker an earlier test started either)
    assert default_cache() is not None
    compiled: list[str] = []
    real = llvmobj.compile_object
    monkeypatch.setattr(llvmobj, "compile_object", lambda text, *a, **k: compiled.append(text) or real(text, *a, **k))
    rng = np.random.default_rng(7)
    n, d = 13, 24
    x = rng.standard_normal((n, d)).astype(np.float32)
    weights = [a for _ in range(3) for a in ((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32),
                                             (0.1 * rng.standard_normal(d)).astype(np.float32))]
    y1 = caten.loads(layers(1), runtime="llvm").f(x, *weights[:2])
    first = len(compiled)
    assert first == len(units.split(module_text(layers(1))))  # every unit of one layer, once
    y3 = caten.loads(layers(3), runtime="llvm").f(x, *weights)
    assert len(compiled) == first + 1  # the entry only: the layers' units came from the unit cache
    for y, w in ((y1, weights[:2]), (y3, weights)):
        ref = caten.loads(layers(len(w) // 2), runtime="numpy").f(x, *w)
        np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(y, oracle(x, w), rtol=1e-4, atol=1e-4)
