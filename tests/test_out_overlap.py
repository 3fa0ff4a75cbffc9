"""`out=` arrays may not overlap an argument or each other: the check (one sort of byte ranges)
agrees with numpy's pairwise np.may_share_memory on random slices of shared buffers, and a call
with an overlapping out= is refused before any kernel runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten.run.module import _overlapping


def _pairwise(args, outs):
    for i, a in enumerate(outs):
        for other in [*args, *outs[:i]]:
            if np.may_share_memory(a, other):
                return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 40), st.booleans()),
                min_size=1, max_size=8), st.integers(0, 7))
def test_agrees_with_pairwise_may_share_memory(specs, nargs):
    pools = [np.zeros(40, np.float32) for _ in range(3)]
    arrays = [pools[p][min(a, b):max(a, b)] if not step else pools[p][min(a, b):max(a, b):2]
              for p, a, b, step in specs]
    args, outs = arrays[:nargs], arrays[nargs:]
    got = _overlapping(args, outs)
    assert (got is not None) == _pairwise(args, outs)
    if got is not None:  # the output it names does overlap something
        assert any(np.may_share_memory(outs[got], o) for o in [*args, *outs] if o is not outs[got])


def test_overlapping_out_is_refused():
    m = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (* X 2))")
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(caten.Error, match="overlaps an argument"):
        m.f(x, out=x)
    y = np.empty(8, np.float32)
    assert m.f(x, out=y) is y and np.array_equal(y, x * 2)
