"""Issue #39's wrong numbers: each must give torch's answer or a caten Error, never a silent value."""

import numpy as np
import pytest

from caten import Tensor
from caten.errors import Error

torch = pytest.importorskip("torch")

X = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("idx", [
    lambda: np.array([0.0, 1.0]), lambda: Tensor(np.array([0.0, 2.0])), lambda: Tensor(np.array([1.0]), dtype="f32"),
])
def test_float_index_is_an_error(idx):
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        torch.tensor(X)[torch.tensor([0.0, 1.0])]
    with pytest.raises(Error, match="tensors used as indices must be long, int, byte or bool"):
        Tensor(X)[idx()]


@pytest.mark.parametrize("idx", [[3], [-4], [0, 7], (slice(None), [4]), (slice(None), [-5]), np.array([[0], [3]])])
def test_out_of_range_index_raises_as_torch(idx):
    tidx = tuple(torch.tensor(i) if isinstance(i, (list, np.ndarray)) else i for i in idx) \
        if isinstance(idx, tuple) else torch.tensor(idx)
    with pytest.raises(IndexError):
        torch.tensor(X)[tidx]
    with pytest.raises(Error, match="out of bounds"):
        Tensor(X)[idx]
    if not isinstance(idx, tuple):
        with pytest.raises(Error, match="out of bounds"):
            Tensor(X)[Tensor(np.asarray(idx, dtype=np.int64))]


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("idx", [[2, -3, 0], (slice(None), [-1, 0]), np.array([[1], [-1]]), []])
def test_in_range_indices_still_match_torch(runtime, idx):
    tidx = tuple(torch.tensor(i) if isinstance(i, list) else i for i in idx) if isinstance(idx, tuple) \
        else torch.tensor(np.asarray(idx, dtype=np.int64))
    want = torch.tensor(X)[tidx].numpy()
    got = Tensor(X, runtime=runtime)[idx].numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_pow_gradients_match_torch_on_a_grid(runtime):
    a = np.array([-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0])
    b = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0])
    A, B = (g.reshape(-1) for g in np.meshgrid(a, b, indexing="ij"))
    ta, tb = torch.tensor(A, requires_grad=True), torch.tensor(B, requires_grad=True)
    (ta ** tb).sum().backward()
    ca, cb = Tensor(A, runtime=runtime, requires_grad=True), Tensor(B, runtime=runtime, requires_grad=True)
    (ca ** cb).sum().backward()
    np.testing.assert_allclose(ca.grad.numpy(), ta.grad.numpy(), rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(cb.grad.numpy(), tb.grad.numpy(), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 4)])
@pytest.mark.parametrize("f", [
    lambda x: x[1:2].sum(), lambda x: x.reshape(-1).sum(), lambda x: x.flip(1).sum(),
    lambda x: (x[:, None] * 2).sum(), lambda x: x.transpose(0, 1)[1:].sum(),
])
def test_backward_through_a_zero_size_dim_gives_an_empty_grad(shape, f):
    t = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    f(t).backward()
    x = Tensor(np.zeros(shape), requires_grad=True)
    f(x).backward()
    assert x.grad.shape == tuple(t.grad.shape)
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


EXACT = """(composite f ((X{f32}[N]) -> (Y{f32}[(/ N 2)]))
  (slice X [0 (/ N 2)]))
"""


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_exact_dim_division_is_checked_at_the_call(runtime):
    import caten
    mod = caten.loads(EXACT, runtime=runtime)
    np.testing.assert_array_equal(mod.f(np.arange(4, dtype=np.float32)), np.arange(2, dtype=np.float32))
    with pytest.raises(Error, match=r"\(/ N 2\): N divisible by 2 \(<string>:2:15"):
        mod.f(np.arange(5, dtype=np.float32))


def test_exact_dim_division_of_a_bound_dim_is_a_source_error():
    import caten
    with pytest.raises(Error, match="5 is not divisible by 2") as ei:
        caten.loads(EXACT, runtime="numpy", defines={"N": 5}).f(np.arange(5, dtype=np.float32))
    assert ei.value.span is not None and (ei.value.span.line, ei.value.span.col) == (2, 15)


@pytest.mark.parametrize("n,msg", [(2 ** 63, r"a dim must lie in \[0, 2\*\*63\)"),
                                   (10 ** 23, r"a dim must lie in \[0, 2\*\*63\)"), (-3, "cannot be negative")])
def test_a_define_outside_int64_dims_is_refused(n, msg):
    import caten
    src = "(composite f ((X{f32}[N]) -> (Y{f32}[]))\n  (sum X))\n"
    with pytest.raises(Error, match=msg):
        caten.loads(src, runtime="numpy", defines={"N": n}).f(np.arange(5, dtype=np.float32))
    assert caten.loads(src, runtime="numpy", defines={"N": 5}).f(np.arange(5, dtype=np.float32)) == 10


@pytest.mark.parametrize("src", [
    "(composite f ((X{f32}[N M]) -> (Y{f32}[]))\n  (sum X))\n",
    "(composite f ((X{f32}[M]) -> (Y{f32}[]))\n  (sum (expand X [4611686018427387904 M])))\n",
])
def test_an_element_count_past_int64_is_refused(src):
    import caten
    with pytest.raises(Error, match="more than an int64 index can count"):
        caten.loads(src, runtime="numpy", defines={"N": 2 ** 62, "M": 4}).f(np.zeros(4, np.float32))


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_an_element_count_past_int64_with_a_symbolic_dim_fails_the_call(runtime):
    """[2**62 M] with M known only at the call: it compiled and ran a kernel over wrapped indices (a
    call that never returned on llvm); the count is now a call-time constraint."""
    import caten
    m = caten.loads("(composite f ((X{f32}[M]) -> (Y{f32}[]))\n  (sum (expand X [4611686018427387904 M])))\n",
                    runtime=runtime)
    with pytest.raises(Error, match=r"\[4611686018427387904 M\] has fewer than 2\*\*63 elements"):
        m.f(np.zeros(4, np.float32))
    m = caten.loads("(composite f ((X{f32}[M]) -> (Y{f32}[]))\n  (sum (expand X [100000 M])))\n", runtime=runtime)
    assert m.f(np.ones(3, np.float32)) == 300000


def test_addmm_with_beta_zero_ignores_the_input_as_torch():
    import caten
    torch = pytest.importorskip("torch")
    i = np.full((2, 3), np.nan, np.float32)
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((4, 3), np.float32)
    got = caten.addmm(caten.Tensor(i), caten.Tensor(a), caten.Tensor(b), beta=0, alpha=2).numpy()
    want = torch.addmm(torch.tensor(i), torch.tensor(a), torch.tensor(b), beta=0, alpha=2).numpy()
    np.testing.assert_array_equal(got, want)


def test_isclose_of_infinities_as_torch():
    import caten
    torch = pytest.importorskip("torch")
    v = np.array([np.inf, -np.inf, 0.0, 0.0, 1.0, np.nan, np.inf], np.float32)
    w = np.array([-np.inf, np.inf, np.inf, -np.inf, 1.0000001, np.nan, np.inf], np.float32)
    for equal_nan in (False, True):
        np.testing.assert_array_equal(caten.Tensor(v).isclose(caten.Tensor(w), equal_nan=equal_nan).numpy(),
                                      torch.tensor(v).isclose(torch.tensor(w), equal_nan=equal_nan).numpy())


@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_relu_gradient_at_zero_and_nan_as_torch(runtime):
    import caten
    torch = pytest.importorskip("torch")
    x = np.array([-1.0, -0.0, 0.0, 1.0, np.nan], np.float32)
    for f, g in ((lambda t: t.relu(), lambda t: t.relu()),
                 (caten.nn.functional.relu, torch.nn.functional.relu)):
        c = caten.Tensor(x, requires_grad=True, runtime=runtime)
        f(c).sum().backward()
        t = torch.tensor(x, requires_grad=True)
        g(t).sum().backward()
        np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())


def test_cummax_of_a_scalar_keeps_a_scalar_index():
    import caten
    torch = pytest.importorskip("torch")
    for name in ("cummax", "cummin"):
        got = getattr(caten.Tensor(np.float32(2.0)), name)(0)
        want = getattr(torch.tensor(2.0), name)(0)
        assert got.indices.shape == tuple(want.indices.shape) == () and got.values.shape == ()
