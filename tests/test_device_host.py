"""caten.run.device: the one host side (alloc, copy in, launch in order, copy out) that the
device runtimes share through an adapter. OpenCL runs it for real (PoCL on the CPU here); the
CUDA adapter can only be built here (no GPU): its run is `test_cuda_runs_like_numpy`, marked gpu."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.plugin import Options
from caten.run.device import DeviceExecutable

# reductions, a dim-dependent grid, an input broadcast
SRC = "(composite f ((X{f32}[M, N] B{f32}[N]) -> (Y{f32}[M, N])) (setf Y (softmax (+ X B) :axis -1)))"


def _usable(name: str) -> None:
    ok, why = R.get(name).available()
    if not ok:
        pytest.skip(why)


def _want(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    z = (x + b).astype(np.float64)
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_opencl_runs_through_the_shared_host_and_grows_its_buffers():
    _usable("opencl")
    prog = caten.loads(SRC, runtime="numpy").f.elaborate({})
    exe = pipeline.compile(R.get("opencl"), prog, Options(use_cache=False))
    assert isinstance(exe, DeviceExecutable)
    rng = np.random.default_rng(7)
    sizes = []
    for m, n in ((3, 5), (40, 300), (2, 7), (0, 4)):  # small, larger (buffers regrow), smaller, empty
        x = rng.standard_normal((m, n)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        y = np.full((m, n), np.nan, np.float32)
        exe.run([x, b], [y], {"M": m, "N": n})
        np.testing.assert_allclose(y, _want(x, b), rtol=2e-6, atol=1e-7)
        sizes.append({k: v[1] for k, v in exe.buffers.items()})
    assert any(sizes[1][k] > sizes[0].get(k, 0) for k in sizes[1])  # grown, not overrun
    assert sizes[2] == sizes[1]  # a smaller call reuses them


def test_cuda_executable_is_the_shared_host_over_its_ptx():
    """Compile-only here: the executable the CUDA runtime loads is the shared host, and every
    kernel it will look up at its first run is an entry of its PTX."""
    from caten.runtimes import cuda_rt

    if cuda_rt.nvrtc_version() is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
    prog = caten.loads(SRC, runtime="numpy").f.elaborate({})
    exe = pipeline.compile(R.get("cuda"), prog, Options(use_cache=False))
    assert isinstance(exe, DeviceExecutable) and isinstance(exe.adapter, cuda_rt.CUDAAdapter)
    entries = set(re.findall(r"\.entry\s+(\w+)", exe.adapter.ptx))
    names = [k.name for k in exe.dp.kernels]
    assert names and set(names) <= entries
