"""Gradients against torch.autograd (LANGUAGE.md section 11): the loss is written in caten's
language, `value-and-grad` differentiates it, and torch computes the same loss and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from tests.gradcheck import assert_close, caten_grads, torch_grads

torch = pytest.importorskip("torch")
F = torch.nn.functional

_rng = np.random.default_rng(0)


def r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def onehot(idx: list[int], k: int) -> np.ndarray:
    return np.eye(k, dtype=np.float32)[idx]


def _causal(a, b, c, d):
    n = a.shape[0]
    s = (a @ b.T / 2).masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    return ((torch.softmax(s, -1) @ c) * d).sum()


CASES = {
    "mlp-gelu-cross-entropy": (
        "(cross-entropy (linear (gelu (linear A B C)) D E) F)",
        [r(4, 5), r(5, 6), r(6), r(6, 3), r(3), onehot([0, 2, 1, 0], 3)], [0, 1, 2, 3, 4],
        lambda a, b, c, d, e, f: -(f * torch.log_softmax(F.gelu(a @ b + c) @ d + e, -1)).sum(-1).mean()),
    # regression: the :vjp counted the batch from the target's shape ([K] broadcast: 1 row), twice torch's
    "cross-entropy-broadcast-target": ("(cross-entropy A B)", [r(2, 3), np.float32([0.2, 0.5, 0.3])], [0, 1],
                                       lambda a, b: -(b * torch.log_softmax(a, -1)).sum(-1).mean()),
    "conv2d-stride-padding-groups": (
        "(sum (* (conv2d A B C :stride 2 :padding 1 :groups 2) D))",
        [r(2, 4, 7, 7), r(6, 2, 3, 3), r(6), r(2, 6, 4, 4)], [0, 1, 2],
        lambda a, b, c, d: (F.conv2d(a, b, c, stride=2, padding=1, groups=2) * d).sum()),
    "conv2d-dilation": (
        "(sum (* (conv2d A B :padding 2 :dilation 2) C))", [r(1, 2, 6, 6), r(3, 2, 3, 3), r(1, 3, 6, 6)], [0, 1],
        lambda a, b, c: (F.conv2d(a, b, padding=2, dilation=2) * c).sum()),
    "max-pool2d": ("(sum (* (max-pool2d A :kernel 2) B))", [r(2, 3, 6, 6), r(2, 3, 3, 3)], [0],
                   lambda a, b: (F.max_pool2d(a, 2) * b).sum()),
    "max-pool2d-overlapping": (
        "(sum (* (max-pool2d A :kernel 3 :stride 1 :padding 1) B))", [r(1, 2, 5, 5), r(1, 2, 5, 5)], [0],
        lambda a, b: (F.max_pool2d(a, 3, 1, 1) * b).sum()),
    "avg-pool2d": ("(sum (* (avg-pool2d A :kernel 3 :stride 2 :padding 1) B))", [r(1, 2, 7, 7), r(1, 2, 4, 4)], [0],
                   lambda a, b: (F.avg_pool2d(a, 3, 2, 1) * b).sum()),
    "layernorm": ("(sum (* (layernorm A B C) D))", [r(3, 8), r(8), r(8), r(3, 8)], [0, 1, 2],
                  lambda a, b, c, d: (F.layer_norm(a, (8,), b, c) * d).sum()),
    "rmsnorm": ("(sum (* (rmsnorm A B) C))", [r(3, 8), r(8), r(3, 8)], [0, 1],
                lambda a, b, c: (a * torch.rsqrt((a * a).mean(-1, keepdim=True) + 1e-6) * b * c).sum()),
    "attention-causal": (
        """(let ((s (/ (matmul A (transpose B)) 2.0))
                 (n (dim A 0))
                 (mask (< (VIEW (arange n) :unsqueeze 1) (VIEW (arange n) :unsqueeze 0))))
             (sum (* (matmul (softmax (WHERE mask -inf s) :axis -1) C) D)))""",
        [r(5, 4), r(5, 4), r(5, 3), r(5, 3)], [0, 1, 2], _causal),
    "softmax-axis0": ("(sum (* (softmax A :axis 0) B))", [r(4, 5), r(4, 5)], [0],
                      lambda a, b: (torch.softmax(a, 0) * b).sum()),
    "log-softmax": ("(sum (* (log-softmax A :axis 1) B))", [r(3, 6), r(3, 6)], [0],
                    lambda a, b: (torch.log_softmax(a, 1) * b).sum()),
    "movement-slice-permute-flip-pad": (
        "(sum (* (pad (flip (permute (slice A [1 5 2] [0 3]) [1 0]) :axis 0) [[1 2] [0 1]]) B))", [r(6, 4), r(6, 3)],
        [0], lambda a, b: (F.pad(torch.flip(a[1:5:2, 0:3].T, [0]), (0, 1, 1, 2)) * b).sum()),
    "movement-reshape-expand-squeeze": (
        "(sum (* (expand (unsqueeze (reshape (transpose A) [2 6]) 0) [3 2 6]) B))", [r(4, 3), r(3, 2, 6)], [0],
        lambda a, b: (a.T.reshape(2, 6).unsqueeze(0).expand(3, 2, 6) * b).sum()),
    "movement-concat-contiguous": (
        "(sum (* (contiguous (concat A (squeeze B 0) :axis 1)) C))", [r(3, 2), r(1, 3, 4), r(3, 6)], [0, 1],
        lambda a, b, c: (torch.cat([a, b.squeeze(0)], 1) * c).sum()),
    "reductions-several-axes": (
        "(+ (sum (* (max A :axis [0 2]) B)) (sum (prod A :axis 1)) (mean (min A :axis [1 2])))", [r(3, 4, 5), r(4)],
        [0], lambda a, b: (a.amax((0, 2)) * b).sum() + a.prod(1).sum() + a.amin((1, 2)).mean()),
    "broadcasting": ("(sum (* (+ A B) (exp C)))", [r(3, 1, 5), r(4, 1), r(3, 4, 5)], [0, 1, 2],
                     lambda a, b, c: ((a + b) * torch.exp(c)).sum()),
    "elementwise-math": (
        "(sum (* (+ (softplus A) (log1p (* A A)) (tanh A) (sigmoid A) (erf A) (sin A) (cos A) (abs A) (relu A)) B))",
        [r(5, 3), r(5, 3)], [0],
        lambda a, b: ((F.softplus(a) + torch.log1p(a * a) + torch.tanh(a) + torch.sigmoid(a) + torch.erf(a)
                       + torch.sin(a) + torch.cos(a) + a.abs() + torch.relu(a)) * b).sum()),
    "pow-div-sqrt": ("(sum (* (+ (pow (+ (abs A) 0.5) B) (/ A (+ (* B B) 1)) (sqrt (+ (* A A) 1))) C))",
                     [r(4, 3), r(4, 3), r(4, 3)], [0, 1],
                     lambda a, b, c: (((a.abs() + 0.5) ** b + a / (b * b + 1) + torch.sqrt(a * a + 1)) * c).sum()),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_against_torch(name, runtime):
    body, arrays, wrt, fn = CASES[name]
    assert_close(caten_grads(body, arrays, wrt, runtime), torch_grads(fn, arrays, wrt), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["mlp-gelu-cross-entropy", "conv2d-stride-padding-groups", "layernorm",
                                  "attention-causal", "movement-slice-permute-flip-pad"])
def test_against_torch_on_c(name):
    body, arrays, wrt, fn = CASES[name]
    assert_close(caten_grads(body, arrays, wrt, "c"), torch_grads(fn, arrays, wrt), rtol=1e-4, atol=1e-4)


DYNAMIC = """
(composite loss ((X{f32}[B, 5], W1{f32}[5, 6], b1{f32}[6], W2{f32}[6, 4], b2{f32}[4], T{f32}[B, 4]) -> (L{f32}))
  (cross-entropy (linear (tanh (linear X W1 b1)) W2 b2) T))
(composite step ((X{f32}[B, 5], W1{f32}[5, 6], b1{f32}[6], W2{f32}[6, 4], b2{f32}[4], T{f32}[B, 4])
                 -> (L{f32}, G1{f32}[5, 6], g1{f32}[6], G2{f32}[6, 4], g2{f32}[4]))
  (setf r (value-and-grad loss X W1 b1 W2 b2 T :wrt [W1 b1 W2 b2]))
  (return (nth r 0) (nth r 1) (nth r 2) (nth r 3) (nth r 4)))
"""


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_dynamic_batch_called_at_two_sizes(runtime):
    """One compiled program, B symbolic, called with B = 3 and B = 7."""
    mod = caten.loads(DYNAMIC, runtime=runtime)
    params = [r(5, 6), r(6), r(6, 4), r(4)]
    for b in (3, 7):
        arrays = [r(b, 5), *params, onehot(list(_rng.integers(0, 4, b)), 4)]
        got = [np.asarray(x) for x in mod.step(*arrays)]
        want = torch_grads(lambda x, w1, b1, w2, b2, t: -(t * torch.log_softmax(
            torch.tanh(x @ w1 + b1) @ w2 + b2, -1)).sum(-1).mean(), arrays, [1, 2, 3, 4])
        assert_close(got, want, rtol=1e-4, atol=1e-5)


SGD_LOOP = """
(composite loss ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (L{f32}))
  (mse (matmul X W) Y))
(composite train ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (W2{f32}[D, K]))
  (dotimes (i 4)
    (setf W (- W (* 0.1 (grad loss X W Y :wrt W)))))
  W)
"""


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_dotimes_runs_several_sgd_steps_in_one_composite(runtime):
    x, w, y = r(6, 3), r(3, 2), r(6, 2)
    wt = torch.tensor(w, requires_grad=True)
    opt = torch.optim.SGD([wt], lr=0.1)
    for _ in range(4):
        opt.zero_grad()
        F.mse_loss(torch.tensor(x) @ wt, torch.tensor(y)).backward()
        opt.step()
    got = caten.loads(SGD_LOOP, runtime=runtime, defines={"B": 6, "D": 3, "K": 2}).train(x, w, y)
    np.testing.assert_allclose(got, wt.detach().numpy(), rtol=1e-5, atol=1e-6)


OPTIMIZED = """
(composite loss ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (L{f32}))
  (cross-entropy (tanh (matmul X W)) Y))
(composite train ((X{f32}[B, D], W{f32}[D, K], Y{f32}[B, K]) -> (W2{f32}[D, K]))
  (setf M (zeros (shape W)))
  (setf V (zeros (shape W)))
  (dotimes (i 3)
    (setf g (grad loss X W Y :wrt W))
    UPDATE)
  W)
"""
UPDATES = {
    "sgd": ("(setf W (sgd-update W g :lr 0.1 :weight-decay 0.01))",
            lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.01)),
    "momentum": ("(setf r (momentum-update W g M :lr 0.1 :momentum 0.9 :nesterov true)) (setf W (nth r 0)) "
                 "(setf M (nth r 1))", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    "adam": ("(setf r (adam-update W g M V (+ i 1) :lr 0.01 :weight-decay 0.01)) (setf W (nth r 0)) "
             "(setf M (nth r 1)) (setf V (nth r 2))", lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01)),
    "adamw": ("(setf r (adamw-update W g M V (+ i 1) :lr 0.01)) (setf W (nth r 0)) (setf M (nth r 1)) "
              "(setf V (nth r 2))", lambda p: torch.optim.AdamW(p, lr=0.01)),
}


@pytest.mark.parametrize("name", sorted(UPDATES))
@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_each_optimizer_over_three_steps_of_gradients(name, runtime):
    """grad + the library's update in a dotimes loop, against torch.autograd + torch.optim."""
    update, make = UPDATES[name]
    x, w, y = r(6, 4), r(4, 3), onehot([0, 1, 2, 1, 0, 2], 3)
    wt = torch.tensor(w, requires_grad=True)
    opt = make([wt])
    for _ in range(3):
        opt.zero_grad()
        (-(torch.tensor(y) * torch.log_softmax(torch.tanh(torch.tensor(x) @ wt), -1)).sum(-1).mean()).backward()
        opt.step()
    src = OPTIMIZED.replace("UPDATE", update)
    got = caten.loads(src, runtime=runtime, defines={"B": 6, "D": 4, "K": 3}).train(x, w, y)
    np.testing.assert_allclose(got, wt.detach().numpy(), rtol=1e-5, atol=1e-6)
