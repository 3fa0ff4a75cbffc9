"""caten.nn.LSTM / GRU against torch's with torch's state_dict loaded: projections, layers,
directions, batch_first, unbatched inputs, given initial states, several lengths; each layer
and direction is one scan (the program does not grow with the length); training steps under
caten.jit vs torch's (gradients through the loop)."""

import numpy as np
import pytest

import caten
from caten import Tensor, nn
from caten.tensor.emit import Printer

torch = pytest.importorskip("torch")

RUNTIMES = ["numpy", "llvm"]  # (the c runtime runs these scans in test_control_torch: test time)


@pytest.fixture
def runtime(request):
    caten.tensor.set_default_runtime(request.param)
    yield request.param
    caten.tensor.set_default_runtime("numpy")


def _pair(kind, **kw):
    torch.manual_seed(0)
    t = getattr(torch.nn, kind)(3, 5, **kw).double().float()
    c = getattr(nn, kind)(3, 5, **kw)
    c.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    assert list(c.state_dict()) == list(t.state_dict()) and repr(c) == repr(t)
    return t, c


CASES = [("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)), ("GRU", dict(batch_first=True)),
         ("LSTM", dict(bias=False)), ("GRU", dict(num_layers=2, bidirectional=True))]


def _x(steps, kw, batch=2, seed=0):
    shape = (batch, steps, 3) if kw.get("batch_first") else (steps, batch, 3)
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _flat(out):
    o, h = out
    return [o] + (list(h) if isinstance(h, tuple) else [h])


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_against_torch(runtime):
    """The cases in one jitted program per length: all of them at lengths 1, 7 and 40 on numpy,
    the first two at length 7 on the compiled runtimes (compile time)."""
    cases = CASES if runtime == "numpy" else CASES[:2]
    pairs = [_pair(k, **kw) for k, kw in cases]
    f = caten.jit(lambda *xs: [v for (_, c), x in zip(pairs, xs) for v in _flat(c(x))])
    for steps in ((1, 7, 40) if runtime == "numpy" else (7,)):
        xs = [_x(steps, kw) for _, kw in cases]
        got = f(*[Tensor(x) for x in xs])
        want = [v.detach().numpy() for (t, _), x in zip(pairs, xs) for v in _flat(t(torch.from_numpy(x)))]
        assert len(got) == len(want)
        for j, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-5, err_msg=f"steps {steps} result {j}")


def test_initial_states_unbatched_and_one_scan_each():
    t, c = _pair("LSTM", num_layers=2, bidirectional=True)
    x = _x(6, {}, batch=1)[:, 0]
    r = np.random.RandomState(3)
    h0, c0 = r.randn(4, 5).astype(np.float32), r.randn(4, 5).astype(np.float32)
    got = _flat(c(Tensor(x), (Tensor(h0), Tensor(c0))))
    want = _flat(t(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0))))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-4, atol=1e-5)
    sizes = []
    for steps in (50, 60):
        text, _ = Printer().program("f", [v.node for v in _flat(c(Tensor(_x(steps, {}))))])
        assert text.count("(scan ") == 4  # 2 layers x 2 directions, whatever the length
        sizes.append(len(text))
    assert sizes[0] == sizes[1]  # the program does not grow with the length
    tg, cg = _pair("GRU")
    with pytest.raises(caten.Error, match="initial state"):
        cg(Tensor(_x(4, {})), Tensor(np.zeros((2, 2, 5), np.float32)))
    with pytest.raises(caten.Error, match="proj_size"):
        nn.GRU(3, 5, proj_size=2)


def test_training_steps_under_jit():
    """SGD steps of an LSTM with a projection as one jitted program (forward scan, its gradient
    through the loop, the update) track torch's, every parameter."""
    t, c = _pair("LSTM", proj_size=3)
    opt, copt = torch.optim.SGD(t.parameters(), lr=0.5), caten.optim.SGD(c.parameters(), lr=0.5)
    x = _x(5, {})

    @caten.jit
    def step(x):
        copt.zero_grad()
        loss = (c(x)[0] ** 2).mean()
        loss.backward()
        copt.step()
        return loss
    for _ in range(3):
        opt.zero_grad()
        loss = (t(torch.from_numpy(x))[0] ** 2).mean()
        loss.backward()
        opt.step()
        np.testing.assert_allclose(step(Tensor(x)).item(), loss.item(), rtol=1e-5)
    for (k, cp), tp in zip(c.named_parameters(), t.parameters()):
        np.testing.assert_allclose(cp.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=k)
