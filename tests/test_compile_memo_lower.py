"""Lowering once per distinct kernel (caten.lower.kernel_memo): repeated layers lower once, and
the loop IR of every kernel is exactly what lowering each afresh makes (the kernels compared as
data, expression by expression, and as `--emit loops` text); kernels that differ only in a stride,
a dtype, a constant or a shape never share; the compiled program computes numpy's values."""

from __future__ import annotations

import numpy as np
import pytest

import caten
import caten.lower.kernel_lowerer as KL
from caten import plugin as R
from caten import target
from caten.deep import deep
from caten.ir.ops import Op
from caten.lower import kernel_memo
from caten.lower.text import kernel_text
from caten.pipeline import Timings, back

pytest.importorskip("llvmlite")

LAYERS = """
(composite f ((X{f32}[N, 16]) (W1{f32}[16, 16]) (W2{f32}[16, 16]) (W3{f32}[16, 16]) (W4{f32}[16, 16])
              (W5{f32}[16, 16]) (W6{f32}[16, 16]) (G{f32}[16]) (B{f32}[16]) -> (Y{f32}[N, 16]))
  (setf h X)
  (setf h (+ h (gelu (matmul (layernorm h G B) W1))))
  (setf h (+ h (gelu (matmul (layernorm h G B) W2))))
  (setf h (+ h (gelu (matmul (layernorm h G B) W3))))
  (setf h (+ h (gelu (matmul (layernorm h G B) W4))))
  (setf h (+ h (gelu (matmul (layernorm h G B) W5))))
  (setf h (+ h (gelu (matmul (layernorm h G B) W6))))
  h)
"""

# the same layer four times, but for a transposed weight (strides), a f64 weight (dtype), another
# constant and a narrower weight (shape): no two of those may share a kernel
VARIANTS = """
(composite f ((X{f32}[N, 16]) (W{f32}[16, 16]) (V{f64}[16, 16]) (U{f32}[16, 8]) -> (Y{f32}[N, 8]))
  (setf h (exp (* 0.25 (matmul X W))))
  (setf h (exp (* 0.25 (matmul h (transpose W)))))
  (setf h (cast (exp (* 0.25 (matmul (cast h f64) V))) f32))
  (setf h (exp (* 0.5 (matmul h W))))
  (exp (* 0.25 (matmul h U))))
"""


def _lower(src: str, memo: bool, gpu: bool = False) -> tuple[list, list]:
    """The loop-IR kernels of `f` as caten.pipeline.back lowers them (for the host's CPU, or for
    a GPU: no target, the GPU's schedule) and the keys the memo computed."""
    m = caten.loads(src, runtime="llvm", use_cache=False)
    prog = m.f.elaborate({})
    t = target.resolve(None)
    caps = R.get("llvm").capabilities(t)
    keys: list = []
    real = kernel_memo.kernel_key

    def spy(*a):
        keys.append(real(*a))
        return keys[-1]

    KL.kernel_key, KL.MEMO = spy, memo
    try:
        lw = deep(back.lower_program, prog, "p", None if gpu else t, caps.threads, Timings(),
                  caps.direct_conv and not gpu, gpu)
    finally:
        KL.kernel_key, KL.MEMO = real, True
    return lw.kernels, keys


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("src", [LAYERS, VARIANTS])
def test_the_memo_lowers_what_a_fresh_lowering_does(src, gpu):
    fresh, _ = _lower(src, memo=False, gpu=gpu)
    memo, keys = _lower(src, memo=True, gpu=gpu)
    assert len(memo) == len(fresh) == len(keys) and all(k is not None for k in keys)
    assert memo == fresh  # (data: equal statements, the very same interned expressions)
    assert [kernel_text(k) for k in memo] == [kernel_text(k) for k in fresh]


def test_repeated_layers_lower_once():
    kernels, keys = _lower(LAYERS, memo=True)
    distinct = {k[0] for k in keys}
    assert len(distinct) <= len(keys) - 4  # (the first and last layers read an input, write the output)
    by_key: dict = {}
    for k, key in zip(kernels, keys):
        by_key.setdefault(key[0], []).append((k, key[1]))
    shared = [g for g in by_key.values() if len(g) > 1]
    assert shared
    for group in shared:  # a copy reads and writes its own buffers: the same code over other names
        (first, a), *rest = group
        for k, b in rest:
            assert a != b
            names = dict(zip(a, b))
            assert [names[p.name] for p in first.params] == [p.name for p in k.params]


def test_a_stride_a_dtype_a_constant_or_a_shape_never_share():
    kernels, keys = _lower(VARIANTS, memo=True)
    matmuls = [key for key in keys if any(line[0] == Op.REDUCE.value for line in key[0][0])]
    assert len({k[0] for k in matmuls}) == len(matmuls) == 5  # (the first test: what each lowers is right)


def _ref_layers(x, ws, g, b):
    from scipy.special import erf

    h = x.astype(np.float64)
    for w in ws:
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        z = ((h - mu) / np.sqrt(var + 1e-5) * g + b) @ w
        h = h + 0.5 * z * (1 + erf(z / np.sqrt(2)))
    return h


def test_repeated_layers_compute_numpy_values(tmp_path, monkeypatch):
    pytest.importorskip("scipy")
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((13, 16)).astype(np.float32)
    ws = [(rng.standard_normal((16, 16)) / 4).astype(np.float32) for _ in range(6)]
    g, b = (1 + 0.1 * rng.standard_normal(16)).astype(np.float32), (0.1 * rng.standard_normal(16)).astype(np.float32)
    m = caten.loads(LAYERS, runtime="llvm")
    y = m.f(x, *ws, g, b)
    np.testing.assert_allclose(y, _ref_layers(x, ws, g, b), rtol=2e-4, atol=2e-4)
