"""`caten.from_torch` imports real models (random weights, eval mode) and matches torch: the
torchvision CNNs (eval BatchNorm, ReLU6), a ViT, and transformers' GPT-2 and BERT (gathers by
index tensors, running sums, the metadata checks torch.export leaves after a cast). The
BatchNorm statistics are drawn too, so the normalization is not the identity, and outputs are
compared relative to their scale.

CI runs one model of each family (a capture costs seconds of torch.export and decomposition):
mobilenet_v2, efficientnet_b0 (the inverted-residual blocks of mobilenet_v3_small, with relu6,
SiLU, sigmoid gating) and the small ViT (the architecture of vit_b_16) run with CATEN_SLOW=1."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


def _randomize_norms(m) -> None:
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.bias.shape, generator=g) * 0.1)


def _vision(name: str):
    def build():
        m = getattr(torchvision.models, name)()
        _randomize_norms(m)
        return m.eval(), (torch.randn(1, 3, 64, 64),)
    return build


def _vit():
    from torchvision.models import VisionTransformer

    m = VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
    torch.nn.init.normal_(m.heads.head.weight)  # torchvision starts the head at zero
    return m.eval(), (torch.randn(1, 3, 32, 32),)


def _vit_b_16():
    """ViT-B/16's own architecture (12 layers, width 768, 86M random weights) on a 32x32 image: 4
    patches and the class token, so torch allows it; ~30 s cold on one core (the slowest
    from_torch test: the weights dominate)."""
    m = torchvision.models.vit_b_16(image_size=32)
    torch.nn.init.normal_(m.heads.head.weight, std=0.02)  # torchvision starts the head at zero
    return m.eval(), (torch.randn(1, 3, 32, 32),)


class _Last(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids).last_hidden_state


def _gpt2():
    tr = pytest.importorskip("transformers")
    cfg = tr.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, bos_token_id=0, eos_token_id=0,
                        use_cache=False)
    return _Last(tr.GPT2Model(cfg)).eval(), (torch.randint(0, 100, (1, 9)),)


def _bert():
    tr = pytest.importorskip("transformers")
    cfg = tr.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                        vocab_size=100)
    return _Last(tr.BertModel(cfg)).eval(), (torch.randint(0, 100, (1, 9)),)


MODELS = {"resnet18": _vision("resnet18"), "mobilenet_v2": _vision("mobilenet_v2"),
          "mobilenet_v3_small": _vision("mobilenet_v3_small"), "efficientnet_b0": _vision("efficientnet_b0"),
          "vit": _vit, "vit_b_16": _vit_b_16, "gpt2": _gpt2, "bert": _bert}


SLOW = {"mobilenet_v2", "efficientnet_b0", "vit"}
_SKIP = pytest.mark.skipif(os.environ.get("CATEN_SLOW") != "1", reason="CATEN_SLOW=1 runs it (the family runs in CI)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_SKIP) if n in SLOW else n for n in MODELS])
def test_model_matches_torch(name):
    torch.manual_seed(0)
    m, args = MODELS[name]()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = m(*args).numpy()
        got = caten.from_torch(m, args)(*[a.numpy() for a in args])
    got = got[0] if isinstance(got, (list, tuple)) else got
    scale = float(np.abs(ref).max())
    assert scale > 1e-3, f"{name}: a degenerate output ({scale}) would compare nothing"
    assert got.shape == ref.shape
    np.testing.assert_allclose(got / scale, ref / scale, rtol=1e-3, atol=1e-4)


class _Ops(torch.nn.Module):
    def forward(self, x, i, j, k):
        a = x[i]                                  # one index tensor
        b = x[:, i]                               # after a whole axis
        c = x[i, j]                               # two, broadcast together
        d = torch.gather(x, 1, k)
        e = torch.cumsum(x, 1) + torch.nn.functional.relu6(x * 8) + torch.nn.functional.hardtanh(x, -0.5, 0.25)
        e = e + torch.nn.functional.silu(x) * torch.sigmoid(x)  # efficientnet's SiLU and gating
        return a.sum() + b.sum() + c.sum() + d.sum() + e.float().sum()


def test_index_gather_cumsum_activations_and_casts_match_torch():
    torch.manual_seed(0)
    x = torch.randn(5, 6)
    i = torch.tensor([[0, -1], [4, 2]])
    j = torch.tensor([[5, -6]])
    k = (torch.arange(30).reshape(5, 6) * 7) % 6
    m = _Ops().eval()
    with torch.no_grad():
        ref = m(x, i, j, k).numpy()
        got = caten.from_torch(m, (x, i, j, k))(x.numpy(), i.numpy(), j.numpy(), k.numpy())
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_index_on_axes_apart_is_refused_naming_the_node():
    class Apart(torch.nn.Module):
        def forward(self, x, i):
            return x[i, :, i]

    x, i = torch.randn(3, 4, 5), torch.tensor([0, 2])
    with pytest.raises(caten.Error, match="not consecutive"):
        caten.from_torch(Apart(), (x, i))
