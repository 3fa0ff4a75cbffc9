"""torch_math's names (isposinf, isneginf, sgn, moveaxis, ger) against torch, on numpy, llvm and c."""

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")

RUNTIMES = ["numpy", "llvm", "c"]
SPECIAL = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan], np.float64)


def _data(shape, dtype):
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("i"):
        return rng.integers(-5, 6, shape).astype(dtype)
    return np.resize(SPECIAL, shape).astype(dtype) if shape != (0,) else np.zeros(shape, dtype)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(3, 5, 7), (0,), (2, 0, 3)])
def test_elementwise(runtime, dtype, shape):
    x = _data(shape, dtype)
    t, c = torch.from_numpy(x), caten.Tensor(x, runtime=runtime)
    for name in ("isposinf", "isneginf") + (() if dtype == "bool" else ("sgn",)):
        got = getattr(c, name)().numpy()
        want = getattr(torch, name)(t).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_sgn_grad(runtime):
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    c = caten.Tensor(x, runtime=runtime, requires_grad=True)
    c.sgn().sum().backward()
    t = torch.tensor(x, requires_grad=True)
    t.sgn().sum().backward()
    np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy(force=True))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_moveaxis_ger(runtime):
    x = np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 5, 7)
    c = caten.Tensor(x, runtime=runtime)
    np.testing.assert_array_equal(c.moveaxis(0, -1).numpy(), torch.from_numpy(x).moveaxis(0, -1).numpy())
    np.testing.assert_array_equal(caten.moveaxis(c, [0, 1], [2, 0]).numpy(),
                                  torch.moveaxis(torch.from_numpy(x), [0, 1], [2, 0]).numpy())
    a, b = np.arange(3, dtype=np.float64), np.arange(5, dtype=np.float64) - 2
    np.testing.assert_array_equal(caten.Tensor(a, runtime=runtime).ger(caten.Tensor(b, runtime=runtime)).numpy(),
                                  torch.ger(torch.from_numpy(a), torch.from_numpy(b)).numpy())
