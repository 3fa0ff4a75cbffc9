"""Windows at vector speed: a register reduction over a few static positions (a depthwise
convolution's or a pooling's window) is unrolled, and `split_loads` cuts the loops around it
into the border (masked loads) and the interior (plain loads, which the renderers vectorize).

- The pass on hand-built loop IR, run by the loop-IR interpreter: bit for bit the one loop's
  result for random bounds, strides and extents (a property test), and an interior left with
  no mask.
- Depthwise convolutions (strides 1-3, dilations, paddings, 3x3 to 7x7 windows, odd and one-
  pixel images, symbolic sizes) and max/avg pooling with padding, on llvm and c, against float64
  numpy references; with every load checked (`check_bounds`); and the gradients through torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopir_run import _stmts

import caten
from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.lower.loadsplit import split_loads


def _masked_sum(ext: L.X, k: int, r: int, lo: L.X, hi: L.X) -> list:
    """out[v] = sum over t < 3 of in[k*v + t + r] where lo <= k*v + t + r < hi (else 0): the
    window positions unrolled, as the lowering writes them."""
    v = L.var("v")
    body: list = [L.Acc("acc", T.f32, L.const(0.0, T.f32))]
    for t in range(3):
        at = L.iadd(L.iadd(L.imul(v, L.const(k)), L.const(t)), L.const(r))
        ok = L.land(L.alu(Op.NOT, T.bool_, L.icmplt(at, lo)), L.icmplt(at, hi))
        x = X_masked(ok, L.load("src", L.imax(L.imin(at, L.const(63)), L.const(0)), T.f32))
        body.append(L.SetAcc("acc", L.alu(Op.ADD, T.f32, L.var("acc", T.f32), x, arg="acc")))
    body.append(L.Store("out", v, L.var("acc", T.f32)))
    return [L.Loop("v", ext, body)]


def X_masked(cond: L.X, value: L.X) -> L.X:
    return L.X.make("masked", value.dtype, (cond, value))


def _run(stmts: list, env: dict) -> np.ndarray:
    bufs = {"src": np.arange(1, 65, dtype=np.float32), "out": np.full(40, -1.0, np.float32)}
    _stmts(stmts, dict(env), bufs)
    return bufs["out"]


@settings(max_examples=80, deadline=None)
@given(ext=st.integers(0, 40), k=st.integers(1, 3), r=st.integers(-4, 4), lo=st.integers(-3, 12),
       hi=st.integers(-2, 70), symbolic=st.booleans())
def test_split_matches_the_one_loop(ext, k, r, lo, hi, symbolic):
    """Bounds that leave the interior empty, whole, or anything between; symbolic bounds too."""
    env = {"E": ext, "LO": lo, "HI": hi}
    e, a, b = (L.var("E"), L.var("LO"), L.var("HI")) if symbolic else (L.const(ext), L.const(lo), L.const(hi))
    one = _masked_sum(e, k, r, a, b)
    split = split_loads(one)
    assert [s.var for s in split] == ["v_lo", "v_in", "v_hi"]
    np.testing.assert_array_equal(_run(split, env), _run(one, env))


def test_interior_has_no_mask():
    split = split_loads(_masked_sum(L.const(30), 2, -1, L.const(0), L.const(57)))
    mid = split[1]
    assert not [x for s, roots in L.walk_stmts(mid.body) for x in L.nodes(*roots) if x.op == "masked"]
    assert [x for s, roots in L.walk_stmts(split[0].body) for x in L.nodes(*roots) if x.op == "masked"]


def _where_max(ext: L.X, r: L.X, bound: L.X) -> list:
    """out[0] = max over v < ext of where(v + r <= bound, src[v], -inf), the `<=` written as
    (a < b) or not (a != b), as a causal mask's `j <= i` lowers."""
    v = L.var("v")
    at = L.iadd(v, r)
    le = L.alu(Op.OR, T.bool_, L.icmplt(at, bound), L.alu(Op.NOT, T.bool_, L.alu(Op.CMPNE, T.bool_, at, bound)))
    x = L.alu(Op.WHERE, T.f32, le, L.load("src", v, T.f32), L.const(float("-inf"), T.f32))
    body = [L.SetAcc("acc", L.alu(Op.MAX, T.f32, L.var("acc", T.f32), x, arg="acc"))]
    return [L.Acc("acc", T.f32, L.const(float("-inf"), T.f32)), L.Loop("v", ext, body),
            L.Store("out", L.const(0), L.var("acc", T.f32))]


@settings(max_examples=60, deadline=None)
@given(ext=st.integers(0, 60), r=st.integers(-5, 5), bound=st.integers(-8, 70), symbolic=st.booleans())
def test_an_index_condition_of_a_where_splits_like_a_mask(ext, r, bound, symbolic):
    """A where's `v + r <= bound` splits the loop as a masked load's bound does: the middle loop
    selects no more, and the result (a max reduction here) is bit for bit the one loop's."""
    env = {"E": ext, "R": r, "B": bound}
    e, rr, b = (L.var("E"), L.var("R"), L.var("B")) if symbolic else (L.const(ext), L.const(r), L.const(bound))
    one = _where_max(e, rr, b)
    split = split_loads(one)
    assert [s.var for s in split if isinstance(s, L.Loop)] == ["v_lo", "v_in", "v_hi"]
    assert not [x for _, roots in L.walk_stmts(split[2].body) for x in L.nodes(*roots) if x.op is Op.WHERE]
    np.testing.assert_array_equal(_run(split, env), _run(one, env))


def test_bounds_on_inner_variables_are_not_split():
    """A bound that reads a variable of the body (an inner loop's counter) differs per
    iteration of that loop: the outer loop is left whole."""
    v, w = L.var("v"), L.var("w")
    ok = L.icmplt(L.iadd(v, w), L.const(5))
    inner = L.Loop("w", L.const(3), [L.Store("out", L.iadd(L.imul(v, L.const(3)), w),
                                               X_masked(ok, L.load("src", w, T.f32)))])
    loop = L.Loop("v", L.const(4), [inner])
    assert [s.var for s in split_loads([loop])] == ["v"]


def _dw_ref(x: np.ndarray, w: np.ndarray, s: int, p: int, d: int) -> np.ndarray:
    n, c, h, wd = x.shape
    k = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - d * (k[0] - 1) - 1) // s + 1, (wd + 2 * p - d * (k[1] - 1) - 1) // s + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            y += xp[:, :, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s] * \
                w[None, :, 0, i, j, None, None].astype(np.float64)
    return y


def _dw_text(c: int, h: int, w: int, k: int, s: int, p: int, d: int, symbolic: bool) -> str:
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    sx, sy = ("N, C, H, W", "N, C, OH, OW") if symbolic else (f"2, {c}, {h}, {w}", f"2, {c}, {oh}, {ow}")
    span = p * 2 - d * (k - 1) - 1
    where = (f" where OH = (+ (idiv (+ H {span}) {s}) 1), OW = (+ (idiv (+ W {span}) {s}) 1)"
             if symbolic else "")
    ch = "C" if symbolic else c
    return (f"(composite dw ((X{{f32}}[{sx}]) (Wt{{f32}}[{ch}, 1, {k}, {k}]) -> (Y{{f32}}[{sy}]){where})\n"
            f"  (conv2d X Wt :stride {s} :padding {p} :dilation {d} :groups {ch}))")


def _dw(c, h, w, k, s, p, d, runtime="llvm", symbolic=False, **kw):
    rng = np.random.default_rng(c * 100 + h + w + k + s + p + d)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    got = caten.loads(_dw_text(c, h, w, k, s, p, d, symbolic), runtime=runtime, use_cache=False, **kw).dw(x, wt)
    want = _dw_ref(x, wt, s, p, d)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


DW = [  # c, h, w, k, stride, padding, dilation
    (5, 13, 17, 3, 1, 1, 1), (5, 13, 17, 3, 2, 1, 1), (3, 9, 11, 5, 1, 2, 1), (3, 9, 11, 5, 2, 2, 1),
    (4, 15, 10, 7, 1, 3, 1), (2, 12, 12, 3, 1, 2, 2), (2, 12, 12, 3, 3, 0, 1), (1, 1, 1, 3, 1, 1, 1),
    (6, 4, 40, 3, 2, 1, 1), (3, 2, 3, 5, 1, 2, 1),
]


@pytest.mark.parametrize("runtime", ["llvm", "c"])
@pytest.mark.parametrize("case", DW)
def test_depthwise_matches_reference(case, runtime):
    _dw(*case, runtime=runtime)


@pytest.mark.parametrize("case", DW[:3] + DW[5:8])
def test_depthwise_symbolic_sizes(case):
    _dw(*case, symbolic=True)


@pytest.mark.parametrize("case", DW)
def test_depthwise_every_access_checked(case):
    _dw(*case, check_bounds=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 6), h=st.integers(1, 14), w=st.integers(1, 20), k=st.sampled_from([1, 2, 3, 5]),
       s=st.integers(1, 3), p=st.integers(0, 3), d=st.integers(1, 2), bounds=st.booleans())
def test_depthwise_property(c, h, w, k, s, p, d, bounds):
    if h + 2 * p < d * (k - 1) + 1 or w + 2 * p < d * (k - 1) + 1:
        return  # (no output: the window is larger than the padded image, which conv2d refuses)
    _dw(c, h, w, k, s, p, d, check_bounds=bounds)


def _pool_ref(x: np.ndarray, k: int, s: int, p: int, op: str) -> np.ndarray:
    n, c, h, w = x.shape
    fill = -np.inf if op == "max" else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    wins = [xp[:, :, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s] for i in range(k) for j in range(k)]
    return np.max(wins, axis=0) if op == "max" else np.mean(wins, axis=0)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("h, w, k, s, p", [(9, 13, 3, 2, 1), (8, 8, 3, 1, 1), (5, 7, 2, 2, 0), (11, 6, 5, 2, 2)])
def test_pooling_with_padding(op, h, w, k, s, p, runtime):
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    text = (f"(composite pool ((X{{f32}}[2, 3, {h}, {w}]) -> (Y{{f32}}[2, 3, {oh}, {ow}]))\n"
            f"  ({op}-pool2d X :kernel {k} :stride {s} :padding {p}))")
    x = np.random.default_rng(h * w + k).standard_normal((2, 3, h, w)).astype(np.float32)
    for bounds in (False, True):
        got = caten.loads(text, runtime=runtime, use_cache=False, check_bounds=bounds).pool(x)
        np.testing.assert_allclose(got, _pool_ref(x, k, s, p, op), rtol=1e-6, atol=1e-6)


def test_depthwise_module_and_gradients_match_torch():
    """nn.Conv2d(groups=C) through caten.Tensor, forward and both gradients, against torch."""
    torch = pytest.importorskip("torch")
    from caten import nn as cnn
    for stride in (1, 2):
        torch.manual_seed(stride)
        ref = torch.nn.Conv2d(6, 6, 3, stride=stride, padding=1, groups=6)
        x = torch.randn(2, 6, 11, 9, requires_grad=True)
        y = ref(x)
        y.backward(torch.ones_like(y))
        m = cnn.Conv2d(6, 6, 3, stride=stride, padding=1, groups=6)
        m.weight = cnn.Parameter(ref.weight.detach().numpy())
        m.bias = cnn.Parameter(ref.bias.detach().numpy())
        cx = caten.Tensor(x.detach().numpy(), requires_grad=True)
        cy = m(cx)
        cy.sum().backward()
        np.testing.assert_allclose(cy.numpy(), y.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cx.grad.numpy(), x.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(m.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_equal_terms_of_a_window_each_count(runtime):
    """Every position of a window adding the same term (a count of ones, ONNX's AveragePool
    without its padding): the unrolled updates must not collapse into one value, as equal
    expressions do in a renderer (the first version counted 1 where the window held 4)."""
    text = """(composite cnt ((X{f32}[2, 3, 8, 7]) -> (Y{f32}[2, 3, 8, 7]))
  (+ (VIEW (sum (windows (full [2 3 9 8] 1 :dtype f32) :kernel [2 2]) :axis [5 6]) :squeeze 1)
     (* X 0.0)))"""
    x = np.zeros((2, 3, 8, 7), np.float32)
    got = caten.loads(text, runtime=runtime, use_cache=False).cnt(x)
    np.testing.assert_array_equal(got, np.full((2, 3, 8, 7), 4.0, np.float32))


def test_onnx_average_pool_matches_the_reference():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    import caten.onnx
    for attrs, out in [({"kernel_shape": [2, 2]}, [1, 3, 31, 31]),
                       ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, [1, 3, 16, 16]),
                       ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, [1, 3, 32, 32])]:
        node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
        x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
        want = ReferenceEvaluator(m).run(None, {"x": x})[0]
        np.testing.assert_allclose(np.asarray(caten.onnx.load(m)(x)), want, rtol=1e-6, atol=1e-6)
