"""Convolution speed structure and its custom gradient.

- The forward GEMM of a convolution merges the output rows and columns into the GEMM's columns
  (`GemmPlan.js`): before, each output row was its own small GEMM that packed the weights again
  (a 4x4 image: 4 columns of a 16-wide tile, 64x4 repacks of the weights per call).
- conv2d's `:vjp` (ops/nn.lisp) computes dX as a transposed convolution; checked against
  torch.autograd over random strides, paddings (beyond kernel-1 too), dilations and groups, on
  llvm and c (the rule has index arithmetic a wrong sign in which gives wrong values, not errors).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import caten
from caten.lower.trial import check_group
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.schedule import schedule
from caten.schedule.plan import gemm_plan

CONV = """(composite conv ((X{f32}[8, 16, 4, 4]) (Wt{f32}[32, 16, 3, 3]) -> (Y{f32}[8, 32, 4, 4]))
  (conv2d X Wt :padding 1))"""


def _gemms(text: str, name: str) -> list:
    src = read_text(text, "<test>", False)
    s = schedule(compile_program(src, src.entry(name), {}, {}, Options(runtime="llvm")), check=check_group)
    return [gemm_plan(st.node) for k in s.kernels for st in k.stages if st.mode == "tiled" and gemm_plan(st.node)]


def test_conv_gemm_columns_cover_the_image():
    (plan,) = _gemms(CONV, "conv")
    assert len(plan.js) == 2 and plan.N == 16 and plan.K == 16 * 9 and plan.M == 32, plan
    x = np.random.default_rng(0).random((8, 16, 4, 4), dtype=np.float32)
    w = np.random.default_rng(1).random((32, 16, 3, 3), dtype=np.float32)
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    for rt in ("llvm", "c"):
        got = caten.loads(CONV, runtime=rt).conv(x, w)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_columns_stay_one_axis():
    """A batched matmul's M axis is read by A: it never joins the columns."""
    (plan,) = _gemms("(composite mm ((A{f32}[3, 5, 7]) (B{f32}[3, 7, 9]) -> (C{f32}[3, 5, 9])) (matmul A B))",
                     "mm")
    assert plan.js == (plan.j,) and plan.N == 9


def _grad_source(n, c, h, w, o, kh, kw, s, p, d, g, oshape):
    x, wt, dy = f"{n}, {c}, {h}, {w}", f"{o}, {c // g}, {kh}, {kw}", ", ".join(map(str, oshape))
    kws = f":stride [{s[0]} {s[1]}] :padding [{p[0]} {p[1]}] :dilation [{d[0]} {d[1]}] :groups {g}"
    return f"""(composite l ((X{{f32}}[{x}]) (Wt{{f32}}[{wt}]) (D{{f32}}[{dy}]) -> (L{{f32}}))
  (sum (* (conv2d X Wt {kws}) D)))
(composite gr ((X{{f32}}[{x}]) (Wt{{f32}}[{wt}]) (D{{f32}}[{dy}]) -> (A{{f32}}[{x}]) (B{{f32}}[{wt}]))
  (setf r (grad l X Wt D :wrt [X Wt]))
  (return (nth r 0) (nth r 1)))"""


def _configs(count: int, seed: int) -> list:
    rnd, out = random.Random(seed), []
    while len(out) < count:
        g, cg, og = rnd.choice([1, 1, 2]), rnd.choice([1, 2, 3]), rnd.choice([1, 2])
        kh, kw = rnd.choice([1, 2, 3]), rnd.choice([1, 3])
        s, d = (rnd.choice([1, 2, 3]), rnd.choice([1, 2])), (rnd.choice([1, 2]), rnd.choice([1, 2]))
        p = (rnd.choice([0, 1, 2, 3]), rnd.choice([0, 1, 4]))
        h, w = rnd.randint(3, 9), rnd.randint(3, 9)
        if h + 2 * p[0] >= d[0] * (kh - 1) + 1 and w + 2 * p[1] >= d[1] * (kw - 1) + 1:
            out.append((rnd.choice([1, 2]), g * cg, h, w, g * og, kh, kw, s, p, d, g))
    return out


@pytest.mark.parametrize("cfg", _configs(12, 1), ids=lambda c: "n{}c{}h{}w{}o{}k{}x{}s{}p{}d{}g{}".format(*c))
def test_conv_vjp_matches_torch(cfg):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    n, c, h, w, o, kh, kw, s, p, d, g = cfg
    rng = np.random.default_rng(sum(map(hash, map(str, cfg))) % 2 ** 32)
    x = rng.random((n, c, h, w), dtype=np.float32)
    wt = rng.random((o, c // g, kh, kw), dtype=np.float32) - 0.5
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(wt, requires_grad=True)
    y = F.conv2d(tx, tw, stride=s, padding=p, dilation=d, groups=g)
    dy = rng.random(tuple(y.shape), dtype=np.float32) - 0.5
    (y * torch.tensor(dy)).sum().backward()
    src = _grad_source(n, c, h, w, o, kh, kw, s, p, d, g, tuple(y.shape))
    for rt in ("llvm", "c"):
        gx, gw = caten.loads(src, runtime=rt).gr(x, wt, dy)
        np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,c,h,w,o,g,s", [(1, 3, 4, 4, 8, 1, 1), (2, 4, 5, 3, 6, 2, 1), (3, 16, 4, 4, 32, 1, 1),
                                           (7, 2, 6, 7, 5, 1, 2), (5, 6, 3, 9, 4, 2, 2)])
def test_small_image_conv_packs_weights_once(n, c, h, w, o, g, s):
    """Few output columns and weights that no batch axis changes: the GEMM runs the batch loop
    itself (shared among the threads, an odd batch too) and packs the weights once."""
    torch = pytest.importorskip("torch")
    src = f"""(composite conv ((X{{f32}}[{n}, {c}, {h}, {w}]) (Wt{{f32}}[{o}, {c // g}, 3, 3]) -> (Y{{f32}}[...]))
  (conv2d X Wt :padding 1 :stride {s} :groups {g}))"""
    want_src = src.replace("(Y{f32}[...])", "(Y{f32}[{}])")
    rng = np.random.default_rng(n * 100 + c)
    x = rng.random((n, c, h, w), dtype=np.float32)
    wt = rng.random((o, c // g, 3, 3), dtype=np.float32) - 0.5
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), padding=1, stride=s, groups=g).numpy()
    text = want_src.replace("{}", ", ".join(map(str, want.shape)))
    plans = _gemms(text, "conv")
    assert plans and all(p.a_batch_free == (g == 1 and n > 1) for p in plans), plans
    for rt in ("llvm", "c"):
        np.testing.assert_allclose(caten.loads(text, runtime=rt).conv(x, wt), want, rtol=1e-5, atol=1e-5)
