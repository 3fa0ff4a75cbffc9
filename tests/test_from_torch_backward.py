"""`caten.from_torch` on the backward ops of the Core ATen opset (a graph exported from a training
step calls them) and the ops it refuses: each compared with torch itself on odd shapes, f32 and
f64, an empty batch; a slice of the cases in one program on llvm and c; each refused op named
with its reason in the importer's one Error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
A = torch.ops.aten

from caten.errors import Error  # noqa: E402
from caten.frontends.torch.export import TorchModule, convert_exported, needed_ops  # noqa: E402


def rnd(*shape, dtype=torch.float32, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)


def _avg(k, s, p, ceil, inc, div):
    def f(x, g):
        return A.avg_pool2d_backward(g, x, k, s, p, ceil, inc, div)
    return f


def _avg_case(shape, k, s, p, ceil=False, inc=True, div=None, dtype=torch.float32):
    x = rnd(*shape, dtype=dtype)
    y = A.avg_pool2d(x, k, s, p, ceil, inc, div)
    return _avg(k, s, p, ceil, inc, div), (x, rnd(*y.shape, dtype=dtype, seed=6))


def _maxpool(k, s, p, d, ceil):
    def f(x, g):
        _, i = A.max_pool2d_with_indices(x, k, s, p, d, ceil)
        return A.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, i)
    return f


def _max_case(shape, k, s, p=(0, 0), d=(1, 1), ceil=False, dtype=torch.float32):
    x = rnd(*shape, dtype=dtype)
    y, _ = A.max_pool2d_with_indices(x, k, s, p, d, ceil)
    return _maxpool(k, s, p, d, ceil), (x, rnd(*y.shape, dtype=dtype, seed=6))


def _adaptive_case(shape, out, dtype=torch.float32):
    x = rnd(*shape, dtype=dtype)
    g = rnd(*shape[:-2], *out, dtype=dtype, seed=6)
    return (lambda x, g: A._adaptive_avg_pool2d_backward(g, x)), (x, g)


def _gn_case(n, c, hw, groups, affine=True, mask=(True, True, True), dtype=torch.float32):
    def f(x, dy, *w):
        wt = w[0] if w else None
        _, mean, rstd = A.native_group_norm(x, wt, None, n, c, hw, groups, 1e-5)
        return tuple(t for t in A.native_group_norm_backward(dy, x, mean, rstd, wt, n, c, hw, groups, list(mask))
                     if t is not None)
    xs = (rnd(n, c, hw, dtype=dtype), rnd(n, c, hw, dtype=dtype, seed=6))
    return f, xs + ((rnd(c, dtype=dtype, seed=7),) if affine else ())


def _conv_case(xs, ws, stride, padding, dilation, transposed, out_pad, groups, mask=(True, True, True),
               dtype=torch.float64):
    x, w = rnd(*xs, dtype=dtype), rnd(*ws, dtype=dtype, seed=6)
    bias = [ws[1] * groups if transposed else ws[0]]
    y = A.convolution(x, w, None, stride, padding, dilation, transposed, out_pad, groups)

    def f(g, x, w):
        return tuple(t for t in A.convolution_backward(g, x, w, bias, stride, padding, dilation, transposed, out_pad,
                                                         groups, list(mask)) if t is not None)
    return f, (rnd(*y.shape, dtype=dtype, seed=7), x, w)


# (aten op the graph must call, (torch function, inputs))
CASES = [
    ("aten.avg_pool2d_backward.default", _avg_case((1, 2, 7, 6), [3, 3], [2, 2], [1, 1])),
    ("aten.avg_pool2d_backward.default", _avg_case((2, 3, 6, 7), [3, 2], [2, 1], [1, 0], True, False)),
    ("aten.avg_pool2d_backward.default", _avg_case((2, 5, 5), [2, 2], [2, 2], [1, 1], True, True, 3,
                                                   dtype=torch.float64)),
    ("aten.avg_pool2d_backward.default", _avg_case((0, 2, 5, 5), [2, 2], [1, 1], [0, 0])),
    ("aten._adaptive_avg_pool2d_backward.default", _adaptive_case((2, 3, 7, 9), (3, 4))),
    ("aten._adaptive_avg_pool2d_backward.default", _adaptive_case((3, 5, 4), (5, 3), dtype=torch.float64)),
    ("aten.max_pool2d_with_indices_backward.default", _max_case((1, 2, 7, 8), [3, 3], [2, 2], [1, 1])),
    ("aten.max_pool2d_with_indices_backward.default", _max_case((2, 2, 7, 8), [3, 2], [2, 1], [1, 0], [2, 1], True,
                                                                dtype=torch.float64)),
    ("aten.native_group_norm_backward.default", _gn_case(2, 6, 5, 3)),
    ("aten.native_group_norm_backward.default", _gn_case(3, 4, 7, 2, affine=False, dtype=torch.float64)),
    ("aten.native_group_norm_backward.default", _gn_case(2, 4, 3, 4, mask=(False, True, True))),
    ("aten.convolution_backward.default", _conv_case((2, 4, 7, 6), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], False,
                                                     [0, 0], 2)),
    ("aten.convolution_backward.default", _conv_case((2, 3, 9), (4, 3, 3), [2], [1], [1], False, [0], 1,
                                                     dtype=torch.float32)),
    ("aten.convolution_backward.default", _conv_case((1, 4, 3, 4), (4, 3, 3, 2), [2, 2], [1, 0], [1, 1], True,
                                                     [1, 0], 2)),
    ("aten.convolution_backward.default", _conv_case((1, 2, 5, 5), (3, 2, 2, 2), [1, 1], [0, 0], [1, 1], False,
                                                     [0, 0], 1, mask=(False, True, False))),
    ("aten.convolution_backward.default", _conv_case((1, 2, 4, 5, 3), (2, 1, 2, 3, 2), [1, 2, 1], [1, 0, 1],
                                                     [1, 1, 2], False, [0, 0, 0], 2)),
    ("aten.convolution_backward.default", _conv_case((2, 3, 4), (3, 2, 3), [2], [1], [1], True, [1], 1,
                                                     dtype=torch.float32)),
    ("aten.max_pool2d_with_indices_backward.default", _max_case((3, 5, 6), [2, 2], [2, 2], ceil=True)),
]


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _compare(got, want, what):
    for g, w in zip(_flat(got), _flat(want), strict=True):
        w = w.detach().numpy()
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype, w.dtype)
        tol = 1e-5 if w.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("op,case", CASES, ids=[f"{c[0].removeprefix('aten.')}-{i}" for i, c in enumerate(CASES)])
def test_backward_op_matches_torch(op, case):
    fn, xs = case
    ep = torch.export.export(Fn(fn), xs)
    assert op in needed_ops(ep), needed_ops(ep)
    m = TorchModule(*convert_exported(ep), runtime="numpy")
    _compare(m(*xs), fn(*xs), op)


@pytest.mark.parametrize("runtime,part", [("llvm", 0), ("c", 1)])
def test_backward_cases_one_program(runtime, part):
    """Every other case in one exported module, compiled once per runtime (imported as captured:
    the lowerings above are what runs, not torch's decomposition of them)."""
    cases = [c for _, c in CASES[part::2] if c[1][0].shape[0] != 0]
    flat = [x for _, xs in cases for x in xs]

    def every(*ins):
        out, k = [], 0
        for fn, xs in cases:
            out += _flat(fn(*ins[k:k + len(xs)]))
            k += len(xs)
        return tuple(out)

    m = TorchModule(*convert_exported(torch.export.export(Fn(every), tuple(flat))), runtime=runtime)
    _compare(m(*flat), every(*flat), runtime)


def test_refused_ops_name_their_reasons():
    """Each op caten cannot compute exactly is named with its reason, all in one Error."""
    from caten.frontends.torch.refused import REFUSED

    def fn(x):
        return (torch.nonzero(x), x * x.sum().item(), x + torch.randn(3, 4), x + torch.rand(3, 4),
                x[torch.randperm(3)], torch.fft.rfft(x).abs())

    ep = torch.export.export(Fn(fn), (rnd(3, 4),)).run_decompositions()
    want = ["aten.nonzero.default", "aten._local_scalar_dense.default", "aten.randn.default", "aten.rand.default",
            "aten.randperm.default", "aten._fft_r2c.default"]
    assert set(want) <= set(needed_ops(ep)), needed_ops(ep)
    with pytest.raises(Error) as e:
        convert_exported(ep)
    for op in want:
        assert f"`{op}`: {REFUSED[op]}" in str(e.value)
