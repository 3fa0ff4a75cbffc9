"""Direct convolution tiles that store past the caches (non-temporal, caten.render.llvm.direct).

A convolution whose output is a program output that nothing in its kernel reads back, larger
than the cores' L2s together, stores each single-pass tile with non-temporal stores when the
output's rows are aligned at run time (the output pool hands out aligned arrays) and with plain
stores otherwise (an `out=` array the caller aligned differently). Both are checked against
torch's convolution, with an edge row tile (and, for 32-wide tiles, an edge column tile); a
small output, or one an epilogue of the same kernel reads back, keeps plain stores.
"""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten import target
from caten.pipeline import emit
from caten.plugin import threads

pytest.importorskip("llvmlite")


def _source(n: int, c: int, h: int, w: int, o: int, epilogue: bool = False) -> str:
    body = "(conv2d X Wt :padding 1)"
    if epilogue:
        body = f"(relu (+ {body} (reshape B [1 {o} 1 1])))"
    extra = f" (B{{f32}}[{o}])" if epilogue else ""
    return (f"(composite conv ((X{{f32}}[{n}, {c}, {h}, {w}]) (Wt{{f32}}[{o}, {c}, 3, 3]){extra} "
            f"-> (Y{{f32}}[{n}, {o}, {h}, {w}])) {body})")


def _ir(mod) -> str:
    return next(iter(emit(mod.runtime, mod.conv.elaborate({}), "source").values()))


def _big_n(o: int, h: int, w: int) -> int:
    """Images enough for an output over twice the threshold (threads x one core's L2)."""
    need = 2 * threads() * target.host().l2_bytes
    return -(-need // (o * h * w * 4))


def _want(x, wt, b=None):
    torch = pytest.importorskip("torch")
    y = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), padding=1)
    if b is not None:
        y = torch.relu(y + torch.from_numpy(b).double().reshape(1, -1, 1, 1))
    return y.numpy()


def test_large_outputs_stream_aligned_and_store_plainly_otherwise():
    o, c, h, w = 29, 7, 44, 44  # rows of 1936 floats: aligned when the output is (29 rows: edge tiles)
    n = _big_n(o, h, w)
    mod = caten.loads(_source(n, c, h, w, o), runtime="llvm")
    assert "!nontemporal" in _ir(mod) and "sfence" in _ir(mod)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), np.float32)
    wt = rng.standard_normal((o, c, 3, 3), np.float32)
    want = _want(x, wt)
    y = mod.conv(x, wt)  # from the pool: aligned, so the streamed stores run
    assert y.ctypes.data % 64 == 0
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    raw = np.zeros(y.size + 16, np.float32)
    for shift in (1, 4):  # rows 4 or 16 bytes off a line: the plain stores
        out = raw[shift:shift + y.size].reshape(y.shape)
        out[...] = np.nan
        mod.conv(x, wt, out=out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mod.conv(x, wt), want, rtol=1e-4, atol=1e-4)  # the pool's array again


def test_small_or_read_back_outputs_keep_plain_stores():
    small = caten.loads(_source(1, 8, 16, 16, 16), runtime="llvm")
    assert "!nontemporal" not in _ir(small)
    o, c, h, w = 16, 8, 40, 40
    n = _big_n(o, h, w)
    fused = caten.loads(_source(n, c, h, w, o, epilogue=True), runtime="llvm")
    assert "!nontemporal" not in _ir(fused)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w), np.float32)
    wt = rng.standard_normal((o, c, 3, 3), np.float32)
    b = rng.standard_normal(o, np.float32)
    np.testing.assert_allclose(fused.conv(x, wt, b), _want(x, wt, b), rtol=1e-4, atol=1e-4)
    # an output that its kernel's epilogue reads back through a reshape (the conv's own shape
    # has a group axis): the epilogue reads it right after each block, from the caches
    both = caten.loads(f"(composite conv ((X{{f32}}[{n}, {c}, {h}, {w}]) (Wt{{f32}}[{o}, {c}, 3, 3]) "
                       f"-> (Y{{f32}}[{n}, {o}, {h}, {w}]) (Z{{f32}}[{n}, {o}, {h}, {w}])) "
                       "(return (conv2d X Wt :padding 1) (relu (conv2d X Wt :padding 1))))", runtime="llvm")
    assert "!nontemporal" not in _ir(both)
    y, z = both.conv(x, wt)
    np.testing.assert_allclose(y, _want(x, wt), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(z, np.maximum(_want(x, wt), 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_symbolic_shapes_decide_at_run_time(dt):
    """Dims bound at the call (the Python API's usual program): the size test runs in the kernel."""
    src = (f"(composite conv ((X{{{dt}}}[N, C, H, W]) (Wt{{{dt}}}[O, C, 3, 3]) -> (Y{{{dt}}}[N, O, H, W])) "
           "(conv2d X Wt :padding 1))")
    mod = caten.loads(src, runtime="llvm")
    rng = np.random.default_rng(2)
    npt = np.float32 if dt == "f32" else np.float64
    o, c, h, w = 21, 5, 36, 36
    wt = rng.standard_normal((o, c, 3, 3)).astype(npt)
    for n in (1, _big_n(o, h, w)):
        x = rng.standard_normal((n, c, h, w)).astype(npt)
        prog, _ = mod.conv.program(mod.conv._bind_types([x, wt]))
        assert "!nontemporal" in next(iter(emit(mod.runtime, prog, "source").values()))
        want = _want(x, wt)
        np.testing.assert_allclose(mod.conv(x, wt), want, rtol=1e-4, atol=1e-4)
        raw = np.zeros(want.size + 16, npt)
        out = raw[2:2 + want.size].reshape(want.shape)
        mod.conv(x, wt, out=out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
