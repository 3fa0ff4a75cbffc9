"""The warm path's shortcuts (caten.pipeline.build, caten.cache.programs): a program the
program-level cache holds is loaded without scanning its graph for host kernels (such a program
is never built whole), a program that calls one is still cut at it, cold and warm; the elaborated
program's cache entry round-trips exactly, and an entry of the previous layout is refused (the
program is elaborated afresh), never misread."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caten
from caten import plugin as R
from caten.cache import codec, programs
from caten.pipeline import Timings, build, extern, front

pytest.importorskip("llvmlite")

SRC = """
(composite f ((X{f32}[N, 8]) (W{f32}[8, 5]) (B{f32}[5]) -> (Y{f32}[N, 5]))
  (relu (+ (matmul X W) (* B 0.8125))))
"""
RULES = str(Path(__file__).resolve().parents[1] / "examples" / "rules" / "blas_matmul.lisp")
MLP = """(composite mlp ((X{f32}[M, K]) (W1{f32}[K, H]) (W2{f32}[H, N]) -> (Y{f32}[M, N]))
  (matmul (relu (+ (matmul X W1) 0.375)) W2))"""


def _args(n: int = 7):
    rng = np.random.default_rng(3)
    return (rng.standard_normal((n, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32),
            rng.standard_normal(5).astype(np.float32))


def _oracle(x, w, b) -> np.ndarray:
    return np.maximum(x.astype(np.float64) @ w + b.astype(np.float64) * 0.8125, 0)


def _compile(src: str, **kw):
    """`f`'s executable through caten.pipeline.build with the in-process memo cleared (only the
    caches on disk can skip work), and the passes it ran."""
    runtime = R.get("llvm")
    runtime.__dict__.pop("_pipeline_memo", None)
    m = caten.loads(src, runtime="llvm", **kw)
    tm = Timings()
    return build.compile(runtime, m.f.elaborate({}), m.options, tm), tm.passes


def test_a_cached_program_loads_without_the_host_kernel_scan(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = extern.has_extern
    monkeypatch.setattr(extern, "has_extern", lambda p: calls.append(p.name) or real(p))
    exe, passes = _compile(SRC)
    assert "lower" in passes and calls == ["f"]  # cold: scanned, then built
    exe, passes = _compile(SRC)
    assert "lower" not in passes and calls == ["f"]  # warm: from the cache, not scanned
    x, w, b = _args()
    y = np.empty((7, 5), np.float32)
    exe.run([x, w, b], [y], {"N": 7})
    np.testing.assert_allclose(y, _oracle(x, w, b), rtol=1e-5, atol=1e-5)
    exe, passes = _compile(SRC.replace("0.8125", "0.5"))  # another program: scanned again
    assert "lower" in passes and calls == ["f", "f"]


CHILD = r"""
import json, sys
import numpy as np
import caten
m = caten.loads(sys.argv[1], runtime="llvm", rules=[sys.argv[2]])
rng = np.random.default_rng(5)
out = []
for shape in ((7, 13, 5, 3), (1, 4, 9, 6)):
    mm, k, h, n = shape
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((mm, k), (k, h), (h, n)))
    want = np.maximum(x.astype(np.float64) @ w1 + 0.375, 0) @ w2
    out.append({"y": m.mlp(x, w1, w2).tolist(), "want": want.tolist()})
print(json.dumps(out))
"""


def test_a_program_calling_host_kernels_is_cut_cold_and_warm(tmp_path):
    """The cache is asked before the scan: a program with EXTERN nodes has no entry of its own
    (its pieces have), so a second process still cuts it and computes the same values."""
    env = {**os.environ, "CATEN_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CHILD, MLP, RULES], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    for cold, warm in zip(*runs):
        np.testing.assert_allclose(np.array(cold["y"]), np.array(cold["want"]), rtol=1e-4, atol=1e-4)
        assert warm["y"] == cold["y"]
    # in this process too: cut afresh at every compile (never kept whole in the memo)
    m = caten.loads(MLP, runtime="llvm", rules=[RULES])
    prog = m.mlp.elaborate({})
    runtime = R.get("llvm")
    a = build.compile(runtime, prog, m.options)
    b = build.compile(runtime, prog, m.options)
    assert type(a).__name__ == type(b).__name__ == "ExternSplit" and a is not b


def test_an_elaborated_program_round_trips_and_the_old_layout_is_refused():
    m = caten.loads(SRC, runtime="llvm", use_cache=False)
    prog = m.f.elaborate({})
    blob = programs.dumps(prog)
    back = programs.loads(blob)
    assert back.key() == prog.key() and back.dump() == prog.dump()
    back.cached_key = None  # the graph itself hashes alike, not just the stored key
    assert back.key() == prog.key()
    assert all(type(n.shape) is tuple and type(n.src) is tuple for n in _nodes(back))
    fmt, graph, fields = codec.loads(blob)
    flat, outs = graph["flat"], graph["outs"]
    old = codec.dumps((3, [list(r) for r in flat], outs, fields))  # the previous layout (graph read at once)
    with pytest.raises(ValueError):
        programs.loads(old)
    assert front._loads(old) is None  # a miss: elaborated afresh
    bad = codec.dumps((programs.FORMAT, codec.Lazy({"flat": [[r[0], r[1], tuple(r[2]), r[3], r[4]] for r in flat],
                                                    "outs": outs}), fields))
    lazy = programs.loads(bad)  # the graph is read on first use (a warm load never reads it) ...
    assert lazy.key() == prog.key() and lazy.inputs == prog.inputs
    with pytest.raises(codec.CodecError):  # ... and a node in another shape than the writer's refused there
        _nodes(lazy)


def test_a_stored_program_reads_its_graph_only_when_asked(monkeypatch):
    m = caten.loads(SRC, runtime="llvm", use_cache=False)
    prog = m.f.elaborate({})
    calls = []
    real = programs._graph
    monkeypatch.setattr(programs, "_graph", lambda g: calls.append(1) or real(g))
    back = programs.loads(programs.dumps(prog))
    assert (back.name, back.inputs, back.outputs, back.dims, back.key()) == \
        (prog.name, prog.inputs, prog.outputs, prog.dims, prog.key()) and calls == []
    assert back == prog and prog == back and calls == [1]  # (equality reads the graph: once)
    assert back.nodes is back.nodes and back.nodes[0] is prog.nodes[0]  # hash-consed: the very nodes
    moved = dataclasses.replace(back, name="g")
    assert moved.nodes is back.nodes and moved.name == "g" and calls == [1]


def _nodes(prog):
    from caten.ir.graph import toposort

    return toposort(prog.nodes)
