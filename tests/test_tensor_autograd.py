"""`Tensor.backward` against torch.autograd (LANGUAGE.md section 12): an MLP (gelu, cross-entropy)
and a CNN (conv2d with stride and padding, max-pool, linear), gradient accumulation, no_grad,
detach, `gradient=`, the errors, differentiating through realized values, and graph reuse.

The reference is torch in f64 on the same f32 inputs, so it carries no rounding of its own. Bound:
a gradient entry is a sum of at most n = 144 f32 products, through erf/exp/log (64 ULPs each in
the conformance suite); Higham & Mary's probabilistic bound for the sum, 8 sqrt(n) u max|x| with
u = 2**-24, is ~6e-6 of the scale, plus 64 ULPs (7.6e-6) for the math: we allow
|got - want| <= 2e-5 * max|want| per tensor (measured: below 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import Tensor, functional
from caten.tensor import set_default_runtime, stats

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")

REL = 2e-5


@pytest.fixture(params=["llvm", "c", "numpy"])
def runtime(request):
    """The default runtime of the Tensors a test makes."""
    set_default_runtime(request.param)
    yield request.param
    set_default_runtime("llvm")


def close(got, want):
    """`got` (a caten Tensor or array) matches `want` (a torch tensor) within REL of its scale."""
    g = np.asarray(got.numpy() if isinstance(got, Tensor) else got, dtype=np.float64)
    w = want.detach().double().numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    scale = max(float(np.abs(w).max()), 1e-30)
    err = float(np.abs(g - w).max())
    assert err <= REL * scale, f"max error {err:.3g} > {REL} * {scale:.3g}"


def params(rng, shapes):
    """The same values as caten leaves (f32) and torch leaves (f64)."""
    arrs = [(rng.standard_normal(s) * (1.0 / np.sqrt(s[0] if len(s) > 1 else 4))).astype(np.float32) for s in shapes]
    return ([Tensor(a, requires_grad=True) for a in arrs],
            [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrs])


def onehot(labels, k):
    return np.eye(k, dtype=np.float32)[labels]


# an MLP -------------------------------------------------------------------------------------------
def mlp_data(seed=0, n=16, d=20, h=32, k=10):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, k, size=n)
    cp, tp = params(rng, [(d, h), (h,), (h, k), (k,)])
    return x, y, cp, tp


def mlp_caten(x, y, p, realize_hidden=False):
    w1, b1, w2, b2 = p
    h = functional.gelu(Tensor(x) @ w1 + b1)
    if realize_hidden:
        h.realize()
        assert h.node.value is not None
    return (h @ w2 + b2).cross_entropy(Tensor(onehot(y, w2.shape[1])))


def mlp_torch(x, y, p):
    w1, b1, w2, b2 = p
    h = F.gelu(torch.tensor(x, dtype=torch.float64) @ w1 + b1)
    return F.cross_entropy(h @ w2 + b2, torch.tensor(y))


def test_mlp_gradients_match_torch(runtime):
    x, y, cp, tp = mlp_data()
    loss = mlp_caten(x, y, cp)
    assert loss.requires_grad and loss.shape == () and loss.runtime == runtime
    loss.backward()
    want = mlp_torch(x, y, tp)
    want.backward()
    close(loss, want)  # backward also gives the loss its value
    for c, t in zip(cp, tp):
        assert c.grad.shape == c.shape and c.grad.dtype == "f32" and not c.grad.requires_grad
        close(c.grad, t.grad)


def test_realized_intermediate_is_still_differentiated_through():
    x, y, cp, tp = mlp_data(seed=1)
    loss = mlp_caten(x, y, cp, realize_hidden=True)
    loss.backward()
    mlp_torch(x, y, tp).backward()
    for c, t in zip(cp, tp):  # w1, b1 lie behind the realized hidden layer
        close(c.grad, t.grad)


# a CNN --------------------------------------------------------------------------------------------
def test_cnn_gradients_match_torch(runtime):
    """conv2d (stride 2, padding 1, bias) -> tanh -> max_pool2d -> conv2d (stride 1, no padding) ->
    flatten -> linear -> cross-entropy. tanh, not relu, before the pool: no ties in a window, whose
    gradient torch gives to one element and another rule may share."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 12, 12)).astype(np.float32)
    y = rng.integers(0, 5, size=3)
    cp, tp = params(rng, [(4, 2, 3, 3), (4,), (6, 4, 2, 2), (6 * 2 * 2, 5), (5,)])
    k1, c1, k2, w, b = cp
    h = Tensor(x).conv2d(k1, c1, stride=2, padding=1).tanh().max_pool2d(kernel=2)
    h = functional.conv2d(h, k2)
    loss = functional.linear(h.flatten(1), w, b).cross_entropy(Tensor(onehot(y, 5)))
    loss.backward()
    tk1, tc1, tk2, tw, tb = tp
    th = F.max_pool2d(torch.tanh(F.conv2d(torch.tensor(x, dtype=torch.float64), tk1, tc1, stride=2, padding=1)), 2)
    th = F.conv2d(th, tk2)
    want = F.cross_entropy(th.flatten(1) @ tw + tb, torch.tensor(y))
    want.backward()
    assert h.shape == tuple(th.shape)
    close(loss, want)
    for c, t in zip(cp, tp):
        close(c.grad, t.grad)


# accumulation, no_grad, detach, gradient= ---------------------------------------------------------
def test_gradients_accumulate_over_two_backward_calls():
    x, y, cp, tp = mlp_data(seed=3)
    x2, y2, _, _ = mlp_data(seed=4)
    mlp_caten(x, y, cp).backward()
    mlp_caten(x2, y2, cp).backward()
    mlp_torch(x, y, tp).backward()
    mlp_torch(x2, y2, tp).backward()
    for c, t in zip(cp, tp):
        close(c.grad, t.grad)
    for c in cp:  # zeroing, as an optimizer's zero_grad does, starts over
        c.grad = None
    mlp_caten(x, y, cp).backward()
    [t.grad.zero_() for t in tp]
    mlp_torch(x, y, tp).backward()
    close(cp[0].grad, tp[0].grad)


def test_no_grad_records_nothing():
    w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with caten.no_grad():
        y = (w * 2).sum()
        with caten.enable_grad():
            z = (w * 3).sum()
    assert not y.requires_grad and z.requires_grad
    with pytest.raises(caten.Error, match="does not require gradients"):
        y.backward()
    z.backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 3, np.float32))


def test_detach_stops_the_gradient():
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    w = Tensor(a, requires_grad=True)
    d = w.detach()
    assert not d.requires_grad
    loss = (d * w).sum() + (w * w).sum()  # d/dw: d + 2w = 3a, where torch's (w*w).sum() alone gives 2a
    loss.backward()
    tw = torch.tensor(a, requires_grad=True)
    ((tw.detach() * tw).sum() + (tw * tw).sum()).backward()
    close(w.grad, tw.grad)
    np.testing.assert_array_equal(w.grad.numpy(), 3 * a)
    u = Tensor(a, requires_grad=True)  # a lazy (unrealized) value detached
    ((u * 2).detach() * u).sum().backward()
    np.testing.assert_array_equal(u.grad.numpy(), 2 * a)


def test_backward_of_a_non_scalar_with_a_gradient():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    g = rng.standard_normal((3, 4)).astype(np.float32)
    w, v = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    y = (w * v).tanh()
    y.backward(gradient=g)
    tw, tv = torch.tensor(a, dtype=torch.float64, requires_grad=True), torch.tensor(b, dtype=torch.float64,
                                                                                     requires_grad=True)
    (tw * tv).tanh().backward(gradient=torch.tensor(g, dtype=torch.float64))
    close(w.grad, tw.grad)
    close(v.grad, tv.grad)  # broadcast: summed over the rows
    u = Tensor(a, requires_grad=True)  # one leaf: vjp gives the gradient itself
    (u * 3).backward(gradient=Tensor(g))
    close(u.grad, torch.tensor(g * 3))


def test_backward_errors():
    w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(caten.Error, match="needs a gradient"):
        (w * 2).backward()
    with pytest.raises(caten.Error, match="gradient of shape"):
        (w * 2).backward(gradient=np.ones((3, 2), np.float32))
    with pytest.raises(caten.Error, match="does not require gradients"):
        Tensor(np.ones(3, np.float32)).sum().backward()
    loss = (Tensor(np.ones(3, np.float32), requires_grad=True) * 2).sum()  # its only leaf is gone
    assert loss.requires_grad
    with pytest.raises(caten.Error, match="no leaf tensor"):
        loss.backward()
    assert w.grad is None  # nothing was accumulated by the failed calls


def test_requires_grad_needs_a_float_tensor():
    with pytest.raises(caten.Error, match="floating-point"):
        Tensor(np.array([1, 2], np.int32), requires_grad=True)
    t = Tensor(np.array([1, 2], np.int64))
    with pytest.raises(caten.Error, match="floating-point"):
        t.requires_grad = True
    tracked = Tensor([1.0, 2.0], requires_grad=True) * 2
    with pytest.raises(caten.Error, match="leaf"):  # a tracked value cannot stop requiring gradients
        tracked.requires_grad = False
    u = Tensor([1.0, 2.0]) * 2  # a value without history is a leaf, as torch's
    u.requires_grad = True
    assert u.is_leaf and tracked.requires_grad
    f = Tensor([1.0, 2.0])
    f.requires_grad = True
    (f * f).sum().backward()
    np.testing.assert_array_equal(f.grad.numpy(), [2.0, 4.0])
    i = Tensor(np.array([1, 2], np.int32))  # an integer result of a float leaf carries no gradient
    assert not (f.cast("i32") + i).requires_grad


# graph reuse ---------------------------------------------------------------------------------------
def test_a_training_loop_compiles_its_programs_once():
    """Three identical SGD steps (forward, backward, update, zero): every program is built in the
    first step and reused after; the parameters follow torch's SGD."""
    x, y, cp, tp = mlp_data(seed=6)
    lr = 0.5
    topt = torch.optim.SGD(tp, lr=lr)
    counts = []
    losses = []
    for _ in range(3):
        loss = mlp_caten(x, y, cp)
        loss.backward()
        losses.append(loss.item())
        with caten.no_grad():
            for p in cp:
                p.assign(p - lr * p.grad)
                p.grad = None
        counts.append(stats()["programs"])
        topt.zero_grad()
        mlp_torch(x, y, tp).backward()
        topt.step()
    assert counts[0] == counts[1] == counts[2], counts
    assert losses[2] < losses[0]
    for c, t in zip(cp, tp):
        close(c, t)
