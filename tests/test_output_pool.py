"""Recycled outputs never alias an array the caller can still see."""

from __future__ import annotations

import numpy as np

import caten

SRC = "(composite f ((A{f32}[N]) -> (Y{f32}[N])) (+ A 1.0))"


def test_held_outputs_and_views_are_never_reused():
    m = caten.loads(SRC, runtime="llvm")
    n = 1 << 19  # 2 MiB: large enough to be pooled
    a = np.zeros(n, np.float32)
    y1 = m.f(a)
    y2 = m.f(a + 1)
    assert not np.shares_memory(y1, y2)
    view = y1[10:20]
    del y1
    y3 = m.f(a + 2)
    assert not np.shares_memory(view, y3)
    np.testing.assert_array_equal(view, 1.0)  # still the first result
    np.testing.assert_array_equal(y2, 2.0)
    np.testing.assert_array_equal(y3, 3.0)


def test_released_outputs_are_reused():
    m = caten.loads(SRC, runtime="llvm")
    a = np.zeros(1 << 19, np.float32)
    ids = set()
    for i in range(6):
        y = m.f(a + i)
        np.testing.assert_array_equal(y, i + 1)
        ids.add(y.ctypes.data)
        del y
    assert len(ids) <= 2


def test_large_outputs_start_on_a_cache_line():
    """Whole-vector and non-temporal tile stores need aligned rows; numpy's own large arrays
    start 16 bytes into a line."""
    m = caten.loads(SRC, runtime="llvm")
    a = np.zeros(1 << 19, np.float32)
    held = [m.f(a + i) for i in range(4)]  # pooled ones, then fresh ones past the pool's size
    for i, y in enumerate(held):
        assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous and y.flags.writeable
        np.testing.assert_array_equal(y, i + 1)
