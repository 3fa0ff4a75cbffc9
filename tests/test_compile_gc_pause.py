"""The warm path pauses Python's garbage collector while it builds long-lived data
(caten.pipeline.passes.gc_paused): the collector runs again afterwards exactly as the caller
had it, nested and concurrent pauses included, and an exception inside does not leave it off;
a warm load in a second process computes what the cold one did."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from caten.pipeline.passes import gc_paused

pytest.importorskip("llvmlite")


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_runs_again_after_the_outermost_pause(collector_on):
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the outer block still builds)
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled(collector_on):
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_does_not_leave_the_collector_off(collector_on):
    with pytest.raises(KeyError):
        with gc_paused():
            raise KeyError("x")
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_with_the_collector_on(collector_on):
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with gc_paused():
        release.set()
        t.join(10)
        assert not gc.isenabled()  # (this thread's block still runs)
    assert gc.isenabled()


CHILD = r"""
import gc, json, sys
import numpy as np
import caten
m = caten.loads(sys.argv[1], runtime="llvm")
rng = np.random.default_rng(5)
x = rng.standard_normal((9, 12)).astype(np.float32)
w = rng.standard_normal((12, 7)).astype(np.float32)
y = m.f(x, w)
print(json.dumps({"gc": gc.isenabled(), "y": y.tolist()}))
"""

SRC = """(composite f ((X{f32}[N, K]) (W{f32}[K, M]) -> (Y{f32}[N, M]))
  (gelu (layernorm (matmul X W) 1.0 0.0)))"""


def test_a_warm_load_computes_what_the_cold_one_did_and_leaves_the_collector_on(tmp_path):
    env = dict(os.environ, CATEN_CACHE_DIR=str(tmp_path / "cache"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, SRC], env=env, capture_output=True, text=True,
                                      check=True, cwd=tmp_path).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert all(r["gc"] for r in runs)
    cold, warm = (np.array(r["y"], dtype=np.float32) for r in runs)
    np.testing.assert_array_equal(cold, warm)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 12)).astype(np.float64)
    h = x @ rng.standard_normal((12, 7)).astype(np.float32).astype(np.float64)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    from scipy.special import erf

    np.testing.assert_allclose(warm, 0.5 * h * (1 + erf(h / np.sqrt(2))), rtol=1e-4, atol=1e-5)
