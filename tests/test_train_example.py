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


def _with_a_gradient() -> np.ndarray:
    """A mask of Theta without the token MLP's output bias. That bias adds one constant per token
    across channels, which the layernorm over channels that follows removes: its gradient is
    exactly 0, and Adam turns the rounding noise in its place (+-1e-9, different in each system)
    into steps of +-lr."""
    sizes = [int(np.prod(shape)) for shape, _ in tm.LAYOUT]
    keep = np.ones(sum(sizes), bool)
    keep[sum(sizes[:7]):sum(sizes[:8])] = False
    return keep


def test_caten_and_torch_train_alike_for_two_epochs():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    data = tm.digits()
    theta = tm.init()
    _, caten_hist, caten_theta = tm.train_caten(data, theta, 2, 64, "llvm", quiet=True)
    _, torch_acc, torch_theta = tm.train_torch(data, theta, 2, 64)
    # every parameter with a gradient must agree (_with_a_gradient says which has none)
    keep = _with_a_gradient()
    # Adam's steps are lr * m / (sqrt(v) + eps): where a gradient is near eps, summation-order
    # differences (caten's vector width differs between AVX2 and AVX-512 hosts, and from torch's)
    # move a parameter by a fraction of lr, so agreement is bounded by 1% of lr (3e-5), as on OpenCL
    np.testing.assert_allclose(caten_theta[keep], torch_theta[keep], rtol=1e-4, atol=3e-5)
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


def test_one_train_step_on_opencl_matches_llvm(tmp_path):
    """The same step on PoCL (a real OpenCL platform): its source from `caten -r opencl -S` builds,
    and the runtime's step gives llvm's loss and new parameters."""
    cl = pytest.importorskip("pyopencl")
    import caten
    from caten import plugin

    ok, why = plugin.get("opencl").available()
    if not ok:
        pytest.skip(why)
    from tests.test_cli import caten_cli

    rc, out, err = caten_cli(["-r", "opencl", "-S", ROOT / "examples" / "train_mixer.lisp", "-o", "k.cl"], tmp_path)
    assert rc == 0, err
    ctx = cl.create_some_context(interactive=False)
    assert cl.Program(ctx, (tmp_path / "k.cl").read_text()).build().all_kernels()
    xtr, ytr, _, _ = tm.digits()
    theta = tm.init()
    args = [xtr[:37], ytr[:37], theta, np.zeros_like(theta), np.zeros_like(theta), np.array(1, np.int64)]
    got = caten.load(ROOT / "examples" / "train_mixer.lisp", runtime="opencl").train_step(*args)
    want = caten.load(ROOT / "examples" / "train_mixer.lisp", runtime="llvm").train_step(*args)
    keep = _with_a_gradient()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    # Adam's first step is lr * g / (|g| + eps): where |g| is near eps it magnifies the runtimes'
    # rounding differences in g, so parameters agree to 1% of lr (3e-3) rather than to ulps
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g[keep], w[keep], rtol=1e-4, atol=3e-5)
