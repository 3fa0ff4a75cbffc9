"""examples/mnist_tensor.py: an MLP and a CNN trained on scikit-learn's digits with caten.Tensor.

Both models must reach the issue's 95% test accuracy with the example's own training function and
default epochs, the jitted step traced once (the short last batch is dropped, so every batch has
one shape). The jitted step itself is checked against torch eager: the same initial weights and
batches must give the same parameters after a few Adam steps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("sklearn")
sys.path.insert(0, str(ROOT / "examples"))
import mnist_tensor as mt  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return mt.digits()


def test_split_and_scaling(data):
    xtr, ytr, xte, yte = data
    assert xtr.shape == (1437, 1, 8, 8) and xte.shape == (360, 1, 8, 8)
    assert xtr.dtype == np.float32 and 0.0 <= xtr.min() and xtr.max() == 1.0
    assert sorted(set(ytr.tolist())) == list(range(10)) and len(ytr) == 1437 and len(yte) == 360


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_model_reaches_95_percent(data, name):
    r = mt.train(name, data, quiet=True)
    assert len(r.history) == mt.MODELS[name].epochs
    assert r.traces == 1  # one batch shape: one trace, one compiled training program
    first_loss, last_loss = r.history[0][0], r.history[-1][0]
    assert last_loss < first_loss / 5, r.history
    assert r.test_accuracy >= 0.95, r.history


def test_jitted_step_matches_torch(data):
    """Five Adam steps of the example's jitted MLP step against torch.optim.Adam from the same weights."""
    torch = pytest.importorskip("torch")
    import caten
    from caten import Tensor, optim

    torch.set_num_threads(1)
    xtr, ytr, _, _ = data
    caten.tensor.set_default_runtime("llvm")
    caten.manual_seed(3)
    model = mt.mlp()
    ref = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ref.load_state_dict({k: torch.tensor(np.array(v)) for k, v in model.state_dict().items()})
    step = mt.train_step(model, optim.Adam(model.parameters(), lr=1e-2))
    topt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    onehot = np.eye(10, dtype=np.float32)[ytr]
    for b in range(5):
        idx = np.arange(b * 64, (b + 1) * 64)
        loss, logits = step(Tensor(xtr[idx]), Tensor(onehot[idx]))
        topt.zero_grad()
        tlogits = ref(torch.tensor(xtr[idx]))
        tloss = torch.nn.functional.cross_entropy(tlogits, torch.tensor(ytr[idx]))
        tloss.backward()
        topt.step()
        assert abs(loss.item() - tloss.item()) < 1e-4 * max(1.0, abs(tloss.item()))
        np.testing.assert_allclose(logits.numpy(), tlogits.detach().numpy(), rtol=1e-4, atol=1e-4)
    got = model.state_dict()
    for k, v in ref.state_dict().items():
        # Adam's first steps move each weight by about lr: summation order differs, so 1% of lr
        np.testing.assert_allclose(got[k], v.numpy(), atol=1e-4, err_msg=k)
