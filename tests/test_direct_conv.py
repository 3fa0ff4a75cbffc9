"""Direct convolution (caten.schedule.direct, `DirectMM`): stride-1 convolutions that keep the
image's width are summed by tiles that load the image in place, with no im2col copy.

- The analysis recognizes exactly the convolutions a direct tile can read (padding that keeps
  the width, any dilation, taps up to 7x7) and leaves the others to the packed GEMM (strides,
  a narrower output, groups, which change the weights with the batch).
- Every case is checked against an independent reference (a numpy sum over the window
  positions of the padded image) on odd sizes: 1 and 13 channels, rows that are not a whole
  tile, 65 channels (two passes of the tiles), images narrower than a tile, symbolic dims.
- Memory safety: the same programs run with every load and store checked (`check_bounds`,
  which runs `DirectMM.expand()`'s plain loops) and with the AVX2 target's tiles; a property
  test draws random shapes, windows, paddings and dilations.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caten
from caten.ir.graph import toposort
from caten.ir.ops import Op
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text
from caten.schedule.plan import direct_tiles, gemm_plan


def reference(x: np.ndarray, w: np.ndarray, pad: tuple[int, int], dil: tuple[int, int] = (1, 1)) -> np.ndarray:
    """Stride-1 convolution as a sum over window positions of the zero-padded image (float64)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh, ow = h + 2 * pad[0] - dil[0] * (kh - 1), wd + 2 * pad[1] - dil[1] * (kw - 1)
    y = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dil[0]:i * dil[0] + oh, j * dil[1]:j * dil[1] + ow]
            y += np.einsum("nchw,oc->nohw", win, w[:, :, i, j].astype(np.float64))
    return y


def source(shape_x: str, shape_w: str, shape_y: str, opts: str) -> str:
    return (f"(composite conv ((X{{f32}}[{shape_x}]) (Wt{{f32}}[{shape_w}]) -> (Y{{f32}}[{shape_y}]))\n"
            f"  (conv2d X Wt {opts}))")


def plans(text: str) -> list:
    src = read_text(text, "<test>", False)
    prog = compile_program(src, src.entry("conv"), {}, {}, Options(runtime="llvm"))
    with direct_tiles(True):
        return [gemm_plan(n) for n in toposort(list(prog.nodes)) if n.op is Op.REDUCE and gemm_plan(n)]


@pytest.mark.parametrize("opts, wshape, yshape, direct", [
    (":padding 1", "8, 4, 3, 3", "2, 8, 9, 10", True),
    (":padding [2 2] :dilation 2", "8, 4, 3, 3", "2, 8, 9, 10", True),
    (":padding 0", "8, 4, 3, 3", "2, 8, 7, 8", False),  # (a narrower output: rows do not line up)
    (":padding 1 :stride 2", "8, 4, 3, 3", "2, 8, 5, 5", False),
    (":padding 1 :groups 2", "8, 2, 3, 3", "2, 8, 9, 10", False),
])
def test_which_convolutions_read_in_place(opts, wshape, yshape, direct):
    (plan,) = plans(source("2, 4, 9, 10", wshape, yshape, opts))
    assert (plan.direct is not None) is direct, plan
    if direct:
        assert len(plan.direct.positions()) == 9 and len(plan.js) == 2 and plan.K == 36


def test_direct_plan_facts():
    """conv f's reading: the image's channel stride, the taps' offsets and the padding bounds."""
    (plan,) = plans(source("8, 64, 56, 56", "64, 64, 3, 3", "8, 64, 56, 56", ":padding 1"))
    d = plan.direct
    assert d is not None and plan.red == d.red and d.extents == (3, 3) and d.width == 56
    coef = dict(d.coef)
    assert coef[d.inner] == 56 * 56 and [coef[a] for a in d.taps] == [56, 1] and d.const == -57
    assert [(b.lane, b.shifts, b.lo, b.hi) for b in d.bounds] == [(0, (1, 0), 1, 57), (1, (0, 1), 1, 57)]
    assert plan.kc == plan.K == 576 and plan.M == 64 and plan.N == 56 * 56


CASES = [
    # N, C, H, W, O, kernel, padding, dilation
    (2, 3, 5, 7, 4, (3, 3), (1, 1), (1, 1)),
    (1, 1, 1, 1, 1, (3, 3), (1, 1), (1, 1)),
    (3, 13, 9, 13, 27, (3, 3), (1, 1), (1, 1)),
    (2, 65, 6, 11, 13, (3, 3), (1, 1), (1, 1)),  # 65 channels: two passes of the tiles
    (1, 7, 17, 40, 5, (5, 5), (2, 2), (1, 1)),
    (2, 5, 12, 9, 7, (3, 3), (2, 2), (2, 2)),
    (1, 6, 8, 8, 3, (1, 3), (0, 1), (1, 1)),
    (2, 4, 70, 3, 66, (3, 3), (1, 1), (1, 1)),
    (1, 8, 3, 150, 9, (3, 3), (1, 1), (1, 1)),  # rows wider than the packed GEMM merges
]


def _text(case, symbolic: bool = False) -> str:
    n, c, h, w, o, k, p, d = case
    sx = "N, C, H, W" if symbolic else f"{n}, {c}, {h}, {w}"
    sw = f"{'O, C' if symbolic else f'{o}, {c}'}, {k[0]}, {k[1]}"
    oh, ow = h + 2 * p[0] - d[0] * (k[0] - 1), w + 2 * p[1] - d[1] * (k[1] - 1)
    sy = "N, O, H, W" if symbolic else f"{n}, {o}, {oh}, {ow}"
    return source(sx, sw, sy, f":padding [{p[0]} {p[1]}] :dilation [{d[0]} {d[1]}]")


def _run(case, runtime: str = "llvm", symbolic: bool = False, **kw) -> tuple[np.ndarray, np.ndarray]:
    n, c, h, w, o, k, p, d = case
    text = _text(case, symbolic)
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, *k)).astype(np.float32)
    got = caten.loads(text, runtime=runtime, use_cache=False, **kw).conv(x, wt)
    return got, reference(x, wt, p, d)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    big = float(np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * max(1.0, big))


@pytest.mark.parametrize("case", CASES)
def test_direct_conv_matches_reference(case):
    found = plans(_text(case))
    # (one pixel and one output channel: a dot product, no GEMM to plan)
    assert [p.direct is not None for p in found] == ([] if case[2:5] == (1, 1, 1) else [True])
    _close(*_run(case))


@pytest.mark.parametrize("case", CASES[:4])
def test_direct_conv_symbolic_dims(case):
    _close(*_run(case, symbolic=True))


@pytest.mark.parametrize("case", CASES[:3] + CASES[5:6])
def test_direct_conv_every_access_checked(case):
    """The plain loops of `DirectMM.expand()` under the bounds checker: no load outside the image."""
    _close(*_run(case, check_bounds=True))


@pytest.mark.parametrize("case", CASES[2:4])
def test_direct_conv_avx2_tiles(case):
    """The AVX2 target's tiles (6x16, masked loads by an AND): compiled for znver3, run here."""
    _close(*_run(case, target="znver3"))


def test_direct_conv_epilogue_and_gradient():
    """bias and relu after the sum, and the gradient of the input (a convolution of dY with the
    flipped weights: direct too) against finite sums in float64."""
    text = """(composite f ((X{f32}[2, 5, 7, 6]) (Wt{f32}[4, 5, 3, 3]) (b{f32}[4]) -> (Y{f32}[2, 4, 7, 6]))
  (relu (conv2d X Wt b :padding 1)))"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    got = caten.loads(text, use_cache=False).f(x, w, b)
    want = np.maximum(reference(x, w, (1, 1)) + b[None, :, None, None], 0)
    _close(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), c=st.integers(1, 9), h=st.integers(1, 12), w=st.integers(1, 40), o=st.integers(1, 17),
       kh=st.sampled_from([1, 3, 5]), kw=st.sampled_from([1, 3, 5]), dh=st.integers(1, 2), dw=st.integers(1, 2),
       bounds=st.booleans())
def test_direct_conv_property(n, c, h, w, o, kh, kw, dh, dw, bounds):
    """Random "same" convolutions (odd windows, padding dilation*(k-1)/2) against the reference,
    half of them with every access checked."""
    case = (n, c, h, w, o, (kh, kw), (dh * (kh - 1) // 2, dw * (kw - 1) // 2), (dh, dw))
    _close(*_run(case, check_bounds=bounds))


@pytest.mark.parametrize("symbolic,n", [(False, 2), (True, 2), (False, 64)])
def test_direct_conv_special_values(symbolic, n):
    """An infinite or NaN weight times a padding zero is NaN, as the reference sums it: the tiles
    that drop padding lanes from their multiply-adds must not skip it (test-runtime's conv2d
    special-values case found this); an infinite pixel is read only where the window holds it.
    64 small images: the kernel's threads split the images, each packing its own weights."""
    case = (n, 3, 9, 11, 4, (3, 3), (1, 1), (1, 1))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 3, 9, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x[0, 1, 0, 0], x[1, 2, 4, 10] = np.inf, -np.inf
    for bad in (np.inf, np.nan):
        w2 = w.copy()
        w2[1, 0, 0, 2], w2[3, 2, 1, 0] = bad, -np.inf
        got = caten.loads(_text(case, symbolic), use_cache=False).conv(x, w2)
        with np.errstate(invalid="ignore"):
            want = reference(x, w2, (1, 1))
        assert np.isnan(want).any()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-4)
    got = caten.loads(_text(case, symbolic), use_cache=False).conv(x, w)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, reference(x, w, (1, 1)), rtol=2e-5, atol=1e-4)


def test_direct_conv_empty_and_one_pixel_images():
    """Symbolic dims bound to 0 (no image, channel, row, column or output channel) and to 1x1
    images: the direct program (compiled for symbolic sizes) returns the reference's shapes and
    values."""
    text = _text((1, 1, 1, 1, 1, (3, 3), (1, 1), (1, 1)), symbolic=True)
    m = caten.loads(text, use_cache=False)
    rng = np.random.default_rng(5)
    for n, c, h, w, o in [(0, 3, 4, 5, 2), (2, 0, 4, 5, 2), (2, 3, 0, 5, 2), (2, 3, 4, 0, 2), (2, 3, 4, 5, 0),
                          (3, 2, 1, 1, 4), (2, 70, 2, 2, 3)]:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
        _close(m.conv(x, wt), reference(x, wt, (1, 1)))
