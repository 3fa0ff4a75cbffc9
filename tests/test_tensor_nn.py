"""`caten.nn` against torch.nn: forward values and gradients from the same weights, default
initialisation statistics, state_dict round trips both ways, and load errors.

Each layer is built in torch, its state_dict loaded into caten's layer of the same arguments,
and both run on the same input; the gradients of the input and of every parameter under the
same cotangent must agree too (torch's autograd is the oracle for caten's value-and-grad).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import caten
from caten import Tensor, nn

torch = pytest.importorskip("torch")


def _check(tm, cm, x: np.ndarray, rtol=1e-5, atol=1e-5, grads=True):
    """Forward and the input's and parameters' gradients under a random cotangent."""
    cm.load_state_dict(tm.state_dict())
    tx = torch.from_numpy(x.copy()).requires_grad_(x.dtype.kind == "f" and grads)
    ty = tm(tx)
    cx = Tensor(x, requires_grad=x.dtype.kind == "f" and grads)
    cy = cm(cx)
    assert cy.shape == tuple(ty.shape)
    np.testing.assert_allclose(cy.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    if not grads:
        return
    cot = np.random.default_rng(5).standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(cot)).sum().backward()
    (cy * Tensor(cot)).sum().backward()
    if tx.requires_grad:
        np.testing.assert_allclose(cx.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
    tp = dict(tm.named_parameters())
    cps = dict(cm.named_parameters())
    assert sorted(tp) == sorted(cps)
    for k, p in cps.items():
        np.testing.assert_allclose(p.grad.numpy(), tp[k].grad.numpy(), rtol=rtol, atol=atol, err_msg=k)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    _check(torch.nn.Linear(7, 4, bias=bias), nn.Linear(7, 4, bias=bias), _x(3, 7))


def test_linear_on_3d_input():
    _check(torch.nn.Linear(5, 6), nn.Linear(5, 6), _x(2, 3, 5))


CONVS = [
    dict(),
    dict(stride=2),
    dict(padding=1),
    dict(padding=(2, 1), stride=(1, 2)),
    dict(dilation=2, padding=2),
    dict(groups=2),
    dict(groups=4, stride=2, padding=1),
    dict(bias=False),
]


@pytest.mark.parametrize("kw", CONVS, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "plain" for c in CONVS])
def test_conv2d(kw):
    _check(torch.nn.Conv2d(4, 8, 3, **kw), nn.Conv2d(4, 8, 3, **kw), _x(2, 4, 9, 8), rtol=1e-4, atol=1e-4)


def test_conv2d_rectangular_kernel():
    _check(torch.nn.Conv2d(3, 2, (3, 1), padding=(1, 0)), nn.Conv2d(3, 2, (3, 1), padding=(1, 0)), _x(1, 3, 6, 5),
           rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [[6], [4, 6]], ids=["1-dim", "2-dims"])
def test_layernorm(shape):
    tm, cm = torch.nn.LayerNorm(shape), nn.LayerNorm(shape)
    with torch.no_grad():  # not the default ones/zeros, so the affine part is tested
        tm.weight.copy_(torch.from_numpy(_x(*shape, seed=1)))
        tm.bias.copy_(torch.from_numpy(_x(*shape, seed=2)))
    _check(tm, cm, _x(3, 4, 6), rtol=1e-4, atol=1e-5)


def test_layernorm_without_affine():
    _check(torch.nn.LayerNorm(6, elementwise_affine=False), nn.LayerNorm(6, elementwise_affine=False), _x(3, 6),
           rtol=1e-4, atol=1e-5)
    assert list(nn.LayerNorm(6, elementwise_affine=False).parameters()) == []


def test_embedding():
    idx = np.array([[1, 0, 4], [4, 4, 2]], np.int64)
    _check(torch.nn.Embedding(5, 3), nn.Embedding(5, 3), idx)


def test_sequential_and_activations():
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                             torch.nn.Conv2d(4, 4, 3), torch.nn.GELU(), torch.nn.AvgPool2d(2, stride=1),
                             torch.nn.Flatten(), torch.nn.Linear(4 * 1 * 2, 3), torch.nn.Tanh(), torch.nn.Sigmoid())
    cm = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3), nn.GELU(),
                       nn.AvgPool2d(2, stride=1), nn.Flatten(), nn.Linear(4 * 1 * 2, 3), nn.Tanh(), nn.Sigmoid())
    _check(tm, cm, _x(2, 2, 8, 10), rtol=1e-4, atol=1e-5)


def test_pooling_with_padding():
    _check(torch.nn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(3, stride=2, padding=1), _x(1, 2, 7, 6))
    _check(torch.nn.AvgPool2d(3, stride=2, padding=1), nn.AvgPool2d(3, stride=2, padding=1), _x(1, 2, 7, 6))


def test_sequential_indexing():
    cm = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert len(cm) == 3
    assert isinstance(cm[0], nn.Linear) and cm[-1] is cm[2]
    head = cm[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2 and head[0] is cm[0]
    x = _x(5, 3)
    np.testing.assert_allclose(cm[2](head(Tensor(x))).numpy(), cm(Tensor(x)).numpy(), rtol=1e-6)
    assert [k for k, _ in cm.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError):
        cm[3]


def test_dropout_train_and_eval():
    d = nn.Dropout(0.5)
    x = Tensor(np.ones((64, 64), np.float32))
    caten.manual_seed(3)
    y = d(x).numpy()
    kept = y != 0
    assert 0.4 < kept.mean() < 0.6
    np.testing.assert_array_equal(y[kept], 2.0)  # 1 / (1 - p), as torch
    assert not np.array_equal(d(x).numpy(), y)  # the stream advances
    caten.manual_seed(3)
    np.testing.assert_array_equal(d(x).numpy(), y)  # reproducible
    m = nn.Sequential(nn.Linear(64, 64), d)
    assert m.eval() is m and not d.training
    out = m(x).numpy()
    np.testing.assert_array_equal(out, m[0](x).numpy())  # the identity in eval mode
    m.train()
    assert d.training and m.training


def test_default_initialisation_statistics():
    """torch's defaults: Linear and Conv2d U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (weights and
    biases), Embedding N(0, 1), LayerNorm ones and zeros."""
    caten.manual_seed(0)
    lin = nn.Linear(400, 300)
    b = 1 / math.sqrt(400)
    w = lin.weight.numpy()
    assert w.shape == (300, 400) and w.dtype == np.float32
    assert np.abs(w).max() <= b and np.abs(w).max() > 0.99 * b
    assert abs(w.std() - b / math.sqrt(3)) < 0.01 * b and abs(w.mean()) < 0.01 * b
    tw = torch.nn.Linear(400, 300).weight.detach().numpy()
    assert abs(w.std() - tw.std()) < 0.02 * tw.std()
    assert np.abs(lin.bias.numpy()).max() <= b
    conv = nn.Conv2d(16, 32, 3, groups=2)
    cb = 1 / math.sqrt(8 * 9)
    cw = conv.weight.numpy()
    assert cw.shape == (32, 8, 3, 3) and np.abs(cw).max() <= cb and abs(cw.std() - cb / math.sqrt(3)) < 0.05 * cb
    emb = nn.Embedding(1000, 64).weight.numpy()
    assert abs(emb.std() - 1) < 0.02 and abs(emb.mean()) < 0.02
    ln = nn.LayerNorm([3, 4])
    assert (ln.weight.numpy() == 1).all() and (ln.bias.numpy() == 0).all() and ln.weight.shape == (3, 4)
    assert all(p.requires_grad for p in (lin.weight, lin.bias, conv.weight, ln.weight))
    caten.manual_seed(0)
    np.testing.assert_array_equal(nn.Linear(400, 300).weight.numpy(), w)  # manual_seed reseeds it


def _net():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3), nn.LayerNorm(3))


def _tnet():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(2 * 4 * 4, 3), torch.nn.LayerNorm(3))


def test_state_dict_round_trips(tmp_path):
    a, b = _net(), _net()
    sd = a.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "3.weight", "3.bias", "4.weight", "4.bias"]
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    a.save(tmp_path / "m.npz")
    b.load_state_dict(str(tmp_path / "m.npz"))
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(v, sd[k])
    b.load_state_dict(tmp_path / "m.npz")  # a Path too
    x = _x(2, 1, 6, 6)
    np.testing.assert_array_equal(a(Tensor(x)).numpy(), b(Tensor(x)).numpy())
    # caten -> torch: the same names and layouts
    t = _tnet()
    t.load_state_dict({k: torch.from_numpy(v) for k, v in a.state_dict().items()})
    np.testing.assert_allclose(t(torch.from_numpy(x)).detach().numpy(), a(Tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    # the state_dict is a copy: changing it leaves the module alone
    sd["0.weight"][...] = 7
    assert not (a.state_dict()["0.weight"] == 7).any()


def test_load_state_dict_errors(tmp_path):
    m = _net()
    sd = m.state_dict()
    with pytest.raises(caten.Error, match="missing.*3.bias"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "3.bias"})
    with pytest.raises(caten.Error, match="unexpected.*5.weight"):
        m.load_state_dict({**sd, "5.weight": np.zeros(3, np.float32)})
    with pytest.raises(caten.Error, match="0.weight.*shape"):
        m.load_state_dict({**sd, "0.weight": np.zeros((2, 1, 3, 4), np.float32)})
    with pytest.raises(caten.Error):
        m.load_state_dict(str(tmp_path / "absent.npz"))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(caten.Error):
        m.load_state_dict(str(tmp_path / "bad.npz"))
    # a failed load changes nothing
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, sd[k])


def test_loaded_values_are_copies():
    m = nn.Linear(2, 2)
    w = np.ones((2, 2), np.float32)
    m.load_state_dict({"weight": w, "bias": np.zeros(2, np.float32)})
    w[...] = 5
    assert (m.weight.numpy() == 1).all()


def test_bad_layer_arguments():
    with pytest.raises(caten.Error):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(caten.Error):
        nn.Linear(3, 4)(Tensor(_x(2, 5))).numpy()


def test_shared_parameter_listed_once():
    lin = nn.Linear(3, 3)
    m = nn.Sequential(lin, nn.ReLU(), lin)
    assert [k for k, _ in m.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(m.parameters())) == 2


def test_conv2d_same_and_valid_padding():
    _check(torch.nn.Conv2d(2, 3, 3, padding="same", dilation=2), nn.Conv2d(2, 3, 3, padding="same", dilation=2),
           _x(1, 2, 7, 6), rtol=1e-4, atol=1e-5)
    _check(torch.nn.Conv2d(2, 3, (1, 3), padding="valid"), nn.Conv2d(2, 3, (1, 3), padding="valid"), _x(1, 2, 5, 6),
           rtol=1e-4, atol=1e-5)
    for bad in [dict(padding="same", stride=2), dict(padding="full")]:
        with pytest.raises(caten.Error):
            nn.Conv2d(2, 3, 3, **bad)
    # an even kernel extent pads one more on the right, as torch's
    _check(torch.nn.Conv2d(2, 3, 2, padding="same"), nn.Conv2d(2, 3, 2, padding="same"), _x(1, 2, 5, 6),
           rtol=1e-4, atol=1e-5)


def test_flatten_dims_and_dropout_p():
    x = _x(2, 3, 4, 5)
    for a, b in [(1, -1), (0, 1), (1, 2), (2, 3)]:
        np.testing.assert_array_equal(nn.Flatten(a, b)(Tensor(x)).numpy(),
                                      torch.nn.Flatten(a, b)(torch.from_numpy(x)).numpy())
    for p in (-0.1, 1.5):
        with pytest.raises(caten.Error):
            nn.Dropout(p)


def test_frozen_parameters_and_buffers_stay_in_the_state_dict():
    """torch's state_dict and named_parameters: frozen parameters too (an optimizer skips them:
    they get no gradient)."""
    m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    m[0].requires_grad_(False)
    assert [k for k, p in m.named_parameters() if p.requires_grad] == ["1.weight", "1.bias"]
    assert [k for k, _ in m.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert list(m.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    m2 = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    m2.load_state_dict(m.state_dict())
    np.testing.assert_array_equal(m2[0].weight.numpy(), m[0].weight.numpy())
    assert m2[0].weight.requires_grad and not m[0].weight.requires_grad
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    t[0].requires_grad_(False)
    assert list(t.state_dict()) == list(m.state_dict())
    assert [k for k, _ in t.named_parameters()] == [k for k, _ in m.named_parameters()]
    assert list(torch.nn.LayerNorm(3, elementwise_affine=False).state_dict()) == \
        list(nn.LayerNorm(3, elementwise_affine=False).state_dict()) == []


def test_module_lists_are_named_as_torch():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = [nn.Linear(2, 2), nn.Linear(2, 2)]
            self.scale = Tensor(np.ones(2, np.float32))  # a buffer: state, not a parameter
            self._cache = Tensor(np.zeros(2, np.float32))  # private: neither

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x * self.scale

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
            self.register_buffer("scale", torch.ones(2))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x * self.scale

    n, t = Net(), TNet()
    assert list(n.state_dict()) == list(t.state_dict()) == ["scale", "blocks.0.weight", "blocks.0.bias",
                                                            "blocks.1.weight", "blocks.1.bias"]
    assert [k for k, _ in n.named_parameters()] == [k for k, _ in t.named_parameters()]
    with torch.no_grad():
        t.scale.copy_(torch.tensor([2.0, 3.0]))
    _check(t, n, _x(3, 2))
    assert len(list(nn.Sequential(n, n).modules())) == 4  # shared modules once


def test_module_to_a_runtime():
    m = nn.Sequential(nn.Embedding(5, 3), nn.LayerNorm(3, elementwise_affine=False)).to("c")
    t = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.LayerNorm(3, elementwise_affine=False))
    m.load_state_dict(t.state_dict())
    y = m([[0, 4], [2, 2]])
    assert y.runtime == "c"
    np.testing.assert_allclose(y.numpy(), t(torch.tensor([[0, 4], [2, 2]])).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_index_checks_and_module_without_forward():
    e = nn.Embedding(3, 2)
    for bad in ([5], [-1], np.array([0.5])):
        with pytest.raises(caten.Error):
            e(bad)
    assert e(np.array([2, 0], np.int32)).shape == (2, 2)
    assert e([]).shape == (0, 2)
    with pytest.raises(caten.Error):
        nn.Module()(Tensor(np.ones(1, np.float32)))
