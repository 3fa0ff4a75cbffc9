"""Convolutions (1-, 2-, 3-D, transposed), unfold/fold and 2-D pooling against torch (#39): values
and gradients of input, weight and bias on odd shapes (prime sizes, stride > kernel, dilation,
groups incl. depthwise, an empty batch), f32 and f64 on numpy, a subset on llvm and c. Each group's
forward values are realized by one program and its gradients by one backward of a summed loss."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error
from caten.tensor.nn import conv_functional as CF
from caten.tensor.realize import realize
from caten.tensor.tensor import Tensor

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's note on its own padded copy

# name: (F function name, input shapes (None: no bias), keywords)
CASES = {
    "conv1d_groups_dil": ("conv1d", [(2, 4, 11), (6, 2, 3), (6,)], dict(stride=2, padding=1, dilation=2, groups=2)),
    "conv1d_same_even": ("conv1d", [(2, 3, 7), (5, 3, 4), None], dict(padding="same")),
    "conv2d_depthwise": ("conv2d", [(2, 4, 7, 5), (4, 1, 3, 2), (4,)],
                         dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2), groups=4)),
    "conv2d_stride_gt_k": ("conv2d", [(1, 3, 11, 7), (2, 3, 2, 2), (2,)], dict(stride=3, padding="valid")),
    "conv2d_unbatched": ("conv2d", [(3, 5, 5), (2, 3, 3, 3), None], dict(padding=1)),
    "conv2d_empty_batch": ("conv2d", [(0, 3, 5, 5), (2, 3, 3, 3), (2,)], dict(padding=1)),
    "conv3d_groups": ("conv3d", [(2, 4, 5, 7, 3), (6, 2, 3, 2, 3), (6,)],
                      dict(stride=(2, 1, 3), padding=(1, 0, 2), dilation=(1, 2, 1), groups=2)),
    "conv3d_same": ("conv3d", [(3, 5, 6, 4), (2, 3, 3, 2, 3), None], dict(padding="same")),
    "convT1d": ("conv_transpose1d", [(2, 4, 5), (4, 3, 3), (6,)],
                dict(stride=3, padding=1, output_padding=2, groups=2, dilation=2)),
    "convT2d": ("conv_transpose2d", [(2, 4, 5, 3), (4, 3, 3, 2), (3,)],
                dict(stride=(2, 3), padding=(2, 0), output_padding=(1, 0))),
    "convT2d_depthwise": ("conv_transpose2d", [(1, 3, 4, 5), (3, 1, 3, 3), None], dict(stride=2, padding=1, groups=3)),
    "convT3d": ("conv_transpose3d", [(1, 2, 3, 4, 2), (2, 2, 2, 3, 2), (4,)],
                dict(stride=2, padding=1, output_padding=1, groups=2)),
    "unfold": ("unfold", [(2, 3, 7, 6)], dict(kernel_size=(3, 2), dilation=(1, 2), padding=1, stride=(2, 1))),
    "fold": ("fold", [(2, 12, 24)], dict(output_size=(7, 6), kernel_size=(3, 2), dilation=(1, 2), padding=1,
                                         stride=(2, 1))),
    "fold_unbatched": ("fold", [(8, 4)], dict(output_size=(4, 5), kernel_size=2, stride=2)),
    "max_pool2d": ("max_pool2d", [(2, 3, 7, 6)], dict(kernel_size=3, stride=2, padding=1)),
    "max_pool2d_dil_ceil": ("max_pool2d", [(2, 3, 7, 6)],
                            dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)),
    "avg_pool2d": ("avg_pool2d", [(2, 3, 7, 5)], dict(kernel_size=(3, 2), stride=(2, 1), padding=1)),
    "avg_pool2d_ceil_nopad": ("avg_pool2d", [(2, 3, 7, 6)],
                              dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    "avg_pool2d_divisor": ("avg_pool2d", [(1, 2, 5, 5)], dict(kernel_size=2, divisor_override=3)),
}
SUBSET = {"llvm": ["conv2d_depthwise", "convT1d", "conv3d_same"], "c": ["conv1d_groups_dil", "unfold", "max_pool2d"]}
F64 = ["conv1d_groups_dil", "conv2d_depthwise", "conv3d_groups", "convT1d", "convT3d", "fold", "avg_pool2d_ceil_nopad"]
TOL = {"f32": dict(rtol=1e-4, atol=1e-5), "f64": dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def _runtime():
    yield
    caten.tensor.set_default_runtime("llvm")


def _run(names: list[str], dtype: str, runtime: str) -> None:
    """Every case's values and gradients against torch's, caten's realized in one program each."""
    caten.tensor.set_default_runtime(runtime)
    rng = np.random.default_rng(39)
    npdt = np.float32 if dtype == "f32" else np.float64
    got, want, leaves = {}, {}, {}
    loss = None
    for name in names:
        fn, shapes, kw = CASES[name]
        data = [None if s is None else rng.standard_normal(s).astype(npdt) for s in shapes]
        ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in data]
        cs = [None if a is None else Tensor(a, requires_grad=True, runtime=runtime) for a in data]
        ty = getattr(TF, fn)(*ts, **kw)
        cy = getattr(CF, fn)(*cs, **kw)
        g = rng.standard_normal(tuple(ty.shape)).astype(npdt)
        (ty * torch.tensor(g)).sum().backward()
        term = (cy * Tensor(g, runtime=runtime)).sum()
        loss = term if loss is None else loss + term
        got[name], want[name] = cy, ty.detach().numpy()
        leaves[name] = [(c, t) for c, t in zip(cs, ts) if c is not None]
    realize([y.node for y in got.values()], runtime)
    for name in names:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name].numpy(), want[name], err_msg=name, **TOL[dtype])
    assert loss is not None
    loss.backward()
    for name in names:
        for i, (c, t) in enumerate(leaves[name]):
            assert c.grad is not None, (name, i)
            np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), err_msg=f"{name} grad {i}", **TOL[dtype])


def test_values_and_grads_numpy():
    _run(list(CASES), "f32", "numpy")


def test_values_and_grads_numpy_f64():
    _run(F64, "f64", "numpy")


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_values_and_grads_compiled(runtime):
    _run(SUBSET[runtime], "f32", runtime)


def test_integer_max_pool_pads_with_the_dtype_minimum():
    caten.tensor.set_default_runtime("numpy")
    x = np.arange(-40, 9, dtype=np.int32).reshape(1, 1, 7, 7)
    want = TF.max_pool2d(torch.tensor(x), 3, 2, 1).numpy()
    np.testing.assert_array_equal(CF.max_pool2d(Tensor(x), 3, 2, 1).numpy(), want)
    np.testing.assert_array_equal(Tensor(x).max_pool2d(kernel=[3, 3], stride=[2, 2], padding=[1, 1]).numpy(), want)


def test_max_pool2d_return_indices():
    caten.tensor.set_default_runtime("numpy")
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 5)).astype(np.float32)
    v, i = CF.max_pool2d(Tensor(x), 3, 2, 1, return_indices=True)
    tv, ti = TF.max_pool2d(torch.tensor(x), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


@pytest.mark.parametrize("call", [
    lambda x, w: CF.conv2d(x, w),                                  # kernel 4x4 over a 3x3 input
    lambda x, w: x.conv2d(w),                                      # the library composite itself
    lambda x, w: x.max_pool2d(kernel=[4, 4]),                      # its windows, in the pool composites
    lambda x, w: x.windows(kernel=[2, 5]),
    lambda x, w: CF.conv2d(x, w[:, :, :1, :1], padding="same", stride=2),
    lambda x, w: CF.conv2d(x.cast("i32"), w.cast("i32")),          # torch has no integer conv on CPU
    lambda x, w: CF.conv_transpose2d(x, w.permute(1, 0, 2, 3), stride=2, output_padding=2),
    lambda x, w: CF.fold(x.reshape([1, 9, 1]), (3, 3), 2),         # 9 is not a multiple of 2*2
    lambda x, w: CF.max_pool2d(x, 2, padding=2),                   # padding over half the kernel
    lambda x, w: CF.conv3d(x, w),                                  # a 4-D weight for conv3d
    lambda x, w: CF.conv2d(x, w[:0]),                              # no output channels
])
def test_refused_with_a_diagnostic(call):
    caten.tensor.set_default_runtime("numpy")
    x = Tensor(np.ones((1, 1, 3, 3), np.float32))
    w = Tensor(np.ones((2, 1, 4, 4), np.float32))
    with pytest.raises(Error):
        call(x, w).numpy()


def _load(cm, tm):
    cm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def test_modules_match_torch():
    caten.tensor.set_default_runtime("numpy")
    nn = caten.nn
    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    pairs = [
        (torch.nn.Conv3d(4, 6, (3, 2, 2), stride=2, padding=1, groups=2), nn.Conv3d(4, 6, (3, 2, 2), stride=2,
                                                                                   padding=1, groups=2),
         (2, 4, 5, 6, 7), {}),
        (torch.nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1), (2, 3, 5, 6), {}),
        (torch.nn.Conv1d(3, 4, 4, padding="same"), nn.Conv1d(3, 4, 4, padding="same"), (2, 3, 7), {}),
        (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2),
         nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 5, 4), {"output_size": [10, 8]}),
        (torch.nn.ConvTranspose1d(3, 2, 3, stride=2, bias=False), nn.ConvTranspose1d(3, 2, 3, stride=2, bias=False),
         (3, 5), {}),
        (torch.nn.ConvTranspose3d(2, 2, 2, stride=2), nn.ConvTranspose3d(2, 2, 2, stride=2), (1, 2, 3, 2, 3), {}),
        (torch.nn.Unfold(2, padding=1, stride=2), nn.Unfold(2, padding=1, stride=2), (1, 2, 5, 4), {}),
        (torch.nn.Fold((4, 5), 2, stride=(2, 1)), nn.Fold((4, 5), 2, stride=(2, 1)), (1, 8, 8), {}),
        (torch.nn.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), nn.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True),
         (1, 2, 7, 6), {}),
        (torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.AvgPool2d(3, 2, 1, count_include_pad=False),
         (1, 2, 7, 6), {}),
    ]
    for tm, cm, shape, kw in pairs:
        _load(cm, tm)
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cm(Tensor(x), **kw).numpy(), tm(torch.tensor(x), **kw).detach().numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=type(cm).__name__)
        assert list(dict(cm.named_parameters())) == list(dict(tm.named_parameters())), type(cm).__name__


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes(mode):
    caten.tensor.set_default_runtime("numpy")
    tm = torch.nn.Conv2d(2, 3, (3, 2), padding=(1, 1), padding_mode=mode)
    cm = caten.nn.Conv2d(2, 3, (3, 2), padding=(1, 1), padding_mode=mode)
    _load(cm, tm)
    x = np.random.default_rng(7).standard_normal((2, 2, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(cm(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


HALF = ["conv1d_groups_dil", "conv2d_depthwise", "conv3d_same", "convT2d", "unfold", "fold", "max_pool2d",
        "avg_pool2d"]


@pytest.mark.parametrize("dtype,tol", [("f16", dict(rtol=1e-2, atol=2e-2)), ("bf16", dict(rtol=2e-2, atol=0.1))])
def test_half_precision_forward(dtype, tol):
    """f16/bf16 values against torch's f64 result on the same rounded inputs (within the format's rounding)."""
    caten.tensor.set_default_runtime("numpy")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    rng = np.random.default_rng(11)
    got, want = [], []
    for name in HALF:
        fn, shapes, kw = CASES[name]
        ts = [None if s is None else torch.tensor(rng.standard_normal(s)).to(tdt) for s in shapes]
        want.append(getattr(TF, fn)(*[None if t is None else t.double() for t in ts], **kw).numpy())
        cs = [None if t is None else Tensor(t.double().numpy()).cast(dtype) for t in ts]
        got.append(getattr(CF, fn)(*cs, **kw).cast("f64"))
    realize([g.node for g in got], "numpy")
    for name, g, w in zip(HALF, got, want):
        np.testing.assert_allclose(g.numpy(), w, err_msg=name, **tol)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1)])
def test_max_pool2d_gradient_goes_to_the_first_maximum(kw):
    """Ties (zeros after a relu) and a nan: torch's gradient goes to each window's first maximum."""
    caten.tensor.set_default_runtime("numpy")
    x = np.array([[[[1, 1, 0, 0], [1, 1, 0, np.nan], [2, 0, 2, 0], [0, 0, 0, 2]]]], np.float32)
    tx, cx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    ty, cy = TF.max_pool2d(tx, **kw), CF.max_pool2d(cx, **kw)
    g = np.arange(1, ty.numel() + 1, dtype=np.float32).reshape(tuple(ty.shape))
    (ty * torch.tensor(g)).sum().backward()
    (cy * Tensor(g)).sum().backward()
    np.testing.assert_array_equal(cy.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(cx.grad.numpy(), tx.grad.numpy())
