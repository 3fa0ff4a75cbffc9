"""The C ABI entry of an llvm or c library keeps its scratch arena from one call to the next (a fresh
malloc of megabytes each call is an mmap whose pages fault in again: 15% of a training step), grows
it when a call needs more, and gives a call that finds it in use (another thread's) one of its own."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from click.testing import CliRunner

from caten.cli.main import cli

SRC = """(composite mlp ((X{f32}[B, K]) (W1{f32}[K, H]) (W2{f32}[H, O]) -> (Y{f32}[B, O]))
  (matmul (relu (matmul X W1)) W2))"""


@pytest.fixture(scope="module", params=["llvm", "c"])
def lib(tmp_path_factory, request):
    d = tmp_path_factory.mktemp("aot")
    (d / "mlp.lisp").write_text(SRC)
    r = CliRunner().invoke(cli, ["-r", request.param, str(d / "mlp.lisp"), "-e", "mlp", "-o", str(d / "libmlp.so"),
                                 "--no-cache"])
    assert r.exit_code == 0, r.output
    so = ctypes.CDLL(str(d / "libmlp.so"))
    fp = ctypes.POINTER(ctypes.c_float)
    so.mlp.argtypes = [fp, fp, fp, fp] + [ctypes.c_int64] * 4
    so.mlp.restype = ctypes.c_int32
    return so


def _call(so, b, k, h, o, seed):
    rng = np.random.default_rng(seed)
    x, w1, w2 = (rng.standard_normal(s, dtype=np.float32) for s in ((b, k), (k, h), (h, o)))
    y = np.full((b, o), np.nan, np.float32)
    fp = ctypes.POINTER(ctypes.c_float)
    assert so.mlp(*(a.ctypes.data_as(fp) for a in (x, w1, w2, y)), b, k, h, o) == 0
    want = np.maximum(x.astype(np.float64) @ w1, 0) @ w2
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3 * np.sqrt(k * h))


def test_arena_kept_and_grown_across_calls(lib):
    for size in [(3, 5, 7, 2), (200, 300, 400, 100), (3, 5, 7, 2), (513, 129, 1025, 33), (1, 1, 1, 1)]:
        _call(lib, *size, seed=sum(size))


def test_calls_from_several_threads_at_once(lib):
    errors = []

    def run(i):
        try:
            for j in range(6):
                _call(lib, 64 + 37 * i, 96 + j, 130 + 11 * i, 40, seed=10 * i + j)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
