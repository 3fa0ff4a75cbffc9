"""torch.export's control flow imported by caten.from_torch as loops and branches: nn.LSTM over
a dynamic length (one compile for lengths 1, 7 and 500), torch's scan reversed, while_loop
(Newton's square root, run until converged), torch.cond (both branches taken), and nn.LSTM /
nn.GRU at a static length imported as one scan per layer and direction; values vs torch."""

import numpy as np
import pytest

import caten
from caten.frontends.torch.export import TorchModule

torch = pytest.importorskip("torch")
from torch._higher_order_ops.scan import scan  # noqa: E402
from torch._higher_order_ops.while_loop import while_loop  # noqa: E402

RUNTIMES = ["numpy", "llvm", "c"]


class Control(torch.nn.Module):
    """nn.LSTM over a dynamic length (imported as torch's scan), a reversed scan, a while_loop
    and a cond."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = torch.nn.LSTM(3, 4)

    def forward(self, x, a):
        y, (h, c) = self.lstm(x)
        rc, ry = scan(lambda c, xt: (c * 0.5 + xt.sum(0), c.sum()), a[:3] * 0, x, reverse=True)
        sq, k = while_loop(lambda s, k: ((s * s - a).abs().max() > 1e-5) & (k < 50),
                           lambda s, k: (0.5 * (s + a / s), k + 1), (a.clone(), torch.tensor(0)))
        br = torch.cond(a.sum() > 10, lambda u, v: (u * 2 + v.sum(), v.exp()), lambda u, v: (u.sin(), v * 3), (a, rc))
        return (y, h, c, rc, ry, sq, k) + br


A = torch.tensor([2.0, 9.0, 0.5, 30.0])
A_SMALL = torch.tensor([0.25, 1.0, 4.0, 0.09])  # the cond's other branch


@pytest.fixture(scope="module")
def control():
    """(module, the imported one): torch.export once (tracing torch's scan takes seconds); the
    test compiles its text per runtime."""
    m = Control().eval()
    T = torch.export.Dim("T", min=1, max=1000)
    return m, caten.from_torch(m, (torch.randn(7, 2, 3), A), dynamic_shapes=({0: T}, None), runtime="numpy")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_scan_while_cond_one_compile_every_length(runtime, control):
    m, imported = control
    cm = TorchModule(imported.source, imported.inputs, imported.weights, runtime)
    assert cm.source.count("(scan ") == 2 and cm.source.count("(while ") == 1 and cm.source.count("(if ") == 1
    long = 500 if runtime != "numpy" else 20  # (the reference interpreter runs trips in Python)
    for steps, a in ((1, A), (7, A), (long, A), (7, A_SMALL)):
        x = torch.randn(steps, 2, 3, generator=torch.Generator().manual_seed(steps))
        got = cm(x, a)
        with torch.no_grad():
            want = m(x, a)
        assert len(got) == len(want) == 9
        for j, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"length {steps} result {j}")
        np.testing.assert_allclose(got[5], np.sqrt(a.numpy()), rtol=1e-5)


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lstm = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2)
        self.gru = torch.nn.GRU(3, 5, batch_first=True)

    def forward(self, x, h0):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(x.transpose(0, 1), h0)
        return y, h, c, z, hg


def test_nn_lstm_gru_import_as_scans(runtime="numpy"):
    """(The compiled runtimes run these scans in test_nn_rnn and above: the import is the same.)"""
    m = Recurrent().eval()
    r = torch.Generator().manual_seed(2)
    x, h0 = torch.randn(6, 2, 3, generator=r), torch.randn(1, 2, 5, generator=r)
    cm = caten.from_torch(m, (x, h0), runtime=runtime)
    assert cm.source.count("(scan ") == 5  # LSTM: 2 layers x 2 directions; GRU: 1
    with torch.no_grad():
        want = m(x, h0)
    for j, (g, w) in enumerate(zip(cm(x, h0), want)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"result {j}")
