"""SORT, the principal stable sort (a merge sort of its own kernel), and the library's `sort`, `argsort`
and `topk` over it, against torch's `sort(stable=True)` / `topk` (an independent oracle): every dtype,
nan/inf/signed zeros, ties, both directions, several axes, empty and 0-d tensors, lines longer than one
merge run, on numpy/llvm/c (and OpenCL where there is a platform), with the bounds-checked mode;
gradients of the sorted values; inside caten.jit."""

from __future__ import annotations

import numpy as np
import pytest

import caten

torch = pytest.importorskip("torch")

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "i8": np.int8,
          "i16": np.int16, "bool": np.bool_, "f16": np.float16}


def _data(dt: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt.startswith("f"):
        x = rng.integers(-4, 5, shape).astype(DTYPES[dt])  # ties
        flat = x.reshape(-1)
        for j, v in enumerate([np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan][:flat.size]):
            flat[(j * 7) % flat.size] = v
        return x
    info = np.iinfo(DTYPES[dt])
    x = rng.integers(-5 if info.min < 0 else 0, 6, shape).astype(DTYPES[dt])
    if x.size:
        x.reshape(-1)[0], x.reshape(-1)[-1] = info.min, info.max
    return x


def _torch_order(x: np.ndarray, ax: int, desc: bool) -> np.ndarray:
    t = torch.from_numpy(x.astype(np.int16) if x.dtype == np.uint8 else x)
    return torch.sort(t, dim=ax, descending=desc, stable=True).indices.numpy()


SHAPES = [(5, 7), (1, 1), (0, 3), (3, 0), (3, 37), (2, 300)]


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("dt", list(DTYPES))
def test_sort_orders_as_torch_stable(rt, dt):
    rng = np.random.default_rng(2)
    m = caten.loads(f"(composite f ((X{{{dt}}}[A, B]) -> (P{{i64}}[A, B] Q{{i64}}[A, B] R{{i64}}[A, B])) "
                    "(return (SORT X :axis 0) (SORT X :axis 1 :descending true) (argsort X)))", runtime=rt)
    for shape in SHAPES:
        x = _data(dt, shape, rng)
        p, q, r = m.f(x)
        assert np.array_equal(p, _torch_order(x, 0, False)), (shape, x, p)
        assert np.array_equal(q, _torch_order(x, 1, True)), (shape, x, q)
        assert np.array_equal(r, _torch_order(x, 1, False)), (shape, x, r)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_bounds_checked_mode_and_a_middle_axis(rt, monkeypatch):
    monkeypatch.setenv("CATEN_CHECK_BOUNDS", "1")
    rng = np.random.default_rng(4)
    m = caten.loads("(composite f ((X{f32}[A, B, C]) -> (Y{f32}[A, B, C] I{i64}[A, B, C])) "
                    "(setf s (sort X :axis 1 :descending true)) (return (nth s 0) (nth s 1)))", runtime=rt)
    for shape in [(2, 9, 3), (1, 64, 1), (3, 1, 2), (2, 0, 2)]:
        x = _data("f32", shape, rng)
        v, i = m.f(x)
        rv, ri = torch.sort(torch.from_numpy(x), dim=1, descending=True, stable=True)
        assert np.array_equal(i, ri.numpy()) and np.array_equal(v, rv.numpy(), equal_nan=True)


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
def test_tensor_sort_topk_values_and_gradients_as_torch(rt):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    x[1, 3] = np.nan
    w = rng.standard_normal((4, 9)).astype(np.float32)
    t = caten.Tensor(x, runtime=rt, requires_grad=True)
    v, i = t.sort(dim=1, descending=True)
    tv, ti = t.topk(3, dim=0, largest=False)
    ((v * caten.Tensor(w, runtime=rt)).sum() + tv.sum()).backward()
    r = torch.tensor(x, requires_grad=True)
    rv, ri = r.sort(dim=1, descending=True, stable=True)
    sv, si = r.topk(3, dim=0, largest=False)
    ((rv * torch.from_numpy(w)).sum() + sv.sum()).backward()
    assert np.array_equal(v.numpy(), rv.detach().numpy(), equal_nan=True) and np.array_equal(i.numpy(), ri.numpy())
    assert np.array_equal(tv.numpy(), sv.detach().numpy(), equal_nan=True) and np.array_equal(ti.numpy(), si.numpy())
    np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=1e-6)
    assert caten.Tensor(np.float32(2.0), runtime=rt).argsort().numpy() == 0


def test_sort_runs_inside_jit():
    @caten.jit
    def f(a):
        return a.sort(dim=-1).values + a.topk(1).values

    x = np.array([[3.0, 1.0, 2.0], [0.0, -1.0, 5.0]], np.float32)
    want = np.sort(x, axis=-1) + np.max(x, axis=-1, keepdims=True)
    np.testing.assert_array_equal(f(caten.Tensor(x)).numpy(), want)


def test_a_device_runtime_sorts_lines_apart():
    from caten import plugin as R

    try:
        if not R.get("opencl").available()[0]:
            pytest.skip("no OpenCL platform (the `opencl` extra brings PoCL)")
    except Exception:  # noqa: BLE001 - no pyopencl
        pytest.skip("no OpenCL platform (the `opencl` extra brings PoCL)")
    m = caten.loads("(composite f ((X{f32}[A, B]) -> (I{i64}[A, B])) (return (SORT X :axis 1)))", runtime="opencl")
    x = _data("f32", (6, 77), np.random.default_rng(8))
    assert np.array_equal(m.f(x), _torch_order(x, 1, False))
