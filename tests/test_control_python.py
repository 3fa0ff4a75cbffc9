"""caten.while_loop / fori_loop / scan / cond (JAX's functions over caten.Tensor) against numpy
and torch: solvers that run until converged, pytree states, runtime trip counts, nesting, one
program under caten.jit, gradients against torch autograd of the unrolled loop, and diagnostics."""

import numpy as np
import pytest

import caten
from caten import Tensor

RUNTIMES = ["numpy", "llvm", "c"]
R = np.random.RandomState(7)
A = np.array([2.0, 9.0, 0.5, 30.0], np.float32)
M0 = R.randn(4, 4).astype(np.float32)
M = (M0 @ M0.T + 4 * np.eye(4)).astype(np.float32)
X1 = R.randn(5, 3).astype(np.float32)
X2 = R.randn(5).astype(np.float32)


def programs(a, m, x1, x2, n):
    """Every form in one traced program: Newton's sqrt, bisection for a cube root, power
    iteration, a fori over a runtime bound, pytree and reversed scans, nested loops, cond, and a
    cond inside a while (the Collatz sequence of 9n)."""
    sq, k = caten.while_loop(lambda s: (s[1] < 100) & ((s[0] * s[0] - a).abs().max() > 1e-5),
                             lambda s: (0.5 * (s[0] + a / s[0]), s[1] + 1), (a, Tensor(np.array(0))))

    def bisect(s):
        lo, hi = s
        mid = (lo + hi) * 0.5
        up = mid * mid * mid > a
        return caten.where(up, lo, mid), caten.where(up, mid, hi)
    lo, hi = caten.while_loop(lambda s: (s[1] - s[0]).max() > 1e-5, bisect, (a * 0, a + 1))

    def power(s):
        v, _, it = s
        w = m @ v
        w = w / (w * w).sum().sqrt()
        return w, (w - v).abs().max(), it + 1
    v, _, _ = caten.while_loop(lambda s: (s[2] < 500) & (s[1] > 1e-7), power,
                               (a * 0 + 1, Tensor(np.array(1.0, np.float32)), Tensor(np.array(0))))
    lam = (v * (m @ v)).sum()
    fo = caten.fori_loop(2, n, lambda i, s: s * 0.5 + i.float(), x2)

    def step(c, x):
        h = (c["h"] * x[1] + x[0]).tanh()
        return {"h": h, "k": c["k"] + 1}, (h * 2, None)
    c, (ys, none) = caten.scan(step, {"h": a[:3], "k": Tensor(np.array(0, np.int32))}, (x1, x2))
    rc, rys = caten.scan(lambda c, x: (c * 0.9 + x, c.sum()), a[:3], x1, reverse=True)
    nc, nys = caten.scan(lambda c, _: (caten.fori_loop(0, 3, lambda i, s: s + c, c), c), a, None, length=3)
    big = caten.cond(a.sum() > 10, lambda u, w: (u * 2, w - 1), lambda u, w: (u - 1, w * 3), a, x2)
    small = caten.cond(a.sum() > 1e6, lambda u: u * 2, lambda u: u - 1, a)
    _, collatz = caten.while_loop(lambda s: s[0] != 1, lambda s: (
        caten.cond(s[0] % 2 == 0, lambda v: v // 2, lambda v: 3 * v + 1, s[0]), s[1] + 1), (n * 9, n * 0))
    return (sq, k, lo, lam, fo, c["h"], c["k"], ys, rc, rys, nc, nys) + big + (small, collatz)


def oracle(n):
    a = A.astype(np.float64)
    lam = np.linalg.eigvalsh(M.astype(np.float64)).max()
    fo = X2.copy()
    for i in range(2, n):
        fo = fo * np.float32(0.5) + np.float32(i)
    h, ys = A[:3].copy(), []
    for x1, x2 in zip(X1, X2):
        h = np.tanh(h * x2 + x1)
        ys.append(h * 2)
    rc, rys = A[:3].copy(), [None] * 5
    for t in range(4, -1, -1):
        rys[t] = rc.sum()
        rc = rc * np.float32(0.9) + X1[t]
    nc, nys = A.copy(), []
    for _ in range(3):
        nys.append(nc)
        nc = nc * 4
    v, collatz = 9 * n, 0
    while v != 1:
        v, collatz = (v // 2 if v % 2 == 0 else 3 * v + 1), collatz + 1
    return [np.sqrt(a), None, np.cbrt(a), lam, fo, h, 5, np.stack(ys), rc, np.array(rys), nc, np.stack(nys),
            A * 2, X2 - 1, A - 1, collatz]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_forms_in_one_jit_program(runtime):
    caten.tensor.set_default_runtime(runtime)
    try:
        f = caten.jit(programs)
        args = [Tensor(v, runtime=runtime) for v in (A, M, X1, X2)]
        before = caten.tensor.stats()["programs"]
        for n in (7, 2):
            got = [o.numpy() for o in f(*args, Tensor(np.array(n), runtime=runtime))]
            want = oracle(n)
            for j, (g, w) in enumerate(zip(got, want)):
                if w is None:
                    continue
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"result {j}")
            assert 3 <= got[1] <= 10  # Newton's step count: converged, not capped
        assert caten.tensor.stats()["programs"] - before == 1  # one program, whatever the trip counts
    finally:
        caten.tensor.set_default_runtime("numpy")


def test_eager_and_torch_oracles():
    torch = pytest.importorskip("torch")
    a = Tensor(A)
    for big in (True, False):
        p = a.sum() > (10 if big else 1e6)
        got = caten.cond(p, lambda u: u.sin(), lambda u: u.cos(), a).numpy()
        want = torch.tensor(A).sin() if bool(p.item()) else torch.tensor(A).cos()  # (torch.cond: test_control_torch)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert caten.cond(True, lambda u: u + 1, lambda u: u - 1, a).numpy()[0] == 3.0  # a Python bool picks now
    i32 = Tensor(np.array(4, np.int32))
    s = caten.fori_loop(Tensor(np.array(1, np.int32)), i32, lambda i, s: s + i, Tensor(np.array(0, np.int32)))
    assert s.dtype == "i32" and s.item() == 6
    c, ys = caten.scan(lambda c, x: (c, None), a, Tensor(X1))
    np.testing.assert_array_equal(c.numpy(), A)
    assert ys is None


def _grad_program(w, xs, n_fori):
    c, ys = caten.scan(lambda c, x: ((c * w + x).tanh(), (c * x).sum()), w * 0 + 1, xs)
    f = caten.fori_loop(0, n_fori, lambda i, s: (s * w).sin() + 0.1, w)
    b = caten.cond(w.sum() > 0, lambda u: (u * u).sum(), lambda u: u.exp().sum(), w)
    return c.sum() + ys.sum() + f.sum() + b


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_gradients_vs_torch_unrolled(runtime):
    torch = pytest.importorskip("torch")
    w0 = np.array([0.5, -0.3, 0.8], np.float32)
    w = Tensor(w0, requires_grad=True, runtime=runtime)
    xs = Tensor(X1, runtime=runtime)
    _grad_program(w, xs, 4).backward()
    wt = torch.tensor(w0, requires_grad=True)
    c, total = torch.ones(3) * 1, 0
    for x in torch.tensor(X1):
        total = total + (c * x).sum()
        c = (c * wt + x).tanh()
    s = wt
    for _ in range(4):
        s = (s * wt).sin() + 0.1
    b = (wt * wt).sum() if wt.sum() > 0 else wt.exp().sum()
    (c.sum() + total + s.sum() + b).backward()
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_diagnostics():
    a = Tensor(A)
    with pytest.raises(caten.Error, match="state value 0 starts as f32"):
        caten.while_loop(lambda s: s.sum() > 0, lambda s: s.double(), a)
    with pytest.raises(caten.Error, match="state value 0 starts as f32"):
        caten.fori_loop(0, 3, lambda i, s: s[:2], a)
    with pytest.raises(caten.Error, match="rank-0 bool"):
        caten.while_loop(lambda s: s > 0, lambda s: s - 1, a)
    with pytest.raises(caten.Error, match="predicate must be a rank-0"):
        caten.cond(a > 0, lambda u: u, lambda u: u, a)
    with pytest.raises(caten.Error, match="true_fun gives"):
        caten.cond(a.sum() > 0, lambda u: u, lambda u: u.sum(), a)
    with pytest.raises(caten.Error, match="loop bound"):
        caten.fori_loop(0, Tensor(np.array(3.0, np.float32)), lambda i, s: s, a)
    with pytest.raises(caten.Error, match="same leading length"):
        caten.scan(lambda c, x: (c, x), a, (Tensor(X1), Tensor(A)))
    with pytest.raises(caten.Error, match="structure"):
        caten.scan(lambda c, x: ((c, c), x), a, Tensor(X2))
    w = Tensor(A[:2], requires_grad=True)
    with pytest.raises(caten.Error, match="reverse mode through a loop whose trip count"):  # as JAX
        caten.while_loop(lambda s: s.sum() < 100, lambda s: s * w + 1, w).sum().backward()
