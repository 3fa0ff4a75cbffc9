"""`caten.optim` against torch.optim: the same MLP, the same weights, the same batches.

A small MLP (two Linear layers with biases, plus a bias-free one) is built in torch and in caten
with identical weights (torch's state_dict loaded into caten's module); each optimizer then takes
5 steps of forward, backward and update on both, and every parameter must agree after every
step. Also: zero_grad's two modes, a parameter without a gradient is left alone (and its state
is not created), and a change of a param group's lr (or a second group) takes effect.
"""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import Tensor, nn, optim

torch = pytest.importorskip("torch")

STEPS = 5
RUNTIMES = ["numpy", "llvm", "c"]


def _models(seed: int = 0):
    torch.manual_seed(seed)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5),
                             torch.nn.Tanh(), torch.nn.Linear(5, 3, bias=False))
    cm = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 3, bias=False))
    cm.load_state_dict(tm.state_dict())
    return tm, cm


def _batches():
    r = np.random.default_rng(1)
    return [(r.standard_normal((4, 6)).astype(np.float32), r.standard_normal((4, 3)).astype(np.float32))
            for _ in range(STEPS)]


def _compare(tm, cm, rtol=2e-5, atol=2e-6):
    for (k, tp), (k2, cp) in zip(tm.named_parameters(), cm.named_parameters()):
        assert k == k2
        np.testing.assert_allclose(cp.numpy(), tp.detach().numpy(), rtol=rtol, atol=atol, err_msg=k)


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.05, nesterov=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.2, betas=(0.85, 0.995))),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{'-'.join(k for k in kw if k != 'lr') or 'plain'}"
                                                for n, kw in CASES])
def test_matches_torch_over_five_steps(name, kw):
    tm, cm = _models()
    topt = getattr(torch.optim, name)(tm.parameters(), **kw)
    copt = getattr(optim, name)(cm.parameters(), **kw)
    for x, y in _batches():
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        tl.backward()
        topt.step()
        copt.zero_grad()
        cl = ((cm(Tensor(x)) - Tensor(y)) ** 2).mean()
        cl.backward()
        copt.step()
        assert cl.item() == pytest.approx(tl.item(), rel=1e-5)
        _compare(tm, cm)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_adam_on_each_runtime(runtime):
    """The same 5 Adam steps on numpy, llvm and c (weights and batches created on that runtime)."""
    tm, _ = _models()
    cm = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 3, bias=False))
    cm.to(runtime).load_state_dict(tm.state_dict())
    topt, copt = torch.optim.Adam(tm.parameters(), lr=0.01), optim.Adam(cm.parameters(), lr=0.01)
    for x, y in _batches():
        topt.zero_grad()
        ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean().backward()
        topt.step()
        copt.zero_grad()
        ((cm(Tensor(x, runtime=runtime)) - Tensor(y, runtime=runtime)) ** 2).mean().backward()
        copt.step()
    _compare(tm, cm)
    assert all(p.runtime == runtime for p in cm.parameters())


def _one_step(cm, copt, x, y):
    copt.zero_grad()
    x, y = (v if isinstance(v, Tensor) else Tensor(v) for v in (x, y))
    ((cm(x) - y) ** 2).mean().backward()
    copt.step()


def test_zero_grad_modes():
    _, cm = _models()
    copt = optim.SGD(cm.parameters(), lr=0.1)
    x, y = _batches()[0]
    ((cm(Tensor(x)) - Tensor(y)) ** 2).mean().backward()
    g1 = [p.grad.numpy().copy() for p in cm.parameters()]
    ((cm(Tensor(x)) - Tensor(y)) ** 2).mean().backward()  # gradients accumulate, as torch's
    for p, g in zip(cm.parameters(), g1):
        np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-6)
    copt.zero_grad(set_to_none=False)
    for p in cm.parameters():
        assert p.grad is not None and p.grad.shape == p.shape
        assert not p.grad.numpy().any()
    ((cm(Tensor(x)) - Tensor(y)) ** 2).mean().backward()
    for p, g in zip(cm.parameters(), g1):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-6)
    copt.zero_grad()
    assert all(p.grad is None for p in cm.parameters())


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_parameter_without_grad_is_skipped(name, jitted):
    """A parameter the loss does not reach keeps its value (and gets no state); torch agrees
    on the others, eagerly and with the step under caten.jit."""
    tm, cm = _models()
    extra_t = torch.nn.Parameter(torch.ones(3))
    extra_c = Tensor(np.ones(3, np.float32), requires_grad=True)
    kw = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.01)
    topt = getattr(torch.optim, name)(list(tm.parameters()) + [extra_t], **kw)
    copt = getattr(optim, name)(list(cm.parameters()) + [extra_c], **kw)
    step = caten.jit(lambda x, y: _one_step(cm, copt, x, y)) if jitted else \
        (lambda x, y: _one_step(cm, copt, x, y))
    for x, y in _batches()[:3]:
        topt.zero_grad()
        ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean().backward()
        topt.step()
        step(x, y)
    assert extra_c.grad is None
    np.testing.assert_array_equal(extra_c.numpy(), np.ones(3, np.float32))
    assert id(extra_c) not in copt.state or not copt.state[id(extra_c)]
    _compare(tm, cm)


def test_param_group_lr_change_takes_effect():
    tm, cm = _models()
    topt, copt = torch.optim.Adam(tm.parameters(), lr=0.01), optim.Adam(cm.parameters(), lr=0.01)
    programs = []
    for i, (x, y) in enumerate(_batches()):
        for g in topt.param_groups:
            g["lr"] = 0.01 * (i + 1)
        for g in copt.param_groups:
            g["lr"] = 0.01 * (i + 1)
        topt.zero_grad()
        ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean().backward()
        topt.step()
        _one_step(cm, copt, x, y)
        programs.append(caten.tensor.stats()["programs"])
        _compare(tm, cm)
    assert programs[-1] == programs[1], "a new lr is an input of the step's program, not a recompile"


def test_two_param_groups():
    """torch's list-of-dicts form: each group with its own lr and momentum."""
    tm, cm = _models()
    tp, cp = list(tm.parameters()), list(cm.parameters())
    topt = torch.optim.SGD([{"params": tp[:2]}, {"params": tp[2:], "lr": 0.3, "momentum": 0.5}], lr=0.1)
    copt = optim.SGD([{"params": cp[:2]}, {"params": cp[2:], "lr": 0.3, "momentum": 0.5}], lr=0.1)
    assert [g["lr"] for g in copt.param_groups] == [0.1, 0.3]
    for x, y in _batches()[:3]:
        topt.zero_grad()
        ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean().backward()
        topt.step()
        _one_step(cm, copt, x, y)
    _compare(tm, cm)


def test_bad_arguments():
    with pytest.raises(caten.Error):
        optim.SGD([], lr=0.1)
    with pytest.raises(caten.Error):
        optim.SGD([Tensor(np.ones(3, np.float32))], lr=0.1)  # no requires_grad
    with pytest.raises(caten.Error):
        optim.SGD([Tensor(np.ones(3, np.float32), requires_grad=True)], lr=0.1, nesterov=True)
    with pytest.raises(caten.Error):
        optim.Adam([{"lr": 0.1}])  # a group without params


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=-1.0)), ("SGD", dict(lr=0.1, momentum=-0.5)),
                                     ("Adam", dict(betas=(0.9, 1.0))), ("AdamW", dict(eps=-1e-8)),
                                     ("Adam", dict(weight_decay=-0.1))])
def test_invalid_hyperparameters_as_torch(name, kw):
    p = Tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(ValueError):
        getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(3))], **kw)
    with pytest.raises(caten.Error):
        getattr(optim, name)([p], **kw)
    with pytest.raises(caten.Error):  # a param group's own value is checked too
        getattr(optim, name)([{"params": [p], **kw}])


def test_lr_given_as_a_tensor():
    tm, cm = _models()
    topt = torch.optim.SGD(tm.parameters(), lr=torch.tensor(0.1), momentum=0.9)
    copt = optim.SGD(cm.parameters(), lr=Tensor(np.array(0.1, np.float32)), momentum=0.9)
    for x, y in _batches()[:2]:
        topt.zero_grad()
        ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean().backward()
        topt.step()
        _one_step(cm, copt, x, y)
    _compare(tm, cm)
