"""Regression: a contraction (REDUCE of a MUL) whose MUL another kernel stores must read that
buffer, not recompute the MUL's operands. The packed-GEMM path used to look through the stored
MUL, and one operand was a register reduction of the other kernel (no buffer): the LLVM renderer
crashed on a load from buffer `None`. Found by differentiating cross-entropy."""

import numpy as np
import pytest

import caten

SRC = """
(composite h ((Z{f32}[4, 3], T{f32}[4, 3], H{f32}[4, 6], s{f32}) -> (A{f32}[3, 6], b{f32}[3]))
  (let ((lp (log-softmax Z :axis -1))
        (t (* s (- (* (exp lp) (sum T :axis -1 :keepdims true)) T))))
    (return (matmul (transpose t) H) (sum t :axis 0))))
"""


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_contraction_over_a_stored_product(runtime):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 3)).astype(np.float32)
    t_in = rng.random((4, 3)).astype(np.float32)
    h = rng.standard_normal((4, 6)).astype(np.float32)
    s = np.float32(0.25)
    lp = z - z.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    t = s * (np.exp(lp) * t_in.sum(-1, keepdims=True) - t_in)
    a, b = caten.loads(SRC, runtime=runtime).h(z, t_in, h, s)
    np.testing.assert_allclose(a, t.T @ h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, t.sum(0), rtol=1e-5, atol=1e-6)
