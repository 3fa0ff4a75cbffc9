"""examples/char_lstm.lisp, a character LSTM language model whose training step and sampler are
each one program (scans), against torch on a tiny config: the step's loss and Adam's updated
parameters, greedy tokens of one sampler program at two generation lengths, and the Gumbel-max
draws of temperature sampling recomputed from caten's own `rand` stream in torch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import caten

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import char_lstm as ex  # noqa: E402

V, H, T, B = 10, 16, 8, 3
RTS = ["numpy", "llvm"]  # the training step on llvm only: the interpreter takes 10 s over its gradient


@pytest.fixture(scope="module", params=RTS)
def model(request):
    return caten.load(EXAMPLES / "char_lstm.lisp", runtime=request.param)


@pytest.fixture(scope="module")
def llvm_model():
    return caten.load(EXAMPLES / "char_lstm.lisp", runtime="llvm")


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, 200)
    return ex.init(V, H, seed), [ex.batch(ids, T, B, rng) for _ in range(3)]


def test_training_steps_match_torch(llvm_model):
    """Three Adam steps: each step's loss and the parameters after it equal torch's (rtol 1e-4)."""
    torch = pytest.importorskip("torch")
    theta, batches = _data()
    tm = ex.TorchModel(theta, V, H)
    state = [theta, np.zeros_like(theta), np.zeros_like(theta)]
    z = np.zeros((B, H), np.float32)
    for step, (x, y) in enumerate(batches, 1):
        loss, *state = llvm_model.train_step(ex.onehot(x, V), ex.onehot(y, V), z, z, *state, np.int64(step))
        want = tm.step(x, y)
        np.testing.assert_allclose(loss, want, rtol=1e-4)
        got = ex.unpack(state[0], V, H)
        with torch.no_grad():
            ref = [tm.lstm.weight_ih_l0, tm.lstm.weight_hh_l0, tm.lstm.bias_ih_l0 + tm.lstm.bias_hh_l0,
                   tm.head.weight, tm.head.bias]
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_one_sampler_program_serves_two_lengths(model):
    """Greedy decoding of 5 and 13 characters by the same compiled sampler (the length a dim)
    gives torch's greedy loop's tokens."""
    pytest.importorskip("torch")
    theta = (ex.init(V, H, 3) * 4).astype(np.float32)  # larger weights: varied, well-separated logits
    tm = ex.TorchModel(theta, V, H)
    prime = np.array([1, 4, 2], np.int64)
    z = np.zeros((1, H), np.float32)
    for n in (5, 13):
        got = model.sample(ex.onehot(prime, V)[:, None], z, z, theta, np.int64(0), np.float32(0.0),
                           np.zeros(n, np.float32))
        np.testing.assert_array_equal(got, tm.sample(prime, n))
    assert len(set(got.tolist())) > 1
    assert len(model.sample._variants) == 1


RAND = "(composite u ((S{i64}[]) (P{f32}[V]) -> (U{f32}[1, V])) (rand [1 (dim P 0)] :seed S))"


def test_temperature_sampling_is_gumbel_max_under_the_seed(model):
    """Temperature 0.7: token k is argmax(logits / 0.7 - log(-log(u_k))), u_k = rand([1, V]) under
    seed + k, recomputed here in torch from caten's rand stream; the same seed repeats the draw."""
    torch = pytest.importorskip("torch")
    theta = ex.init(V, H, 5)
    tm = ex.TorchModel(theta, V, H)
    u = caten.loads(RAND, runtime="numpy").u
    prime = np.array([7], np.int64)
    z = np.zeros((1, H), np.float32)
    args = (ex.onehot(prime, V)[:, None], z, z, theta, np.int64(11), np.float32(0.7), np.zeros(9, np.float32))
    got = model.sample(*args)
    np.testing.assert_array_equal(model.sample(*args), got)
    want = []
    with torch.no_grad():
        out, state = tm.lstm(torch.nn.functional.one_hot(torch.tensor(prime), V).float()[:, None])
        logits = tm.head(out[-1, 0])
        for k in range(9):
            g = -torch.log(-torch.log(torch.tensor(u(np.int64(11 + k), np.zeros(V, np.float32))[0])))
            tok = int((logits / torch.tensor(0.7, dtype=torch.float32) + g).argmax())
            want.append(tok)
            out, state = tm.lstm(torch.nn.functional.one_hot(torch.tensor([[tok]]), V).float(), state)
            logits = tm.head(out[0, 0])
    np.testing.assert_array_equal(got, want)
