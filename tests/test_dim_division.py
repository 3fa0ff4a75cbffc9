"""Floor division and modulo inside dim expressions (`(idiv N 3)`, `(mod (- 0 N) 3)`): the
decompose pass writes them in primitives (caten.lower.dimx), the same code as the IDIV/MOD ops,
so no renderer spells them. Checked against numpy's slicing and padding for negative and
symbolic operands on every compiling runtime, in the kernels (loop extents, indices), and in the
C ABI entry (its `where` check and arena offsets), where a truncating division would be wrong."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import caten
from caten import loopir as L
from caten import pipeline, target
from caten import plugin as R
from caten.plugin import Options

SRC = """
(composite f ((X{f32}[N]) -> (Y{f32}[(+ N (mod (- 0 N) 3))])) (pad X [[0 (mod (- 0 N) 3)]] :value 1.0))
(composite g ((X{f32}[N]) -> (Y{f32}[(idiv (+ (- N (mod (- 0 N) 3)) 2) 3)])) (slice X [(mod (- 0 N) 3) N 3]))
(composite h ((X{f32}[N, M]) -> (Y{f32}[(- 0 (idiv (- 0 N) 2)), (idiv M 2)])) (slice X [0 N 2] [1 M 2]))
(composite s ((X{f32}[N, M]) -> (Y{f32}[(- 0 (idiv (- 0 N) 3)), M]))
  (let ((z (slice X [0 N 3]))) (* (softmax z :axis 0) (sum z :axis 1 :keepdims true))))
"""
RUNTIMES = ["llvm", "c", "opencl"]


def _usable(name: str) -> None:
    ok, why = R.get(name).available()
    if not ok:
        pytest.skip(why)


def _softmax_times_rowsum(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(0, keepdims=True))
    return e / e.sum(0, keepdims=True) * z.sum(1, keepdims=True)


@pytest.mark.parametrize("runtime,bounds", [(r, False) for r in RUNTIMES] + [("llvm", True), ("opencl", True)])
def test_dim_division_in_kernels_like_numpy(runtime, bounds):
    """(bounds: the bounds-checked mode, whose checks add dims of buffer sizes after the pass)"""
    _usable(runtime)
    m = caten.loads(SRC, runtime=runtime, use_cache=False, check_bounds=bounds)
    for n in range(0, 8):
        x = np.arange(n, dtype=np.float32) + 1
        np.testing.assert_array_equal(m.f(x), np.pad(x, (0, (-n) % 3), constant_values=1.0))
        np.testing.assert_array_equal(m.g(x), x[(-n) % 3::3])
        for k in (1, 2, 5):
            x2 = (np.arange(n * k, dtype=np.float32).reshape(n, k) - 3) / 7
            np.testing.assert_array_equal(m.h(x2), x2[0::2, 1::2])
            if n:
                np.testing.assert_allclose(m.s(x2), _softmax_times_rowsum(x2[0::3].astype(np.float64)),
                                           rtol=1e-5, atol=1e-6)


def _dims(k: L.Kernel) -> list[L.X]:
    """The dim leaves (no source) of a kernel's expressions."""
    stack = [v for s in _all(k.body) for v in vars(s).values() if isinstance(v, L.X)]
    out, seen = [], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.op == "dim" and not x.src:
            out.append(x)
        stack.extend(x.src)
    return out


def _all(body):
    for s in body:
        yield s
        yield from _all(getattr(s, "body", None) or [])


def _divides(d) -> bool:
    return not isinstance(d, int) and any(a.op in ("idiv", "mod") or (a.op != "sym" and any(map(_divides, a.args)))
                                          for m in d.terms for a in m)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_renderers_see_no_dim_division(runtime):
    """What a runtime renders: no dim leaf divides (each became primitives, keeping its Dim for
    the launch sizes), and no C-like source carries a floor-division helper of its own."""
    _usable(runtime)
    rt = R.get(runtime)
    progs = [caten.loads(SRC, runtime="numpy").__getattr__(n).elaborate({}) for n in "fghs"]
    before = pipeline.lower_all(rt, progs, target.host(), decomposed=False)
    after = pipeline.lower_all(rt, progs, target.host())
    assert any(_divides(x.arg) for lw in before for k in lw.kernels for x in _dims(k))
    assert not any(_divides(x.arg) for lw in after for k in lw.kernels for x in _dims(k))
    if runtime != "llvm":
        src = rt.render(after, target.host(), Options())
        assert "floordiv" not in src and "dmod" not in src


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_c_abi_entry_floors_negative_dims(tmp_path, runtime):
    """The entry function checks `ceil(N/3) == (N+2)//3`, written `(- 0 (idiv (- 0 N) 3))`: a
    truncating division of -N would fail it for N = 4; the temporaries' arena offsets divide too."""
    _usable(runtime)
    prog = caten.loads(SRC, runtime="numpy").s.elaborate({})
    assert any(_divides(a) or _divides(b) for a, b in
               pipeline.lower_all(R.get(runtime), prog, target.host())[0].plan.constraints)
    files = pipeline.emit(R.get(runtime), prog, "lib", Options())
    lib_path = tmp_path / "libs.so"
    lib_path.write_bytes(files[".so"])
    lib = ctypes.CDLL(str(lib_path))
    fp = ctypes.POINTER(ctypes.c_float)
    lib.s.argtypes = [fp, fp, ctypes.c_int64, ctypes.c_int64]
    lib.s.restype = ctypes.c_int32
    for n, k in ((4, 3), (7, 2), (9, 5)):
        x = ((np.arange(n * k, dtype=np.float32) - 5) / 9).reshape(n, k)
        y = np.full((-(-n // 3), k), np.nan, np.float32)
        assert lib.s(x.ctypes.data_as(fp), y.ctypes.data_as(fp), n, k) == 0, (n, k)
        np.testing.assert_allclose(y, _softmax_times_rowsum(x[0::3].astype(np.float64)), rtol=1e-5, atol=1e-6)
