"""A GEMM's elementwise epilogue runs over each output block as the block is done
(caten.lower.epilogue): a 2-D linear layer's bias and activation, a batched one's GELU in place,
the Mixer's residual add into the output. Values against numpy in float64 on shapes whose
blocks have edges in every dimension (rows past an M block, columns past an N block, several K
blocks, so that only the last K block's epilogue may run), an empty K (one K block of no k),
and epilogues that read the GEMM's output at another element (which must not be fused), on
both kinds of the project's CPUs where the host runs them, and on the C runtime; a direct
convolution's bias and relu against torch; and a property test over random shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import caten
from caten import pipeline, target
from caten.plugin import Options

SRC = """
(composite lin-relu ((X{f32}[M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[M, N])) (relu (linear X W b)))
(composite lin-gelu ((X{f32}[M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[M, N])) (gelu (linear X W b)))
(composite blin-gelu ((X{f32}[Q, M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[Q, M, K]))
  (matmul (gelu (linear X W b)) (transpose W)))
(composite bmlp-exp ((X{f32}[Q, M, K]) (W{f32}[K, N]) (b{f32}[N]) -> (Y{f32}[Q, M, K]))
  (matmul (exp (* 0.05 (linear X W b))) (transpose W)))
(composite residual ((X{f32}[Q, M, K]) (W{f32}[K, K]) -> (Y{f32}[Q, M, K])) (+ X (matmul X W)))
(composite transposed ((A{f32}[Q, N, N]) (B{f32}[N, N]) -> (Y{f32}[Q, N, N]))
  (+ (matmul A B) (* 2.0 (transpose (matmul A B)))))
(composite shifted ((A{f32}[Q, M, K]) (B{f32}[K, N]) -> (Y{f32}[Q, M, N]))
  (+ (matmul A B) (flip (matmul A B) :axis 2)))
"""
_erf = np.vectorize(math.erf)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _module(rt: str = "llvm", cpu: str | None = None, threads: int = 2, monkeypatch=None) -> caten.Module:
    if monkeypatch is not None:
        monkeypatch.setenv("CATEN_NUM_THREADS", str(threads))
    return caten.loads(SRC, runtime=rt, use_cache=False, **({"target": cpu} if cpu else {}))


def _loops(entry: str, src: str = SRC) -> str:
    from caten.runtimes.llvm_rt import RUNTIME

    prog = getattr(caten.loads(src, runtime="llvm", use_cache=False), entry.replace("-", "_")).program({})[0]
    return pipeline.emit(RUNTIME, prog, "loops", Options())[".txt"]


def _close(got: np.ndarray, want: np.ndarray, k: int, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * math.sqrt(max(k, 1)), err_msg=what)


def _check(mod: caten.Module) -> None:
    rng = np.random.default_rng(1)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    for m, k, n in [(300, 700, 500), (1, 13, 1025), (129, 1, 33), (7, 600, 1100), (113, 257, 31)]:
        x, w, b = r(m, k), r(k, n), r(n)
        ref = x.astype(np.float64) @ w + b
        _close(mod.lin_relu(x, w, b), np.maximum(ref, 0), k, f"lin-relu {m}x{k}x{n}")
        _close(mod.lin_gelu(x, w, b), _gelu(ref), k, f"lin-gelu {m}x{k}x{n}")
    for q, m, k, n in [(3, 197, 300, 129), (2, 13, 7, 1025)]:
        x, w, b = r(q, m, k), r(k, n), r(n)
        ref = _gelu(x.astype(np.float64) @ w + b) @ w.T.astype(np.float64)
        _close(mod.blin_gelu(x, w, b), ref, k * n, f"blin-gelu {q}x{m}x{k}x{n}")
        x, w = r(q, m, k), r(k, k)
        _close(mod.residual(x, w), x + x.astype(np.float64) @ w, k, f"residual {q}x{m}x{k}")
    for q, nn in [(2, 129), (3, 31)]:
        a, b = r(q, nn, nn), r(nn, nn)
        y = a.astype(np.float64) @ b
        _close(mod.transposed(a, b), y + 2.0 * np.swapaxes(y, 1, 2), nn, f"transposed {q}x{nn}")
    a, b = r(2, 130, 300), r(300, 70)
    y = a.astype(np.float64) @ b
    _close(mod.shifted(a, b), y + y[:, :, ::-1], 300, "shifted")


def _check_empty(mod: caten.Module) -> None:
    """K = 0: the one K block of no k stores zeros, and the epilogue runs over them."""
    b = np.linspace(-1, 1, 9, dtype=np.float32)
    x, w = np.zeros((5, 0), np.float32), np.zeros((0, 9), np.float32)
    np.testing.assert_allclose(mod.lin_relu(x, w, b), np.broadcast_to(np.maximum(b, 0), (5, 9)))
    np.testing.assert_allclose(mod.lin_gelu(x, w, b), np.broadcast_to(_gelu(b.astype(np.float64)), (5, 9)),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cpu", ["znver3", "rocketlake"])
@pytest.mark.parametrize("threads", [1, 2])
def test_epilogues_on_each_cpu(cpu, threads, monkeypatch):
    if target.parse(cpu).vector_bits > target.host().vector_bits:
        pytest.skip(f"this host cannot run {cpu} code")
    mod = _module("llvm", cpu, threads, monkeypatch)
    _check(mod)
    _check_empty(mod)


def test_epilogues_on_the_c_runtime(monkeypatch):
    mod = _module("c", None, 2, monkeypatch)
    _check(mod)
    _check_empty(mod)


def test_a_2d_linear_layer_with_its_epilogue_is_one_kernel_that_runs_it_per_block():
    body = _loops("lin", "(composite lin ((X{f32}[300, 700]) (W{f32}[700, 500]) (b{f32}[500]) -> (Y{f32}[300, 500]))"
                         " (gelu (linear X W b)))")
    assert body.count("kernel ") == 1, body
    # the epilogue's rows loop, which runs only at the last of the 3 K blocks (700 = 3 x 234)
    assert "s0er_" in body and "(not:bool (cmplt:bool s0kc_" in body, body


def test_an_epilogue_reading_another_element_is_not_fused():
    """The transposed and flipped reads stay a stage after the GEMM (their values are checked above)."""
    for entry in ("transposed", "shifted"):
        body = _loops(entry)
        assert "er_" not in body, body


CONVS = [  # n, c, h, w, o, k, stride, padding, groups: the direct tiles' epilogue per block of columns
    (2, 16, 20, 20, 24, 3, 1, 1, 1), (1, 3, 7, 13, 5, 3, 1, 1, 1), (3, 8, 33, 31, 16, 5, 1, 2, 1),
    (8, 64, 14, 14, 64, 3, 1, 1, 1), (2, 6, 9, 17, 9, 3, 2, 1, 3), (1, 4, 40, 3, 8, 1, 1, 0, 2),
]


@pytest.mark.parametrize("rt", ["llvm", "c"])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_bias_relu_epilogue(rt, threads, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("CATEN_NUM_THREADS", str(threads))
    rng = np.random.default_rng(3)
    for n, c, h, w, o, k, s, p, g in CONVS:
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((o, c // g, k, k), dtype=np.float32)
        b = rng.standard_normal(o, dtype=np.float32)
        want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(wt, dtype=torch.float64),
                                          torch.tensor(b, dtype=torch.float64), stride=s, padding=p, groups=g)
        want = torch.relu(want).numpy()
        ys = ", ".join(map(str, want.shape))
        src = (f"(composite cv ((X{{f32}}[{n}, {c}, {h}, {w}]) (Wt{{f32}}[{o}, {c // g}, {k}, {k}]) (b{{f32}}[{o}]) "
               f"-> (Y{{f32}}[{ys}])) (relu (conv2d X Wt b :stride {s} :padding {p} :groups {g})))")
        got = caten.loads(src, runtime=rt, use_cache=False).cv(x, wt, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(c * k * k), err_msg=str((n, c, h, w)))


def test_conv_bias_relu_runs_per_block_of_the_direct_tiles():
    body = _loops("cv", "(composite cv ((X{f32}[8, 64, 14, 14]) (Wt{f32}[64, 64, 3, 3]) (b{f32}[64]) "
                        "-> (Y{f32}[8, 64, 14, 14])) (relu (conv2d X Wt b :padding 1)))")
    assert "direct tiles" in body and "s0er_" in body and "s0es_" in body, body


def test_conv_epilogue_with_no_input_channels():
    """C = 0 (a symbolic channel count): the convolution sums nothing, so its epilogue sees zeros."""
    src = ("(composite cv ((X{f32}[N, C, H, W]) (Wt{f32}[O, C, 3, 3]) (b{f32}[O]) -> (Y{f32}[N, O, H, W])) "
           "(relu (conv2d X Wt b :padding 1)))")
    b = np.array([-1.0, 0.5, 2.0, -0.25], np.float32)
    for rt in ("llvm", "c"):
        got = caten.loads(src, runtime=rt, use_cache=False).cv(np.zeros((2, 0, 5, 6), np.float32),
                                                                np.zeros((4, 0, 3, 3), np.float32), b)
        np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(b, 0)[None, :, None, None], (2, 4, 5, 6)))


def test_epilogue_property_random_shapes():
    """Any shape, empty dims included, on the module compiled once with symbolic dims: each
    epilogue against numpy (the fused block loops' bounds, the last-K-block guard, the empty K)."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    mod = _module()
    size = st.sampled_from([0, 1, 7, 13, 14, 15, 112, 113, 255, 257, 300, 513])  # (tile, block and K-block edges)

    @hypothesis.settings(max_examples=80, deadline=None, database=None)
    @hypothesis.given(st.integers(0, 3), size, size, size, st.integers(0, 2 ** 31 - 1))
    @hypothesis.example(2, 13, 0, 17, 1)  # (an empty K, and several K blocks, every run)
    @hypothesis.example(2, 113, 300, 257, 2)
    def check(q, m, k, n, seed):
        rng = np.random.default_rng(seed)
        x, w, b = (rng.standard_normal(s, dtype=np.float32) for s in ((m, k), (k, n), (n,)))
        ref = x.astype(np.float64) @ w + b
        _close(mod.lin_relu(x, w, b), np.maximum(ref, 0), k, f"lin-relu {m}x{k}x{n}")
        xb = rng.standard_normal((q, m, k), dtype=np.float32)
        # (an epilogue written over its GEMM's output, between two GEMMs: only the last K block's may run)
        ref = np.exp(0.05 * (xb.astype(np.float64) @ w + b)) @ w.T.astype(np.float64)
        _close(mod.bmlp_exp(xb, w, b), ref, k * n, f"bmlp-exp {q}x{m}x{k}x{n}")
        wk = rng.standard_normal((k, k), dtype=np.float32)
        _close(mod.residual(xb, wk), xb + xb.astype(np.float64) @ wk, k, f"residual {q}x{m}x{k}")

    check()
