"""nn.functional.hardshrink/softshrink and nn.Hardshrink/Softshrink against torch: values,
gradients, nan and the band's edges, on numpy, llvm and c."""

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")

EDGE = [np.nan, 0.5, -0.5, 0.7, -0.7, np.inf, -np.inf, 0.0, -0.0, 0.3, -0.2, 2.0]


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 0)])
@pytest.mark.parametrize("name,lambd", [("hardshrink", 0.5), ("softshrink", 0.5), ("softshrink", 0.25)])
def test_shrink(runtime, dtype, shape, name, lambd):
    x = np.resize(np.array(EDGE, dtype), shape)
    c = caten.Tensor(x, runtime=runtime, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    y = getattr(caten.nn.functional, name)(c, lambd)
    want = getattr(torch.nn.functional, name)(t, lambd)
    got = y.numpy()
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, want.detach().numpy())
    # a zero's sign is torch's scalar loop's (a * 0) there; its vectorized loop gives +0.0
    nz = got != 0
    np.testing.assert_array_equal(np.signbit(got[nz]), np.signbit(want.detach().numpy()[nz]))
    y.sum().backward()
    want.sum().backward()
    # at nan torch's own gradient is 1 in its scalar loop (its formula, grad * !(|x| <= lambd))
    # and 0 in its vectorized one, depending on where the element falls: caten follows the formula
    nan = np.isnan(x)
    np.testing.assert_array_equal(c.grad.numpy()[~nan], t.grad.numpy()[~nan])
    assert (c.grad.numpy()[nan] == 1).all()


def test_modules():
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    for name, args in (("Hardshrink", ()), ("Softshrink", (0.3,))):
        m, tm = getattr(caten.nn, name)(*args), getattr(torch.nn, name)(*args)
        assert repr(m) == repr(tm)
        np.testing.assert_array_equal(m(caten.Tensor(x)).numpy(), tm(torch.from_numpy(x)).numpy())
