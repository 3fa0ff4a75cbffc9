"""caten's complex tensors (planar pairs of real Tensors) against torch's complex tensors."""

import numpy as np
import pytest

import caten
from caten.tensor.complex import ComplexTensor, from_numpy
from caten.tensor.realize import realize
from caten.tensor.tensor import Tensor

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _numpy_default():
    caten.tensor.set_default_runtime("numpy")


def _pair(shape, seed, dt=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(
        np.complex128 if dt == np.float64 else np.complex64)


def _close(got, ref, tol=1e-12):
    ref = ref.detach().resolve_conj().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_arithmetic_and_elementwise():
    a, b = _pair((3, 4), 0), _pair((4,), 1)
    r = np.random.default_rng(2).standard_normal((3, 4))
    A, B, R = from_numpy(a), from_numpy(b), Tensor(r)
    ta, tb, tr = torch.tensor(a), torch.tensor(b), torch.tensor(r)
    cases = [(A + B, ta + tb), (A - R, ta - tr), (R - A, tr - ta), (A * B, ta * tb), (A / B, ta / tb),
             (2.5 / A, 2.5 / ta), (A * (1 - 2j), ta * (1 - 2j)), ((0.5 + 1j) - A, (0.5 + 1j) - ta),
             (A * R, ta * tr), (A / 3, ta / 3), (-A, -ta), (A.conj(), ta.conj()), (A.exp(), ta.exp()),
             (A.abs(), ta.abs()), (A.angle(), ta.angle()), (A @ B, ta @ tb),
             (A.reshape(4, 3), ta.reshape(4, 3)), (A.view(12), ta.view(12)), (A.permute(1, 0), ta.permute(1, 0)),
             (A.transpose(0, 1), ta.transpose(0, 1)), (A[1:, ::2], ta[1:, ::2]), (A[0], ta[0]),
             (A.sum(1), ta.sum(1)), (A.mean(), ta.mean()), (A.sum(), ta.sum()),
             (caten.view_as_real(A), torch.view_as_real(ta)),
             (caten.view_as_complex(caten.view_as_real(A)), ta),
             (caten.polar(R.abs(), R), torch.polar(tr.abs(), tr)),
             (caten.complex(R, R * 2), torch.complex(tr, tr * 2)), (caten.real(A), ta.real),
             (caten.imag(A), ta.imag)]
    outs = [c for c, _ in cases]
    parts = [p for o in outs for p in ((o.real, o.imag) if isinstance(o, ComplexTensor) else (o,))]
    realize([p.node for p in parts], "numpy")
    for got, ref in cases:
        _close(got.numpy(), ref)
    assert A.dtype == "complex128" and from_numpy(_pair(2, 0, np.float32)).numpy().dtype == np.complex64
    assert A.shape == (3, 4) and A.size(1) == 4 and A.dim() == 2 and A.is_complex() and not R.is_complex()
    assert A.numel() == 12 and len(A) == 3


def test_gradients_of_real_losses():
    a, b = _pair((2, 5), 3), _pair((5, 3), 4)
    A, B = from_numpy(a, requires_grad=True), from_numpy(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    loss = (A @ B).abs().sum() + (A * A.conj()).real.sum() + (A.exp() / (B[:2, :1] + 3)).angle().sum()
    tl = (ta @ tb).abs().sum() + (ta * ta.conj()).real.sum() + (ta.exp() / (tb[:2, :1] + 3)).angle().sum()
    loss.backward()
    tl.backward()
    _close(loss.numpy(), tl)
    _close(A.grad.numpy(), ta.grad)
    _close(B.grad.numpy(), tb.grad)


def test_tensor_of_a_complex_array():
    a = _pair((2, 3), 5, np.float32)
    z = caten.tensor(a, requires_grad=True)
    assert isinstance(z, ComplexTensor) and z.dtype == "complex64" and z.requires_grad
    np.testing.assert_array_equal(z.numpy(), a)
    (z * z).real.sum().backward()
    _close(z.grad.numpy(), 2 * a.conj(), 1e-6)


def test_abs_gradient_at_zero_is_zero():
    A = from_numpy(np.zeros(3, np.complex64), requires_grad=True)
    A.abs().sum().backward()
    np.testing.assert_array_equal(A.grad.numpy(), np.zeros(3, np.complex64))


def test_refusals():
    x = Tensor(np.ones(3, np.float32))
    with pytest.raises(caten.Error, match="both parts"):
        caten.complex(x, x.double())
    with pytest.raises(caten.Error, match="last dimension"):
        caten.view_as_complex(Tensor(np.ones((2, 3))))
    with pytest.raises(caten.Error, match="non-complex"):
        caten.imag(x)
    with pytest.raises(caten.Error, match="complex16|f16"):
        ComplexTensor(x.half(), x.half())
