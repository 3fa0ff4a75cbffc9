"""Regression: a shrink can leave a size-1 axis's mask inverted ((0, -1): its one position is
outside), and a reshape that drops or adds size-1 axes used to keep only the masks of the other
axes -- the view then read the source element instead of zero (7 here, from a buffer of one
element read at offset 2 of its padded view). Found by the adjoint property of view VJPs
(tests/test_view_transpose.py), which exercises such chains on random shapes."""

import numpy as np
import pytest

import caten

SRC = "(composite f ((X{f32}[1]) -> (Y{f32}[1, 1])) (reshape (slice (VIEW X :pad [[0 2]]) [2 3]) [1 1]))"


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_reshape_of_a_view_whose_mask_a_shrink_emptied_reads_zero(runtime):
    got = caten.loads(SRC, runtime=runtime).f(np.array([7.0], np.float32))
    np.testing.assert_array_equal(got, np.zeros((1, 1), np.float32))
