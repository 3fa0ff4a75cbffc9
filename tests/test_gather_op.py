"""The principal GATHER (issue 39): data read at data-dependent coordinates, O(index size) rather
than a one-hot over the axis. Its semantics (a negative index counts from the end; an index outside
[-n, n), or a position past the data's other axes, reads 0) on every runtime against numpy, with the
bounds checker on; its gradient adds repeated indices; `take` compiles to it; and a source-level
`VIEW :shrink` past a symbolic axis is refused at the call instead of reading outside the buffer."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

SRC = """
(composite rows ((X{f32}[M N] I{i64}[K N]) -> (Y{f32}[K N])) (GATHER X I :axis 0))
(composite cols ((X{f32}[M N] I{i32}[M K]) -> (Y{f32}[M K])) (GATHER X I :axis 1))
(composite wide ((X{f32}[M N] I{i64}[K W]) -> (Y{f32}[K W])) (GATHER X I :axis 0))
(composite emb ((W{f32}[V D] I{i64}[T]) -> (Y{f32}[T D])) (take W I))
"""


def gather_ref(x: np.ndarray, i: np.ndarray, axis: int) -> np.ndarray:
    """numpy's take_along_axis with GATHER's edges, element by element."""
    out = np.zeros(i.shape, x.dtype)
    n = x.shape[axis]
    for p in np.ndindex(*i.shape):
        j = int(i[p]) + (n if i[p] < 0 else 0)
        q = list(p)
        q[axis] = j
        if 0 <= j < n and all(c < s for c, s in zip(q, x.shape)):
            out[p] = x[tuple(q)]
    return out


RNG = np.random.default_rng(7)
X = RNG.standard_normal((5, 4)).astype(np.float32)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_gather_edges_match_the_reference(runtime):
    m = caten.loads(SRC, runtime=runtime, check_bounds=runtime != "numpy")
    i0 = np.array([[0, 4, -1, 2], [5, -6, 3, 3], [1, 1, 1, 1]], np.int64)  # past both ends, negatives, repeats
    np.testing.assert_array_equal(m.rows(X, i0), gather_ref(X, i0, 0))
    i1 = np.array([[3, 0], [-4, 9], [2, 2], [0, -1], [1, -5]], np.int32)
    np.testing.assert_array_equal(m.cols(X, i1), gather_ref(X, i1, 1))
    i2 = RNG.integers(-6, 6, size=(3, 7))  # the index's extent passes the data's second axis
    np.testing.assert_array_equal(m.wide(X, i2), gather_ref(X, i2, 0))


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_take_compiles_to_a_gather_not_a_one_hot(runtime):
    m = caten.loads(SRC, runtime=runtime)
    w = RNG.standard_normal((1000, 8)).astype(np.float32)
    idx = np.array([999, 0, 5, 5, -1], np.int64)
    np.testing.assert_array_equal(m.emb(w, idx), w[idx])
    ir = caten.loads(SRC, runtime=runtime).emb.emit("ir") if hasattr(caten.loads(SRC, runtime=runtime).emb, "emit") \
        else None
    if ir is not None:
        assert "GATHER" in ir and "REDUCE" not in ir


def test_gradient_adds_repeated_indices():
    w = caten.Tensor(X, requires_grad=True)
    idx = caten.Tensor(np.array([[1, 1, 4, 0], [1, 3, 4, 0]], np.int64))
    y = w.gather(0, idx)
    (y * y).sum().backward()
    want = np.zeros_like(X)
    for p in np.ndindex(2, 4):
        want[idx.numpy()[p], p[1]] += 2 * X[idx.numpy()[p], p[1]]
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6)


def test_gather_index_must_be_integer():
    with pytest.raises(Error, match="index must be an integer"):
        caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (GATHER X X :axis 0))\n", runtime="numpy").f(
            np.zeros(3, np.float32))


@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_shrink_past_a_symbolic_axis_is_refused_at_the_call(runtime):
    m = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[5])) (VIEW X :shrink [[0 5]]))\n", runtime=runtime)
    np.testing.assert_array_equal(m.f(np.arange(7, dtype=np.float32)), np.arange(5, dtype=np.float32))
    with pytest.raises(Error, match="constraint"):
        m.f(np.ones(1, np.float32))  # it read 4 floats past the buffer


def test_static_shrink_outside_the_axis_is_a_source_error():
    with pytest.raises(Error, match="outside an axis of size 3"):
        caten.loads("(composite f ((X{f32}[3]) -> (Y{f32}[5])) (VIEW X :shrink [[0 5]]))\n", runtime="numpy").f(
            np.zeros(3, np.float32))
