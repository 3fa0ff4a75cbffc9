"""`caten.from_torch` (LANGUAGE.md section 13): torch.export -> caten, outputs against torch itself."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.export import Dim  # noqa: E402

import caten  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.lin = nn.Conv2d(2, 4, 3, padding=1), nn.Linear(36, 5)

    def forward(self, x):
        return self.lin(torch.flatten(F.max_pool2d(torch.relu(self.c(x)), 2), 1))


class MixerBlock(nn.Module):
    def __init__(self, t=6, c=8, ht=12, hc=16):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.t1, self.t2 = nn.Linear(t, ht), nn.Linear(ht, t)
        self.c1, self.c2 = nn.Linear(c, hc), nn.Linear(hc, c)

    def forward(self, x):
        x = x + self.t2(F.gelu(self.t1(self.n1(x).transpose(1, 2)))).transpose(1, 2)
        return x + self.c2(F.gelu(self.c1(self.n2(x))))


class CausalSelfAttention(nn.Module):
    def __init__(self, c=8, h=2):
        super().__init__()
        self.h, self.qkv, self.o = h, nn.Linear(c, 3 * c), nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).contiguous().view(b, t, c))


def check(module: nn.Module, shape: tuple, batches=(None,), dynamic: bool = False, runtime: str = "llvm") -> object:
    """Capture and compile `module` once, compare it with torch at each batch size; the module."""
    torch.manual_seed(0)
    module = module.eval()
    x = torch.randn(*shape)
    ds = {"x": {0: Dim("batch")}} if dynamic else None
    cm = caten.from_torch(module, (x,), dynamic_shapes=ds, runtime=runtime)
    assert "(composite forward" in cm.source
    for b in batches:
        xb = x if b is None else torch.randn(b, *shape[1:])
        with torch.no_grad():
            want = module(xb).numpy()
        got = cm(xb)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))
        np.testing.assert_allclose(cm(xb.numpy()), got)  # numpy arrays are accepted as well
    return cm


@pytest.mark.parametrize("runtime", ["llvm", "numpy"])
def test_mlp(runtime):
    check(MLP(), (3, 16), runtime=runtime)


def test_small_cnn():
    cm_text = check(CNN(), (2, 2, 6, 6)).source
    assert "(conv2d " in cm_text and "(max-pool2d " in cm_text


def test_mlp_mixer_block():
    check(MixerBlock(), (2, 6, 8))


def test_causal_self_attention():
    check(CausalSelfAttention(), (2, 5, 8))


@pytest.mark.parametrize("model,shape", [(MLP, (3, 16)), (CNN, (2, 2, 6, 6)), (CausalSelfAttention, (2, 5, 8))])
def test_dynamic_batch_two_sizes_one_program(model, shape):
    """One capture with a symbolic batch dim, called at two batch sizes."""
    cm = check(model(), shape, batches=(2, 5), dynamic=True)
    assert "[s" in cm.source  # the batch is a dim symbol of the signature, not a number


def test_unsupported_aten_op_is_a_diagnostic():
    class NonZero(nn.Module):  # an output shape known only from the values
        def forward(self, x):
            return torch.nonzero(x)

    with pytest.raises(caten.Error, match="nonzero"):
        caten.from_torch(NonZero(), (torch.randn(4),))


def test_refusal_names_every_missing_op():
    """One Error lists all the ATen ops caten lacks, not only the first one met."""
    torch = pytest.importorskip("torch")
    import caten
    from caten.errors import Error

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x) + torch.special.bessel_j1(x)

    with pytest.raises(Error) as e:
        caten.from_torch(M(), (torch.randn(3),))
    msg = str(e.value)
    assert "special_bessel_j0" in msg and "special_bessel_j1" in msg


class _Pow(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.e = e

    def forward(self, x):
        return torch.pow(x, self.e)


@pytest.mark.parametrize("e", [2, 3, 2.0, 3.0, -1.0, -2.0, 1.5, 4, 0.5])
@pytest.mark.parametrize("dt", [torch.float16, torch.float32, torch.float64])
def test_pow_by_a_constant_rounds_as_torch(e, dt):
    """x ** 2, 3, -1 and -2 are ATen's formulas (x*x*x: bit for bit torch's, and no transcendental
    in GPT-2's GELU); any other exponent is pow, within an ulp of torch; zeros, infinities, nan."""
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=dt) * 10
    if e in (1.5, 0.5):
        x = x.abs()
    x[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")], dtype=dt)
    want = _Pow(e)(x).numpy()
    got = np.asarray(caten.from_torch(_Pow(e), (x,))(x.numpy()))
    if e in (2, 3, -1, -2) and dt != torch.float16:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=3 * np.finfo(want.dtype).eps, atol=0)
