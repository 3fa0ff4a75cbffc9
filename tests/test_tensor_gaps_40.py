"""Tensor gaps found by the port of tinygrad's op suite (#40): F.scaled_dot_product_attention,
F.max_unpool1d/2d/3d, F.normalize for every p, nonzero of a 0-d tensor, torch's exception classes
(linspace of bool, an unknown pad mode), and the "wrong numbers" checklist of #39. Values and
gradients against torch; numpy on every case, llvm and c on a representative one."""

from __future__ import annotations

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")
TF = torch.nn.functional
F = caten.nn.functional


def _check(cfn, tfn, arrays, rt, tol=1e-5, consts=()):
    """cfn and tfn on the same float arrays (requiring gradients) and extra constants; the values
    and the gradients of a weighted sum compared."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    cs = [caten.Tensor(a, requires_grad=True, runtime=rt) for a in arrays]
    to = tfn(*ts, *[torch.tensor(c) for c in consts])
    co = cfn(*cs, *[caten.Tensor(c, runtime=rt) for c in consts])
    w = np.random.default_rng(1).standard_normal(tuple(to.shape)).astype(arrays[0].dtype)
    (to * torch.tensor(w)).sum().backward()
    (co * caten.Tensor(w, runtime=rt)).sum().backward()
    np.testing.assert_allclose(co.numpy(), to.detach().numpy(), atol=tol, rtol=tol)
    for c, t in zip(cs, ts):
        np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), atol=tol, rtol=tol)


def _rand(*shapes, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# scaled_dot_product_attention ------------------------------------------------------------------
MASK_B = np.random.default_rng(2).random((4, 6)) > 0.5
MASK_B[1] = False  # a row that attends nothing: torch's safe softmax gives 0 (and a 0 gradient)
MASK_F = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
MASK_F[2] = -np.inf
SDPA = [
    ([(2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7)], None, {}),
    ([(3, 4), (6, 4), (6, 5)], None, {"is_causal": True}),
    ([(4, 6), (3, 6), (3, 5)], None, {"is_causal": True, "scale": 0.7}),
    ([(2, 4, 5), (2, 6, 5), (2, 6, 3)], MASK_B, {}),
    ([(2, 4, 5), (2, 6, 5), (2, 6, 3)], MASK_F, {"scale": 0.3}),
    ([(2, 4, 3, 5), (2, 2, 6, 5), (2, 1, 6, 3)], None, {"enable_gqa": True}),
    ([(2, 1, 3, 5), (1, 2, 6, 5), (1, 2, 6, 3)], None, {}),  # batch dims broadcast
    ([(2, 4, 0, 5), (2, 4, 6, 5), (2, 4, 6, 3)], None, {}),
    ([(2, 4, 3, 5), (2, 4, 0, 5), (2, 4, 0, 3)], None, {}),
]


@pytest.mark.parametrize("shapes,mask,kw", SDPA)
def test_sdpa_matches_torch(shapes, mask, kw):
    consts = () if mask is None else (mask,)
    _check(lambda q, k, v, *m: F.scaled_dot_product_attention(q, k, v, *m, **kw),
           lambda q, k, v, *m: TF.scaled_dot_product_attention(q, k, v, *m, **kw), _rand(*shapes), "numpy",
           consts=consts)


@pytest.mark.parametrize("rt", ["c"])  # llvm: the unpool, uint8 and view tests
def test_sdpa_runtimes(rt):
    _check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
           lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
           _rand((2, 4, 5), (2, 6, 5), (2, 6, 3)), rt, consts=(MASK_B,))


@pytest.mark.parametrize("dt", [np.float16, np.float64])
def test_sdpa_dtypes(dt):
    q, k, v = _rand((2, 3, 4), (2, 5, 4), (2, 5, 3), dtype=dt)
    want = TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=True)
    got = F.scaled_dot_product_attention(*(caten.Tensor(a, runtime="numpy") for a in (q, k, v)), is_causal=True)
    assert got.dtype == {np.float16: "f16", np.float64: "f64"}[dt]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-3 if dt == np.float16 else 1e-12)


@pytest.mark.parametrize("shapes,kw,mask_dt", [
    ([(2, 3, 4), (2, 5, 4), (2, 5, 4)], {"is_causal": True}, "bool"),  # a mask with is_causal
    ([(2, 6, 3, 4), (2, 4, 5, 4), (2, 4, 5, 4)], {"enable_gqa": True}, None),  # 4 heads do not divide 6
    ([(2, 6, 3, 4), (2, 4, 5, 4), (2, 4, 5, 4)], {}, None),  # heads differ without gqa
    ([(4,), (5, 4), (5, 4)], {}, None),  # a 1-D query
    ([(3, 4), (5, 4), (5, 4)], {}, "int32"),  # an int mask
    ([(3, 4), (5, 4), (5, 4)], {}, "float64"),  # a float mask of another width
])
def test_sdpa_errors_as_torch(shapes, kw, mask_dt):
    arrs = _rand(*shapes)
    m = None if mask_dt is None else np.ones((shapes[0][-2] if len(shapes[0]) > 1 else 1, 5), mask_dt)
    with pytest.raises(RuntimeError):
        TF.scaled_dot_product_attention(*(torch.tensor(a) for a in arrs),
                                        attn_mask=None if m is None else torch.tensor(m), **kw)
    with pytest.raises(caten.Error):
        F.scaled_dot_product_attention(*(caten.Tensor(a, runtime="numpy") for a in arrs),
                                       attn_mask=None if m is None else caten.Tensor(m, runtime="numpy"), **kw)


def test_sdpa_refuses_dropout():
    q = caten.Tensor(_rand((3, 4))[0], runtime="numpy")
    with pytest.raises(caten.Error, match="dropout_p"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)


# max_unpool --------------------------------------------------------------------------------------
UNPOOL = [
    (2, (2, 3, 9, 8), {"kernel_size": (3, 2), "stride": (3, 2)}),
    (2, (2, 3, 9, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "output_size": (9, 8)}),
    (2, (3, 7, 6), {"kernel_size": 2, "output_size": (99, 99, 7, 6)}),  # batch/channel of output_size ignored
    (2, (2, 3, 5, 5), {"kernel_size": 3, "stride": 1}),  # overlapping windows: repeated indices
    (1, (2, 3, 9), {"kernel_size": 2}),
    (3, (1, 2, 4, 5, 6), {"kernel_size": 2, "stride": (2, 1, 2)}),
]


@pytest.mark.parametrize("nd,shape,kw", UNPOOL)
def test_max_unpool_matches_torch(nd, shape, kw):
    pk = {k: v for k, v in kw.items() if k != "output_size"}
    _check(lambda x: getattr(F, f"max_unpool{nd}d")(*getattr(F, f"max_pool{nd}d")(x, return_indices=True, **pk), **kw),
           lambda x: getattr(TF, f"max_unpool{nd}d")(*getattr(TF, f"max_pool{nd}d")(x, return_indices=True, **pk),
                                                     **kw), _rand(shape), "numpy", tol=1e-6)


def test_max_unpool_of_infinities_and_nan():
    data = np.array([[[[np.inf, -np.inf, np.nan], [1.0, 2.0, 3.0]]]], np.float32)
    want = TF.max_unpool2d(*TF.max_pool2d(torch.tensor(data), 2, return_indices=True), 2)
    got = F.max_unpool2d(*F.max_pool2d(caten.Tensor(data, runtime="numpy"), 2, return_indices=True), 2)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("rt", ["llvm"])  # c: the sdpa, uint8 and int max-pool tests
def test_max_unpool_runtimes(rt):
    _check(lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, 1, return_indices=True), 3, 1),
           lambda x: TF.max_unpool2d(*TF.max_pool2d(x, 3, 1, return_indices=True), 3, 1), _rand((1, 2, 5, 4)), rt)


@pytest.mark.parametrize("call", [
    lambda f, x, i: f.max_unpool2d(x, i, 2, output_size=(9, 9)),  # not within a stride of the default 4
    lambda f, x, i: f.max_unpool2d(x, i, 2, output_size=(1, 4, 4)),  # 3 sizes
    lambda f, x, i: f.max_unpool2d(x, i * 9, 2),  # an index outside the output
    lambda f, x, i: f.max_unpool2d(x[0, 0], i[0, 0], 2),  # a 2-D input
    lambda f, x, i: f.max_unpool2d(x, i.int(), 2),  # int32 indices
])
def test_max_unpool_errors_as_torch(call):
    a = _rand((1, 1, 4, 4))[0]
    tx, ti = TF.max_pool2d(torch.tensor(a), 2, return_indices=True)
    cx, ci = F.max_pool2d(caten.Tensor(a, runtime="numpy"), 2, return_indices=True)
    with pytest.raises((RuntimeError, ValueError)):
        call(TF, tx, ti)
    with pytest.raises(caten.Error):
        call(F, cx, ci)


# normalize, nonzero, errors ------------------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 1, 3, 0.5, 0, float("inf"), -float("inf"), -1])
def test_normalize_every_p(p):
    a = np.array([[1., 0, -2, 3], [0, 0, 0, 0], [0.5, -0.5, 0, 1e-3]], np.float32)  # a zero row: gradient 0
    for dim in (1, 0):
        _check(lambda x, d=dim: F.normalize(x, p=p, dim=d), lambda x, d=dim: TF.normalize(x, p=p, dim=d), [a], "numpy")


def test_nonzero_of_0d():
    for v in (5.0, 0.0):
        t, c = torch.tensor(v), caten.Tensor(np.float32(v), runtime="numpy")
        assert c.nonzero().shape == tuple(t.nonzero().shape)
        assert c.argwhere().shape == tuple(t.argwhere().shape)
        assert [x.numpy().tolist() for x in c.nonzero(as_tuple=True)] == [x.tolist() for x in t.nonzero(as_tuple=True)]


def test_torch_exception_classes():
    with pytest.raises(NotImplementedError):
        torch.linspace(5, 10, 3, dtype=torch.bool)
    with pytest.raises(NotImplementedError):
        caten.linspace(5, 10, 3, dtype="bool")
    with pytest.raises(NotImplementedError):
        TF.pad(torch.zeros(3, 3, 3), (3, 0), mode="typo")
    with pytest.raises(NotImplementedError):
        F.pad(caten.zeros(3, 3, 3), (3, 0), mode="typo")


# leaves as torch's ------------------------------------------------------------------------------------
def test_factory_and_detached_results_are_leaves():
    x = caten.randn(3).requires_grad_()
    assert x.is_leaf and x.requires_grad
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())
    a = caten.Tensor([1.0, 2.0], requires_grad=True)
    d = (a * 3).detach().requires_grad_()
    (d * d).sum().backward()
    np.testing.assert_array_equal(d.grad.numpy(), [6.0, 12.0])
    assert a.grad is None
    with pytest.raises(caten.Error, match="floating-point"):
        caten.arange(3).requires_grad_()


# the "wrong numbers" checklist of #39 (the rest have their tests in test_wrong_numbers*.py) -----------
@pytest.mark.parametrize("rt", ["numpy", "c"])
def test_integer_max_pool_with_padding_as_torch(rt):
    """Padding takes no part in an integer max (no -inf, no 0): torch's values and indices."""
    rng = np.random.default_rng(0)
    for dt in ([np.int8, np.uint8, np.int16, np.int32, np.int64] if rt == "numpy" else [np.int64]):
        x = rng.integers(0 if dt == np.uint8 else -100, 100, (2, 2, 5, 4)).astype(dt)
        if dt == np.int64:
            x[0, 0, 0, 0] = np.iinfo(np.int64).min
        for kw in ({"kernel_size": 2, "stride": 1, "padding": 1},
                   {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}):
            want = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
            got = F.max_pool2d(caten.Tensor(x, runtime=rt), return_indices=True, **kw)
            np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
            np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        want = TF.max_pool3d(torch.tensor(x[None]), 2, 1, 1)
        np.testing.assert_array_equal(F.max_pool3d(caten.Tensor(x[None], runtime=rt), 2, 1, 1).numpy(), want.numpy())


def test_softmax_of_a_0d_tensor_with_the_implicit_dim():
    for f in ("softmax", "log_softmax"):
        want = getattr(torch.tensor(1.5), f)(0)
        np.testing.assert_array_equal(getattr(caten.Tensor(1.5, runtime="numpy"), f)().numpy(), want.numpy())
        np.testing.assert_array_equal(getattr(F, f)(caten.Tensor(1.5, runtime="numpy")).numpy(), want.numpy())


def test_conv_with_a_kernel_larger_than_the_input_raises_as_torch():
    with pytest.raises(RuntimeError):
        TF.conv2d(torch.zeros(1, 1, 3, 3), torch.zeros(1, 1, 5, 5))
    with pytest.raises(caten.Error, match="kernel"):
        F.conv2d(caten.zeros(1, 1, 3, 3), caten.zeros(1, 1, 5, 5))


def test_cross_entropy_reduces_classes_on_axis_1_on_llvm():
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((2, 3, 4, 2)).astype(np.float32), rng.integers(0, 3, (2, 4, 2))
    _check(lambda a: F.cross_entropy(a, caten.Tensor(t, runtime="llvm")),
           lambda a: TF.cross_entropy(a, torch.tensor(t)), [x], "llvm")


# uint8 bilinear: torch's fixed-point kernel, byte for byte ----------------------------------------------
U8 = [(3, (64, 64), {"size": (10, 10)}), (5, (7, 9), {"size": (13, 4)}), (1, (5, 6), {"size": (5, 11)}),
      (5, (7, 5), {"scale_factor": (0.6, 2.5)})]


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("c,hw,kw", U8)
def test_bilinear_uint8_is_torchs_bytes(c, hw, kw, align):
    x = np.random.default_rng(c + hw[0]).integers(0, 256, (2, c) + hw).astype(np.uint8)
    want = TF.interpolate(torch.tensor(x), mode="bilinear", align_corners=align, **kw).numpy()
    got = F.interpolate(caten.Tensor(x, runtime="numpy"), mode="bilinear", align_corners=align, **kw)
    assert got.dtype == "u8"
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_bilinear_uint8_runtimes(rt):
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 9, 7)).astype(np.uint8)
    want = TF.interpolate(torch.tensor(x), size=(4, 12), mode="bilinear").numpy()
    np.testing.assert_array_equal(F.interpolate(caten.Tensor(x, runtime=rt), size=(4, 12), mode="bilinear").numpy(),
                                  want)


# view(dtype): the bits reinterpreted -------------------------------------------------------------------
def _bits_of(dt, rng):
    npdt = np.dtype({"f": "float", "i": "int", "u": "uint"}[dt[0]] + dt[1:])
    if dt[0] == "f":
        a = (rng.standard_normal((3, 8)) * 1000).astype(npdt)
        a[0, :3] = [np.inf, -0.0, np.nan]
        return a
    return rng.integers(np.iinfo(npdt).min, np.iinfo(npdt).max, (3, 8), dtype=npdt)


VIEW_PAIRS = [("f32", "i32"), ("f32", "u8"), ("f32", "i64"), ("f64", "u16"), ("f64", "f32"), ("i8", "u64"),
              ("u8", "f64"), ("i16", "f32"), ("u32", "i16"), ("i64", "f64"), ("u64", "i8"), ("i32", "u32")]


def test_view_dtype_is_torchs_bits():
    """Same width, narrower and wider, across floats (inf, -0.0, nan) and signed/unsigned ints."""
    rng = np.random.default_rng(0)
    for src, dst in VIEW_PAIRS:
        a = _bits_of(src, rng)
        tdt = getattr(torch, {"f": "float", "i": "int", "u": "uint"}[dst[0]] + dst[1:])
        want = torch.from_numpy(a.copy()).view(tdt).numpy()
        got = caten.Tensor(a, runtime="numpy").view(dst).numpy()
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), (src, dst)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_view_dtype_runtimes(rt):
    rng = np.random.default_rng(0)
    for src, dst in [("f64", "u8"), ("i16", "i64")]:
        a = _bits_of(src, rng)
        want = a.view(np.dtype({"f": "float", "i": "int", "u": "uint"}[dst[0]] + dst[1:]))
        assert caten.Tensor(a, runtime=rt).view(dst).numpy().tobytes() == want.tobytes()


def test_view_dtype_errors_as_torch():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for call in (lambda t, d: t.view(d.int64), lambda t, d: t[0, 0].view(d.int16)):
        with pytest.raises(RuntimeError, match="different element sizes"):
            call(torch.tensor(x), torch)
        with pytest.raises(caten.Error, match="different element sizes"):
            call(caten.Tensor(x, runtime="numpy"), torch)
    with pytest.raises(caten.Error, match="not supported"):  # refused, not approximated
        caten.Tensor(x, runtime="numpy").view(torch.float16)


def test_cummax_of_a_scalar_checks_dim_and_unknown_dtype_is_a_type_error():
    for f in ("cummax", "cummin"):
        for d in (1, -2):
            with pytest.raises(IndexError):
                getattr(torch.tensor(2.5), f)(d)
            with pytest.raises(IndexError):
                getattr(caten.Tensor(2.5, runtime="numpy"), f)(d)
    with pytest.raises(TypeError):
        torch.tensor([1.0, 2.0]).sum(dtype="")
    with pytest.raises(TypeError):
        caten.Tensor([1.0, 2.0], runtime="numpy").sum(dtype="")
