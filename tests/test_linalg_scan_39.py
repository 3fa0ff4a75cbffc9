"""Issue #39's linear algebra, layout, scans and counts against torch: einsum, tensordot, kron,
b/add*mm, cross, cdist, trapezoid, vander, meshgrid, diag_embed, block_diag, tensor_split, rot90,
atleast_Nd, cummax/cummin, logcumsumexp, searchsorted, bucketize, mode, bincount, histc,
repeat_interleave, aminmax, nansum/nanmean, cov/corrcoef; values (odd shapes, empty dims, dtypes)
and gradients on numpy, an in-graph program on llvm and c; and the Tensor wrong-number regressions
(1-D matmul of mismatched sizes, rank-0 softmax, cross_entropy's class axis and its targets)."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

torch = pytest.importorskip("torch")
F = caten.nn.functional
RNG = np.random.default_rng(39)


@pytest.fixture(autouse=True)
def _numpy_runtime():
    caten.tensor.set_default_runtime("numpy")
    yield
    caten.tensor.set_default_runtime("numpy")


def r(*shape, dt=np.float32, lo=None, hi=None):
    if lo is not None:
        return RNG.integers(lo, hi, shape).astype(dt)
    return RNG.standard_normal(shape).astype(dt)


def C(a, **kw):
    return caten.Tensor(np.asarray(a), **kw)


def T(a):
    return torch.tensor(np.asarray(a))


def same(got, want, tol=1e-5, what=""):
    """got (a caten tensor, or a tuple of them) equals torch's want: shape, dtype and values."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), what
        for g, w in zip(got, want):
            same(g, w, tol, what)
        return
    g, w = np.asarray(got.numpy()), want.detach().numpy()
    assert g.shape == w.shape, (what, g.shape, w.shape)
    assert g.dtype == w.dtype, (what, g.dtype, w.dtype)
    if w.dtype.kind in "iub":
        assert (g == w).all(), (what, g, w)
    else:
        rtol = tol if w.dtype != np.float64 else 1e-12
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


A23, B34, S33 = r(2, 3), r(3, 4), r(3, 3)
EINSUM = [("ij,jk->ik", [A23, B34]), ("ij,jk", [A23, B34]), ("ii->i", [S33]), ("ii", [S33]),
          ("...j,jk->...k", [r(2, 5, 3), B34]), ("bij,bjk->bik", [r(2, 3, 4), r(2, 4, 5)]),
          ("i,j->ij", [r(3), r(4)]), ("ij->", [A23]), ("ji", [A23]), ("i...->...", [r(3, 2, 4)]),
          ("ij,ij->i", [r(0, 3), r(0, 3)]), ("iij->j", [r(3, 3, 2)]), ("b...,b...->b", [r(2, 3), r(2, 3)]),
          ("ij,kj->ik", [r(4, 3, dt=np.int64, lo=-4, hi=5), r(2, 3, dt=np.int64, lo=-4, hi=5)]),
          ("ii->i", [np.array([[1.0, np.inf], [np.nan, 2.0]], np.float32)]),  # the diagonal alone, not a sum
          ("ij->i", [r(2, 3, dt=np.int8, lo=-4, hi=5)]), ("ij,jk", [r(2, 3, dt=np.int32, lo=-4, hi=5),
                                                                   r(3, 2, dt=np.int32, lo=-4, hi=5)]),
          ("i,j->ij", [np.array([True, False, True]), np.array([True, False])]), ("ij->", [r(2, 3, dt=np.float16)]),
          ("ijij->ji", [r(2, 3, 2, 3, dt=np.float64)])]


@pytest.mark.parametrize("eq,ops", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_values(eq, ops):
    same(caten.einsum(eq, *[C(o) for o in ops]), torch.einsum(eq, *[T(o) for o in ops]), what=eq)
    same(caten.einsum(eq, [C(o) for o in ops]), torch.einsum(eq, [T(o) for o in ops]), what=eq)


def test_einsum_errors():
    with pytest.raises(Error, match="sizes"):
        caten.einsum("ij,jk->ik", C(r(2, 3)), C(r(4, 5)))
    with pytest.raises(Error, match="dtypes"):
        caten.einsum("i,i->", C(r(3)), C(r(3, dt=np.int64, lo=0, hi=3)))
    with pytest.raises(Error, match="subscripts"):
        caten.einsum("ijk->i", C(r(2, 3)))


def _linalg_cases():
    a, b = r(2, 3, 4), r(3, 4, 5)
    inp, b1, b2 = r(3, 5), r(2, 3, 4), r(2, 4, 5)
    m, v, iv = r(3, 4), r(4), r(3)
    u, w = r(4, 3, 2), r(4, 3, 2)
    ia, ib = r(2, 3, dt=np.int64, lo=-5, hi=5), r(2, dt=np.int64, lo=-5, hi=5)
    c1, c2, c3, c4 = r(4, 3), r(5, 3), r(30, 3), r(27, 3)
    nan = np.full((3, 5), np.nan, np.float32)
    y, x = r(3, 5), np.sort(r(5))
    k312, c5, c6 = r(3, 1, 2), r(2, 3, 4), r(2, 5, 4)
    nan2 = np.array([[np.nan, 1.0], [0.5, 2.0]], np.float32)
    inf2 = np.array([[np.inf, 0.0], [np.nan, 1.0], [1.0, np.nan], [np.nan] * 2], np.float32)
    return [
        ("tensordot", lambda M: M.tensordot(a, b)),
        ("tensordot pairs", lambda M: M.tensordot(a, b, dims=([1], [0]))),
        ("tensordot 0", lambda M: M.tensordot(a[0], b[0], dims=0)),
        ("kron", lambda M: M.kron(A23, k312)),
        ("kron int", lambda M: M.kron(ia, ib)),
        ("baddbmm", lambda M: M.baddbmm(inp, b1, b2, beta=0.5, alpha=2)),
        ("addbmm", lambda M: M.addbmm(inp, b1, b2, beta=0.5, alpha=2)),
        ("addbmm beta 0 ignores nan", lambda M: M.addbmm(nan, b1, b2, beta=0)),
        ("addmv", lambda M: M.addmv(iv, m, v, alpha=3)),
        ("addr", lambda M: M.addr(A23, iv[:2], iv, beta=2)),
        ("cross", lambda M: M.cross(u, w, dim=1)),
        ("cross int", lambda M: M.cross(ia.reshape(2, 3), ia[::-1].copy().reshape(2, 3), dim=1)),
        ("linalg.cross", lambda M: (M.linalg.cross if M is _Torch else M.linalg_cross)(u[:, :, 0], w[:, :, 0])),
        ("cdist 2", lambda M: M.cdist(c1, c2)),
        ("cdist 1", lambda M: M.cdist(c1, c2, p=1.0)),
        ("cdist inf", lambda M: M.cdist(c1, c2, p=float("inf"))),
        ("cdist 3", lambda M: M.cdist(c1, c2, p=3.0)),
        ("cdist 0", lambda M: M.cdist(c1, c2, p=0.0)),
        ("cdist nan p=1, 2, 0", lambda M: [M.cdist(nan2, c2[:, :2].copy(), p=p) for p in (0.0, 1.0, 2.0)]),
        ("cdist inf specials", lambda M: M.cdist(inf2, c2[:, :2].copy(), p=float("inf"))),
        ("cdist mm", lambda M: M.cdist(c3, c4)),
        ("cdist batched", lambda M: M.cdist(c5, c6)),
        ("trapezoid", lambda M: M.trapezoid(y)),
        ("trapezoid dx", lambda M: M.trapezoid(y, dx=0.3, dim=0)),
        ("trapezoid x", lambda M: M.trapezoid(y, x)),
        ("trapezoid empty", lambda M: M.trapezoid(r(3, 0))),
        ("vander", lambda M: M.vander(iv, N=4)),
        ("vander int increasing", lambda M: M.vander(np.array([1, 2, 3]), increasing=True)),
        ("vander N=0", lambda M: M.vander(iv, N=0)),
    ]


LINALG = _linalg_cases()


@pytest.mark.parametrize("case", LINALG, ids=[n for n, _ in LINALG])
def test_linalg_values(case):
    name, f = case
    same(f(_Caten), f(_Torch), what=name)


class _Wrap:
    """torch's or caten's namespace with numpy arguments turned into its tensors."""

    def __init__(self, mod, conv):
        self.mod, self.conv = mod, conv

    def __getattr__(self, name):
        fn = getattr(self.mod, name)
        if name == "linalg":
            return _Wrap(fn, self.conv)

        def call(*args, **kw):
            args = [self.conv(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
            return fn(*args, **kw)
        return call


_Caten = _Wrap(caten, C)
_Torch = _Wrap(torch, T)


def _layout_cases():
    d, s, h = r(2, 3), r(7, 5), r(2, 4, 6)
    g1, g2, g3 = r(3), r(4), r(2)
    out = [
        ("diag_embed", lambda M: M.diag_embed(d)),
        ("diag_embed off 1 dims 0 2", lambda M: M.diag_embed(d, 1, 0, 2)),
        ("diag_embed off -2 dims 1 0", lambda M: M.diag_embed(d, -2, 1, 0)),
        ("diag_embed empty", lambda M: M.diag_embed(r(2, 0), 1)),
        ("diagflat", lambda M: M.diagflat(d, -1)),
        ("block_diag", lambda M: M.block_diag(A23, g1, np.float32(2.0), r(0, 2))),
        ("block_diag int", lambda M: M.block_diag(np.array([[1, 2]]), np.array([3]))),
        ("meshgrid ij", lambda M: M.meshgrid(g1, g2, g3, indexing="ij")),
        ("meshgrid xy", lambda M: M.meshgrid(g1, g2, g3, indexing="xy")),
        ("cartesian_prod", lambda M: M.cartesian_prod(g1, g2)),
        ("cartesian_prod int", lambda M: M.cartesian_prod(np.arange(3), np.arange(2), np.arange(2))),
        ("hsplit", lambda M: M.hsplit(h, 2)),
        ("vsplit", lambda M: M.vsplit(h, [1])),
        ("dsplit", lambda M: M.dsplit(h, 3)),
        ("atleast many", lambda M: M.atleast_3d(np.float32(1.0), s, g1)),
    ]
    for a in ([3], [1, 4], [2, -1, 9], 3, 7):
        out.append((f"tensor_split {a}", lambda M, a=a: M.tensor_split(s, a)))
    out.append(("tensor_split dim 1", lambda M: M.tensor_split(s, 2, dim=1)))
    for k in (-1, 0, 1, 2, 3, 5):
        out.append((f"rot90 {k}", lambda M, k=k: M.rot90(h, k, (2, 0))))
    for n in (1, 2, 3):
        for a in (np.float32(2.0), g1, d, h):
            out.append((f"atleast_{n}d rank {a.ndim}", lambda M, n=n, a=a: getattr(M, f"atleast_{n}d")(a)))
    return out


LAYOUT = _layout_cases()


@pytest.mark.parametrize("case", LAYOUT, ids=[n for n, _ in LAYOUT])
def test_layout_values(case):
    name, f = case
    same(f(_Caten), f(_Torch), what=name)


def test_layout_errors():
    with pytest.raises(Error, match="equal parts"):
        caten.hsplit(C(r(2, 3)), 2)
    with pytest.raises(Error, match="rank"):
        caten.vsplit(C(r(3)), 3)
    with pytest.raises(Error, match="size 3"):
        caten.cross(C(r(2, 4)), C(r(2, 4)))
    with pytest.raises(Error, match="dtypes"):  # torch: expected scalar type Float but found Long
        caten.cross(C(r(2, 3)), C(r(2, 3, dt=np.int64, lo=0, hi=3)), dim=1)
    with pytest.raises(Error, match="differ in size"):
        caten.tensordot(C(r(2, 3)), C(r(4, 2)), dims=1)


# scans and counts ----------------------------------------------------------------------------------
def _scan_cases():
    x = r(3, 6, lo=0, hi=3)
    x[1, 2], x[2, 4] = np.nan, np.nan
    xi = r(4, 5, dt=np.int64, lo=0, hi=3)
    y = r(3, 7) * 30
    y[0, 0] = -200.0
    seq = np.sort(r(8, lo=0, hi=10))
    vals = np.array([[0, 3, 5.5, np.nan], [9, 10, -1, 3]], np.float32)
    bseq, bv = np.sort(r(2, 5), axis=1), r(2, 3)
    us = seq[RNG.permutation(8)]
    srt = np.argsort(us, kind="stable")
    m = r(3, 7, dt=np.int64, lo=0, hi=4)
    b, w = np.array([0, 3, 3, 1, 5]), r(5)
    hst = r(200)
    hst[:5] = [0, 1, 0.25, 0.5, -1]
    ri = r(2, 3)
    out = []
    for f in ("cummax", "cummin"):
        out += [(f"{f} nan dim {d}", lambda M, f=f, d=d: getattr(M, f)(x, d)) for d in (0, 1)]
        out.append((f"{f} int", lambda M, f=f: getattr(M, f)(xi, 1)))
        out.append((f"{f} f64 empty", lambda M, f=f: getattr(M, f)(r(0, 3, dt=np.float64), 1)))
    out += [
        ("logcumsumexp", lambda M: M.logcumsumexp(y, 1)),
        ("logcumsumexp dim 0 f64", lambda M: M.logcumsumexp(y.astype(np.float64), 0)),
        ("logcumsumexp f16", lambda M: M.logcumsumexp(y.astype(np.float16) / 8, 1)),
        ("logcumsumexp -inf", lambda M: M.logcumsumexp(np.array([-np.inf, 0.0, -np.inf, 1.0], np.float32), 0)),
        ("searchsorted left", lambda M: M.searchsorted(seq, vals)),
        ("searchsorted right", lambda M: M.searchsorted(seq, vals, right=True)),
        ("searchsorted batched side int32", lambda M: M.searchsorted(bseq, bv, side="right", out_int32=True)),
        ("searchsorted sorter", lambda M: M.searchsorted(us, vals, sorter=(C if M is _Caten else T)(srt))),
        ("searchsorted nan tail", lambda M: M.searchsorted(np.array([1, 2, np.nan, np.nan, np.nan], np.float32),
                                                           np.array([1.5, np.nan, 0, 2, 3], np.float32))),
        ("searchsorted unsorted right", lambda M: M.searchsorted(np.array([5, 1, 4, 2, 3]), np.arange(7), right=True)),
        ("searchsorted scalar", lambda M: M.searchsorted(seq, 2.5)),
        ("searchsorted int", lambda M: M.searchsorted(np.array([1, 3, 3, 7]), np.array([0, 3, 8]))),
        ("bucketize", lambda M: M.bucketize(vals, seq)),
        ("bucketize right", lambda M: M.bucketize(vals, seq, right=True)),
        ("mode", lambda M: M.mode(m, 1)),
        ("mode float keepdim", lambda M: M.mode(m.astype(np.float32), 0, True)),
        ("bincount", lambda M: M.bincount(b)),
        ("bincount weights minlength", lambda M: M.bincount(b, w, minlength=8)),
        ("bincount int weights", lambda M: M.bincount(b, b)),
        ("bincount empty", lambda M: M.bincount(np.zeros(0, np.int64), minlength=3)),
        ("histc", lambda M: M.histc(hst, bins=7)),
        ("histc range", lambda M: M.histc(hst, bins=4, min=-1, max=1)),
        ("histc f64", lambda M: M.histc(hst.astype(np.float64), bins=13, min=-1, max=1)),
        ("repeat_interleave int dim", lambda M: M.repeat_interleave(ri, 2, dim=1)),
        ("repeat_interleave flat", lambda M: M.repeat_interleave(ri, 3)),
        ("repeat_interleave tensor", lambda M: M.repeat_interleave(ri, (C if M is _Caten else T)(
            np.array([1, 0, 2])), dim=1)),
        ("repeat_interleave alone", lambda M: M.repeat_interleave(np.array([1, 0, 2]))),
    ]
    return out


SCANS = _scan_cases()


@pytest.mark.parametrize("case", SCANS, ids=[n for n, _ in SCANS])
def test_scan_values(case):
    name, f = case
    same(f(_Caten), f(_Torch), tol=1e-4 if "logcumsumexp" in name else 1e-5, what=name)


def _reduce_cases():
    x = r(3, 4)
    x[0, 1] = np.nan
    x0 = np.nan_to_num(x)
    xi = r(3, 4, dt=np.int64, lo=0, hi=5)
    c = r(3, 6)
    fw, aw = RNG.integers(1, 4, 6), RNG.random(6).astype(np.float32)
    return [
        ("aminmax dim", lambda M: M.aminmax(x0, dim=1)),
        ("aminmax all", lambda M: M.aminmax(x0)),
        ("aminmax keepdim", lambda M: M.aminmax(x0, keepdim=True)),
        ("aminmax int", lambda M: M.aminmax(xi, dim=0, keepdim=True)),
        ("nansum", lambda M: M.nansum(x, 1)),
        ("nansum all", lambda M: M.nansum(x)),
        ("nansum int", lambda M: M.nansum(xi, 0)),
        ("nanmean", lambda M: M.nanmean(x, 1, keepdim=True)),
        ("nanmean all nan", lambda M: M.nanmean(np.full((2, 3), np.nan, np.float64), 1)),
        ("cov", lambda M: M.cov(c)),
        ("cov correction 0", lambda M: M.cov(c, correction=0)),
        ("cov fweights", lambda M: M.cov(c, fweights=(C if M is _Caten else T)(fw))),
        ("cov aweights", lambda M: M.cov(c, aweights=(C if M is _Caten else T)(aw))),
        ("cov both", lambda M: M.cov(c, fweights=(C if M is _Caten else T)(fw),
                                     aweights=(C if M is _Caten else T)(aw), correction=2)),
        ("cov 1-D", lambda M: M.cov(c[0])),
        ("cov int", lambda M: M.cov(xi)),
        ("corrcoef", lambda M: M.corrcoef(c)),
        ("std_mean correction", lambda M: M.std_mean(c, 1, correction=0)),
        ("var_mean", lambda M: M.var_mean(c, 0, keepdim=True)),
        ("count_nonzero", lambda M: M.count_nonzero(xi, 1)),
    ]


REDUCE = _reduce_cases()


@pytest.mark.parametrize("case", REDUCE, ids=[n for n, _ in REDUCE])
def test_reduce_values(case):
    name, f = case
    same(f(_Caten), f(_Torch), what=name)


def test_host_side_ops_refused_inside_jit():
    with pytest.raises(Error, match="jit"):
        caten.jit(lambda t: t.cummax(0).values)(C(r(3)))
    with pytest.raises(Error, match="negative"):
        caten.bincount(C(np.array([1, -1])))
    with pytest.raises(RuntimeError):
        torch.cov(T(r(2, 3)), fweights=T(np.array([1, -1, 2])))
    with pytest.raises(Error, match="negative"):
        caten.cov(C(r(2, 3)), fweights=C(np.array([1, -1, 2])))


# gradients -----------------------------------------------------------------------------------------
def _grad_cases():
    a, b = r(2, 3, 4, dt=np.float64), r(3, 4, 5, dt=np.float64)
    m, v = r(3, 4, dt=np.float64), r(4, dt=np.float64)
    c1, c2 = r(4, 3, dt=np.float64), r(5, 3, dt=np.float64)
    c1[0] = c2[1]  # a zero distance: torch's gradient is 0 there
    y = r(3, 6, dt=np.float64) * 5
    return [
        ("einsum", lambda M, p: M.einsum("bij,jk,bii->bk", p[0], p[1], p[2]),
         [a[:, :, :3].copy(), b[:, :, 0].copy(), r(2, 3, 3, dt=np.float64)]),
        ("tensordot", lambda M, p: M.tensordot(p[0], p[1]), [a, b]),
        ("kron", lambda M, p: M.kron(p[0], p[1]), [m, r(2, 3, dt=np.float64)]),
        ("baddbmm", lambda M, p: M.baddbmm(p[0], p[1], p[2], beta=0.5, alpha=2),
         [r(3, 5, dt=np.float64), r(2, 3, 4, dt=np.float64), r(2, 4, 5, dt=np.float64)]),
        ("addbmm", lambda M, p: M.addbmm(p[0], p[1], p[2], alpha=-1.5),
         [r(3, 5, dt=np.float64), r(2, 3, 4, dt=np.float64), r(2, 4, 5, dt=np.float64)]),
        ("addmv", lambda M, p: M.addmv(p[0], p[1], p[2], beta=2), [r(3, dt=np.float64), m, v]),
        ("addr", lambda M, p: M.addr(p[0], p[1], p[2], alpha=3), [m, r(3, dt=np.float64), v]),
        ("cross", lambda M, p: M.cross(p[0], p[1], dim=0), [r(3, 4, dt=np.float64), r(3, 4, dt=np.float64)]),
        ("cdist 2", lambda M, p: M.cdist(p[0], p[1]), [c1, c2]),
        ("cdist 1", lambda M, p: M.cdist(p[0], p[1], p=1.0), [r(4, 3, dt=np.float64), c2]),
        ("cdist 3", lambda M, p: M.cdist(p[0], p[1], p=3.0), [r(4, 3, dt=np.float64), c2]),
        ("cdist inf", lambda M, p: M.cdist(p[0], p[1], p=float("inf")), [r(4, 3, dt=np.float64), c2]),
        ("cdist inf ties", lambda M, p: M.cdist(p[0], p[1], p=float("inf")),
         [np.array([[0.0, 0.0, 0.5], [1.0, 2.0, 3.0]]), np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])]),
        ("cdist mm", lambda M, p: M.cdist(p[0], p[1]), [r(27, 3, dt=np.float64), c2]),
        ("trapezoid x", lambda M, p: M.trapezoid(p[0], p[1]), [y, np.sort(r(6, dt=np.float64))]),
        ("trapezoid dx", lambda M, p: M.trapezoid(p[0], dx=0.7, dim=0), [y]),
        ("vander", lambda M, p: M.vander(p[0], N=4) if M is caten else  # torch's vander backward fails
         torch.stack([p[0] ** k for k in (3, 2, 1, 0)], 1), [r(5, dt=np.float64)]),
        ("diag_embed", lambda M, p: M.diag_embed(p[0], -1, 0, 2), [m]),
        ("block_diag", lambda M, p: M.block_diag(p[0], p[1]), [m, v]),
        ("cartesian_prod", lambda M, p: M.cartesian_prod(p[0], p[1]), [v, r(3, dt=np.float64)]),
        ("rot90", lambda M, p: M.rot90(p[0], 3, (1, 2)), [a]),
        ("tensor_split", lambda M, p: M.tensor_split(p[0], 3, dim=2)[1], [a]),
        ("repeat_interleave", lambda M, p: M.repeat_interleave(p[0], (C if M is caten else T)(np.array([2, 0, 1])),
                                                               dim=0), [m]),
        ("cummax", lambda M, p: M.cummax(p[0], 1).values, [y]),
        ("cummin", lambda M, p: M.cummin(p[0], 0).values, [y]),
        ("logcumsumexp", lambda M, p: M.logcumsumexp(p[0], 1), [y]),
        ("mode", lambda M, p: M.mode(p[0], 0).values, [np.round(y / 5)]),
        ("cov aweights", lambda M, p: M.cov(p[0], aweights=p[1]), [r(3, 6, dt=np.float64), RNG.random(6) + 0.1]),
        ("corrcoef", lambda M, p: M.corrcoef(p[0]), [r(3, 6, dt=np.float64)]),
        ("nanmean", lambda M, p: M.nanmean(p[0], 1), [np.where(y > 4, np.nan, y)]),
    ]


GRADS = _grad_cases()


@pytest.mark.parametrize("case", GRADS, ids=[n for n, _, _ in GRADS])
def test_gradients_vs_torch(case):
    name, f, args = case
    tp = [torch.tensor(a, requires_grad=True) for a in args]
    cp = [caten.Tensor(a, requires_grad=True) for a in args]
    tout, cout = f(torch, tp), f(caten, cp)
    g = RNG.standard_normal(tuple(tout.shape))
    (tout * torch.tensor(g)).sum().backward()
    (cout * caten.Tensor(g)).sum().backward()
    for k, (t, c) in enumerate(zip(tp, cp)):
        want = t.grad if t.grad is not None else torch.zeros_like(t)
        np.testing.assert_allclose(c.grad.numpy(), want.numpy(), rtol=1e-9, atol=1e-9, err_msg=f"{name} d{k}")


# llvm and c: the in-graph ones in one program ----------------------------------------------------
def _program(a, b, s, x, seq, v, y, c1, c2):
    return (caten.einsum("ij,jk->ik", a, b), caten.tensordot(a, b, dims=1), caten.kron(a, s),
            caten.baddbmm(s, a.unsqueeze(0), b.unsqueeze(0), beta=0.5, alpha=2), caten.cross(x, x.flip(0), dim=0),
            caten.diag_embed(a, 1), caten.logcumsumexp(y, 1), caten.searchsorted(seq, v),
            caten.cdist(c1, c2), caten.cdist(c1, c2, p=1.0), caten.trapezoid(y), caten.vander(seq, N=3),
            caten.block_diag(a, s), caten.nansum(y, 0), caten.cov(y), caten.rot90(a))


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_compiled_runtimes_match_torch(rt):
    a, b, s, x = r(2, 3), r(3, 4), r(2, 4), r(3, 5)
    seq, v = np.sort(r(6)), r(2, 3)
    y = r(3, 5) * 10
    y[1, 1] = np.nan
    c1, c2 = r(4, 3), r(5, 3)
    got = caten.jit(_program, runtime=rt)(*(C(t, runtime=rt) for t in (a, b, s, x, seq, v, y, c1, c2)))
    ta, tb, ts, tx, tseq, tv, ty, tc1, tc2 = map(T, (a, b, s, x, seq, v, y, c1, c2))
    want = (torch.einsum("ij,jk->ik", ta, tb), torch.tensordot(ta, tb, dims=1), torch.kron(ta, ts),
            torch.baddbmm(ts, ta.unsqueeze(0), tb.unsqueeze(0), beta=0.5, alpha=2),
            torch.cross(tx, tx.flip(0), dim=0), torch.diag_embed(ta, 1), torch.logcumsumexp(ty, 1),
            torch.searchsorted(tseq, tv), torch.cdist(tc1, tc2), torch.cdist(tc1, tc2, p=1.0), torch.trapezoid(ty),
            torch.vander(tseq, N=3), torch.block_diag(ta, ts), torch.nansum(ty, 0), torch.cov(ty), torch.rot90(ta))
    for k, (g, w) in enumerate(zip(got, want)):
        same(g, w, tol=1e-4, what=f"{rt} output {k}")


# Tensor wrong numbers (regressions) --------------------------------------------------------------
def test_matmul_of_vectors_of_different_sizes_is_an_error():
    with pytest.raises(RuntimeError):
        torch.tensor([2.0]) @ torch.tensor([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(Error):
        (C(np.array([2.0], np.float32)) @ C(np.array([1.0, 2.0, 3.0, 4.0], np.float32))).numpy()


def test_softmax_of_a_rank_0_tensor():
    same(caten.Tensor(1.5).softmax(0), torch.tensor(1.5).softmax(0))
    same(caten.Tensor(1.5).log_softmax(0), torch.tensor(1.5).log_softmax(0))


@pytest.mark.parametrize("kw", [{}, {"ignore_index": 2}, {"label_smoothing": 0.3},
                                {"reduction": "sum", "label_smoothing": 0.2, "ignore_index": 1},
                                {"reduction": "none", "weight": [1.0, 2.0, 0.5, 3.0]},
                                {"weight": [1.0, 2.0, 0.5, 3.0], "label_smoothing": 0.4, "ignore_index": 1}])
def test_cross_entropy_reduces_classes_on_axis_1(kw):
    x = r(3, 4, 5)
    t = RNG.integers(0, 4, (3, 5))
    t[0, 1] = kw.get("ignore_index", -100)
    conv = {k: (np.asarray(v, np.float32) if isinstance(v, list) else v) for k, v in kw.items()}
    want = torch.nn.functional.cross_entropy(T(x), T(t), **{k: T(v) if isinstance(v, np.ndarray) else v
                                                           for k, v in conv.items()})
    got = F.cross_entropy(C(x), C(t), **{k: C(v) if isinstance(v, np.ndarray) else v for k, v in conv.items()})
    same(got, want)


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.3}, {"weight": [1.0, 2.0, 0.5, 3.0], "label_smoothing": 0.2}])
def test_cross_entropy_probability_targets(kw):
    x, p = r(3, 4, 5), RNG.random((3, 4, 5)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    conv = {k: (np.asarray(v, np.float32) if isinstance(v, list) else v) for k, v in kw.items()}
    want = torch.nn.functional.cross_entropy(T(x), T(p), **{k: T(v) if isinstance(v, np.ndarray) else v
                                                           for k, v in conv.items()})
    got = F.cross_entropy(C(x), C(p), **{k: C(v) if isinstance(v, np.ndarray) else v for k, v in conv.items()})
    same(got, want)


def test_mismatched_targets_are_errors_where_torch_errors():
    x, t = r(32, 10), RNG.random((32, 1)).astype(np.float32)
    ti = RNG.integers(0, 10, (32, 1))
    for name, target in (("cross_entropy", t), ("binary_cross_entropy_with_logits", t), ("cross_entropy", ti),
                         ("nll_loss", ti), ("cross_entropy", t[:, 0])):
        with pytest.raises(Exception):  # noqa: B017 (torch raises RuntimeError or ValueError)
            getattr(torch.nn.functional, name)(T(x), T(target))
        with pytest.raises(Error):
            getattr(F, name)(C(x), C(target))


@pytest.mark.parametrize("bins,lo,hi,dt", [(20, 0.0, 1.0, np.float64), (24, -2.0, -1.8, np.float32),
                                           (13, -1.0, -0.9, np.float32), (9, -3.0, -2.7, np.float16)])
def test_histc_on_bin_edges(bins, lo, hi, dt):
    """Values on and next to every edge land in torch's bins (its interpolation rule, not the edges)."""
    edges = np.linspace(lo, hi, bins + 1).astype(dt)
    v = np.concatenate([RNG.uniform(lo - 0.5, hi + 0.5, 50).astype(dt), edges, np.nextafter(edges, np.inf),
                        np.nextafter(edges, -np.inf)]).astype(dt)
    for mn, mx in ((lo, hi), (0, 0)):
        same(caten.histc(C(v), bins=bins, min=mn, max=mx), torch.histc(T(v), bins=bins, min=mn, max=mx))
