"""EXTERN on a compiling runtime: the program is cut at extern calls (caten/pipeline/extern.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import caten

RULES = str(Path(__file__).resolve().parents[1] / "examples" / "rules" / "blas_matmul.lisp")


@pytest.mark.parametrize("runtime", ["llvm", "numpy"])
def test_blas_rule_runs_and_matches(runtime):
    src = """(composite mlp ((X{f32}[M, K]) (W1{f32}[K, H]) (W2{f32}[H, N]) -> (Y{f32}[M, N]))
      (matmul (relu (+ (matmul X W1) 1.0)) W2))"""
    mod = caten.loads(src, runtime=runtime, rules=[RULES])
    prog = mod.mlp.elaborate({})
    from caten.ir.graph import toposort
    from caten.ir.ops import Op

    externs = [n for n in toposort(prog.nodes) if n.op is Op.EXTERN]
    assert len(externs) == (2 if runtime == "llvm" else 0)  # the rule is marked :runtime llvm
    rng = np.random.default_rng(1)
    for m, k, h, n in ((7, 13, 5, 3), (33, 8, 17, 2)):  # one compiled program, two sizes
        x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, h), (h, n)))
        want = np.maximum(x @ w1 + 1, 0) @ w2
        np.testing.assert_allclose(mod.mlp(x, w1, w2), want, rtol=1e-5, atol=1e-5)


def test_extern_alone_and_inputs_untouched():
    src = "(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))"
    mod = caten.loads(src, runtime="llvm", rules=[RULES])
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), np.float32)
    a0, b0 = a.copy(), b.copy()
    np.testing.assert_array_equal(mod.mm(a, b), a @ b)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
