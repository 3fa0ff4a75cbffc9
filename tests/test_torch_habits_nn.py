"""torch habits in caten.nn and caten.optim, each against real torch: loss modules (every
reduction and option), activation modules, normalisations, pools, Module habits (names, counts,
modes, state_dict, repr, apply, init), optimizers over several steps, and lr schedules.

Pure semantics run on the numpy runtime (fast); a training loop runs on llvm where codegen matters.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import caten
from caten import Tensor, nn, optim
from caten.tensor import state

torch = pytest.importorskip("torch")
RT = "numpy"


@pytest.fixture(autouse=True)
def _numpy_runtime():
    """Tensors made without runtime= run on numpy here; the default comes back after."""
    old = state.RUNTIME[0]
    state.set_default_runtime(RT)
    yield
    state.set_default_runtime(old)


def _x(*shape, seed=0, lo=None, hi=None):
    rng = np.random.default_rng(seed)
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def _agree(cfn, tfn, *arrays, grad=(0,), rtol=1e-5, atol=1e-6):
    """cfn on caten Tensors and tfn on torch tensors give the same value, and the same
    gradients of the float inputs listed in `grad` under a random cotangent."""
    cs = [Tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    ts = [torch.from_numpy(a.copy()).requires_grad_(i in grad) for i, a in enumerate(arrays)]
    cy, ty = cfn(*cs), tfn(*ts)
    assert cy.shape == tuple(ty.shape)
    np.testing.assert_allclose(cy.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    cot = np.random.default_rng(9).standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(cot)).sum().backward()
    (cy * Tensor(cot)).sum().backward()
    for i in grad:
        np.testing.assert_allclose(cs[i].grad.numpy(), ts[i].grad.numpy(), rtol=rtol, atol=atol, err_msg=f"grad {i}")


def _pair(tm, cm):
    """caten module `cm` with torch module `tm`'s weights."""
    cm.load_state_dict(tm.state_dict())
    return cm


# losses -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss", "HuberLoss", "SmoothL1Loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pointwise_losses(name, reduction):
    a, b = _x(4, 3, seed=1) * 2, _x(4, 3, seed=2)
    _agree(lambda x, y: getattr(nn, name)(reduction=reduction)(x, y),
           lambda x, y: getattr(torch.nn, name)(reduction=reduction)(x, y), a, b, grad=(0, 1))


def test_huber_delta_and_smooth_l1_beta():
    a, b = _x(5, 4, seed=1) * 3, _x(5, 4, seed=2)
    _agree(lambda x, y: nn.HuberLoss(delta=0.5)(x, y), lambda x, y: torch.nn.HuberLoss(delta=0.5)(x, y), a, b)
    _agree(lambda x, y: nn.SmoothL1Loss(beta=2.0)(x, y), lambda x, y: torch.nn.SmoothL1Loss(beta=2.0)(x, y), a, b)


def _ce(cargs, targ, logits, target, **kw):
    tw = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    cw = {k: Tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    _agree(lambda x, t: getattr(nn, cargs)(**cw)(x, t), lambda x, t: getattr(torch.nn, targ)(**tw)(x, t),
           logits, target)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_class_indices(reduction):
    _ce("CrossEntropyLoss", "CrossEntropyLoss", _x(6, 5), np.array([0, 4, 2, 2, 1, 3]), reduction=reduction)


W5 = np.array([0.5, 2.0, 1.0, 0.1, 3.0], np.float32)


@pytest.mark.parametrize("kw", [dict(weight=W5), dict(ignore_index=2), dict(label_smoothing=0.2),
                                dict(weight=W5, ignore_index=1, label_smoothing=0.1),
                                dict(weight=W5, label_smoothing=0.3, reduction="sum"),
                                dict(ignore_index=4, label_smoothing=0.25, reduction="none")])
def test_cross_entropy_options(kw):
    _ce("CrossEntropyLoss", "CrossEntropyLoss", _x(6, 5, seed=3), np.array([0, 4, 2, 2, 1, 3]), **kw)


@pytest.mark.parametrize("kw", [dict(), dict(label_smoothing=0.1), dict(weight=W5, reduction="sum"),
                                dict(weight=W5, label_smoothing=0.2, reduction="none")])
def test_cross_entropy_probability_targets(kw):
    p = np.random.default_rng(4).dirichlet(np.ones(5), size=6).astype(np.float32)
    _ce("CrossEntropyLoss", "CrossEntropyLoss", _x(6, 5, seed=5), p, **kw)


def test_cross_entropy_spatial_and_unbatched():
    t = np.random.default_rng(6).integers(0, 4, (2, 3, 5))
    _ce("CrossEntropyLoss", "CrossEntropyLoss", _x(2, 4, 3, 5), t, label_smoothing=0.1)
    _ce("CrossEntropyLoss", "CrossEntropyLoss", _x(4), np.array(2))


@pytest.mark.parametrize("kw", [dict(), dict(weight=W5, ignore_index=3), dict(reduction="none")])
def test_nll_loss(kw):
    logp = torch.log_softmax(torch.from_numpy(_x(6, 5, seed=7)), 1).numpy()
    _ce("NLLLoss", "NLLLoss", logp, np.array([0, 4, 3, 2, 1, 3]), **kw)


def test_class_targets_are_checked():
    with pytest.raises(caten.Error, match="out of bounds"):
        nn.CrossEntropyLoss()(Tensor(_x(2, 3)), Tensor(np.array([0, 3])))
    with pytest.raises(caten.Error, match="integers"):
        nn.CrossEntropyLoss()(Tensor(_x(2, 3)), Tensor(np.array([0.0, 1.0], np.float32)))
    with pytest.raises(caten.Error):
        nn.MSELoss()(Tensor(_x(2, 3)), Tensor(_x(3)))  # torch broadcasts with a warning; caten refuses
    with pytest.raises(caten.Error):
        nn.MSELoss(reduction="avg")


@pytest.mark.parametrize("weighted", [False, True])
def test_bce(weighted):
    x, y = _x(4, 3, lo=0.05, hi=0.95), (_x(4, 3, seed=1) > 0).astype(np.float32)
    w = _x(4, 3, seed=2, lo=0.5, hi=2)
    cw, tw = (Tensor(w), torch.from_numpy(w)) if weighted else (None, None)
    _agree(lambda a, b: nn.BCELoss(weight=cw)(a, b), lambda a, b: torch.nn.BCELoss(weight=tw)(a, b), x, y)


@pytest.mark.parametrize("pos_weight", [None, [0.5, 2.0, 3.0]])
def test_bce_with_logits(pos_weight):
    x, y = _x(4, 3) * 4, _x(4, 3, seed=1, lo=0, hi=1)
    pw = np.array(pos_weight, np.float32) if pos_weight else None
    _agree(lambda a, b: nn.BCEWithLogitsLoss(pos_weight=None if pw is None else Tensor(pw))(a, b),
           lambda a, b: torch.nn.BCEWithLogitsLoss(pos_weight=None if pw is None else torch.from_numpy(pw))(a, b),
           x, y, grad=(0, 1))


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")  # torch's note on its 'mean' for kl_div
@pytest.mark.parametrize("reduction,log_target", [("batchmean", False), ("mean", False), ("sum", True),
                                                  ("none", False)])
def test_kl_div(reduction, log_target):
    logp = torch.log_softmax(torch.from_numpy(_x(3, 4)), 1).numpy()
    q = np.random.default_rng(2).dirichlet(np.ones(4), size=3).astype(np.float32)
    q[0, 1] = 0  # 0 log 0 = 0
    q = np.log(q + 1e-3).astype(np.float32) if log_target else q
    _agree(lambda a, b: nn.KLDivLoss(reduction, log_target=log_target)(a, b),
           lambda a, b: torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)(a, b), logp, q)


# activations --------------------------------------------------------------------------------
ACTS = [("Identity", ()), ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.2,)), ("GELU", ()), ("GELU", ("tanh",)),
        ("SiLU", ()), ("Sigmoid", ()), ("Tanh", ()), ("Softmax", (1,)), ("LogSoftmax", (1,)), ("ELU", (0.5,)),
        ("Softplus", (2.0, 5.0)), ("Hardswish", ()), ("Hardsigmoid", ()), ("Mish", ()), ("Hardtanh", (-0.5, 2.0)),
        ("SELU", ()), ("CELU", (0.7,)), ("LogSigmoid", ()), ("Softsign", ()), ("Tanhshrink", ()), ("GLU", ()),
        ("GLU", (0,)), ("Softmin", (1,))]


@pytest.mark.parametrize("name,args", ACTS)
def test_activations(name, args):
    x = _x(4, 6) * 4
    _agree(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), x)
    assert repr(getattr(nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


@pytest.mark.parametrize("n", [1, 3])
def test_prelu(n):
    t = torch.nn.PReLU(n)
    with torch.no_grad():
        t.weight.copy_(torch.linspace(0.1, 0.5, n))
    c = _pair(t, nn.PReLU(n))
    _agree(lambda a: c(a), lambda a: t(a), _x(2, 3, 4))
    _agree(lambda a: c(a), lambda a: t(a), _x(2, 3, 4))  # the slope's gradient too
    (t(torch.from_numpy(_x(2, 3, 4))) ** 2).sum().backward()
    (c(Tensor(_x(2, 3, 4))) ** 2).sum().backward()
    np.testing.assert_allclose(c.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-5)
    assert repr(c) == repr(t)


# layers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(groups=2, dilation=2, bias=False)])
def test_conv1d(kw):
    t = torch.nn.Conv1d(4, 6, 3, **kw)
    c = _pair(t, nn.Conv1d(4, 6, 3, **kw))
    _agree(lambda x: c(x), lambda x: t(x), _x(2, 4, 9))
    assert repr(c) == repr(t)


def test_batchnorm2d_train_then_eval():
    t, c = torch.nn.BatchNorm2d(3, momentum=0.3), nn.BatchNorm2d(3, momentum=0.3)
    c.weight.set_value(np.array([1.5, 0.5, 2.0], np.float32))
    with torch.no_grad():
        t.weight.copy_(torch.tensor([1.5, 0.5, 2.0]))
    for s in range(3):  # batch statistics, the running ones moved (unbiased var) every step
        x = _x(4, 3, 2, 2, seed=s) * (s + 1) + s
        _agree(lambda a: c(a), lambda a: t(a), x, rtol=1e-4, atol=1e-5)
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(c.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert list(c.state_dict()) == list(t.state_dict())
    c.eval(), t.eval()
    _agree(lambda a: c(a), lambda a: t(a), _x(2, 3, 2, 2, seed=7), rtol=1e-5)
    assert int(c.num_batches_tracked.item()) == 3


@pytest.mark.parametrize("shape,kw", [((5, 4), dict(momentum=None)), ((3, 4, 6), dict(affine=False)),
                                      ((5, 4), dict(track_running_stats=False))])
def test_batchnorm1d(shape, kw):
    t, c = torch.nn.BatchNorm1d(4, **kw), nn.BatchNorm1d(4, **kw)
    for s in range(2):
        _agree(lambda a: c(a), lambda a: t(a), _x(*shape, seed=s) + s, rtol=1e-4, atol=1e-5)
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(c.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert repr(c) == repr(t)
    with pytest.raises(caten.Error, match="more than 1 value"):
        nn.BatchNorm1d(4)(Tensor(_x(1, 4)))


@pytest.mark.parametrize("make", [lambda m: m.GroupNorm(2, 4), lambda m: m.LayerNorm([3, 5]),
                                  lambda m: m.RMSNorm(5), lambda m: m.RMSNorm([3, 5], eps=1e-3)])
def test_norms(make):
    t, c = make(torch.nn), make(nn)
    for p in t.parameters():
        with torch.no_grad():
            p.copy_(torch.from_numpy(_x(*p.shape, seed=3)))
    _pair(t, c)
    _agree(lambda a: c(a), lambda a: t(a), _x(2, 4, 3, 5), rtol=1e-4, atol=1e-5)
    assert repr(c) == repr(t)


@pytest.mark.parametrize("make", [lambda m: m.MaxPool2d(2), lambda m: m.MaxPool2d(3, stride=2, padding=1),
                                  lambda m: m.AvgPool2d(2, stride=1), lambda m: m.AdaptiveAvgPool2d((1, 1)),
                                  lambda m: m.AdaptiveAvgPool2d((2, 3)), lambda m: m.AdaptiveAvgPool2d((4, None))])
def test_pools(make):
    _agree(make(nn), make(torch.nn), _x(2, 3, 6, 7))
    assert repr(make(nn)) == repr(make(torch.nn))


def test_flatten_unflatten_dropout():
    x = _x(2, 12, 3)
    for cm, tm in [(nn.Unflatten(1, (3, 4)), torch.nn.Unflatten(1, (3, 4))),
                   (nn.Sequential(nn.Unflatten(1, (2, -1)), nn.Flatten(1, 2)),
                    torch.nn.Sequential(torch.nn.Unflatten(1, (2, -1)), torch.nn.Flatten(1, 2)))]:
        _agree(cm, tm, x)
        assert repr(cm) == repr(tm)
    d = nn.Dropout(0.25)
    assert repr(d) == repr(torch.nn.Dropout(0.25))
    y = d(Tensor(np.ones((100, 100), np.float32))).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)} and 0.2 < (y == 0).mean() < 0.3
    d.eval()
    np.testing.assert_array_equal(d(Tensor(x)).numpy(), x)


def test_embedding_padding_idx():
    t, c = torch.nn.Embedding(5, 3, padding_idx=1), nn.Embedding(5, 3, padding_idx=1)
    np.testing.assert_array_equal(c.weight.numpy()[1], 0)
    with torch.no_grad():
        t.weight.copy_(torch.from_numpy(_x(5, 3)))
    _pair(t, c)
    idx = np.array([[1, 4, 1], [0, 2, 1]])
    ty, cy = t(torch.from_numpy(idx)), c(idx)
    np.testing.assert_allclose(cy.numpy(), ty.detach().numpy())
    ty.sum().backward()
    cy.sum().backward()
    np.testing.assert_allclose(c.weight.grad.numpy(), t.weight.grad.numpy())
    assert repr(c) == repr(t)


# torch.nn.functional ------------------------------------------------------------------------
def test_functional_imports_as_torch():
    import caten.nn.functional as F
    from caten.nn.init import zeros_
    from caten.optim.lr_scheduler import StepLR

    assert F is nn.functional and zeros_ is nn.init.zeros_ and StepLR is optim.lr_scheduler.StepLR
    assert next(nn.Linear(2, 3).parameters()).shape == (3, 2)  # parameters() is an iterator, as torch's


@pytest.mark.parametrize("name,args,kw", [
    ("conv2d", ((2, 3, 6, 6), (4, 3, 3, 3), (4,)), dict(stride=2, padding=1)),
    ("max_pool2d", ((2, 3, 6, 6),), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", ((2, 3, 6, 6),), dict(kernel_size=2)),
    ("layer_norm", ((2, 3, 4), (3, 4), (3, 4)), dict(eps=1e-3)),
    ("normalize", ((3, 5),), dict(dim=1)), ("normalize", ((3, 5),), dict(p=1.0, dim=0)),
    ("gelu", ((3, 5),), dict(approximate="tanh")), ("softmax", ((3, 5),), dict(dim=0)),
    ("leaky_relu", ((3, 5),), dict(negative_slope=0.3)), ("linear", ((3, 5), (2, 5), (2,)), {}),
])
def test_functional(name, args, kw):
    arrays = [_x(*a, seed=i) for i, a in enumerate(args)]
    shape = ((3, 4),) if name == "layer_norm" else ()  # layer_norm(x, normalized_shape, weight, bias)

    def call(mod, x, *rest):
        return getattr(mod, name)(x, *shape, *rest, **kw)

    _agree(lambda *a: call(nn.functional, *a), lambda *a: call(torch.nn.functional, *a),
           *arrays, grad=tuple(range(len(arrays))), rtol=1e-4, atol=1e-5)


def test_functional_one_hot_dropout_embedding():
    t = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(nn.functional.one_hot(Tensor(t)).numpy(),
                                  torch.nn.functional.one_hot(torch.from_numpy(t)).numpy())
    assert nn.functional.one_hot(Tensor(t), num_classes=6).shape == (2, 2, 6)
    with pytest.raises(caten.Error):
        nn.functional.one_hot(Tensor(t), num_classes=2)
    x = _x(3, 4)
    np.testing.assert_array_equal(nn.functional.dropout(Tensor(x), 0.5, training=False).numpy(), x)
    w = _x(5, 3)
    np.testing.assert_array_equal(nn.functional.embedding(t, Tensor(w)).numpy(), w[t])


@pytest.mark.parametrize("name,kw,shape", [("LSTM", dict(), (5, 2, 3)),
                                           ("LSTM", dict(num_layers=2, batch_first=True), (2, 4, 3)),
                                           ("GRU", dict(bidirectional=True), (4, 2, 3)),
                                           ("RNN", dict(nonlinearity="relu", bias=False), (4, 3)),
                                           ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True),
                                            (2, 3, 3))])
def test_recurrent(name, kw, shape):
    """Outputs, final states and every weight's gradient; torch's parameter names and repr."""
    t = getattr(torch.nn, name)(3, 4, **kw)
    c = _pair(t, getattr(nn, name)(3, 4, **kw))
    assert [k for k, _ in c.named_parameters()] == [k for k, _ in t.named_parameters()] and repr(c) == repr(t)

    def run(m, x):
        out, h = m(x)
        h = h[0] * 2 + h[1] if isinstance(h, tuple) else h
        return (out * out).sum() + (h * h).sum() * 0.5

    x = _x(*shape)
    tl, cl = run(t, torch.from_numpy(x)), run(c, Tensor(x))
    np.testing.assert_allclose(cl.item(), tl.item(), rtol=1e-5)
    tl.backward()
    cl.backward()
    for (k, cp), tp in zip(c.named_parameters(), t.parameters()):
        np.testing.assert_allclose(cp.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)
    h0 = _x(t.num_layers * (1 + t.bidirectional), *((2,) if len(shape) == 3 else ()), 4, seed=5)
    hx = (h0, h0 * 0.5) if name == "LSTM" else h0
    conv = (lambda f: tuple(f(v) for v in hx)) if name == "LSTM" else (lambda f: f(hx))
    np.testing.assert_allclose(c(Tensor(x), conv(Tensor))[0].numpy(),
                               t(torch.from_numpy(x), conv(torch.from_numpy))[0].detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw,fkw", [(dict(), dict()), (dict(batch_first=True), dict(average_attn_weights=False)),
                                    (dict(bias=False), dict(attn_mask="float")),
                                    (dict(batch_first=True), dict(key_padding_mask="pad", attn_mask="causal"))])
def test_multihead_attention(kw, fkw):
    t = torch.nn.MultiheadAttention(8, 2, **kw)
    c = _pair(t, nn.MultiheadAttention(8, 2, **kw))
    assert list(c.state_dict()) == list(t.state_dict()) and repr(c) == repr(t)
    masks = {"causal": np.triu(np.ones((3, 4), bool), 1), "pad": np.array([[False] * 3 + [True], [False] * 4]),
             "float": _x(3, 4, seed=8)}
    cf = {k: Tensor(masks[v]) if isinstance(v, str) else v for k, v in fkw.items()}
    tf = {k: torch.from_numpy(masks[v]) if isinstance(v, str) else v for k, v in fkw.items()}
    shape = (2, 3, 8) if kw.get("batch_first") else (3, 2, 8)
    kv = (2, 4, 8) if kw.get("batch_first") else (4, 2, 8)
    _agree(lambda q, k, v: c(q, k, v, **cf)[0], lambda q, k, v: t(q, k, v, **tf)[0],
           _x(*shape), _x(*kv, seed=1), _x(*kv, seed=2), grad=(0, 1, 2), rtol=1e-4, atol=1e-5)
    _agree(lambda q, k, v: c(q, k, v, **cf)[1], lambda q, k, v: t(q, k, v, **tf)[1],
           _x(*shape), _x(*kv, seed=1), _x(*kv, seed=2), grad=(0,), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True, activation="gelu", batch_first=True)])
def test_transformer_encoder(kw):
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kw)
    t = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    c = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kw), 2,
                              norm=nn.LayerNorm(8))
    _pair(t, c)
    assert list(c.state_dict()) == list(t.state_dict()) and repr(c) == repr(t)
    mask = np.triu(np.full((3, 3), -np.inf, np.float32), 1)
    _agree(lambda x: c(x, mask=Tensor(mask)), lambda x: t(x, mask=torch.from_numpy(mask)), _x(3, 3, 8) * 2,
           rtol=1e-4, atol=1e-5)


# Module habits ------------------------------------------------------------------------------
def _nets():
    def build(m):
        return m.Sequential(m.Conv2d(3, 4, 3, padding=1, bias=False), m.BatchNorm2d(4), m.ReLU(), m.MaxPool2d(2),
                            m.Flatten(), m.Linear(4 * 2 * 2, 5), m.Dropout(0.1))
    torch.manual_seed(0)
    return build(torch.nn), build(nn)


def test_names_counts_and_children_as_torch():
    t, c = _nets()
    assert [k for k, _ in c.named_parameters()] == [k for k, _ in t.named_parameters()]
    assert sum(p.numel() for p in c.parameters()) == sum(p.numel() for p in t.parameters())
    assert [k for k, _ in c.named_buffers()] == [k for k, _ in t.named_buffers()]
    assert [k for k, _ in c.named_modules()] == [k for k, _ in t.named_modules()]
    assert [type(m).__name__ for m in c.children()] == [type(m).__name__ for m in t.children()]
    assert [type(m).__name__ for m in c.modules()] == [type(m).__name__ for m in t.modules()]
    assert list(c.state_dict()) == list(t.state_dict())
    assert repr(c) == repr(t)


def test_train_eval_propagate_and_outputs_match():
    t, c = _nets()
    _pair(t, c)
    assert c.training and all(m.training for m in c.modules())
    c.eval(), t.eval()
    assert not any(m.training for m in c.modules())
    _agree(lambda a: c(a), lambda a: t(a), _x(2, 3, 4, 4), rtol=1e-4, atol=1e-5)
    c.train()
    assert all(m.training for m in c.modules())


def test_zero_grad_and_requires_grad():
    t, c = _nets()
    c(Tensor(_x(2, 3, 4, 4))).sum().backward()
    assert all(p.grad is not None for p in c.parameters())
    c.zero_grad()
    assert all(p.grad is None for p in c.parameters())
    c[0].requires_grad_(False)
    assert [k for k, p in c.named_parameters() if p.requires_grad] == \
        [k for k, p in t.named_parameters() if not k.startswith("0.")]
    assert len(list(c.parameters())) == len(list(t.parameters()))  # frozen ones are still parameters
    c(Tensor(_x(2, 3, 4, 4))).sum().backward()
    assert c[0].weight.grad is None and c[5].weight.grad is not None
    opt = optim.SGD(c.parameters(), lr=0.1)  # frozen parameters are accepted and skipped
    w0 = c[0].weight.numpy().copy()
    opt.step()
    np.testing.assert_array_equal(c[0].weight.numpy(), w0)


def test_apply_and_init():
    seen = []
    c = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))

    def init(m):
        seen.append(type(m).__name__)
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.weight, 0.5)
            nn.init.zeros_(m.bias)

    assert c.apply(init) is c
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 2)))
    tseen = []
    t.apply(lambda m: tseen.append(type(m).__name__))
    assert seen == tseen
    assert (c[2][0].weight.numpy() == 0.5).all() and (c[0].bias.numpy() == 0).all()
    w = nn.init.ones_(Tensor(np.zeros((3, 3), np.float32)))
    assert (w.numpy() == 1).all()


@pytest.mark.parametrize("fn,kw,bound", [("xavier_uniform_", {}, math.sqrt(6 / (200 + 300))),
                                         ("kaiming_uniform_", {"a": math.sqrt(5)}, 1 / math.sqrt(300)),
                                         ("kaiming_uniform_", {"nonlinearity": "relu"}, math.sqrt(6 / 300)),
                                         ("uniform_", {"a": -0.2, "b": 0.2}, 0.2)])
def test_init_bounds(fn, kw, bound):
    """torch's bounds: the values fill [-bound, bound] (draws differ from torch's generator)."""
    w = Tensor(np.zeros((200, 300), np.float32), requires_grad=True)
    assert getattr(nn.init, fn)(w, **kw) is w
    v = w.numpy()
    assert np.abs(v).max() <= bound * (1 + 1e-6) and np.abs(v).max() > 0.98 * bound
    assert w.requires_grad


def test_init_normal_and_gain():
    w = nn.init.normal_(Tensor(np.zeros((400, 400), np.float32)), mean=1.0, std=0.5)
    assert abs(w.numpy().mean() - 1) < 0.01 and abs(w.numpy().std() - 0.5) < 0.01
    k = nn.init.kaiming_normal_(Tensor(np.zeros((400, 400), np.float32)), nonlinearity="relu")
    assert abs(k.numpy().std() - math.sqrt(2 / 400)) < 0.002
    for nl in ("relu", "tanh", "leaky_relu", "linear"):
        assert nn.init.calculate_gain(nl) == pytest.approx(torch.nn.init.calculate_gain(nl))


def test_containers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(3, 3) for _ in range(2)])
            self.heads = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Linear(3, 2)})
            self.register_buffer("scale", Tensor(np.float32(2.0)))

        def forward(self, x):
            for b in self.blocks:
                x = b(x).relu()
            return self.heads["b"](x) * self.scale

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(2)])
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 1), "b": torch.nn.Linear(3, 2)})
            self.register_buffer("scale", torch.tensor(2.0))

        def forward(self, x):
            for b in self.blocks:
                x = b(x).relu()
            return self.heads["b"](x) * self.scale

    t = TNet()
    c = _pair(t, Net())
    assert list(c.state_dict()) == list(t.state_dict())
    assert [k for k, _ in c.named_parameters()] == [k for k, _ in t.named_parameters()]
    assert repr(c).replace("TNet", "Net") == repr(t).replace("TNet", "Net")
    assert len(c.blocks) == 2 and "a" in c.heads and list(c.heads.keys()) == ["a", "b"]
    _agree(lambda a: c(a), lambda a: t(a), _x(4, 3))
    s = nn.Sequential(OrderedDict([("fc", nn.Linear(3, 2)), ("act", nn.Tanh())]))
    ts = torch.nn.Sequential(OrderedDict([("fc", torch.nn.Linear(3, 2)), ("act", torch.nn.Tanh())]))
    assert list(s.state_dict()) == list(ts.state_dict()) == ["fc.weight", "fc.bias"]
    assert s.fc is s[0] and repr(s) == repr(ts)


def test_load_state_dict_strict_false():
    c = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    sd = {k: v for k, v in torch.nn.Sequential(torch.nn.Linear(3, 4)).state_dict().items()}
    res = c.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["1.bias", "1.weight"] and res.unexpected_keys == []
    np.testing.assert_array_equal(c[0].weight.numpy(), sd["0.weight"].numpy())
    with pytest.raises(caten.Error, match="missing"):
        c.load_state_dict(sd)


# optimizers ---------------------------------------------------------------------------------
def _steps(copt, topt, steps=4, **kw):
    """The same model, data and optimizer settings in both: parameters after every step agree."""
    torch.manual_seed(1)
    t = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    c = _pair(t, nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)))
    co, to = copt(c.parameters(), **kw), topt(t.parameters(), **kw)
    x, y = _x(8, 4, seed=3), np.random.default_rng(4).integers(0, 3, 8)
    for _ in range(steps):
        for o, loss in ((co, lambda: nn.CrossEntropyLoss()(c(Tensor(x)), Tensor(y))),
                        (to, lambda: torch.nn.CrossEntropyLoss()(t(torch.from_numpy(x)), torch.from_numpy(y)))):
            o.zero_grad()
            loss().backward()
            o.step()
        for (k, cp), tp in zip(c.named_parameters(), t.parameters()):
            np.testing.assert_allclose(cp.numpy(), tp.detach().numpy(), rtol=2e-5, atol=2e-6, err_msg=k)
    return co, to


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(centered=True, weight_decay=0.1),
                                dict(momentum=0.5, centered=True, alpha=0.9, eps=1e-6)])
def test_rmsprop(kw):
    _steps(optim.RMSprop, torch.optim.RMSprop, lr=0.01, **kw)


@pytest.mark.parametrize("kw", [dict(), dict(lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.2)])
def test_adagrad(kw):
    _steps(optim.Adagrad, torch.optim.Adagrad, lr=0.1, **kw)


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                     ("Adam", dict(lr=0.01, weight_decay=0.1)), ("AdamW", dict(lr=0.01))])
def test_existing_optimizers(name, kw):
    co, to = _steps(getattr(optim, name), getattr(torch.optim, name), **kw)
    assert [sorted(g) for g in co.state_dict()["param_groups"]] == \
        [sorted(k for k in g if k in co.param_groups[0]) for g in to.state_dict()["param_groups"]]
    assert sorted(co.state_dict()["state"]) == sorted(to.state_dict()["state"])


def test_param_group_lr_change_and_closure():
    co, to = _steps(optim.SGD, torch.optim.SGD, steps=1, lr=0.1)
    for o in (co, to):
        o.param_groups[0]["lr"] = 0.5
    assert isinstance(co.param_groups, list) and co.param_groups[0]["lr"] == 0.5
    w = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    o = optim.SGD([w], lr=0.5)

    def closure():
        o.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert o.step(closure).item() == 5.0
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])


def test_optimizer_state_dict_round_trip():
    w = Tensor(np.array([1.0, -2.0], np.float32), requires_grad=True)
    o = optim.Adam([w], lr=0.1)
    for _ in range(2):
        o.zero_grad()
        (w * w).sum().backward()
        o.step()
    sd = o.state_dict()
    assert sd["param_groups"][0]["params"] == [0] and int(sd["state"][0]["step"]) == 2
    w2 = Tensor(w.numpy(), requires_grad=True)
    o2 = optim.Adam([w2], lr=0.3)
    o2.load_state_dict(sd)
    assert o2.param_groups[0]["lr"] == 0.1
    for ww, oo in ((w, o), (w2, o2)):
        oo.zero_grad()
        (ww * ww).sum().backward()
        oo.step()
    np.testing.assert_array_equal(w.numpy(), w2.numpy())


# schedulers ---------------------------------------------------------------------------------
SCHEDULES = [("StepLR", dict(step_size=3, gamma=0.5)), ("MultiStepLR", dict(milestones=[2, 5, 5, 11], gamma=0.3)),
             ("ExponentialLR", dict(gamma=0.9)), ("CosineAnnealingLR", dict(T_max=6, eta_min=0.001)),
             ("LinearLR", dict(start_factor=0.25, total_iters=7)), ("LinearLR", dict()),
             ("OneCycleLR", dict(max_lr=1.0, total_steps=25)),
             ("OneCycleLR", dict(max_lr=[0.5, 2.0], total_steps=30, anneal_strategy="linear", three_phase=True))]


@pytest.mark.parametrize("name,kw", SCHEDULES)
def test_lr_schedules(name, kw):
    """The lr and momentum sequences over 20 steps, two param groups, exactly torch's."""
    cp = [Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2)]
    tp = [torch.zeros(2, requires_grad=True) for _ in range(2)]
    co = optim.SGD([{"params": [cp[0]]}, {"params": [cp[1]], "lr": 0.3}], lr=0.1, momentum=0.9)
    to = torch.optim.SGD([{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.3}], lr=0.1, momentum=0.9)
    cs, ts = getattr(optim.lr_scheduler, name)(co, **kw), getattr(torch.optim.lr_scheduler, name)(to, **kw)
    for _ in range(20):
        assert cs.get_last_lr() == ts.get_last_lr()
        assert [g["momentum"] for g in co.param_groups] == [g["momentum"] for g in to.param_groups]
        to.step()
        co.step()
        cs.step(), ts.step()


def test_lambda_lr_and_user_change():
    w = Tensor(np.zeros(2, np.float32), requires_grad=True)
    tw = torch.zeros(2, requires_grad=True)
    co, to = optim.Adam([w], lr=0.01), torch.optim.Adam([tw], lr=0.01)
    cs = optim.lr_scheduler.LambdaLR(co, lambda e: 0.95 ** e)
    ts = torch.optim.lr_scheduler.LambdaLR(to, lambda e: 0.95 ** e)
    c2, t2 = optim.lr_scheduler.ExponentialLR(co, 0.5), torch.optim.lr_scheduler.ExponentialLR(to, 0.5)
    for _ in range(20):  # two schedulers chained on one optimizer
        to.step()
        cs.step(), ts.step(), c2.step(), t2.step()
        assert c2.get_last_lr() == t2.get_last_lr() and co.param_groups[0]["lr"] == to.param_groups[0]["lr"]


def test_constant_lr_and_reduce_on_plateau():
    cp, tp = Tensor(np.zeros(2, np.float32), requires_grad=True), torch.zeros(2, requires_grad=True)
    co, to = optim.SGD([cp], lr=0.1), torch.optim.SGD([tp], lr=0.1)
    cs = optim.lr_scheduler.ConstantLR(co, factor=0.5, total_iters=4)
    ts = torch.optim.lr_scheduler.ConstantLR(to, factor=0.5, total_iters=4)
    cp2, tp2 = Tensor(np.zeros(2, np.float32), requires_grad=True), torch.zeros(2, requires_grad=True)
    co2, to2 = optim.Adam([cp2], lr=0.1), torch.optim.Adam([tp2], lr=0.1)
    cr = optim.lr_scheduler.ReduceLROnPlateau(co2, factor=0.5, patience=2, cooldown=1, min_lr=0.01)
    tr = torch.optim.lr_scheduler.ReduceLROnPlateau(to2, factor=0.5, patience=2, cooldown=1, min_lr=0.01)
    metrics = [5, 4, 4, 4, 4, 3.9999, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    for m in metrics:
        to.step()
        cs.step(), ts.step()
        to2.step()
        cr.step(Tensor(np.float32(m))), tr.step(m)
        assert cs.get_last_lr() == ts.get_last_lr() and cr.get_last_lr() == tr.get_last_lr()
    assert cr.get_last_lr()[0] < 0.1  # it did reduce


def test_clip_grad():
    t, c = _nets()
    _pair(t, c).eval(), t.eval()  # no dropout draws
    x = _x(2, 3, 4, 4)
    c(Tensor(x)).sum().backward()
    t(torch.from_numpy(x)).sum().backward()
    for norm_type in (2.0, math.inf):
        tn = torch.nn.utils.clip_grad_norm_(t.parameters(), 0.5, norm_type=norm_type)
        cn = nn.utils.clip_grad_norm_(c.parameters(), 0.5, norm_type=norm_type)
        np.testing.assert_allclose(cn.item(), tn.item(), rtol=1e-5)
        for (k, cp), tp in zip(c.named_parameters(), t.parameters()):
            np.testing.assert_allclose(cp.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)
    torch.nn.utils.clip_grad_value_(t.parameters(), 0.01)
    nn.utils.clip_grad_value_(c.parameters(), 0.01)
    for cp, tp in zip(c.parameters(), t.parameters()):
        np.testing.assert_allclose(cp.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-8)


def test_sequential_add_module_and_casts():
    s, ts = nn.Sequential(), torch.nn.Sequential()
    s.add_module("fc", nn.Linear(2, 3)), ts.add_module("fc", torch.nn.Linear(2, 3))
    s.append(nn.ReLU()), ts.append(torch.nn.ReLU())
    assert repr(s) == repr(ts) and list(s.state_dict()) == list(ts.state_dict())
    s.double()
    assert {p.dtype for p in s.parameters()} == {"f64"} and all(p.requires_grad for p in s.parameters())
    assert s(Tensor(np.ones((1, 2)))).dtype == "f64"
    assert s.float() is s and {p.dtype for p in s.parameters()} == {"f32"}


# a training loop where codegen matters ------------------------------------------------------
def test_training_loop_on_llvm():
    """Conv, BatchNorm, pooling, CrossEntropyLoss with label smoothing, RMSprop and StepLR on llvm."""
    state.set_default_runtime("llvm")
    t, c = _nets()
    _pair(t, c.to("llvm"))
    t[6].p = c[6].p = 0.0
    co, to = optim.RMSprop(c.parameters(), lr=0.01, momentum=0.5), torch.optim.RMSprop(t.parameters(), lr=0.01,
                                                                                          momentum=0.5)
    cs, ts = optim.lr_scheduler.StepLR(co, 2, 0.5), torch.optim.lr_scheduler.StepLR(to, 2, 0.5)
    x, y = _x(6, 3, 4, 4, seed=2), np.random.default_rng(1).integers(0, 5, 6)
    for _ in range(3):
        cl = nn.CrossEntropyLoss(label_smoothing=0.1)(c(Tensor(x)), Tensor(y))
        tl = torch.nn.CrossEntropyLoss(label_smoothing=0.1)(t(torch.from_numpy(x)), torch.from_numpy(y))
        np.testing.assert_allclose(cl.item(), tl.item(), rtol=1e-4)
        for o, loss, s in ((co, cl, cs), (to, tl, ts)):
            o.zero_grad()
            loss.backward()
            o.step()
            s.step()
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(c.state_dict()[k], v.numpy(), rtol=1e-3, atol=1e-4, err_msg=k)
