"""torch's advanced indexing on caten.Tensor (issue 39): several index tensors, bool masks anywhere,
ints and None beside them, the index dims placed where torch puts them; values and gradients against
torch, out-of-range indices raise in eager code; `t[idx] = v` with torch's order of the index dims."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

torch = pytest.importorskip("torch")

X = np.arange(60, dtype=np.float32).reshape(3, 4, 5) / 7
CASES = {
    "two arrays split by a slice": lambda m, x: x[m([0, 2]), :, m([1, 3])],
    "two adjacent arrays": lambda m, x: x[:, m([0, 2]), m([1, 3])],
    "int then slice then array": lambda m, x: x[0, :, m([1, 2])],
    "arrays beside a slice": lambda m, x: x[m([0]), 1:3, m([2])],
    "bool mask on axis 1": lambda m, x: x[:, m([True, False, True, False])],
    "None and two arrays": lambda m, x: x[None, m([0, 1]), m([1, 2])],
    "ellipsis and negative": lambda m, x: x[..., m([1, -2])],
    "int and two arrays": lambda m, x: x[1, m([0, 2]), m([1, 3])],
    "array int array": lambda m, x: x[m([1]), 0, m([1, 3])],
    "broadcast arrays": lambda m, x: x[m([[0], [2]]), m([1, 3, 0])],
    "2-d mask on the last axes": lambda m, x: x[:, m([[True, False, True, False, True]] * 4)],
    "arrays around an ellipsis": lambda m, x: x[m([2, -1]), ..., m([0, 4])],
    "2-d array between slices": lambda m, x: x[1:, m([[1, 0]]), 2:4],
    "mask and array": lambda m, x: x[m([True, False, True]), :, m([1, 2])],
}


# every case on numpy, a representative subset on llvm
RUNS = [(n, "numpy") for n in CASES] + [(n, "llvm") for n in ("two arrays split by a slice", "broadcast arrays",
                                                                "mask and array")]


@pytest.mark.parametrize("name,runtime", RUNS)
def test_getitem_matches_torch(name, runtime):
    f = CASES[name]
    t = torch.tensor(X, requires_grad=True)
    c = caten.Tensor(X, requires_grad=True, runtime=runtime)
    ty = f(torch.tensor, t)
    cy = f(lambda v: caten.Tensor(np.asarray(v), runtime=runtime), c)
    assert cy.shape == tuple(ty.shape)
    np.testing.assert_array_equal(cy.numpy(), ty.detach().numpy())
    (ty * ty).sum().backward()
    (cy * cy).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_out_of_range_component_raises():
    c = caten.Tensor(X)
    with pytest.raises(Error, match="out of bounds"):
        c[caten.tensor([0, 3]), caten.tensor([0, 0])]
    with pytest.raises(Error, match="long, int"):
        c[caten.tensor([0, 1]), caten.tensor([0.0, 1.0])]


def test_setitem_uses_torch_order_of_index_dims():
    t, c = torch.zeros(3, 4, 5), caten.zeros(3, 4, 5)
    t[0, :, [1, 2]] = torch.arange(8.0).reshape(4, 2)  # numpy would want a [2, 4] value here
    c[0, :, [1, 2]] = caten.arange(8.0).reshape(4, 2)
    t[[0, 1], [1, 2]] = 7.0
    c[[0, 1], [1, 2]] = 7.0
    t[t > 6] = -1.0
    c[c > 6] = -1.0
    np.testing.assert_array_equal(c.numpy(), t.numpy())


@pytest.mark.parametrize("sl", [np.s_[::-1], np.s_[:, ::-2], np.s_[3:0:-1, 5:1:-3], np.s_[-1::-2, 1], np.s_[10:-10:-1],
                                np.s_[0:3:-1], np.s_[None, 2::-1], np.s_[..., ::-3]])
def test_negative_step_slices_as_numpy(sl):
    x = np.arange(24.0).reshape(4, 6)
    c = caten.Tensor(x, requires_grad=True)
    y = c[sl]
    np.testing.assert_array_equal(y.numpy(), x[sl])
    (y * y).sum().backward()
    g = np.zeros_like(x)
    g[sl] = 2 * x[sl]
    np.testing.assert_array_equal(c.grad.numpy(), g)


def test_torch_habits_of_index_errors_and_nested_tuples():
    x = np.arange(12.0).reshape(3, 4)
    c, t = caten.Tensor(x), torch.tensor(x)
    for f in (lambda a: a[((0,),)], lambda a: a[(((0,),),)], lambda a: a[(1, (1, 1))]):
        np.testing.assert_array_equal(f(c).numpy(), f(t).numpy())
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        c[3]
    with pytest.raises(RuntimeError):  # torch's class for a shape that does not fit
        c.reshape(5)
    assert c.type() == t.type() and c.type(caten.int32).dtype == "i32"
    s = caten.Tensor(np.float32(2.5))
    assert float(s.cumsum(0).numpy()) == 2.5 and float(s.cumprod(-1).numpy()) == 2.5


@pytest.mark.parametrize("shape,args", [((8,), (0, 2, 1)), ((8,), (0, 7, 3)), ((3, 3, 3), (2, 2, 8)),
                                        ((3, 3, 3), (1, 0, 8)), ((2, 3, 3, 2, 5), (-1, 2, 2)), ((), (0, 1, 1))])
def test_tensor_unfold_windows_as_torch(shape, args):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t, c = torch.tensor(x, requires_grad=True), caten.Tensor(x, requires_grad=True)
    r, y = t.unfold(*args), c.unfold(*args)
    assert y.shape == tuple(r.shape)
    np.testing.assert_array_equal(y.numpy(), r.detach().numpy())
    (r * r).sum().backward()
    (y * y).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("shape,kw", [((2, 3, 4), dict(offset=1, dim1=0, dim2=2)), ((2, 3, 4), dict(offset=-1, dim1=2,
                                                                                                   dim2=1)),
                                      ((3, 5), {}), ((3, 5), dict(offset=-5)), ((2, 3, 4), dict(dim1=-1, dim2=0))])
def test_diagonal_of_any_two_dims_as_torch(shape, kw):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    t, c = torch.tensor(x, requires_grad=True), caten.Tensor(x, requires_grad=True)
    r, y = t.diagonal(**kw), c.diagonal(**kw)
    assert y.shape == tuple(r.shape)
    np.testing.assert_array_equal(y.numpy(), r.detach().numpy())
    (r * r).sum().backward()
    (y * y).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), rtol=1e-6)
