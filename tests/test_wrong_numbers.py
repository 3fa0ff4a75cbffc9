"""Regressions of wrong numbers a user found: each one either computes torch's value or is refused
with a caten.Error, never a silent wrong answer."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import Tensor

INNER = """(composite f ((A{f32}[N] B{f32}[M]) -> (C{f32}))
  (matmul A B))"""


def test_1d_matmul_of_sizes_1_and_4_is_refused():
    """A size-1 operand broadcast in `sum (MUL A B)` gave 5*(1+2+3+4) = 20.0; numpy and torch refuse."""
    with pytest.raises(caten.Error, match="inner dimensions differ: 1 vs 4"):
        Tensor([5.0]).matmul(Tensor([1.0, 2.0, 3.0, 4.0])).item()
    with pytest.raises(ValueError):
        np.matmul(np.array([5.0]), np.array([1.0, 2.0, 3.0, 4.0]))


def test_1d_matmul_with_bound_dims(runtime):
    with pytest.raises(caten.Error, match="inner dimensions differ"):
        caten.loads(INNER, runtime=runtime, defines={"N": 1, "M": 4}).f(
            np.ones(1, np.float32), np.ones(4, np.float32))
    a, b = np.arange(1, 4, dtype=np.float32), np.arange(3, 6, dtype=np.float32)
    got = caten.loads(INNER.replace("[M]", "[N]"), runtime=runtime).f(a, b)
    np.testing.assert_allclose(got, a @ b)
