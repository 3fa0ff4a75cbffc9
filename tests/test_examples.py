"""The programs in examples/ against independent numpy implementations of the same math.

The oracles are written from the definitions (the MLP-Mixer and attention papers, exact
erf-based GELU, biased-variance LayerNorm) in float64, and the compiled programs run in
float32. The runtimes come from CATEN_TEST_RUNTIMES (comma-separated, default "numpy").
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import caten

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RTOL, ATOL = 1e-4, 1e-5


def _runtimes() -> list[str]:
    names = [r.strip() for r in os.environ.get("CATEN_TEST_RUNTIMES", "numpy").split(",")]
    return [r for r in names if r] or ["numpy"]


@pytest.fixture(params=_runtimes())
def runtime(request) -> str:
    return request.param


@functools.cache
def _load(name: str, runtime: str):
    return caten.load(str(EXAMPLES / name), runtime=runtime)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def close(got, want) -> None:
    got = np.asarray(got)
    assert got.dtype == np.float32, got.dtype
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------
# numpy oracles (float64)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_gelu(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def np_layernorm(x, gamma, beta, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def np_mlp(x, w1, b1, w2, b2):
    return np_gelu(x @ w1 + b1) @ w2 + b2


def np_mixer_block(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4):
    x = np.asarray(x, dtype=np.float64)
    # token mixing: the MLP acts on columns of each [T, C] slab, i.e. on X^T
    n1 = np_layernorm(x, g1, be1)
    u = x + np_mlp(n1.transpose(0, 2, 1), w1, b1, w2, b2).transpose(0, 2, 1)
    n2 = np_layernorm(u, g2, be2)
    return u + np_mlp(n2, w3, b3, w4, b4)


def np_causal_attend(q, k, v):
    """q, k, v: [..., T, E]."""
    t, e = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(e)
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)  # j > i
    s = np.where(mask, -np.inf, s)
    return np_softmax(s) @ v


def np_causal_attention(x, wq, wk, wv, wo):
    x = np.asarray(x, dtype=np.float64)
    o = np_causal_attend(x @ wq, x @ wk, x @ wv)
    return x + o @ wo


def np_causal_mha(x, wq, wk, wv, wo):
    x = np.asarray(x, dtype=np.float64)
    h = wq.shape[0]
    heads = []
    for i in range(h):
        heads.append(np_causal_attend(x @ wq[i], x @ wk[i], x @ wv[i]))
    concat = np.concatenate(heads, axis=-1)                  # [B, T, H*E]
    wo_stacked = np.concatenate(list(wo), axis=0)            # [H*E, D]
    return x + concat @ wo_stacked


# ---------------------------------------------------------------------------------------
# oracle self-checks (these need no caten at all)

def test_oracle_gelu_known_values():
    np.testing.assert_allclose(np_gelu([0.0, 1.0, -1.0]), [0.0, 0.8413447460685429, -0.15865525393145707])


def test_oracle_mha_with_one_head_is_single_head():
    r = rng(9)
    x, w = r.standard_normal((2, 5, 4)), r.standard_normal((4, 4, 4))
    np.testing.assert_allclose(np_causal_mha(x, w[:1], w[1:2], w[2:3], w[3:]),
                               np_causal_attention(x, w[0], w[1], w[2], w[3]))


# ---------------------------------------------------------------------------------------
# softmax

def test_softmax_rows(runtime):
    mod = _load("softmax.lisp", runtime)
    x = f32(rng(1).standard_normal((5, 13)) * 3)
    x0 = x.copy()
    y = mod.softmax_rows(x)
    close(y, np_softmax(x))
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(x, x0)  # inputs are never modified


def test_softmax_rows_is_stable_for_large_inputs(runtime):
    mod = _load("softmax.lisp", runtime)
    x = f32(rng(2).standard_normal((3, 9)) + np.array([[1000.0], [-1000.0], [80.0]]))
    y = mod.softmax_rows(x)
    assert np.all(np.isfinite(y))
    close(y, np_softmax(x))


def test_softmax_rows_rebinds_dims_per_call(runtime):
    mod = _load("softmax.lisp", runtime)
    for shape in [(1, 1), (2, 7), (7, 3)]:
        x = f32(rng(sum(shape)).standard_normal(shape))
        close(mod.softmax_rows(x), np_softmax(x))


def test_softmax_helper_composite(runtime):
    mod = _load("softmax.lisp", runtime)
    x = f32(rng(3).standard_normal((4, 6)))
    close(mod.shifted_exp(x), np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64)))


def test_softmax_yaml_matches_lisp(runtime):
    lisp, yml = _load("softmax.lisp", runtime), _load("softmax.yaml", runtime)
    x = f32(rng(4).standard_normal((6, 11)))
    y_yaml = yml.softmax_rows(x)
    close(y_yaml, np_softmax(x))
    np.testing.assert_allclose(y_yaml, lisp.softmax_rows(x), rtol=1e-6, atol=1e-7)


def test_softmax_accepts_strided_views(runtime):
    mod = _load("softmax.lisp", runtime)
    base = f32(rng(8).standard_normal((9, 6)))
    for x in (base.T, base[::2, 1:], np.asfortranarray(base)):
        close(mod.softmax_rows(x), np_softmax(x))


def test_softmax_handles_minus_inf_entries(runtime):
    mod = _load("softmax.lisp", runtime)
    x = f32([[-np.inf, 0.0, 1.0], [2.0, -np.inf, -np.inf]])
    close(mod.softmax_rows(x), np_softmax(x))


def test_softmax_defines_fix_a_dim(runtime):
    mod = caten.load(str(EXAMPLES / "softmax.lisp"), runtime=runtime, defines={"N": 5})
    x = f32(rng(12).standard_normal((3, 5)))
    close(mod.softmax_rows(x), np_softmax(x))
    with pytest.raises(caten.Error):
        mod.softmax_rows(f32(np.zeros((3, 6))))


def run_cli(tmp_path, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "caten", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("source", ["softmax.lisp", "softmax.yaml"])
def test_softmax_cli_run(runtime, tmp_path, source):
    x = f32(rng(5).standard_normal((3, 7)))
    np.save(tmp_path / "x.npy", x)
    # without -e, `caten run` runs the last composite in the file: softmax-rows
    run_cli(tmp_path, "run", str(EXAMPLES / source), "-r", runtime, "X=x.npy", "-o", "y.npy")
    close(np.load(tmp_path / "y.npy"), np_softmax(x))


def test_softmax_cli_run_entry(runtime, tmp_path):
    x = f32(rng(11).standard_normal((4, 5)))
    np.save(tmp_path / "x.npy", x)
    run_cli(tmp_path, "run", str(EXAMPLES / "softmax.lisp"), "-e", "shifted-exp", "-r", runtime,
            "X=x.npy", "-o", "e.npy")
    close(np.load(tmp_path / "e.npy"), np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64)))


# ---------------------------------------------------------------------------------------
# axpy

def test_axpy(runtime):
    mod = _load("axpy.lisp", runtime)
    r = rng(6)
    x, y = f32(r.standard_normal(13)), f32(r.standard_normal(13))
    a = np.array(2.5, dtype=np.float32)
    close(mod.axpy(a, x, y), 2.5 * x.astype(np.float64) + y)
    close(mod.axpy(np.float32(2.5), x, y), 2.5 * x.astype(np.float64) + y)  # a numpy scalar


def test_axpy_cli_run_scalar_input(runtime, tmp_path):
    x, y = f32(rng(13).standard_normal(7)), f32(rng(14).standard_normal(7))
    np.save(tmp_path / "a.npy", np.array(-0.5, dtype=np.float32))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run_cli(tmp_path, "run", str(EXAMPLES / "axpy.lisp"), "-r", runtime,
            "A=a.npy", "X=x.npy", "Y=y.npy", "-o", "z.npy")
    close(np.load(tmp_path / "z.npy"), -0.5 * x.astype(np.float64) + y)


def test_axpy_generic_binds_type_variable(runtime):
    mod = _load("axpy_generic.lisp", runtime)
    r = rng(7)
    x, y = r.standard_normal(9), r.standard_normal(9)
    z = mod.axpy_t(np.array(-1.5), x, y)
    assert z.dtype == np.float64
    np.testing.assert_allclose(z, -1.5 * x + y, rtol=1e-12)
    xi, yi = np.arange(5, dtype=np.int32), np.full(5, 3, dtype=np.int32)
    zi = mod.axpy_t(np.array(4, dtype=np.int32), xi, yi)
    assert zi.dtype == np.int32
    np.testing.assert_array_equal(zi, 4 * xi + yi)


def test_axpy_rejects_bad_arguments(runtime):
    mod = _load("axpy.lisp", runtime)
    a = np.array(1.0, dtype=np.float32)
    with pytest.raises(caten.Error):
        mod.axpy(a, np.zeros(4, np.float32), np.zeros(5, np.float32))  # N disagrees
    with pytest.raises(caten.Error):
        mod.axpy(a, np.zeros(4, np.float64), np.zeros(4, np.float64))  # wrong dtype
    with pytest.raises(ValueError):  # caten.Error is a ValueError
        mod.axpy(a, np.zeros(4, np.float32))  # too few arguments


# ---------------------------------------------------------------------------------------
# MLP-Mixer

def mixer_params(b=2, t=7, c=12, dt=10, dc=20, seed=10):
    r = rng(seed)

    def w(*shape, fan_in):
        return f32(r.standard_normal(shape) / math.sqrt(fan_in))

    x = f32(r.standard_normal((b, t, c)))
    g1, be1 = f32(1 + 0.1 * r.standard_normal(c)), f32(0.1 * r.standard_normal(c))
    w1, b1 = w(t, dt, fan_in=t), f32(0.1 * r.standard_normal(dt))
    w2, b2 = w(dt, t, fan_in=dt), f32(0.1 * r.standard_normal(t))
    g2, be2 = f32(1 + 0.1 * r.standard_normal(c)), f32(0.1 * r.standard_normal(c))
    w3, b3 = w(c, dc, fan_in=c), f32(0.1 * r.standard_normal(dc))
    w4, b4 = w(dc, c, fan_in=dc), f32(0.1 * r.standard_normal(c))
    return x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4


def test_mlp(runtime):
    mod = _load("mlp_mixer.lisp", runtime)
    x, *_, w3, b3, w4, b4 = mixer_params()
    close(mod.mlp(x, w3, b3, w4, b4), np_mlp(x.astype(np.float64), w3, b3, w4, b4))


def test_token_mixing(runtime):
    mod = _load("mlp_mixer.lisp", runtime)
    x, _, _, w1, b1, w2, b2, *_ = mixer_params()
    want = np_mlp(x.astype(np.float64).transpose(0, 2, 1), w1, b1, w2, b2).transpose(0, 2, 1)
    close(mod.token_mixing(x, w1, b1, w2, b2), want)


@pytest.mark.parametrize("dims", [dict(b=2, t=7, c=12, dt=10, dc=20), dict(b=1, t=3, c=5, dt=9, dc=4)])
def test_mixer_block(runtime, dims):
    mod = _load("mlp_mixer.lisp", runtime)
    args = mixer_params(**dims)
    before = [a.copy() for a in args]
    close(mod.mixer_block(*args), np_mixer_block(*args))
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


def test_mixer_block_rejects_mismatched_weights(runtime):
    mod = _load("mlp_mixer.lisp", runtime)
    args = list(mixer_params())
    args[3] = f32(np.zeros((8, 10)))  # W1 must be [T, DT] with T = 7
    with pytest.raises(caten.Error):
        mod.mixer_block(*args)


# ---------------------------------------------------------------------------------------
# causal attention

def attention_params(b=2, t=7, d=12, seed=20):
    r = rng(seed)
    x = f32(r.standard_normal((b, t, d)))
    ws = [f32(r.standard_normal((d, d)) / math.sqrt(d)) for _ in range(4)]
    return (x, *ws)


@pytest.mark.parametrize("b,t,d", [(2, 7, 12), (1, 1, 3), (3, 5, 1)])
def test_causal_attention(runtime, b, t, d):
    mod = _load("attention.lisp", runtime)
    args = attention_params(b, t, d)
    close(mod.causal_attention(*args), np_causal_attention(*args))


def test_causal_attention_is_causal(runtime):
    """Changing the last token must not change any earlier output position."""
    mod = _load("attention.lisp", runtime)
    x, *ws = attention_params(b=1, t=5, d=6, seed=21)
    x2 = x.copy()
    x2[:, -1, :] += 3.0
    y1, y2 = mod.causal_attention(x, *ws), mod.causal_attention(x2, *ws)
    np.testing.assert_allclose(y1[:, :-1], y2[:, :-1], rtol=RTOL, atol=ATOL)
    assert not np.allclose(y1[:, -1], y2[:, -1])


def test_causal_attend_first_row_copies_v(runtime):
    """Position 0 sees only itself, so its output is exactly V[0]."""
    mod = _load("attention.lisp", runtime)
    r = rng(22)
    q, k, v = (f32(r.standard_normal((2, 3, 5, 4))) for _ in range(3))
    o = mod.causal_attend(q, k, v)
    close(o, np_causal_attend(q.astype(np.float64), k, v))
    np.testing.assert_allclose(o[:, :, 0], v[:, :, 0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("b,t,d,h,e", [(2, 7, 12, 3, 4), (1, 5, 6, 2, 5)])
def test_causal_mha(runtime, b, t, d, h, e):
    mod = _load("attention.lisp", runtime)
    r = rng(23)
    x = f32(r.standard_normal((b, t, d)))
    wq, wk, wv = (f32(r.standard_normal((h, d, e)) / math.sqrt(d)) for _ in range(3))
    wo = f32(r.standard_normal((h, e, d)) / math.sqrt(h * e))
    close(mod.causal_mha(x, wq, wk, wv, wo), np_causal_mha(x, wq, wk, wv, wo))


# ---------------------------------------------------------------------------------------
# ahead-of-time compilation of the examples

@pytest.mark.parametrize("source", ["softmax.lisp", "softmax.yaml", "axpy.lisp", "mlp_mixer.lisp",
                                    "attention.lisp"])
def test_example_emits_ir(runtime, tmp_path, source):
    run_cli(tmp_path, str(EXAMPLES / source), "-r", runtime, "--emit", "ir", "-o", "out.ir")
    assert (tmp_path / "out.ir").read_text().strip()


def test_axpy_shared_library_abi(runtime, tmp_path):
    """`caten -r llvm examples/axpy.lisp -o libaxpy.so` gives axpy.h and the documented C ABI."""
    if runtime != "llvm":
        pytest.skip("shared libraries come from the llvm runtime")
    import ctypes

    run_cli(tmp_path, "-r", "llvm", str(EXAMPLES / "axpy.lisp"), "-o", "libaxpy.so")
    assert (tmp_path / "axpy.h").exists()
    assert "axpy" in (tmp_path / "axpy.h").read_text()
    lib = ctypes.CDLL(str(tmp_path / "libaxpy.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    lib.axpy.argtypes = [fp, fp, fp, fp, ctypes.c_int64]
    lib.axpy.restype = ctypes.c_int32
    n = 11
    a = np.array(1.75, dtype=np.float32)
    x, y = f32(rng(15).standard_normal(n)), f32(rng(16).standard_normal(n))
    z = np.zeros(n, dtype=np.float32)
    ptr = lambda arr: arr.ctypes.data_as(fp)
    assert lib.axpy(ptr(a), ptr(x), ptr(y), ptr(z), n) == 0
    close(z, 1.75 * x.astype(np.float64) + y)
