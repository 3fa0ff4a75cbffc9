"""Deferred softmax normalization (caten.schedule.softnorm): `softmax(x) @ V` sums the
exponentials times V and divides the [rows, d] result by the row sums. Checked: it fires where it
is sound (f32/f64, the probabilities read only by the sum), not elsewhere (f16, the probabilities
also an output, a sum over another axis), and the values equal the reference interpreter's on
llvm and c, with infinities and nans in the scores and in V and fully masked rows."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.ir.graph import toposort
from caten.ir.ops import Op

ATT = """
(composite att ((X{T}[H, S, L]) (V{T}[H, L, E]) -> (O{T}[H, S, E]))
  (return (matmul (softmax X :axis -1) V)))
(composite both ((X{T}[H, S, L]) (V{T}[H, L, E]) -> (O{T}[H, S, E]) (P{T}[H, S, L]))
  (setf p (softmax X :axis -1))
  (return (matmul p V) p))
(composite across ((X{T}[H, S, L]) (V{T}[H, S, E]) -> (O{T}[H, L, E]))
  (return (matmul (transpose (softmax X :axis -1)) V)))
"""


def _deferred(name: str, T: str) -> bool:
    """Whether the pass rewrote the composite's graph (an FDIV of the sum's shape appears)."""
    from caten.schedule import softnorm

    m = caten.loads(ATT, runtime="numpy", defines={"T": T, "H": 2, "S": 5, "L": 7, "E": 3})
    comp = getattr(m, name)
    prog = comp.elaborate(dict(comp.module.types))
    out = softnorm.defer(list(prog.nodes))
    return out != list(prog.nodes) and any(n.op is Op.FDIV and n.shape[-1] == 1 for n in toposort(out))


def test_fires_only_where_it_is_sound():
    assert _deferred("att", "f32") and _deferred("att", "f64")
    assert not _deferred("att", "f16")  # (e·V can be l times larger than P·V: f16 overflows)
    assert not _deferred("both", "f32")  # (the probabilities are read anyway)
    assert not _deferred("across", "f32")  # (a sum over the rows, not the softmax axis)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_values_with_specials_equal_the_reference(runtime):
    rng = np.random.default_rng(0)
    H, S, L, E = 2, 9, 13, 5
    x = rng.standard_normal((H, S, L)).astype(np.float32) * 4
    v = rng.standard_normal((H, L, E)).astype(np.float32)
    x[0, 1, :] = -np.inf  # a fully masked row: nan
    x[0, 2, 3] = np.inf  # an infinite score: nan
    x[1, 3, 5] = np.nan
    x[1, 4, :6] = -np.inf  # a partly masked row
    v[1, 7, 2] = np.inf  # 0·inf in rows whose weight there is 0: nan, as P·V has it
    d = {"T": "f32", "H": H, "S": S, "L": L, "E": E}
    want = caten.loads(ATT, runtime="numpy", defines=d).att(x, v)
    got = caten.loads(ATT, runtime=runtime, defines=d, check_bounds=True).att(x, v)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-6)
    with np.errstate(all="ignore"):
        p = np.exp(x - x.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ v
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
