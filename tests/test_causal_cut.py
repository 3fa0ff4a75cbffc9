"""Causal cuts (caten.schedule.causal): a row block of attention stops at its last unmasked key.

The cut is exact or absent: each case is compared with the numpy runtime (the language's
reference interpreter, which cuts nothing) on the same inputs, non-finite values among the masked
keys included (0 * inf is nan in the composite, and must stay nan), and the schedule says whether
the cut was taken.
"""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.plugin import Options

S, H = 768, 1  # the smallest rows that row blocks take (768 x 768 scores per head), 6 blocks of 128

ATT = """
(composite att ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) -> (O{f32}[H, S, 64]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf i (reshape (arange S) [S 1]))
  (setf j (reshape (arange S) [1 S]))
  (setf s (where MASK s -inf))
  (return (matmul (softmax s :axis -1) V)))
"""

MASKS = {  # mask -> whether the cut applies
    "(<= j i)": True,
    "(< j (+ i 5))": True,  # five keys past the diagonal: J(nb) = (nb + 1) * 128 + 4
    "(and (<= j i) (< (- i 200) j))": True,  # a sliding window: its upper bound cuts
    "(< j i)": False,  # row 0 keeps no key: softmax gives nan there, which a cut sum would not
    "(<= j (+ i 700))": False,  # nearly nothing to cut
}


def _source(mask: str) -> str:
    return ATT.replace("MASK", mask)


def _inputs(seed: int, bad: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((H, S, 64)).astype(np.float32) for _ in range(3))
    if bad:  # non-finite values at keys most rows mask (and at one key every row sees)
        v[0, S - 1, 3] = np.inf
        v[0, S // 2, 5] = np.nan
        v[0, 0, 7] = -np.inf
        k[0, S - 2, 1] = np.inf
    return [q, k, v]


def _schedule(src: str) -> str:
    mod = caten.loads(src, runtime="llvm", defines={"S": S, "H": H})
    return pipeline.emit(R.get("llvm"), mod.att.program({})[0], "schedule", Options())[".txt"]


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-5, atol=2e-6)


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("mask", list(MASKS))
def test_a_cut_attention_equals_the_uncut_composite(mask: str) -> None:
    _same_as_uncut(mask, MASKS[mask])


def test_a_row_with_no_key_is_not_cut() -> None:
    """(its own test: CI runs a slice of the masks above, and this refusal must always run)"""
    _same_as_uncut("(< j i)", False)


def _same_as_uncut(mask: str, cut: bool) -> None:
    src = _source(mask)
    dump = _schedule(src)
    assert ("keys [0, min(" in dump) is cut, dump
    ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att
    got = caten.loads(src, runtime="llvm", defines={"S": S, "H": H}).att
    for bad in (False, True):
        xs = _inputs(1, bad)
        _check(got(*xs), ref(*xs))


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_the_cut_stays_in_bounds(runtime: str) -> None:
    src = _source("(<= j i)")
    ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att
    got = caten.loads(src, runtime=runtime, defines={"S": S, "H": H}, check_bounds=True).att
    xs = _inputs(2, bad=True)
    _check(got(*xs), ref(*xs))


def test_nothing_is_cut_when_another_output_reads_the_probabilities() -> None:
    src = """
(composite att ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) -> (O{f32}[H, S, 64]) (P{f32}[H, S, S]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf s (where (<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1])) s -inf))
  (setf p (softmax s :axis -1))
  (return (matmul p V) p))
"""
    assert "keys [0, min(" not in _schedule(src)
    ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att
    got = caten.loads(src, runtime="llvm", defines={"S": S, "H": H}).att
    xs = _inputs(3)
    for g, w in zip(got(*xs), ref(*xs)):
        _check(g, w)


def test_an_additive_mask_is_not_cut() -> None:
    """s + (-inf) is nan where s is +inf: the masked scores still matter, so nothing is proven."""
    src = """
(composite att ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) -> (O{f32}[H, S, 64]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf m (where (<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1])) 0.0 -inf))
  (return (matmul (softmax (+ s m) :axis -1) V)))
"""
    assert "keys [0, min(" not in _schedule(src)
    ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att
    got = caten.loads(src, runtime="llvm", defines={"S": S, "H": H}).att
    xs = _inputs(4, bad=True)
    _check(got(*xs), ref(*xs))


def test_a_random_mask_of_indices_cuts_only_what_it_masks() -> None:
    """Property: masks j <= i + c and j >= i - w with random c and w (some leave a row with no
    key), random data with infinities: the compiled program equals the reference interpreter."""
    rng = np.random.default_rng(7)
    for _ in range(2):
        c, w = int(rng.integers(-2, 300)), int(rng.integers(1, 900))
        src = _source(f"(and (<= j (+ i {c})) (<= (- i {w}) j))")
        ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att
        got = caten.loads(src, runtime="llvm", defines={"S": S, "H": H}).att
        xs = _inputs(int(rng.integers(1 << 30)), bad=bool(rng.integers(2)))
        _check(got(*xs), ref(*xs))


def test_the_gradient_of_a_causal_attention() -> None:
    """Its backward pass (row blocks over dQ; a softmax gradient's sums over the keys of P * dP,
    where dP is no broadcast a guard could check per head) compiles and equals the interpreter."""
    src = _source("(<= j i)") + """
(composite att-grad ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) (G{f32}[H, S, 64])
                     -> (dQ{f32}[H, S, 64]) (dK{f32}[H, S, 64]) (dV{f32}[H, S, 64]))
  (setf g (vjp att Q K V :wrt [Q K V] :cotangent G))
  (return (nth g 0) (nth g 1) (nth g 2)))
"""
    ref = caten.loads(src, runtime="numpy", defines={"S": S, "H": H}).att_grad
    got = caten.loads(src, runtime="llvm", defines={"S": S, "H": H}).att_grad
    xs = _inputs(5) + [np.random.default_rng(6).standard_normal((H, S, 64)).astype(np.float32)]
    for g, w in zip(got(*xs), ref(*xs)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
