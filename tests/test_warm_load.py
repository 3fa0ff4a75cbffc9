"""A warm load (caten.pipeline.restore): a second process whose cache holds the compiled program
loads it without scheduling, lowering or rendering, and computes the same values; a changed
program, option or target misses that cache and runs the whole back end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.pipeline import Timings, build, codekey

SRC = """
(composite f ((X{f32}[N, 8]) (W{f32}[8, 5]) (B{f32}[5]) -> (Y{f32}[N, 5]))
  (relu (+ (matmul X W) B)))
"""

CHILD = r"""
import json, sys
import numpy as np
import caten
m = caten.loads(sys.argv[1], runtime=sys.argv[2], check_bounds=sys.argv[3] == "1")
prog, exe = m.f.program({})
rng = np.random.default_rng(0)
x = rng.standard_normal((7, 8)).astype(np.float32)
w = rng.standard_normal((8, 5)).astype(np.float32)
b = rng.standard_normal(5).astype(np.float32)
y = m.f(x, w, b)
print(json.dumps({"y": y.tolist(), "passes": sorted(m.f._timings.get((), caten.pipeline.Timings()).passes)}))
"""


def _oracle() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 8)).astype(np.float32)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    return np.maximum(x.astype(np.float64) @ w + b, 0)


def _run(cache: str, rt: str, bounds: bool) -> dict:
    env = {**os.environ, "CATEN_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, SRC, rt, "1" if bounds else "0"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("rt,bounds", [("llvm", False), ("c", True)])
def test_a_second_process_loads_without_lowering(tmp_path, rt, bounds):
    if not R.get(rt).available()[0]:
        pytest.skip(f"runtime {rt} unavailable")
    cache = str(tmp_path / "cache")
    cold = _run(cache, rt, bounds)
    warm = _run(cache, rt, bounds)
    assert {"schedule", "lower", "render"} <= set(cold["passes"])
    assert not {"schedule", "lower", "decompose", "render", "compile", "elaborate"} & set(warm["passes"])
    assert "load" in warm["passes"]
    np.testing.assert_allclose(np.array(warm["y"]), _oracle(), rtol=1e-5, atol=1e-5)
    assert warm["y"] == cold["y"]


def _passes(src: str, rt: str = "llvm", **kw) -> set[str]:
    """The back passes a compile of `f` ran, with the in-process memo cleared (only the caches
    on disk can skip work)."""
    runtime = R.get(rt)
    runtime.__dict__.pop("_pipeline_memo", None)
    m = caten.loads(src, runtime=rt, **kw)
    prog = m.f.elaborate({})
    tm = Timings()
    exe = build.compile(runtime, prog, m.options, tm)
    x = np.ones((3, 8), np.float32)
    y = np.empty((3, 5), np.float32)
    exe.run([x, np.ones((8, 5), np.float32), np.ones(5, np.float32)], [y], {"N": 3})
    assert np.all(y == 9.0)
    return set(tm.passes)


def test_a_changed_program_option_or_target_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    assert "lower" in _passes(SRC)
    assert "lower" not in _passes(SRC)  # the same program again: from the program-level cache
    assert "lower" in _passes(SRC.replace("relu", "abs"))
    assert "lower" in _passes(SRC, opt_level=1)
    assert "lower" in _passes(SRC, check_bounds=True)
    assert "lower" in _passes(SRC, target="x86-64-v2")
    assert "lower" not in _passes(SRC, target="x86-64-v2")


def test_an_edit_to_the_compiler_misses(tmp_path, monkeypatch):
    """A back-end module that changed (its fingerprint) is another key."""
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    assert "lower" in _passes(SRC)
    monkeypatch.setattr(codekey, "code_fingerprint", lambda runtime, store=None: "edited")
    assert "lower" in _passes(SRC)


def test_a_parsed_unit_round_trips_through_the_cache_codec():
    """Spans and the reader's atoms are stored as flat lists (caten.cache.codec): the same forms
    come back, and a malformed one is a miss (CodecError), never a wrong form."""
    import math

    from caten.cache import codec
    from caten.errors import Span
    from caten.read.program import load_unit_text
    from caten.read.sexpr import Kw, Num, Str, Sym

    unit = load_unit_text(SRC + '(composite g ((X{f32}[3]) -> (Y{f32}[3])) (* X (+ 1.5 -2 :k "s")))', "<string>")
    back = codec.loads(codec.dumps(unit))
    assert repr(back) == repr(unit)
    span = Span("f.lisp", 1, 2, 3, 4, "x" * 60)
    forms = [Sym("a" * 60, span), Num(3, span), Num(float("nan"), span), Num(-math.inf, span), Str("q\n", span),
             Kw("k", span), Sym("s", None)]
    for a, b in zip(forms, codec.loads(codec.dumps(forms))):
        assert type(a) is type(b) and a.span == b.span and repr(a) == repr(b)
    for bad in (b'[]\n{"@":"N","v":[true,"f",1,2,3,4,null]}', b'[]\n{"@":"Y","v":[1,"f",1,2,3,4,null]}',
                b'[]\n{"@":"K","v":["k","f",1,2,3,4]}', b'[]\n{"@":"S","v":["f",1,2,3,4,7]}'):
        with pytest.raises(codec.CodecError):
            codec.loads(bad)


APPEND = """
(composite step ((K{f32}[T, D]) (k{f32}[1, D]) (pos{i64}[1]) -> (K{f32}[T, D]) (s{f32}[T]))
  (setf K2 (scatter K (expand (reshape pos [1 1]) [1 D]) k :axis 0))
  (return K2 (sum K2 :axis 1)))
"""

APPEND_CHILD = r"""
import json, sys
import numpy as np
import caten
m = caten.loads(sys.argv[1], runtime="llvm")
K = np.arange(12, dtype=np.float32).reshape(4, 3)
K2, s = m.step(K, np.full((1, 3), 7, np.float32), np.array([2]))
(_, exe), = m.step._variants.values()
print(json.dumps({"K": K.tolist(), "same": K2 is K, "s": s.tolist(), "direct": sorted(exe.in_place),
                  "passes": sorted(m.step._timings.get((), caten.pipeline.Timings()).passes)}))
"""


def test_a_warm_load_keeps_in_place_outputs(tmp_path):
    """An output written straight into its input's array (Program.aliases) is so after a warm
    load too: the program-level cache keeps which outputs the code computes in place."""
    env = {**os.environ, "CATEN_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", APPEND_CHILD, APPEND], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ref = np.arange(12, dtype=np.float32).reshape(4, 3)
    ref[2] = 7
    for r in runs:
        assert r["same"] and r["direct"] == [0]
        np.testing.assert_array_equal(np.array(r["K"]), ref)
        np.testing.assert_allclose(r["s"], ref.sum(1))
    assert "lower" in runs[0]["passes"] and "lower" not in runs[1]["passes"]
