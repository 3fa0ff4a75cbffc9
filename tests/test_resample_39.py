"""Issue #39's pooling, padding and resampling against torch: F.pad in every mode (negative widths
included), 1-D/3-D max/avg pools with every keyword, adaptive and lp pools, interpolate in every
mode (size, scale_factor, align_corners, recompute_scale_factor; up and down), pixel/channel
shuffles, grid_sample, affine_grid, cosine_similarity and pairwise_distance, and their modules.
Values and gradients on odd shapes at f32 and f64 on the numpy runtime; each family's cases are
realized as one program; a representative set on llvm and c."""

from __future__ import annotations

import numpy as np
import pytest

import caten
import caten.nn as cnn
from caten.errors import Error
from caten.tensor.lazy import Node
from caten.tensor.realize import realize
from caten.tensor.state import set_default_runtime

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = caten.nn.functional
TDT = {"f32": torch.float32, "f64": torch.float64}
TOL = {"f32": 2e-5, "f64": 1e-12}


@pytest.fixture(autouse=True)
def _numpy_runtime():
    set_default_runtime("numpy")
    yield
    set_default_runtime("numpy")


def check(cases: list, dt: str, runtime: str = "numpy", grad: bool = True, seed: int = 0) -> None:
    """cases: (what, caten fn, torch fn, input shapes). Every output and input gradient (under a
    random cotangent) realized in one program and compared with torch's."""
    rng = np.random.default_rng(seed)
    set_default_runtime(runtime)
    got, want, leaves, twant = [], [], [], []
    loss = None
    for what, cf, tf, shapes in cases:
        arrs = [rng.normal(size=s).astype(np.dtype(dt.replace("f", "float"))) * 2 for s in shapes]
        ts = [torch.tensor(a, requires_grad=grad) for a in arrs]
        cs = [caten.tensor(a, requires_grad=grad) for a in arrs]
        ty, cy = tf(*ts), cf(*cs)
        ty, cy = (ty if isinstance(ty, tuple) else (ty,)), (cy if isinstance(cy, tuple) else (cy,))
        for t, c in zip(ty, cy):
            assert tuple(c.shape) == tuple(t.shape), (what, c.shape, t.shape)
            got.append((what, c))
            want.append(t.detach().numpy())
        if grad:
            w = rng.normal(size=ty[0].shape).astype(arrs[0].dtype)
            (ty[0] * torch.tensor(w)).sum().backward()
            term = (cy[0] * caten.tensor(w)).sum()
            loss = term if loss is None else loss + term
            leaves += [(what, c) for c in cs]
            twant += [t.grad.numpy() if t.grad is not None else np.zeros_like(a) for t, a in zip(ts, arrs)]
    realize([c.node for _, c in got] + ([loss.node] if grad else []), runtime)  # forward once
    if grad:
        loss.backward()
    nodes: list[Node] = [c.grad.node for _, c in leaves if c.grad is not None]
    realize(nodes, runtime)
    for (what, c), w in zip(got, want):
        _close(c.numpy(), w, dt, what)
    for (what, c), w in zip(leaves, twant):
        _close(c.grad.numpy() if c.grad is not None else np.zeros_like(w), w, dt, f"d {what}", scale=8)


def _close(g: np.ndarray, w: np.ndarray, dt: str, what: str, scale: float = 1) -> None:
    assert g.shape == w.shape, (what, g.shape, w.shape)
    if w.dtype.kind == "f":
        assert g.dtype == w.dtype, (what, g.dtype, w.dtype)
        assert (np.isnan(g) == np.isnan(w)).all(), what
        ok = np.isnan(w) | (np.abs(g - w) <= TOL[dt] * scale * (1 + np.abs(w)))
        assert ok.all(), (what, g[~ok][:4], w[~ok][:4])
    else:
        assert (g == w).all(), (what, g, w)


# padding ------------------------------------------------------------------------------------------
PADS = [("constant", (1, 2), (3, 4, 5)), ("constant", (-1, 2, 0, -2), (2, 3, 4, 5)),
        ("constant", (1, 0, 2, 1, 0, 1, 1, 1), (2, 3, 4, 5)), ("reflect", (2, 3), (3, 5)),
        ("reflect", (1, 2, 3, 0), (2, 3, 4, 5)), ("reflect", (1, 2, 3, 0, 2, 1), (2, 3, 4, 5)),
        ("reflect", (-2, 3), (2, 5)), ("replicate", (3, 4), (2, 3, 5)), ("replicate", (2, -1, 1, 3), (3, 4, 5)),
        ("replicate", (1, 1, 1, 1, 1, 1), (1, 3, 4, 5)), ("circular", (2, 3), (2, 5)),
        ("circular", (1, 2, 4, 0), (2, 3, 4, 5)), ("circular", (-1, 2, 1, -2, 2, 3), (3, 4, 5, 6)),
        ("circular", (2, -1), (2, 3, 5))]


def test_pad_every_mode(dt="f32"):
    cases = []
    for mode, p, shape in PADS:
        kw = {"value": 1.5} if mode == "constant" else {}
        cases.append((f"pad {mode} {p}", lambda x, p=p, m=mode, kw=kw: F.pad(x, p, mode=m, **kw),
                      lambda x, p=p, m=mode, kw=kw: TF.pad(x, p, mode=m, **kw), [shape]))
    check(cases, dt)


def test_pad_integers_bool_and_refusals():
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    for mode in ("constant", "reflect", "replicate", "circular"):
        got = F.pad(caten.tensor(a), (1, 2, 2, 1), mode=mode).numpy()
        assert (got == TF.pad(torch.tensor(a), (1, 2, 2, 1), mode=mode).numpy()).all(), mode
    b = np.array([[True, False, True]])
    assert (F.pad(caten.tensor(b), (1, 1), value=True).numpy() ==
            TF.pad(torch.tensor(b), (1, 1), value=True).numpy()).all()
    x = caten.tensor(np.zeros((2, 3, 4), np.float32))
    for bad in [lambda: F.pad(x, (4, 0), mode="reflect"), lambda: F.pad(x, (1,)), lambda: F.pad(x, (1, 1), "wrap"),
                lambda: F.pad(x, (1, 1), mode="reflect", value=2.0), lambda: F.pad(x, (-3, -2)),
                lambda: F.pad(x, (5, 0), mode="circular")]:
        with pytest.raises(Error):
            bad()


def test_padding_modules_match_torch():
    tn = torch.nn
    cases = []
    for name, arg, shape in [("ZeroPad1d", 2, (2, 3, 5)), ("ZeroPad2d", (1, 0, 2, 1), (2, 3, 5)),
                             ("ZeroPad3d", 1, (1, 2, 3, 4)), ("ConstantPad1d", (2, 1), (3, 4)),
                             ("ConstantPad2d", 1, (2, 3, 4)), ("ConstantPad3d", (1, 0, 0, 1, 1, 0), (1, 2, 3, 4)),
                             ("ReflectionPad1d", 2, (2, 5)), ("ReflectionPad2d", (1, 2, 2, 1), (1, 3, 4)),
                             ("ReflectionPad3d", 1, (1, 2, 3, 4)), ("ReplicationPad1d", 3, (2, 4)),
                             ("ReplicationPad2d", 2, (2, 3, 4)), ("ReplicationPad3d", 1, (1, 2, 3, 4)),
                             ("CircularPad1d", 2, (2, 5)), ("CircularPad2d", (1, 2, 0, 3), (1, 4, 5)),
                             ("CircularPad3d", 1, (1, 2, 3, 4))]:
        extra = (0.5,) if name.startswith("Constant") else ()
        cm, tm = getattr(cnn, name)(arg, *extra), getattr(tn, name)(arg, *extra)
        cases.append((name, cm, tm, [shape]))
    check(cases, "f32")


# pooling ------------------------------------------------------------------------------------------
def _on_abs(f, kw):
    return lambda x: f(x.abs(), **kw)


def _pool_cases() -> list:
    P = [("max_pool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True)),
         ("max_pool1d", (3, 9), dict(kernel_size=2, dilation=3, padding=1, return_indices=True)),
         ("max_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                                               ceil_mode=True, return_indices=True)),
         ("max_pool3d", (2, 5, 5, 6), dict(kernel_size=2, dilation=2)),
         ("max_pool2d_with_indices", (2, 3, 7, 9), dict(kernel_size=3, stride=2, padding=1, dilation=1,
                                                         ceil_mode=True)),
         ("avg_pool1d", (2, 3, 10), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
         ("avg_pool1d", (3, 9), dict(kernel_size=4, stride=3, padding=2, count_include_pad=False, ceil_mode=True)),
         ("avg_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=1, ceil_mode=True,
                                               count_include_pad=False)),
         ("avg_pool3d", (2, 4, 5, 6), dict(kernel_size=3, stride=2, padding=1, divisor_override=5)),
         ("adaptive_avg_pool1d", (2, 3, 11), dict(output_size=4)),
         ("adaptive_avg_pool2d", (2, 3, 7, 9), dict(output_size=(3, None))),
         ("adaptive_avg_pool3d", (1, 2, 5, 7, 3), dict(output_size=(2, 3, 4))),
         ("adaptive_max_pool1d", (2, 3, 10), dict(output_size=3, return_indices=True)),
         ("adaptive_max_pool2d", (2, 3, 7, 9), dict(output_size=(4, 5), return_indices=True)),
         ("adaptive_max_pool3d", (1, 2, 5, 7, 3), dict(output_size=(2, 3, 5))),
         ("lp_pool1d", (2, 3, 11), dict(norm_type=2.0, kernel_size=3, stride=2)),
         ("lp_pool2d", (2, 3, 7, 9), dict(norm_type=3.0, kernel_size=(2, 3), ceil_mode=True)),
         ("lp_pool3d", (1, 2, 5, 6, 7), dict(norm_type=1.5, kernel_size=2, stride=(1, 2, 2)))]
    cases = []
    for name, shape, kw in P:
        tname = name.replace("_with_indices", "") if name.startswith("max_pool2d") else name
        tkw = dict(kw, return_indices=True) if name == "max_pool2d_with_indices" else kw
        if name.startswith("lp_pool"):  # torch's lp pools raise a non-positive base to a fractional power
            cases.append((f"{name} {kw}", _on_abs(getattr(F, name), kw), _on_abs(getattr(TF, tname), kw), [shape]))
            continue
        cases.append((f"{name} {kw}", lambda x, n=name, kw=kw: getattr(F, n)(x, **kw),
                      lambda x, n=tname, kw=tkw: getattr(TF, n)(x, **kw), [shape]))
    return cases


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_pools_values_indices_and_grads(dt):
    cases = _pool_cases()
    check(cases if dt == "f32" else cases[::3], dt)  # f64 on a slice: the index math is dtype-free


def test_pool_modules_and_empty_batch():
    tn = torch.nn
    cases = [(n, getattr(cnn, n)(*a, **kw), getattr(tn, n)(*a, **kw), [s]) for n, a, kw, s in [
        ("MaxPool1d", (3,), dict(stride=2, padding=1, return_indices=True), (2, 3, 9)),
        ("MaxPool3d", (2,), dict(ceil_mode=True), (1, 2, 5, 5, 3)),
        ("AvgPool1d", (3,), dict(stride=1, count_include_pad=False, padding=1), (2, 7)),
        ("AvgPool3d", ((1, 2, 2),), dict(divisor_override=3), (1, 2, 3, 4, 5)),
        ("AdaptiveAvgPool1d", (4,), {}, (2, 3, 9)), ("AdaptiveAvgPool3d", ((2, 1, 3),), {}, (1, 2, 3, 4, 5)),
        ("AdaptiveMaxPool1d", (3,), dict(return_indices=True), (2, 8)),
        ("AdaptiveMaxPool2d", ((2, 3),), {}, (2, 3, 5, 7)), ("LPPool2d", (2, 2), {}, (1, 3, 4, 5))]]
    check(cases, "f32")
    x = np.zeros((0, 3, 8), np.float32)
    assert F.max_pool1d(caten.tensor(x), 2).shape == TF.max_pool1d(torch.tensor(x), 2).shape
    v, i = F.max_pool1d(caten.tensor(x), 3, return_indices=True)
    assert v.shape == i.shape == (0, 3, 2) and i.dtype == "i64"
    assert F.adaptive_avg_pool1d(caten.tensor(x), 3).shape == (0, 3, 3)


def test_pool_refusals():
    x = caten.tensor(np.zeros((1, 2, 5), np.float32))
    for bad in [lambda: F.max_pool1d(x, 2, padding=2), lambda: F.max_pool1d(x, 7),
                lambda: F.avg_pool1d(caten.tensor(np.zeros((1, 5), np.int64)), 2),
                lambda: F.max_pool3d(x, 2), lambda: F.avg_pool3d(caten.tensor(np.zeros((1, 2, 3, 3), np.float32)), 2,
                                                                 divisor_override=0)]:
        with pytest.raises(Error):
            bad()


# interpolate --------------------------------------------------------------------------------------
def _interp_cases(nd: int, modes: list[str], n_sizes: int = 6) -> list:
    shape = (2, 3) + (5, 7, 4)[:nd]
    sizes = [dict(size=(9, 3, 6)[:nd]), dict(scale_factor=1.7), dict(scale_factor=0.6), dict(scale_factor=1.3),
             dict(scale_factor=2.5, recompute_scale_factor=True), dict(size=shape[2:])][:n_sizes]
    cases = []
    for mode in modes:
        for kw in sizes:
            for ac in ([None] if mode in ("nearest", "nearest-exact", "area") else [False, True]):
                cases.append((f"interpolate {mode} {kw} align_corners={ac}",
                              lambda x, m=mode, kw=kw, ac=ac: F.interpolate(x, mode=m, align_corners=ac, **kw),
                              lambda x, m=mode, kw=kw, ac=ac: TF.interpolate(x, mode=m, align_corners=ac, **kw),
                              [shape]))
    return cases


@pytest.mark.parametrize("nd,modes", [(1, ["nearest", "nearest-exact", "linear", "area"]),
                                      (2, ["nearest", "nearest-exact", "bilinear", "bicubic", "area"]),
                                      (3, ["nearest", "nearest-exact", "trilinear", "area"])])
def test_interpolate_every_mode(nd, modes):
    check(_interp_cases(nd, modes), "f32")


def test_interpolate_f64():
    check(_interp_cases(2, ["nearest", "bilinear", "bicubic"], 3) + _interp_cases(3, ["trilinear"], 2), "f64")


def test_upsample_modules_and_refusals():
    tn = torch.nn
    cases = [("Upsample", cnn.Upsample(scale_factor=2, mode="bilinear"), tn.Upsample(scale_factor=2, mode="bilinear"),
              [(1, 2, 3, 4)]),
             ("Upsample size", cnn.Upsample(size=(5, 3), mode="bicubic", align_corners=True),
              tn.Upsample(size=(5, 3), mode="bicubic", align_corners=True), [(1, 2, 3, 4)]),
             ("UpsamplingNearest2d", cnn.UpsamplingNearest2d(scale_factor=3), tn.UpsamplingNearest2d(scale_factor=3),
              [(2, 1, 3, 2)]),
             ("UpsamplingBilinear2d", cnn.UpsamplingBilinear2d(size=(5, 7)), tn.UpsamplingBilinear2d(size=(5, 7)),
              [(2, 1, 3, 2)])]
    check(cases, "f32")
    x = caten.tensor(np.zeros((1, 2, 3, 4), np.float32))
    for bad in [lambda: F.interpolate(x, scale_factor=2, mode="linear"),
                lambda: F.interpolate(x, size=3, scale_factor=2), lambda: F.interpolate(x, 3, align_corners=True),
                lambda: F.interpolate(x, 3, mode="bilinear", antialias=True),
                lambda: F.interpolate(x, 3, mode="cubic")]:
        with pytest.raises(Error):
            bad()


def test_nearest_on_integers():
    a = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(1, 2, 3, 5)
    for mode in ("nearest", "nearest-exact"):
        got = F.interpolate(caten.tensor(a), scale_factor=1.7, mode=mode).numpy()
        assert (got == TF.interpolate(torch.tensor(a), scale_factor=1.7, mode=mode).numpy()).all()


# rearrangements, sampling and distances ---------------------------------------------------------
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_shuffles_sampling_and_distances(dt):
    cases = [("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), [(2, 8, 3, 5)]),
             ("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 3), lambda x: TF.pixel_unshuffle(x, 3), [(1, 2, 3, 6)]),
             ("pixel_shuffle 5d", cnn.PixelShuffle(3), torch.nn.PixelShuffle(3), [(2, 1, 9, 2, 3)]),
             ("PixelUnshuffle", cnn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), [(3, 4, 6)]),
             ("channel_shuffle", cnn.ChannelShuffle(3), torch.nn.ChannelShuffle(3), [(2, 6, 3, 1)]),
             ("cosine_similarity", lambda a, b: F.cosine_similarity(a, b, dim=1),
              lambda a, b: TF.cosine_similarity(a, b, dim=1), [(3, 5, 2), (3, 5, 2)]),
             ("CosineSimilarity bcast", cnn.CosineSimilarity(dim=-1, eps=1e-3),
              torch.nn.CosineSimilarity(dim=-1, eps=1e-3), [(4, 3), (1, 3)]),
             ("pairwise_distance", lambda a, b: F.pairwise_distance(a, b), lambda a, b: TF.pairwise_distance(a, b),
              [(4, 5), (4, 5)]),
             ("PairwiseDistance p1", cnn.PairwiseDistance(p=1.0, keepdim=True),
              torch.nn.PairwiseDistance(p=1.0, keepdim=True), [(4, 5), (4, 5)]),
             ("pairwise_distance p3", lambda a, b: F.pairwise_distance(a, b, p=3.0),
              lambda a, b: TF.pairwise_distance(a, b, p=3.0), [(3, 2, 5), (3, 2, 5)]),
             ("affine_grid", lambda t: F.affine_grid(t, (2, 3, 4, 5)),
              lambda t: TF.affine_grid(t, (2, 3, 4, 5), align_corners=False), [(2, 2, 3)]),
             ("affine_grid 3d", lambda t: F.affine_grid(t, (1, 1, 3, 2, 4), align_corners=True),
              lambda t: TF.affine_grid(t, (1, 1, 3, 2, 4), align_corners=True), [(1, 3, 4)])]
    for mode in ("bilinear", "nearest", "bicubic"):
        for pm in ("zeros", "border", "reflection"):
            for ac in (False, True):
                if mode != "bilinear" and ac == (pm == "zeros"):  # three of the six for the others
                    continue
                cases.append((f"grid_sample {mode} {pm} {ac}",
                              lambda x, g, m=mode, p=pm, a=ac: F.grid_sample(x, g * 0.7, m, p, a),
                              lambda x, g, m=mode, p=pm, a=ac: TF.grid_sample(x, g * 0.7, m, p, a),
                              [(2, 3, 5, 7), (2, 4, 3, 2)]))
    check(cases if dt == "f32" else cases[5:10] + cases[12::4], dt)


def test_cosine_similarity_of_a_zero_vector():
    a = np.zeros((2, 3), np.float64)
    a[1] = [1.0, 2.0, -1.0]
    b = np.ones((2, 3))
    check([("cosine zero", lambda x, y: F.cosine_similarity(x, y), lambda x, y: TF.cosine_similarity(x, y),
            [(2, 3), (2, 3)])], "f64")
    ca, ta = caten.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    F.cosine_similarity(ca, caten.tensor(b)).sum().backward()
    TF.cosine_similarity(ta, torch.tensor(b)).sum().backward()
    _close(ca.grad.numpy(), ta.grad.numpy(), "f64", "d cosine at 0")


def test_grid_sample_refusals():
    x = caten.tensor(np.zeros((1, 2, 3, 4), np.float32))
    g = caten.tensor(np.zeros((1, 2, 2, 2), np.float32))
    for bad in [lambda: F.grid_sample(x, g, mode="area"), lambda: F.grid_sample(x, g, padding_mode="wrap"),
                lambda: F.grid_sample(x.reshape(1, 2, 3, 4, 1), g), lambda: F.pixel_shuffle(x, 2)]:
        with pytest.raises(Error):
            bad()


# compiled runtimes --------------------------------------------------------------------------------
@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_compiled_runtimes_match_torch(rt):
    cases = [c for c in _pool_cases() if c[0].startswith(("max_pool3d", "avg_pool1d", "adaptive_max_pool2d"))][::2]
    cases += [c for c in _interp_cases(2, ["bicubic"]) if "1.7" in c[0] and "False" in c[0]]
    cases += [(f"pad {m}", lambda x, m=m: F.pad(x, (2, 1, 1, 3), mode=m),
               lambda x, m=m: TF.pad(x, (2, 1, 1, 3), mode=m), [(2, 3, 4, 5)]) for m in ("reflect",)]
    cases.append(("grid_sample", lambda x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
                  lambda x, g: TF.grid_sample(x, g, padding_mode="reflection", align_corners=False),
                  [(1, 2, 4, 5), (1, 3, 2, 2)]))
    check(cases, "f32", runtime=rt)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_precision_within_one_rounding(dt):
    """f16/bf16 as torch's CPU kernels: f32 inside, one rounding (index-only ops exact; the linear
    weights' rounding may differ from torch's by one unit in the last place)."""
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    a = np.random.default_rng(3).normal(size=(2, 3, 5, 7)).astype(np.float32) * 3
    t, x = torch.tensor(a).to(tdt), caten.tensor(a).cast(dt)
    g = np.full((2, 3, 4, 2), 0.3, np.float32)
    g[0, 1] = -0.55
    cases = [(0, lambda x: F.max_pool2d_with_indices(x, 3, 2, 1)[0], lambda t: TF.max_pool2d(t, 3, 2, 1)),
             (0, lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), lambda t: TF.pad(t, (1, 2, 2, 1), mode="reflect")),
             (0, lambda x: F.interpolate(x, scale_factor=1.7), lambda t: TF.interpolate(t, scale_factor=1.7)),
             (0, lambda x: F.avg_pool1d(x.reshape(6, 5, 7), 3, 2, 1),
              lambda t: TF.avg_pool1d(t.reshape(6, 5, 7), 3, 2, 1)),
             (0, lambda x: F.adaptive_avg_pool2d(x, (3, 4)), lambda t: TF.adaptive_avg_pool2d(t, (3, 4))),
             (0, lambda x: F.interpolate(x, size=(4, 9), mode="bicubic"),
              lambda t: TF.interpolate(t, size=(4, 9), mode="bicubic")),
             (0, lambda x: F.grid_sample(x, caten.tensor(g).cast(dt), align_corners=False),
              lambda t: TF.grid_sample(t, torch.tensor(g).to(tdt), align_corners=False)),
             (1, lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"),
              lambda t: TF.interpolate(t, scale_factor=1.7, mode="bilinear"))]
    outs = [cf(x) for _, cf, _ in cases]
    realize([o.node for o in outs], "numpy")
    eps = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}[dt]
    for (ulps, _, tf), o in zip(cases, outs):
        w = tf(t).float().numpy()
        assert o.dtype == dt
        got = o.numpy().astype(np.float32)
        assert (np.abs(got - w) <= ulps * eps * 2 * np.maximum(np.abs(w), 1)).all(), (dt, np.abs(got - w).max())
