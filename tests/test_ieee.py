"""IEEE 754 results (LANGUAGE.md 5.1) on every CPU runtime, with numpy as the oracle.

`/` is correctly rounded, so bit-identical to numpy's (never a * (1/b) unless the divisor is a
power of two whose reciprocal is exact, or under --fast-math); `pow` keeps C99 Annex F's special
cases exactly and is within a few ulp elsewhere; `abs(-0.0)` is +0.0 and `sign` matches torch (0 for nan).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import caten
from caten import pipeline
from caten import plugin as R
from caten.ir import dtypes as T
from caten.ir.graph import toposort
from caten.options import Options
from caten.pipeline import compile_program
from caten.read.source import read_text

SRC = """
(composite quot ((A{T}[N] B{T}[N]) -> (C{T}[N])) (/ A B))
(composite power ((A{T}[N] B{T}[N]) -> (C{T}[N])) (pow A B))
(composite absval ((A{T}[N]) -> (C{T}[N])) (abs A))
(composite signum ((A{T}[N]) -> (C{T}[N])) (sign A))
(composite recip-of ((A{T}[N]) -> (C{T}[N])) (recip A))
(composite quarter ((A{T}[N]) -> (C{T}[N])) (/ A 4))
(composite by-tiny ((A{T}[N]) -> (C{T}[N])) (/ A 1e-45))
(composite by-neg-half ((A{T}[N]) -> (C{T}[N])) (/ A -0.5))
"""

DTYPES = ["f16", "bf16", "f32", "f64"]
_MODS: dict[tuple, caten.run.module.Module] = {}


def _runtimes() -> list[str]:
    out = ["numpy", "llvm", "c"]
    try:
        if R.get("opencl").available()[0]:
            out.append("opencl")
    except Exception:  # noqa: BLE001 - no pyopencl: the CPU runtimes still run
        pass
    return out


def mod(rt: str, **kw) -> caten.run.module.Module:
    key = (rt, tuple(sorted(kw.items())))
    if key not in _MODS:
        _MODS[key] = caten.loads(SRC, runtime=rt, **kw)
    return _MODS[key]


def npdt(name: str) -> np.dtype:
    return T.lookup(name).np


def specials(name: str) -> np.ndarray:
    """Zeros, infinities, nan, subnormals, the extremes and a few ordinary values of a float dtype."""
    dt = npdt(name)
    fi = np.finfo(dt) if name != "bf16" else None
    if fi is None:
        import ml_dtypes

        fi = ml_dtypes.finfo(dt)
    tiny, big = float(fi.tiny), float(fi.max)
    sub = float(fi.smallest_subnormal)
    vals = [0.0, 1.0, 2.0, 3.0, 7.0, 0.1, 110.0, 55.0, 1e-3, tiny, tiny * 0.75, sub, sub * 3, big, big / 3,
            1e-30, 1e-39, 6e-8, np.inf, np.nan]
    with np.errstate(all="ignore"):
        v = np.array(vals, np.float64).astype(dt)
    return np.concatenate([v, -v])


def pairs(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = zip(*itertools.product(v, v))
    return np.array(a, v.dtype), np.array(b, v.dtype)


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16 if x.dtype.itemsize == 2 else
                                        np.uint32 if x.dtype.itemsize == 4 else np.uint64)


def assert_bits(got: np.ndarray, want: np.ndarray, what: str, *inputs: np.ndarray) -> None:
    """Identical results: nan where numpy has nan (any payload), the same bits elsewhere (so -0.0 != 0.0)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    bad = (gn != wn) | (~wn & (bits(got) != bits(want)))
    if bad.any():
        i = np.flatnonzero(bad)[:8]
        ins = " ".join(f"in{k}={x[i].astype(np.float64)}" for k, x in enumerate(inputs))
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ; at {i}: {ins} "
                             f"got {got[i].astype(np.float64)} want {want[i].astype(np.float64)}")


@pytest.fixture(params=_runtimes())
def rt(request) -> str:
    return request.param


# division -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES)
def test_division_is_correctly_rounded(rt, dt):
    a, b = pairs(specials(dt))
    with np.errstate(all="ignore"):
        want = np.true_divide(a, b)
    assert_bits(mod(rt).quot(a, b), want, f"{dt} a / b on {rt}", a, b)


def test_division_examples_a_reciprocal_gets_wrong(rt):
    """110/55 is 2 (a * (1/55) is 1.9999999); 1e-30/1e-39 is finite (1/1e-39 overflows f32)."""
    a = np.array([110, 1e-30, 1], np.float32)
    b = np.array([55, 1e-39, 3], np.float32)
    got = mod(rt).quot(a, b)
    assert got[0] == 2.0 and got[1] == np.float32(1e-30) / np.float32(1e-39) and np.isfinite(got[1])
    assert_bits(got, a / b, f"f32 on {rt}", a, b)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_low_precision_division_does_not_overflow_through_a_reciprocal(rt, dt):
    """f16: 1/6e-8 is inf, yet 1e-3/6e-8 = 16667 fits; bf16: 1/1e-39 is inf, 1e-30/1e-39 is not."""
    a = np.array([1e-3, 1e-30, 0.5], np.float64).astype(npdt(dt))
    b = np.array([6e-8, 1e-39, 3e-41], np.float64).astype(npdt(dt))
    with np.errstate(all="ignore"):
        want = np.true_divide(a, b)
        assert np.isinf(np.reciprocal(b)).any()
    got = mod(rt).quot(a, b)
    assert np.isfinite(got.astype(np.float64)).sum() == np.isfinite(want.astype(np.float64)).sum() >= 1
    assert_bits(got, want, f"{dt} on {rt}", a, b)


def test_recip_matches_numpy(rt):
    for dt in DTYPES:
        v = specials(dt)
        with np.errstate(all="ignore"):
            want = np.reciprocal(v.astype(np.float32) if dt in ("f16", "bf16") else v).astype(v.dtype)
        assert_bits(mod(rt).recip_of(v), want, f"{dt} recip on {rt}", v)


@pytest.mark.parametrize("dt", DTYPES)
def test_division_by_a_power_of_two_constant(rt, dt):
    """(/ x 4) becomes x * 0.25 (exact, subnormal results included); (/ x 1e-45) stays a division."""
    v = specials(dt)
    with np.errstate(all="ignore"):
        four = np.true_divide(v, np.array(4, v.dtype))
        tiny = np.true_divide(v, np.array(1e-45).astype(v.dtype))
    assert_bits(mod(rt).quarter(v), four, f"{dt} x/4 on {rt}", v)
    assert_bits(mod(rt).by_tiny(v), tiny, f"{dt} x/1e-45 on {rt}", v)
    with np.errstate(all="ignore"):
        neg = np.true_divide(v, np.array(-0.5, v.dtype))
    assert_bits(mod(rt).by_neg_half(v), neg, f"{dt} x/-0.5 on {rt}", v)


def _ops(entry: str, dt: str, opt: int = 2, rules=None) -> list[str]:
    src = read_text(SRC, "ieee.lisp")
    prog = compile_program(src, src.entry(entry), {"T": T.lookup(dt)}, {},
                           Options.of(opt_level=opt, rules=rules, runtime="numpy"))
    return [n.op.value for n in toposort(prog.nodes)]


def test_only_exact_reciprocals_replace_division():
    assert "FDIV" not in _ops("quarter", "f32") and "MUL" in _ops("quarter", "f32")
    assert "FDIV" in _ops("quarter", "f32", opt=0)
    assert "FDIV" not in _ops("by-neg-half", "bf16")
    # 1e-45 is f32's 2**-149, whose reciprocal overflows; in f16 and f64 it is not a power of two
    for dt in ("f16", "f32", "f64"):
        assert "FDIV" in _ops("by-tiny", dt)
    for opt in (1, 2, 3):
        ops = _ops("quot", "f32", opt)
        assert "FDIV" in ops and "RECIP" not in ops, (opt, ops)


def test_fast_math_is_the_only_source_of_a_times_recip_b():
    a = np.array([110], np.float32)
    b = np.array([55], np.float32)
    assert "RECIP" in _ops("quot", "f32", rules=["builtin:fastmath"])
    assert mod("llvm").quot(a, b)[0] == 2.0 and mod("llvm", opt_level=3).quot(a, b)[0] == 2.0
    fast = mod("llvm", fast_math=True).quot(a, b)[0]  # same source and -O: a different cache entry
    assert fast == a[0] * (np.float32(1) / b[0]) != 2.0  # the reciprocal's double rounding, as asked


def test_fast_math_cli_flag(tmp_path):
    import subprocess
    import sys

    (tmp_path / "p.lisp").write_text("(composite q ((A{f32}[N] B{f32}[N]) -> (C{f32}[N])) (/ A B))\n")
    np.save(tmp_path / "a.npy", np.array([110], np.float32))
    np.save(tmp_path / "b.npy", np.array([55], np.float32))
    outs = []
    for extra in ([], ["--fast-math"]):
        subprocess.run([sys.executable, "-m", "caten", "run", "p.lisp", "-r", "numpy", *extra, "A=a.npy", "B=b.npy",
                        "-o", "y.npy"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
        outs.append(float(np.load(tmp_path / "y.npy")[0]))
    assert outs[0] == 2.0 and outs[1] == float(np.float32(110) * (np.float32(1) / np.float32(55)))


def test_device_sources_divide_with_ieee_division():
    """OpenCL builds ask for correctly rounded division (its default allows 2.5 ulp); CUDA's `/` is IEEE."""
    from caten.render import cstyle as CS
    from runtimes import opencl_rt

    src = read_text(SRC, "ieee.lisp")
    prog = compile_program(src, src.entry("quot"), {"T": T.f32}, {}, Options(runtime="opencl"))
    lowered = pipeline.lower_program(prog, "quot", None, 1)
    for target in (CS.OPENCL, CS.CUDA):
        text = CS.device_source([CS.device_program(lowered, target, local=64, coop=True)], target)
        assert " / " in text and "native_divide" not in text and "__fdividef" not in text
    assert "-cl-fp32-correctly-rounded-divide-sqrt" in opencl_rt.BUILD_OPTIONS
    man = json.loads(pipeline.emit(opencl_rt.RUNTIME, prog, "source")[".json"])
    assert "-cl-fp32-correctly-rounded-divide-sqrt" in man["build_options"]  # for hosts of `-S` output


# pow --------------------------------------------------------------------------------------------

POW_GRID = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 0.3, -0.3,
            2.5, -2.5, 1.5, 10.0, -7.0, 0.75, 1e-3]


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = got.astype(np.float64), want.astype(np.float64)
    sp = np.spacing(np.abs(want)).astype(np.float64)
    with np.errstate(all="ignore"):
        return np.where(g == w, 0.0, np.abs(g - w) / sp)


@pytest.mark.parametrize("dt", DTYPES)
def test_pow_follows_annex_f(rt, dt):
    g = np.array(POW_GRID, np.float64)
    x, y = (v.astype(npdt(dt)) for v in pairs(g))
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype) if dt in ("f16", "bf16") \
            else np.power(x, y)
        got = mod(rt).power(x, y)
    xf, yf, wf = x.astype(np.float64), y.astype(np.float64), want.astype(np.float64)
    special = ~np.isfinite(xf) | ~np.isfinite(yf) | (xf == 0) | (yf == 0) | (np.abs(xf) == 1) | \
        ~np.isfinite(wf) | (wf == 0)
    assert_bits(got[special], want[special], f"{dt} pow special cases on {rt}", x[special], y[special])
    u = _ulps(got[~special], want[~special])
    assert (u <= 2).all(), (dt, rt, x[~special][u > 2], y[~special][u > 2], got[~special][u > 2], u[u > 2])


def test_pow_f64_with_large_exponents(rt):
    """f64 has no wider type: log2 is carried in double-double, else y log2 x scales its rounding
    error (3 ** 646 was 538 ulp off). Results from 1e-300 to 1e300, subnormal and overflowing ones."""
    rng = np.random.default_rng(7)
    n = 3000
    x = np.exp(rng.uniform(-700, 700, n))
    x[: n // 3] = rng.uniform(0.5, 2, n // 3)
    y = rng.uniform(-1, 1, n) * 720 / np.maximum(np.abs(np.log(x)), 1e-3)
    x[:4], y[:4] = [3.0, 2.0, 0.7255973544850242, 10.0], [646.0, -1074.0, -1743.6150245656388, -310.0]
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    got = mod(rt).power(x, y)
    fin = np.isfinite(want) & (want != 0)
    assert_bits(got[~fin], want[~fin], f"f64 pow overflow/underflow on {rt}", x[~fin], y[~fin])
    u = _ulps(got[fin], want[fin])
    assert u.max() <= 2, (rt, x[fin][u > 2], y[fin][u > 2], u[u > 2])


def test_pow_named_cases(rt):
    x = np.array([-np.inf, 1.0, -1.0, np.nan, -0.0, -0.0, -np.inf, -8.0, 16777215.0], np.float32)
    y = np.array([0.3, np.nan, np.inf, 0.0, -3.0, 3.0, -3.0, 1.0 / 3.0, 1.0], np.float32)
    want = np.array([np.inf, 1, 1, 1, -np.inf, -0.0, -0.0, np.nan, 16777215.0], np.float32)
    with np.errstate(all="ignore"):
        assert_bits(np.power(x, y), want, "numpy itself", x, y)
    assert_bits(mod(rt).power(x, y), want, f"pow on {rt}", x, y)


def test_pow_odd_integer_exponents_keep_the_sign(rt):
    x = np.array([-2.0, -0.5, -3.0, -1.5, -2.0, -1.0], np.float64)
    y = np.array([3.0, 5.0, -3.0, 7.0, 1e300, 2.0 ** 53 + 2], np.float64)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    got = mod(rt).power(x, y)
    assert (np.signbit(got) == np.signbit(want)).all() and (_ulps(got, want) <= 2).all(), (got, want)


# abs and sign -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES)
def test_abs_and_sign_of_special_values(rt, dt):
    v = specials(dt)
    assert_bits(mod(rt).absval(v), np.abs(v), f"{dt} abs on {rt}", v)
    got = mod(rt).absval(np.array([-0.0, -np.nan, np.nan, -np.inf], np.float64).astype(npdt(dt)))
    assert not np.signbit(got.astype(np.float32)).any(), f"abs must clear the sign bit: {got}"
    # numpy's sign of -0.0 is +0.0 (ml_dtypes' bf16 keeps -0.0: the f32 result is the oracle)
    want = np.sign(v.astype(np.float32)).astype(v.dtype) if dt == "bf16" else np.sign(v)
    want = np.where(np.isnan(v), np.zeros_like(v), want)  # torch's sign: 0 for nan (issue #39)
    assert_bits(mod(rt).signum(v), want, f"{dt} sign on {rt}", v)
