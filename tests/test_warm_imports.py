"""What a warm load imports: a second process that finds its compiled program in the cache loads
the stored program and links the stored objects, so it must not import the code that makes them
(the elaborator, reader, scheduler, lowerer, renderers, compile workers) or ml_dtypes for a
program of numpy's own dtypes; importing them was most of GPT-2 small's warm load (issue #41).
ml_dtypes' dtypes still map both ways once it is loaded (caten.ir.dtypes), and LLVM's library
is mapped ahead of llvmlite's import (caten.compile.llvmobj.prefetch), never in its way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("llvmlite")

SRC = """
(composite f ((X{f32}[N, 8]) (W{f32}[8, 5]) (B{f32}[5]) -> (Y{f32}[N, 5]))
  (relu (+ (matmul X W) (* B 0.75))))
"""

CHILD = r"""
import json, sys
import numpy as np
import caten
m = caten.loads(sys.argv[1], runtime="llvm")
rng = np.random.default_rng(4)
x = rng.standard_normal((7, 8)).astype(np.float32)
w = rng.standard_normal((8, 5)).astype(np.float32)
b = rng.standard_normal(5).astype(np.float32)
y = m.f(x, w, b)
passes = sorted(m.f._timings.get((), caten.pipeline.Timings()).passes)
print(json.dumps({"y": y.tolist(), "passes": passes, "modules": sorted(sys.modules)}))
"""

# what makes code, not what loads it: none of these may run when the cache holds the program
NOT_WARM = ("caten.compile.jobs", "caten.render", "caten.read.reader", "caten.elaborate.elaborator",
            "caten.schedule", "caten.lower", "caten.ir.verify", "caten.rewrite", "ml_dtypes")


def _run(cache: str) -> dict:
    env = {**os.environ, "CATEN_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, SRC], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _oracle() -> np.ndarray:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 8)).astype(np.float32)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    return np.maximum(x.astype(np.float64) @ w + b.astype(np.float64) * 0.75, 0)


def test_a_warm_load_imports_none_of_the_code_that_compiles(tmp_path):
    cache = str(tmp_path / "cache")
    cold = _run(cache)
    assert "lower" in cold["passes"]
    assert any(m == "caten.lower" or m.startswith("caten.lower.") for m in cold["modules"])  # (the probe sees it)
    warm = _run(cache)
    assert "lower" not in warm["passes"] and "elaborate" not in warm["passes"]
    loaded = [m for m in warm["modules"] if any(m == n or m.startswith(n + ".") for n in NOT_WARM)]
    assert not loaded, f"a warm load imported {loaded}"
    for r in (cold, warm):
        np.testing.assert_allclose(np.array(r["y"]), _oracle(), rtol=1e-5, atol=1e-5)


DTYPES_CHILD = r"""
import json, sys
import numpy as np
from caten.ir import dtypes as T
from caten.tensor.lazy import dtype_name
out = {"eager": "ml_dtypes" in sys.modules, "names": [dtype_name(n) for n in ("bfloat16", "int4", "float8_e5m2")]}
if sys.argv[1] == "user":  # the caller imports ml_dtypes and hands caten its arrays first
    import ml_dtypes
    arrs = [np.zeros(2, ml_dtypes.bfloat16), np.zeros(2, ml_dtypes.int4), np.zeros(2, ml_dtypes.float8_e4m3fnuz)]
    out["is_float"] = [T.is_np_float(a.dtype) for a in arrs]
    out["is_int4"] = [T.is_np_int4(a.dtype) for a in arrs]
    out["from"] = [T.from_numpy(a.dtype).name for a in arrs]
else:  # caten asks for them first
    out["np"] = [str(d.np) for d in (T.bf16, T.i4, T.u4, T.f8e4m3, T.f8e5m2fnuz)]
    out["back"] = [T.from_numpy(d.np).name for d in T.ALL]
    out["int4"] = [T.is_np_int4(d.np) for d in T.ALL]
    out["float"] = [T.is_np_float(d.np) for d in T.ALL]
out["none"] = T.from_numpy(np.dtype(np.complex64)) is None
print(json.dumps(out))
"""


@pytest.mark.parametrize("first", ["user", "caten"])
def test_ml_dtypes_loads_on_first_use_and_maps_both_ways(first):
    out = subprocess.run([sys.executable, "-c", DTYPES_CHILD, first], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["eager"] is False  # (importing caten.ir.dtypes no longer imports it)
    assert r["names"] == ["bf16", "i4", "f8e5m2"] and r["none"] is True
    if first == "user":
        assert r["is_float"] == [True, False, True] and r["is_int4"] == [False, True, False]
        assert r["from"] == ["bf16", "i4", "f8e4m3fnuz"]
    else:
        from caten.ir import dtypes as T

        assert r["np"] == ["bfloat16", "int4", "uint4", "float8_e4m3fn", "float8_e5m2fnuz"]
        assert r["back"] == [d.name for d in T.ALL]
        assert r["int4"] == [d in T.INT4 for d in T.ALL]
        assert r["float"] == [d.is_float for d in T.ALL]


PREFETCH_CHILD = r"""
import json, sys
from caten.compile import llvmobj
llvmobj.prefetch()
llvmobj.prefetch()  # (once per process)
threads = list(llvmobj._prefetching)
for t in threads:
    t.join()
mapped = "libllvmlite" in open("/proc/self/maps").read()
imported = "llvmlite.binding" in sys.modules
b = llvmobj.llvm()  # llvmlite loads the library the thread mapped
print(json.dumps({"threads": len(threads), "mapped": mapped, "imported": imported,
                  "version": list(b.llvm_version_info)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_prefetch_maps_llvm_without_importing_llvmlite():
    out = subprocess.run([sys.executable, "-c", PREFETCH_CHILD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["threads"] == 1 and r["mapped"] and not r["imported"] and r["version"][0] >= 10


def test_prefetch_without_llvmlite_does_nothing(monkeypatch):
    import importlib.util

    from caten.compile import llvmobj

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    llvmobj._map_library()  # (what the thread runs: no library, no error)
