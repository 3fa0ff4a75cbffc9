"""The losses of LANGUAGE.md section 11 (ops/loss.lisp) against torch.nn.functional and numpy.

Each loss is compiled through the public API and called on data with the awkward values its
formula must survive (large logits, zero target probabilities, soft targets); the result must
be a rank-0 array of the input's dtype equal to torch's default-reduction value and to the
formula written directly in numpy. Runs on the numpy, llvm and c runtimes.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")
F = torch.nn.functional

RUNTIMES = ["numpy", "llvm", "c"]
NP = {"f32": np.float32, "f64": np.float64}
TOL = {"f32": dict(rtol=2e-6, atol=1e-7), "f64": dict(rtol=1e-13, atol=1e-15)}
B, C = 6, 5


@functools.cache
def _mod(name: str, dt: str, rt: str):
    src = f"(composite f ((A{{{dt}}}[B C] Y{{{dt}}}[B C]) -> (L{{{dt}}})) ({name} A Y))"
    return caten.loads(src, runtime=rt)


def _run(name: str, dt: str, rt: str, a: np.ndarray, y: np.ndarray) -> np.ndarray:
    got = _mod(name, dt, rt).f(a, y)
    assert got.shape == () and got.dtype == np.dtype(NP[dt]), (got.shape, got.dtype)
    return got


def _check(got, torch_val, numpy_val, dt: str) -> None:
    np.testing.assert_allclose(got, torch_val, **TOL[dt])
    np.testing.assert_allclose(got, numpy_val, **TOL[dt])


def _logp(dt: str, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((B, C)) * 3
    return (x - np.log(np.exp(x).sum(1, keepdims=True))).astype(NP[dt])


def _onehot(dt: str) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng(1).integers(0, C, B)
    return idx, np.eye(C, dtype=NP[dt])[idx]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_l1_loss(rt, dt):
    r = np.random.default_rng(2)
    a, b = (r.standard_normal((B, C)).astype(NP[dt]) for _ in range(2))
    got = _run("l1-loss", dt, rt, a, b)
    _check(got, F.l1_loss(torch.from_numpy(a), torch.from_numpy(b)).numpy(), np.abs(a - b).mean(), dt)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_nll_loss_with_a_one_hot_target(rt, dt):
    logp = _logp(dt)
    idx, onehot = _onehot(dt)
    logp[0, (idx[0] + 1) % C] = -np.inf  # a class of probability 0 that is not the target adds nothing
    got = _run("nll-loss", dt, rt, logp, onehot)
    want = F.nll_loss(torch.from_numpy(logp), torch.from_numpy(idx)).numpy()
    _check(got, want, -logp[np.arange(B), idx].mean(), dt)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_bce_with_logits_is_stable_and_takes_soft_targets(rt, dt):
    r = np.random.default_rng(3)
    z = (r.standard_normal((B, C)) * 4).astype(NP[dt])
    z[0, :4] = [120.0, -120.0, 1e-3, -40.0]  # exp(120) overflows f32: the naive formula gives inf/nan
    y = r.uniform(0, 1, (B, C)).astype(NP[dt])
    y[1, :3] = [0.0, 1.0, 0.5]
    got = _run("bce-with-logits", dt, rt, z, y)
    assert np.isfinite(got)
    want = F.binary_cross_entropy_with_logits(torch.from_numpy(z), torch.from_numpy(y)).numpy()
    zz, yy = z.astype(np.float64), y.astype(np.float64)
    ref = (np.maximum(zz, 0) - zz * yy + np.log1p(np.exp(-np.abs(zz)))).mean()
    _check(got, want, ref, dt)


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_kl_div_batchmean_with_zero_probabilities(rt, dt):
    logp = _logp(dt, 4)
    q = np.exp(_logp(dt, 5).astype(np.float64))
    q[2, 1] = 0.0  # 0 * log 0 = 0
    q = (q / q.sum(1, keepdims=True)).astype(NP[dt])
    got = _run("kl-div", dt, rt, logp, q)
    want = F.kl_div(torch.from_numpy(logp), torch.from_numpy(q), reduction="batchmean").numpy()
    qq, lp = q.astype(np.float64), logp.astype(np.float64)
    ref = np.where(qq == 0, 0.0, qq * (np.log(np.where(qq == 0, 1, qq)) - lp)).sum() / B
    _check(got, want, ref, dt)


def test_kl_div_needs_a_batch_axis():
    with pytest.raises(caten.Error, match="batch axis"):
        caten.loads("(composite f ((A{f32}) (Y{f32}) -> (L{f32})) (kl-div A Y))", runtime="numpy").f(
            np.float32(0), np.float32(1))
