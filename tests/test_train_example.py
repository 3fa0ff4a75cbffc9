"""examples/train_mixer.py: the Mixer classifier trained on scikit-learn's digits.

The caten training step and torch eager start from the same weights and see the same batches, so
their parameters must agree after two epochs (44 Adam steps; the gradients and Adam are checked
against torch on their own in test_grad_torch.py and test_optim.py); the full run must reach the
issue's 97% test accuracy, as `python examples/train_mixer.py` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("sklearn")
sys.path.insert(0, str(ROOT / "examples"))
import train_mixer as tm  # noqa: E402


def test_caten_and_torch_train_alike_for_two_epochs():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    data = tm.digits()
    theta = tm.init()
    _, caten_hist, caten_theta = tm.train_caten(data, theta, 2, 64, "llvm", quiet=True)
    _, torch_acc, torch_theta = tm.train_torch(data, theta, 2, 64)
    # the token MLP's output bias adds one constant per token across channels, which the layernorm
    # over channels that follows removes: its gradient is exactly 0, and Adam turns the rounding
    # noise in its place (+-1e-9, different in each system) into steps of +-lr. Every other
    # parameter must agree.
    sizes = [int(np.prod(shape)) for shape, _ in tm.LAYOUT]
    start = sum(sizes[:7])
    keep = np.ones(caten_theta.size, bool)
    keep[start:start + sizes[7]] = False
    np.testing.assert_allclose(caten_theta[keep], torch_theta[keep], rtol=1e-4, atol=1e-6)
    assert abs(caten_hist[-1][1] - torch_acc) <= 1 / 360 + 1e-9  # at most one test image apart
    assert caten_hist[0][0] > caten_hist[1][0]  # the loss falls


def test_train_mixer_reaches_97_percent(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "train_mixer.py")], capture_output=True, text=True,
                       timeout=900, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("caten (llvm): test accuracy")][-1]
    acc = float(line.split("test accuracy ")[1].split("%")[0])
    assert acc >= 97.0
    assert np.isfinite(acc)
