"""Recycled outputs never alias an array the caller can still see."""

from __future__ import annotations

import numpy as np
import pytest

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
    start 16-48 bytes into a line."""
    m = caten.loads(SRC, runtime="llvm")
    a = np.zeros(1 << 19, np.float32)
    held = [m.f(a + i) for i in range(4)]  # pooled ones, then fresh ones past the pool's size
    for i, y in enumerate(held):
        assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous and y.flags.writeable
        np.testing.assert_array_equal(y, i + 1)


def test_the_pool_never_hands_out_memory_still_in_view():
    """Property: under any interleaving of takes, views of what was taken, and releases, every
    array or view still held keeps the value written when it was taken (an output handed out
    twice while visible would be overwritten by the second use)."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from caten.run.module import OutputPool

    shapes = [(1 << 18,), (512, 1024), (64,)]  # two pooled (1 MiB, 2 MiB) and a small one
    views = [lambda a: a, lambda a: a.reshape(-1)[3:], lambda a: a.T, lambda a: a[..., ::2], lambda a: a.view(np.int32)]
    step = st.one_of(st.tuples(st.just("take"), st.integers(0, len(shapes) - 1)),
                     st.tuples(st.just("view"), st.integers(0, 63), st.integers(0, len(views) - 1)),
                     st.tuples(st.just("drop"), st.integers(0, 63)))

    @hypothesis.settings(max_examples=400, deadline=None)
    @hypothesis.given(st.lists(step, max_size=40))
    def run(steps):
        pool = OutputPool()
        held: list[tuple[np.ndarray, int]] = []  # (array or view, the value its memory holds)
        for n, op in enumerate(steps):
            if op[0] == "take":
                shape = shapes[op[1]]
                a = pool.take(shape, np.dtype(np.float32))
                a[...] = n
                held.append((a, n))
            elif op[0] == "view" and held:
                a, v = held[op[1] % len(held)]
                held.append((views[op[2]](a), v))
            elif op[0] == "drop" and held:
                held.pop(op[1] % len(held))
            for a, v in held:
                want = np.float32(v).view(np.int32) if a.dtype == np.int32 else v
                assert (a == want).all()

    run()
