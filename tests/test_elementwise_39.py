"""Issue #39's elementwise breadth against torch: rounding, copysign/fmod/lerp/atan2/hypot/logaddexp/
xlogy/nan_to_num/fmax/heaviside, erfc/erfinv/expm1/log10/logit/sinc, the hyperbolic functions,
shifts and bitwise names, div's rounding modes; values (special ones included) and gradients on
the numpy runtime, a representative program on llvm and c."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

torch = pytest.importorskip("torch")

TDT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
       "i8": torch.int8, "u8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
       "bool": torch.bool}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30, -1e-30, 1e10, -7.75]


@pytest.fixture(autouse=True)
def _numpy_runtime():
    caten.tensor.set_default_runtime("numpy")
    yield
    caten.tensor.set_default_runtime("numpy")


def values(dt: str, shape=(3, 7), scale=3.0, seed=0, special=True) -> torch.Tensor:
    """Odd-shaped normal values with the special ones in front, as a torch tensor of dtype dt."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    v = rng.normal(size=n) * scale
    if special:
        k = min(n, len(SPECIAL))
        v[:k] = SPECIAL[:k] if seed % 2 == 0 else SPECIAL[::-1][:k]
    return torch.tensor(v).to(TDT[dt]).reshape(shape)


def cat(t: torch.Tensor, **kw) -> caten.Tensor:
    return caten.tensor(t.detach().numpy() if t.dtype != torch.bfloat16 else t.detach().float().numpy(),
                        dtype=_name(t.dtype), **kw)


def _name(tdt) -> str:
    return next(k for k, v in TDT.items() if v == tdt)


def close(got: np.ndarray, want: torch.Tensor, ulps: float = 2, atol: float = 0.0, what: str = "") -> None:
    """got equals want within `ulps` units in the last place of want's dtype (or atol); nan where
    want is nan; the sign of a zero or infinity as want's."""
    w = want.detach().double().numpy()
    g = np.asarray(got).astype(np.float64)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    assert str(np.asarray(got).dtype) in (str(want.dtype).replace("torch.", ""), "bfloat16"), (what, got.dtype)
    assert (np.isnan(g) == np.isnan(w)).all(), (what, g[np.isnan(g) != np.isnan(w)], w[np.isnan(g) != np.isnan(w)])
    exact = (w == 0) | np.isinf(w)
    assert (g[exact] == w[exact]).all() and (np.signbit(g[exact]) == np.signbit(w[exact])).all(), \
        (what, g[exact], w[exact])
    eps = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23,
           torch.float64: 2.0 ** -52}.get(want.dtype, 0.0)
    tiny = {torch.float16: 6e-8, torch.bfloat16: 1e-38, torch.float32: 1e-45, torch.float64: 5e-324}.get(want.dtype, 0)
    with np.errstate(invalid="ignore"):
        ok = np.isnan(w) | (g == w) | (np.abs(g - w) <= np.maximum(ulps * eps * np.abs(w), atol) + tiny)
    assert ok.all(), (what, np.argwhere(~ok)[:5].tolist(), g[~ok][:5], w[~ok][:5])


# unary float math ---------------------------------------------------------------------------------
UNARY = {  # name: (domain, ulps in f32/f64, torch fn)
    "expm1": ("any", 2, torch.expm1), "log10": ("pos", 2, torch.log10), "sinh": ("any", 4, torch.sinh),
    "cosh": ("any", 4, torch.cosh), "asinh": ("any", 3, torch.asinh), "acosh": ("acosh", 3, torch.acosh),
    "atanh": ("unit", 3, torch.atanh), "erfc": ("any", 6, torch.erfc), "erfinv": ("unit", 4, torch.erfinv),
    "deg2rad": ("any", 0, torch.deg2rad), "rad2deg": ("any", 0, torch.rad2deg), "sinc": ("small", 4, torch.sinc),
    "exp2": ("small", 2, torch.exp2),
}


def domain(kind: str, dt: str) -> torch.Tensor:
    x = values(dt)
    if kind == "pos":
        return x.abs()
    if kind == "acosh":
        return x.abs() + 0.75
    if kind == "unit":
        return torch.cat([torch.tanh(x.double()).to(x.dtype).reshape(-1),
                          torch.tensor([1.0, -1.0, 1.5, 0.999, -0.99999], dtype=torch.float64).to(x.dtype)])
    if kind == "small":
        return x.clamp(-8, 8)
    return x


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_unary_math_vs_torch(name, dt):
    kind, ulps, fn = UNARY[name]
    x = domain(kind, dt)
    close(getattr(cat(x), name)().numpy(), fn(x), ulps=ulps, what=f"{name} {dt}")
    # caten.<name> too, on an empty dim
    e = torch.zeros((2, 0), dtype=TDT[dt])
    assert getattr(caten, name)(cat(e)).shape == (2, 0)


@pytest.mark.parametrize("name", ["expm1", "atanh", "deg2rad", "log10"])
def test_unary_math_half_and_integers(name):
    kind, _, fn = UNARY[name]
    for dt in ("f16", "bf16"):
        x = domain(kind, dt)
        close(getattr(cat(x), name)().numpy(), fn(x), ulps=1, what=f"{name} {dt}")
    i = torch.tensor([[0, 1, -1], [3, -5, 2]], dtype=torch.int32)
    if kind == "pos":
        i = i.abs()
    close(getattr(cat(i), name)().numpy(), fn(i), ulps=4, what=f"{name} i32")  # promoted to f32, as torch


def test_erfinv_and_erfc_f64_are_accurate():
    y = torch.linspace(-0.99, 0.99, 41, dtype=torch.float64)
    close(cat(y).erfinv().numpy(), torch.erfinv(y), ulps=4, what="erfinv f64")
    x = torch.linspace(-6, 27, 67, dtype=torch.float64)
    close(cat(x).erfc().numpy(), torch.erfc(x), ulps=4, what="erfc f64 tail")


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_logit(dt):
    u = torch.rand(4, 5, generator=torch.Generator().manual_seed(1), dtype=TDT[dt])
    u = torch.cat([u.reshape(-1), torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-7], dtype=TDT[dt])])
    close(cat(u).logit().numpy(), torch.logit(u), ulps=4, atol=1e-6, what="logit")
    close(cat(u).logit(eps=1e-3).numpy(), torch.logit(u, eps=1e-3), ulps=4, atol=1e-6, what="logit eps")


# rounding -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_rounding_is_exact(dt):
    x = values(dt, scale=4.0)
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 4503599627370495.5, 8388607.5, 1023.5],
                          dtype=torch.float64).to(TDT[dt])
    t = torch.cat([x.reshape(-1), halves])
    for name in ("round", "floor", "ceil", "trunc", "fix", "frac"):
        close(getattr(cat(t), name)().numpy(), getattr(torch, name)(t), ulps=0, what=f"{name} {dt}")


def test_round_decimals_and_integers():
    x = values("f32", scale=50.0, special=False)
    for d in (1, 2, -1, -2):
        close(cat(x).round(decimals=d).numpy(), torch.round(x, decimals=d), ulps=0, what=f"round({d})")
    for dt in ("i8", "u8", "i32", "i64"):
        i = torch.tensor([[0, 1, 7], [100, 3, 5]], dtype=TDT[dt])
        for name in ("round", "floor", "ceil", "trunc"):
            got = getattr(cat(i), name)().numpy()
            assert got.dtype == np.dtype(str(i.dtype).replace("torch.", "")) and (got == i.numpy()).all()
    with pytest.raises(Error):
        cat(torch.tensor([1, 2])).frac()
    with pytest.raises(Error):
        cat(torch.tensor([1, 2])).round(decimals=1)


def test_sign_and_sgn_of_nan_are_zero():
    x = torch.tensor([np.nan, -0.0, 0.0, -3.0, np.inf, -np.inf], dtype=torch.float32)
    for name in ("sign", "sgn"):
        close(getattr(cat(x), name)().numpy(), getattr(torch, name)(x), ulps=0, what=name)


# binary -------------------------------------------------------------------------------------------
BINARY = {  # name: (ulps, atol, domain of b)
    "copysign": (0, 0, "any"), "fmod": (0, 0, "any"), "atan2": (2, 0, "any"), "arctan2": (2, 0, "any"),
    "hypot": (1, 0, "any"), "logaddexp": (2, 2e-7, "any"), "logaddexp2": (2, 4e-7, "any"),
    "xlogy": (3, 0, "pos"), "fmax": (0, 0, "any"), "fmin": (0, 0, "any"), "remainder": (0, 0, "any"),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_binary_math_vs_torch(name, dt):
    ulps, atol, dom = BINARY[name]
    a, b = values(dt, seed=0), values(dt, seed=1)
    if dom == "pos":
        b = torch.cat([b.abs()[:, :-1], torch.tensor([[np.nan], [0.0], [-1.0]], dtype=TDT[dt])], 1)
    close(getattr(cat(a), name)(cat(b)).numpy(), getattr(torch, name)(a, b), ulps=ulps,
          atol=atol * 1e-9 if dt == "f64" else atol, what=f"{name} {dt}")
    if dt == "f64":
        return
    # broadcasting a row, and a Python number
    close(getattr(caten, name)(cat(a), cat(b[0])).numpy(), getattr(torch, name)(a, b[0]), ulps=ulps,
          atol=atol, what=f"{name} {dt} broadcast")
    try:
        want = getattr(torch, name)(a, 1.5)
    except TypeError:  # torch takes no Python number here: neither need caten
        return
    close(getattr(cat(a), name)(1.5).numpy(), want, ulps=ulps, atol=atol, what=name)


@pytest.mark.parametrize("dt", ["i8", "u8", "i64"])
def test_integer_binaries(dt):
    lo = 0 if dt == "u8" else -9
    rng = np.random.default_rng(3)
    a = torch.tensor(rng.integers(lo, 10, size=(4, 5)), dtype=TDT[dt])
    b = torch.tensor(rng.integers(1, 10, size=(4, 5)) * (1 if dt == "u8" else rng.choice([-1, 1], (4, 5))),
                     dtype=TDT[dt])
    for name in ("fmod", "fmax", "fmin", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor"):
        got, want = getattr(cat(a), name)(cat(b)).numpy(), getattr(torch, name)(a, b)
        assert str(got.dtype) == str(want.dtype).replace("torch.", "") and (got == want.numpy()).all(), name
    for mode in ("trunc", "floor"):
        got, want = caten.div(cat(a), cat(b), rounding_mode=mode).numpy(), torch.div(a, b, rounding_mode=mode)
        assert (got == want.numpy()).all(), mode
    assert (cat(a).bitwise_not().numpy() == torch.bitwise_not(a).numpy()).all()
    # copysign, atan2 and xlogy of integers are f32, as torch's
    for name in ("copysign", "atan2", "xlogy"):
        close(getattr(cat(a), name)(cat(b.abs())).numpy(), getattr(torch, name)(a, b.abs()), ulps=2, what=name)


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_div_rounding_modes_on_floats(dt):
    a, b = values(dt, seed=0), values(dt, seed=1)
    for mode in ("trunc", "floor"):
        close(caten.div(cat(a), cat(b), rounding_mode=mode).numpy(), torch.div(a, b, rounding_mode=mode), ulps=0,
              what=mode)
        close(cat(a).div(2.5, rounding_mode=mode).numpy(), a.div(2.5, rounding_mode=mode), ulps=0, what=mode)
    close(cat(a).floor_divide(cat(b)).numpy(), torch.floor_divide(a, b), ulps=0, what="floor_divide")
    close(cat(a).true_divide(cat(b)).numpy(), torch.true_divide(a, b), ulps=0, what="true_divide")


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_lerp_heaviside_nan_to_num_float_power(dt):
    a, b = values(dt, seed=0), values(dt, seed=1)
    w = torch.rand(3, 7, generator=torch.Generator().manual_seed(2)).to(TDT[dt]) * 1.4 - 0.2
    at = 1e-6 if dt in ("f32", "f64") else 2e-2
    close(cat(a).lerp(cat(b), cat(w)).numpy(), torch.lerp(a, b, w), ulps=2, atol=at, what="lerp tensor weight")
    close(cat(a).lerp(cat(b), 0.75).numpy(), torch.lerp(a, b, 0.75), ulps=2, atol=at, what="lerp scalar weight")
    v = torch.tensor(0.5, dtype=TDT[dt])
    close(cat(a).heaviside(cat(v)).numpy(), torch.heaviside(a, v), ulps=0, what="heaviside")
    close(cat(a).nan_to_num().numpy(), torch.nan_to_num(a), ulps=0, what="nan_to_num")
    close(caten.nan_to_num(cat(a), nan=1.0, posinf=2.0, neginf=-3.0).numpy(),
          torch.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-3.0), ulps=0, what="nan_to_num values")
    close(cat(a).float_power(cat(b.abs())).numpy(), torch.float_power(a, b.abs()), ulps=4, what="float_power")
    close(cat(a).ldexp(cat(torch.tensor([3, -2, 0, 1, 5, -1, 2], dtype=torch.int32))).numpy(),
          torch.ldexp(a, torch.tensor([3, -2, 0, 1, 5, -1, 2], dtype=torch.int32)), ulps=0, what="ldexp")
    sb = cat(a).signbit().numpy()
    assert (sb == torch.signbit(a).numpy())[~torch.isnan(a).numpy()].all()


def test_refusals_name_the_limitation():
    f, i = cat(torch.ones(3)), cat(torch.ones(3, dtype=torch.int32))
    for call in (lambda: f << 1, lambda: f.bitwise_and(f), lambda: i.hypot(i), lambda: i.logaddexp(i),
                 lambda: f.heaviside(cat(torch.tensor(1.0, dtype=torch.float64))),
                 lambda: f.lerp(cat(torch.ones(3, dtype=torch.float64)), 0.5),
                 lambda: cat(torch.ones(3, dtype=torch.bool)).floor(),
                 lambda: caten.div(f, f, rounding_mode="round")):
        with pytest.raises(Error):
            call()


# shifts -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["i8", "u8", "i32", "i64"])
def test_shifts_match_torch_including_out_of_range(dt):
    info = np.iinfo(dt.replace("i", "int").replace("u", "uint") if dt != "u8" else "uint8")
    a = torch.tensor([5, 1, 100, info.min, info.max, 7, 0, info.max // 3, 2], dtype=TDT[dt])
    b = torch.tensor([0, 1, 3, 7, info.bits - 1, info.bits, info.bits + 1, 2, 1], dtype=TDT[dt])
    if info.min < 0:
        a[1], b[-1] = -3, -1
    for got, want in ((cat(a) << cat(b), a << b), (cat(a) >> cat(b), a >> b),
                      (cat(a).bitwise_left_shift(2), a.bitwise_left_shift(2)),
                      (caten.bitwise_right_shift(cat(a), 1), torch.bitwise_right_shift(a, 1)),
                      (cat(a) << 3, a << 3), (1 << cat(b.clamp(0, 6)), 1 << b.clamp(0, 6))):
        assert (got.numpy() == want.numpy()).all() and str(got.dtype) == _name(want.dtype), (dt, got.numpy(), want)


# gradients ----------------------------------------------------------------------------------------
GRAD_UNARY = {"expm1": "any", "log10": "pos", "sinh": "any", "cosh": "any", "asinh": "any", "acosh": "acosh",
              "atanh": "half", "erfc": "any", "erfinv": "half", "sinc": "any", "deg2rad": "any", "logit": "prob",
              "frac": "any", "round": "any", "floor": "any", "nan_to_num": "inf"}


def _grad_input(kind: str) -> torch.Tensor:
    x = torch.tensor(np.random.default_rng(5).normal(size=(2, 5)) * 1.5)
    if kind == "pos":
        return x.abs() + 0.1
    if kind == "acosh":
        return x.abs() + 1.2
    if kind in ("half", "prob"):
        return torch.sigmoid(x) * 0.9 + 0.05 if kind == "prob" else torch.tanh(x) * 0.9
    if kind == "inf":
        x[0, 0], x[1, 1] = np.inf, np.nan
    return x


@pytest.mark.parametrize("name", sorted(GRAD_UNARY))
def test_unary_gradients_vs_torch(name):
    x = _grad_input(GRAD_UNARY[name]).requires_grad_(True)
    g = torch.linspace(-1, 2, x.numel(), dtype=torch.float64).reshape(x.shape)
    (getattr(torch, name)(x) * g).sum().backward()
    c = cat(x, requires_grad=True)
    (getattr(c, name)() * cat(g)).sum().backward()
    close(c.grad.numpy(), x.grad, ulps=64, what=f"d {name}")


@pytest.mark.parametrize("name", ["copysign", "fmod", "atan2", "hypot", "logaddexp", "logaddexp2", "xlogy",
                                  "fmax", "fmin", "lerp"])
def test_binary_gradients_vs_torch(name):
    rng = np.random.default_rng(7)
    a = torch.tensor(rng.normal(size=(3, 4)))
    b = torch.tensor(rng.normal(size=(3, 4)))
    if name in ("fmax", "fmin"):
        a[0, 0], b[0, 1], b[1, 1] = np.nan, np.nan, a[1, 1]  # nan on either side, and a tie
    if name == "xlogy":
        b, a[0, 0] = b.abs(), 0.0
    a.requires_grad_(True)
    b.requires_grad_(True)
    ca, cb = cat(a, requires_grad=True), cat(b, requires_grad=True)
    if name == "lerp":
        torch.lerp(a, b, 0.3).sum().backward()
        ca.lerp(cb, 0.3).sum().backward()
    else:
        getattr(torch, name)(a, b).sum().backward()
        getattr(ca, name)(cb).sum().backward()
    close(ca.grad.numpy(), a.grad, ulps=16, what=f"d{name}/da")
    if b.grad is not None:
        close(cb.grad.numpy(), b.grad, ulps=16, what=f"d{name}/db")


# llvm and c ---------------------------------------------------------------------------------------
def _program(x, y, u, i, j):
    return (x.round(), x.floor(), x.ceil(), x.trunc(), x.frac(), x.fmod(y), x.copysign(y), x.atan2(y), x.hypot(y),
            x.logaddexp(y), x.fmax(y), u.erfinv(), x.erfc(), x.expm1(), x.sinh(), u.atanh(), x.nan_to_num(),
            x.lerp(y, 0.7), i << j, i >> j, i.fmod(j.clamp(1, 5)), x.sign())


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_compiled_runtimes_match_torch(rt):
    x, y = values("f32", seed=0), values("f32", seed=1)
    u = torch.tanh(values("f32", seed=2, special=False))
    i = torch.tensor(np.random.default_rng(4).integers(-50, 50, size=(3, 7)), dtype=torch.int32)
    j = torch.tensor(np.random.default_rng(6).integers(-2, 34, size=(3, 7)), dtype=torch.int32)
    got = caten.jit(_program, runtime=rt)(*(cat(t, runtime=rt) for t in (x, y, u, i, j)))
    want = (x.round(), x.floor(), x.ceil(), x.trunc(), x.frac(), x.fmod(y), x.copysign(y), x.atan2(y), x.hypot(y),
            x.logaddexp(y), x.fmax(y), u.erfinv(), x.erfc(), x.expm1(), x.sinh(), u.atanh(), x.nan_to_num(),
            x.lerp(y, 0.7), i << j, i >> j, i.fmod(j.clamp(1, 5)), x.sign())
    ulps = [0] * 7 + [2, 1, 2, 0, 4, 6, 2, 4, 3, 0, 2, 0, 0, 0, 0]
    for k, (g, w, n) in enumerate(zip(got, want, ulps)):
        if w.dtype == torch.int32:
            assert (g.numpy() == w.numpy()).all(), (rt, k)
        else:
            close(g.numpy(), w, ulps=n, atol=1e-6 if k == 17 else 0.0, what=f"{rt} output {k}")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_binary_math_half_precision(dt):
    a, b = values(dt, seed=0), values(dt, seed=1)
    for name in ("copysign", "fmod", "atan2", "hypot", "logaddexp", "xlogy", "fmax", "fmin", "remainder"):
        # a nan's sign bit is invisible to caten (signbit's doc): copysign's b is a number here
        bb = b.abs() if name == "xlogy" else b.nan_to_num(1.0) if name == "copysign" else b
        close(getattr(cat(a), name)(cat(bb)).numpy(), getattr(torch, name)(a, bb), ulps=1, what=f"{name} {dt}")


def test_signed_zeros_and_bools():
    z = torch.tensor([-0.0, 0.0], dtype=torch.float32)
    for name in ("tanh", "atan", "sinh", "asinh", "atanh", "expm1", "trunc"):
        close(getattr(cat(z), name)().numpy(), getattr(torch, name)(z), ulps=0, what=f"{name}(-0.0)")
    bo = torch.tensor([True, False])
    assert (cat(bo).sign().numpy() == torch.sign(bo).numpy()).all()
    assert (cat(bo).signbit().numpy() == torch.signbit(bo).numpy()).all()
    assert (cat(bo).bitwise_xor(True).numpy() == torch.bitwise_xor(bo, True).numpy()).all()
    t = cat(torch.tensor([1.5, -2.5]))
    t.floor_()
    assert t.numpy().tolist() == [1.0, -3.0]


def test_aliases_and_small_names():
    x, y, z = values("f32", seed=0), values("f32", seed=1), values("f32", seed=2, special=False)
    cx, cy, cz = cat(x), cat(y), cat(z)
    for name in ("angle", "negative", "absolute", "arcsin", "arccos", "arctan"):
        close(getattr(cx, name)().numpy(), getattr(torch, name)(x), ulps=2, what=name)
    close(cx.addcmul(cy, cz, value=0.3).numpy(), x.addcmul(y, z, value=0.3), ulps=0, what="addcmul")
    close(caten.addcdiv(cx, cy, cz, value=-2).numpy(), torch.addcdiv(x, y, z, value=-2), ulps=0, what="addcdiv")
    close(cx.divide(cy, rounding_mode="floor").numpy(), x.divide(y, rounding_mode="floor"), ulps=0, what="divide")
    close(caten.subtract(cx, cy, alpha=2).numpy(), torch.subtract(x, y, alpha=2), ulps=0, what="subtract")
    for name in ("greater", "less", "greater_equal", "less_equal", "not_equal"):
        assert (getattr(cx, name)(cy).numpy() == getattr(torch, name)(x, y).numpy()).all(), name
    close(cat(torch.tensor([1, -2])).angle().numpy(), torch.tensor([1, -2]).angle(), ulps=0, what="angle int")


def test_addcmul_rounds_once_as_torch_and_differentiates():
    rng = np.random.default_rng(11)
    a, b, c = (torch.tensor(rng.normal(size=(5, 9))) for _ in range(3))
    close(cat(a).addcmul(cat(b), cat(c), value=0.3).numpy(), a.addcmul(b, c, value=0.3), ulps=0, what="addcmul f64")
    ts = [t.clone().requires_grad_(True) for t in (a, b, c)]
    cs = [cat(t, requires_grad=True) for t in (a, b, c)]
    (ts[0].addcmul(ts[1], ts[2], value=-1.5) ** 2).sum().backward()
    (cs[0].addcmul(cs[1], cs[2], value=-1.5) ** 2).sum().backward()
    for t, c in zip(ts, cs):
        close(c.grad.numpy(), t.grad, ulps=8, what="d addcmul")
    ii = [torch.tensor([[3, -4, 5]]), torch.tensor([[2, 7, -1]]), torch.tensor([[6, 0, 9]])]
    got = cat(ii[0]).addcmul(cat(ii[1]), cat(ii[2]), value=2).numpy()
    assert (got == ii[0].addcmul(ii[1], ii[2], value=2).numpy()).all()


@pytest.mark.parametrize("dt", ["i8", "i32"])
def test_gcd_lcm(dt):
    rng = np.random.default_rng(13)
    a = torch.tensor(rng.integers(-100, 100, size=(3, 5)), dtype=TDT[dt])
    b = torch.tensor(rng.integers(-100, 100, size=(3, 5)), dtype=TDT[dt])
    a[0, 0] = b[0, 0] = a[1, 0] = 0
    if dt == "i32":
        a[2, 0], b[2, 0] = 1836311903, 1134903170  # consecutive Fibonacci numbers: Euclid's longest run
    for name in ("gcd", "lcm"):
        got, want = getattr(cat(a), name)(cat(b)).numpy(), getattr(torch, name)(a, b)
        assert (got == want.numpy()).all() and str(got.dtype) == str(want.dtype).replace("torch.", ""), name
    with pytest.raises(Error):
        cat(torch.ones(2)).gcd(cat(torch.ones(2)))


def _wide(x, u):
    return x.erfc(), x.expm1(), x.sinh(), x.addcmul(u, x, value=0.3), u.erfinv()


def test_double_double_paths_compiled():
    """f64's exact-product tricks (exp-dd, fma) need the compiler to keep each IEEE op as written:
    checked on c, whose compiler could contract them into FMAs."""
    x = torch.tensor(np.random.default_rng(17).normal(size=(3, 5)) * 4)
    u = torch.tanh(x / 3)
    got = caten.jit(_wide, runtime="c")(cat(x, runtime="c"), cat(u, runtime="c"))
    want = (x.erfc(), x.expm1(), x.sinh(), x.addcmul(u, x, value=0.3), u.erfinv())
    for k, (g, w, n) in enumerate(zip(got, want, (4, 4, 4, 0, 4))):
        close(g.numpy(), w, ulps=n, what=f"c f64 output {k}")


@pytest.mark.parametrize("dt", ["f16", "f32", "f64"])
def test_frexp(dt):
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 0.75, -3.0, 1e-40, 2.0 ** -1074, 1.7976931348623157e308,
               0.99999999, 65504.0, 2.0 ** -24]
    rng = np.random.default_rng(19)
    x = torch.cat([torch.tensor(special, dtype=torch.float64),
                   torch.tensor(np.exp2(rng.integers(-140, 120, 60)) * rng.uniform(-2, 2, 60))]).to(TDT[dt])
    m, e = cat(x).frexp()
    tm, te = torch.frexp(x)
    close(m.numpy(), tm, ulps=0, what="frexp mantissa")
    assert np.array_equal(m.numpy().astype(np.float64), tm.double().numpy(), equal_nan=True)
    assert e.dtype == "i32" and (e.numpy() == te.numpy()).all()
    with pytest.raises(Error):
        cat(torch.tensor([1, 2])).frexp()


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_nextafter(dt):
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 0.75, -3.0, 1e-40, 2.0 ** -1074, 1.7976931348623157e308,
         2.0 ** -126, 2.0 ** -1022, 65504.0, 2.0 ** -24, 1.0, -1.0, 0.5]
    w = [1.0, -1.0, 0.0, 0.0, 1.0, 0.0, 2.0, -4.0, 0.0, -1.0, np.inf, 0.0, 0.0, np.inf, 0.0, 1.0, 0.0, 0.0]
    rng = np.random.default_rng(23)
    x = torch.cat([torch.tensor(v, dtype=torch.float64),
                   torch.tensor(rng.normal(size=40) * np.exp2(rng.integers(-30, 30, 40)))]).to(TDT[dt])
    y = torch.cat([torch.tensor(w, dtype=torch.float64), torch.tensor(rng.normal(size=40))]).to(TDT[dt])
    got, want = cat(x).nextafter(cat(y)).numpy(), torch.nextafter(x, y)
    close(got, want, ulps=0, what=f"nextafter {dt}")
    assert np.array_equal(got.astype(np.float64), want.double().numpy(), equal_nan=True)  # to the last subnormal
