"""Losses given class indices (as torch's), and the tensor modules reachable as attributes."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import Tensor


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_cross_entropy_and_nll_take_class_indices(index_dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    y = np.array([0, 4, 2, 2, 1, 3], dtype=index_dtype)
    a = Tensor(logits, requires_grad=True)
    loss = a.cross_entropy(Tensor(y))
    loss.backward()
    t = torch.tensor(logits, requires_grad=True)
    want = F.cross_entropy(t, torch.tensor(y.astype(np.int64)))
    want.backward()
    assert abs(loss.item() - want.item()) < 1e-6
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-6)
    logp = F.log_softmax(torch.tensor(logits), -1)
    got = caten.functional.nll_loss(Tensor(logp.numpy()), y).item()  # a numpy array of indices too
    assert abs(got - F.nll_loss(logp, torch.tensor(y.astype(np.int64))).item()) < 1e-6


def test_one_hot_targets_still_work_and_modules_are_attributes():
    logits = np.zeros((2, 3), np.float32)
    onehot = np.eye(3, dtype=np.float32)[[0, 2]]
    assert abs(Tensor(logits).cross_entropy(Tensor(onehot)).item() - np.log(3)) < 1e-6
    assert caten.nn.Linear and caten.optim.Adam and caten.functional.softmax
