"""Helpers for the LLVM runtime tests: build a Program from graph nodes, run it on the llvm
runtime and on the reference interpreter, and compare."""

from __future__ import annotations

import numpy as np
from caten.runtimes.llvm_rt import RUNTIME

from caten import pipeline
from caten.ir import dims as D
from caten.ir.interpret import evaluate
from caten.ir.program import Program, TensorSpec
from caten.plugin import Options


def program(name, ins, outs, dims=(), defines=None) -> Program:
    return Program(name, [TensorSpec(f"X{i}", b.dtype, b.shape) for i, b in enumerate(ins)],
                   [TensorSpec(f"Y{i}", o.dtype, o.shape) for i, o in enumerate(outs)], list(outs), list(dims),
                   defines=dict(defines or {}))


def run_both(p: Program, arrays, env=None):
    env = dict(env or {})
    exe = pipeline.compile(RUNTIME, p, Options())
    full = {**p.defines, **env}
    outs = [np.empty([D.evaluate(d, full) for d in o.shape], o.dtype.np) for o in p.outputs]
    exe.run(arrays, outs, env)
    ref = evaluate(p.nodes, arrays, full)
    return outs, ref


def assert_close(got, want, rtol=1e-5, atol=1e-6, exact=False):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if exact or got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True)


def check(p: Program, arrays, env=None, **tol):
    got, want = run_both(p, arrays, env)
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w), **tol)
    return got


def rand(dtype, shape, rng, lo=-4, hi=4):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, lo * 8), min(info.max, hi * 8) + 1, size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


# the ISAs' code paths of a kernel test: AVX-512 and AVX2 on llvm (compiled for each, run where the
# host has it), f64, and the C runtime's plain loops
ISA_CASES = [("llvm", "rocketlake", np.float32), ("llvm", "znver3", np.float32),
             ("llvm", "rocketlake", np.float64), ("c", "", np.float32)]


def isa_module(src: str, rt: str, cpu: str, dt, monkeypatch):
    """`src` (its `{T}` the dtype of dt) loaded for runtime rt and target cpu, on two threads;
    skipped where cpu's vectors are wider than the host's (its code would die of SIGILL)."""
    import pytest

    import caten
    from caten import target

    if cpu and target.parse(cpu).vector_bits > target.host().vector_bits:
        pytest.skip(f"{cpu}'s vectors are wider than this host's")
    monkeypatch.setenv("CATEN_NUM_THREADS", "2")
    name = "f32" if dt == np.float32 else "f64"
    return caten.loads(src.replace("{T}", "{" + name + "}"), runtime=rt, use_cache=False,
                       **({"target": cpu} if cpu else {}))
