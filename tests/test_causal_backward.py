"""Causal cuts in attention's backward pass (caten.schedule.causal, caten.schedule.bounds).

The dQ row blocks stop at their last unmasked key, like the forward's; the dK/dV key blocks leave
out the query rows before them. Past it the softmax
gradient's row dot sums P * dP with P an exact zero, which is a zero only where dP = dO Vᵀ is
finite: a run-time check bounds |dP| from the largest |dO| and |V|, and where the bound does not
prove it finite (an inf or nan in dO or V, or values near overflow) the blocks run over every key.
Each case is compared with the numpy runtime (the reference interpreter, which cuts nothing), its
nan and inf positions exactly; the finite values against torch's f64 autograd too."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.plugin import Options

S, H = 768, 1

SRC = """
(composite att ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) -> (O{f32}[H, S, 64]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf s (where (<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1])) s -inf))
  (return (matmul (softmax s :axis -1) V)))
(composite att-grad ((Q{f32}[H, S, 64]) (K{f32}[H, S, 64]) (V{f32}[H, S, 64]) (G{f32}[H, S, 64])
                     -> (dQ{f32}[H, S, 64]) (dK{f32}[H, S, 64]) (dV{f32}[H, S, 64]))
  (setf g (vjp att Q K V :wrt [Q K V] :cotangent G))
  (return (nth g 0) (nth g 1) (nth g 2)))
"""


def _inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((H, S, 64)).astype(np.float32) for _ in range(4)]


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-5)


def test_the_dq_row_blocks_are_cut_behind_a_run_time_check():
    mod = caten.loads(SRC, runtime="llvm", defines={"S": S, "H": H})
    text = pipeline.emit(R.get("llvm"), mod.att_grad.program({})[0], "schedule", Options())[".txt"]
    cut = [ln for ln in text.splitlines() if "keys [0, min(" in ln]
    assert cut and all(f"+ {S} * t" in ln for ln in cut), text  # (J = S where the check failed)
    assert any(f"REDUCE f32 [{H} {S // 128} 128 1 64]" in ln for ln in cut)  # dQ's own sum over the keys


def test_the_key_blocks_leave_out_the_rows_before_them():
    """dK and dV sum over the query rows, a key block at a time: block nb's rows i < nb * 128 see
    none of its keys. The query axis is flipped in those cones, so the rows kept are the first
    S - nb * 128, under the run-time check of the row statistics (max, sum: finite, sum > 0) and
    of dO and Q (finite: they multiply the exact zeros)."""
    mod = caten.loads(SRC, runtime="llvm", defines={"S": S, "H": H})
    text = pipeline.emit(R.get("llvm"), mod.att_grad.program({})[0], "schedule", Options())[".txt"]
    cut = [ln for ln in text.splitlines() if "rows [0, min(" in ln]
    assert cut and all(f"{S} - o1 * 128 + {S} * t" in ln for ln in cut), text
    assert sum(f"REDUCE f32 [{H} {S // 128} 1 128 64]" in ln for ln in cut) == 2  # dK's and dV's sums
    assert any(f"REDUCE f32 [{H} {S // 128} {S} 128 1]" in ln for ln in cut)  # the scores, recomputed


BAND = SRC.replace("(<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1]))",
                   "(and (<= (reshape (arange S) [1 S]) (reshape (arange S) [S 1]))"
                   " (< (reshape (arange S) [S 1]) (+ (reshape (arange S) [1 S]) 300)))")


def test_a_sliding_window_is_cut_at_its_start_and_keeps_its_values():
    """A band of 300 keys (j <= i < j + 300): each key block's cut starts at its first row; the
    rows past the band stay (only a block's first rows are left out), masked to zero as before."""
    xs = _inputs(3)
    assert "(and" in BAND
    text = pipeline.emit(R.get("llvm"), caten.loads(BAND, runtime="llvm", defines={"S": S, "H": H})
                         .att_grad.program({})[0], "schedule", Options())[".txt"]
    assert any("rows [0, min(" in ln for ln in text.splitlines()), text
    want = caten.loads(BAND, runtime="numpy", defines={"S": S, "H": H}).att_grad(*xs)
    for runtime in ("llvm", "c"):
        got = caten.loads(BAND, runtime=runtime, defines={"S": S, "H": H}, check_bounds=True).att_grad(*xs)
        for g, w in zip(got, want):
            _check(g, w)


def test_random_gradients_agree_with_torch_and_the_interpreter():
    torch = pytest.importorskip("torch")
    xs = _inputs(1)
    got = caten.loads(SRC, runtime="llvm", defines={"S": S, "H": H}, check_bounds=True).att_grad(*xs)
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs[:3])
    s = (tq @ tk.transpose(-1, -2)) * 0.125
    s = torch.where(torch.arange(S)[None] <= torch.arange(S)[:, None], s, -torch.inf)
    want = torch.autograd.grad(torch.softmax(s, -1) @ tv, (tq, tk, tv), torch.tensor(xs[3], dtype=torch.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=2e-4, atol=2e-5)


BAD = {  # what makes some masked dP (or a factor of a masked zero) non-finite
    "inf in V at a late key": lambda q, k, v, g: v.__setitem__((0, S - 3, 5), np.inf),
    "nan in V": lambda q, k, v, g: v.__setitem__((0, S // 2, 0), np.nan),
    "inf in dO": lambda q, k, v, g: g.__setitem__((0, 10, 2), np.inf),
    "inf in K at a late key": lambda q, k, v, g: k.__setitem__((0, S - 2, 1), -np.inf),
    "dP overflows at masked keys": lambda q, k, v, g: (v.__setitem__((0, S - 1), 3e19),
                                                       g.__setitem__((0, 5), 3e19)),
    # (the key blocks' check: a row's max or sum not finite, a nan in Q)
    "inf in Q at an early row": lambda q, k, v, g: q.__setitem__((0, 5, 1), np.inf),
    "nan in Q": lambda q, k, v, g: q.__setitem__((0, 100, 7), np.nan),
}


@pytest.mark.parametrize("case", list(BAD))
def test_non_finite_and_overflowing_values_stay_as_the_uncut_composite_makes_them(case):
    xs = _inputs(2)
    BAD[case](*xs)
    want = caten.loads(SRC, runtime="numpy", defines={"S": S, "H": H}).att_grad(*xs)
    assert any(not np.isfinite(w).all() for w in want)  # (each case changes the result)
    for runtime in ("llvm", "c"):
        got = caten.loads(SRC, runtime=runtime, defines={"S": S, "H": H}, check_bounds=True).att_grad(*xs)
        for g, w in zip(got, want):
            _check(g, w)
