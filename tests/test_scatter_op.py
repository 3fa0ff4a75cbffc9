"""SCATTER, the principal indexed store: each runtime against a plain Python loop over the index
(an oracle independent of the op table's numpy reference), for every :op, dtypes, both axes, empty
dims, repeated, negative and out-of-range indices, a wider index than the data, and the
bounds-checked mode; the gradient of each :op against torch's scatter_reduce / scatter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import caten
from caten.errors import Error

NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "u8": np.uint8, "i64": np.int64, "bool": np.bool_}


def oracle(x: np.ndarray, i: np.ndarray, s: np.ndarray, ax: int, op: str) -> np.ndarray:
    y = x.copy()
    for p in itertools.product(*map(range, i.shape)):
        k = int(i[p])
        k = k + x.shape[ax] if k < 0 else k
        if not 0 <= k < x.shape[ax] or any(p[d] >= x.shape[d] for d in range(x.ndim) if d != ax):
            continue
        t = p[:ax] + (k,) + p[ax + 1:]
        a, b = y[t], s[p]
        with np.errstate(all="ignore"):
            y[t] = b if op == "set" else a + b if op == "add" else a * b if op == "mul" else \
                (np.maximum(a, b) if op == "max" else np.minimum(a, b))
    return y


def _data(dt: str, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    if dt == "bool":
        return rng.random(shape) < 0.5
    v = rng.integers(-3, 4, shape) if dt != "u8" else rng.integers(0, 6, shape)
    x = v.astype(NP[dt])
    if dt.startswith("f") and x.size:
        x.flat[0] = np.nan
    return x


SHAPES = [(5, 4, 7, 3), (3, 6, 2, 9), (0, 3, 2, 2), (4, 0, 3, 0), (4, 3, 0, 3), (1, 1, 6, 1)]


@pytest.mark.parametrize("rt", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "u8", "bool"])
def test_every_op_matches_a_loop_over_the_index(rt, dt):
    rng = np.random.default_rng(11)
    ops = [o for o in ("add", "mul", "max", "min", "set") if dt != "bool" or o in ("max", "min", "set")]
    for ax in (0, 1):
        outs = " ".join(f"Y{o}{{{dt}}}[A, B]" for o in ops)
        body = " ".join(f"(SCATTER X I S :axis {ax} :op {o})" for o in ops)
        m = caten.loads(f"(composite f ((X{{{dt}}}[A, B] I{{i32}}[K, L] S{{{dt}}}[K, L]) -> ({outs})) "
                        f"(return {body}))", runtime=rt)
        for a, b, k, l_ in SHAPES:
            x, s = _data(dt, (a, b), rng), _data(dt, (k, l_), rng)
            n = (a, b)[ax]
            i = rng.integers(-n - 2, n + 2, (k, l_)).astype(np.int32)
            ys = m.f(x, i, s)
            for o, y in zip(ops, ys if isinstance(ys, tuple) else (ys,)):
                want = oracle(x, i, s, ax, o)
                assert y.dtype == want.dtype and np.array_equal(y, want, equal_nan=dt.startswith("f")), \
                    (rt, dt, ax, o, (a, b, k, l_), x, i, s, y, want)


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_bounds_checked_mode_finds_no_access_outside(rt, monkeypatch):
    monkeypatch.setenv("CATEN_CHECK_BOUNDS", "1")
    rng = np.random.default_rng(3)
    m = caten.loads("(composite f ((X{f32}[A, B, C] I{i64}[K, L, M] S{f32}[K, L, M]) -> (Y{f32}[A, B, C])) "
                    "(return (SCATTER X I S :axis 1 :op add)))", runtime=rt)
    for shape, ishape in [((2, 3, 4), (3, 5, 6)), ((2, 0, 4), (2, 3, 4)), ((0, 3, 4), (1, 2, 2))]:
        x = rng.standard_normal(shape).astype(np.float32)
        i = rng.integers(-6, 6, ishape)
        s = rng.standard_normal(ishape).astype(np.float32)
        np.testing.assert_allclose(m.f(x, i, s), oracle(x, i, s, 1, "add"), rtol=1e-6)


def test_refusals_name_the_problem():
    for src, why in [("(SCATTER X X X)", "index must be an integer"),
                     ("(SCATTER X (cast X i32) (cast X f64))", "source must have the data's dtype"),
                     ("(SCATTER X (cast X i32) X :op sub)", ":op must be one of"),
                     ("(SCATTER X (cast (reshape X [-1]) i32) X)", "rank")]:
        with pytest.raises(Error, match=why):
            caten.loads(f"(composite f ((X{{f32}}[A, B]) -> (Y{{f32}}[A, B])) (return {src}))", runtime="numpy")


@pytest.mark.parametrize("op,red", [("add", "sum"), ("mul", "prod"), ("max", "amax"), ("min", "amin"), ("set", None)])
def test_gradients_match_torch(op, red):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (4, 5)).astype(np.float64)  # small integers: ties for max/min, zeros for mul
    s = rng.integers(-3, 4, (6, 5)).astype(np.float64)
    i = rng.integers(0, 4, (6, 5))
    src = (f"(composite y ((X{{f64}}[A, B] I{{i64}}[K, B] S{{f64}}[K, B] R{{f64}}[A, B]) -> (L{{f64}}[])) "
           f"(return (sum (* (SCATTER X I S :axis 0 :op {op}) R))))\n"
           "(composite g ((X{f64}[A, B] I{i64}[K, B] S{f64}[K, B] R{f64}[A, B]) -> (DX{f64}[A, B] DS{f64}[K, B])) "
           "(return (grad y X I S R :wrt X) (grad y X I S R :wrt S)))")
    r = rng.standard_normal((4, 5))
    dx, ds = caten.loads(src, runtime="llvm").g(x, i, s, r)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(s, requires_grad=True)
    ti = torch.tensor(i)
    y = tx.scatter(0, ti, ts) if red is None else tx.scatter_reduce(0, ti, ts, red)
    (y * torch.tensor(r)).sum().backward()
    if red is None:  # torch's scatter: a repeated index's source gets the cotangent from every copy it
        # could have written; caten's (and torch's own deterministic order) gives it to the last one only
        last = {}
        for p in itertools.product(*map(range, i.shape)):
            last[(i[p], p[1])] = p
        want_ds = np.zeros_like(s)
        for (k, b), p in last.items():
            want_ds[p] = r[k, b]
        np.testing.assert_allclose(ds, want_ds)
        np.testing.assert_allclose(dx, tx.grad.numpy())
        return
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ds, ts.grad.numpy(), rtol=1e-12)


def test_an_embedding_gradient_is_one_store_per_index():
    """GATHER's gradient is a SCATTER add: `--emit loops` holds no loop over the vocabulary per index."""
    src = ("(composite e ((W{f32}[V, D] T{i64}[N]) -> (L{f32}[])) (return (sum (take W T :axis 0))))\n"
           "(composite g ((W{f32}[V, D] T{i64}[N]) -> (G{f32}[V, D])) (return (grad e W T :wrt W)))")
    m = caten.loads(src, runtime="llvm")
    w = np.zeros((7, 3), np.float32)
    t = np.array([1, 1, 4, -1, 9])
    want = np.zeros_like(w)
    np.add.at(want, [1, 1, 4, 6], 1.0)
    np.testing.assert_array_equal(m.g(w, t), want)


def test_a_device_runtime_keeps_the_axis_serial():
    """On OpenCL the leading loops spread over work-items; the scatter axis's loop must not (two
    positions of one line writing one element): `set` keeps the last writer, `add` every source."""
    from caten import plugin as R

    try:
        if not R.get("opencl").available()[0]:
            pytest.skip("no OpenCL platform (the `opencl` extra brings PoCL)")
    except Exception:  # noqa: BLE001 - no pyopencl
        pytest.skip("no OpenCL platform (the `opencl` extra brings PoCL)")
    rng = np.random.default_rng(1)
    m = caten.loads("(composite f ((X{f32}[A, B] I{i32}[K, B] S{f32}[K, B]) -> (Y{f32}[A, B] Z{f32}[A, B])) "
                    "(return (SCATTER X I S :axis 0 :op add) (SCATTER X I S :axis 0 :op set)))", runtime="opencl")
    x = rng.integers(-3, 4, (64, 33)).astype(np.float32)
    s = rng.integers(-3, 4, (100, 33)).astype(np.float32)
    i = rng.integers(-65, 65, (100, 33)).astype(np.int32)
    y, z = m.f(x, i, s)
    assert np.array_equal(y, oracle(x, i, s, 0, "add")) and np.array_equal(z, oracle(x, i, s, 0, "set"))
