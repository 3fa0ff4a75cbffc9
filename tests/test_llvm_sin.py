"""SIN on the LLVM runtime for every finite argument: Cody-Waite reduction for ordinary |x|,
Payne-Hanek (mantissa times a table of bits of 1/pi) for large |x| -- up to the dtype's max."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

import caten
from caten import pipeline
from caten.lower import numerics_sin as LL
from caten.options import Options

F32_MAX = float(np.finfo(np.float32).max)
F64_MAX = float(np.finfo(np.float64).max)
_mods: dict = {}


def fn(expr: str, dt: str):
    key = (expr, dt)
    if key not in _mods:
        _mods[key] = caten.loads(f"(composite f ((X{{{dt}}}[N]) -> (Y{{{dt}}}[N])) {expr})", runtime="llvm").f
    return _mods[key]


def ulps(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in units of the last place of ref (both of y's dtype); nan where both are nan."""
    sp = np.spacing(np.abs(ref)).astype(np.float64)
    err = np.abs(y.astype(np.float64) - ref.astype(np.float64)) / sp
    return np.where(np.isnan(y) & np.isnan(ref), 0.0, err)


def near_pi_multiples(dt, rng, n: int) -> np.ndarray:
    """Values of dt next to k*pi for huge k (the worst cancellation in a reduction)."""
    pi = Fraction(math.pi)  # not pi, but rounding k*pi then nudging by ulps still lands next to k*pi
    info = np.finfo(dt)
    out = []
    for e in rng.integers(0, int(np.log2(float(info.max))) - 1, n):
        k = int(rng.integers(1, 2**20)) << int(max(0, e - 20))
        v = dt(float(k * pi)) if float(k * pi) < float(info.max) else info.max
        out += [v, np.nextafter(v, dt(0)), np.nextafter(v, dt(np.inf))]
    return np.array(out, dtype=dt)


def cases(dt, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    info = np.finfo(dt)
    lo, hi = (-30, np.log10(F32_MAX)) if dt == np.float32 else (-300, np.log10(F64_MAX))
    mag = 10.0 ** rng.uniform(lo, hi, 200_000)
    x = np.minimum(mag, float(info.max)) * rng.choice([-1.0, 1.0], mag.size)
    # the largest representable values (their near neighbours) and their negatives
    top = np.array([info.max], dt)
    for _ in range(64):
        top = np.append(top, np.nextafter(top[-1], dt(0)))
    special = np.array([0.0, -0.0, info.smallest_subnormal, -info.smallest_subnormal, info.smallest_normal,
                        info.smallest_normal * 0.75, np.inf, -np.inf, np.nan, 1e22, 1e30, -1e30, math.pi,
                        2**24, 2**24 + 2, 2**53, 2**63, 2**64 * 3], dtype=dt)
    near = near_pi_multiples(dt, rng, 300)
    return np.concatenate([x.astype(dt), top, -top, special, near, -near])


def test_pi_table_bits():
    """The 1/pi window table agrees with an independent high-precision 1/pi (Fraction + series)."""
    # pi by the Chudnovsky-free BBP series, exact to ~1500 bits as a Fraction partial sum
    pi = sum(Fraction(1, 16**k) * (Fraction(4, 8 * k + 1) - Fraction(2, 8 * k + 4) - Fraction(1, 8 * k + 5)
                                   - Fraction(1, 8 * k + 6)) for k in range(380))
    for j, v in enumerate(LL.INV_PI):
        a = 8 * (j - LL.TAB_PAD)
        ref = math.floor(Fraction(2) ** (a + 63) / pi) % (1 << 64) if a + 63 >= 0 else 0
        assert v == ref, j


def test_sin_f32_all_magnitudes():
    x = cases(np.float32)
    y = fn("(SIN X)", "f32")(x)
    with np.errstate(invalid="ignore"):
        ref = np.sin(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(y), ~np.isfinite(x))
    err = ulps(y, ref)
    assert err.max() <= 2.0, (err.max(), x[np.argmax(err)])
    assert np.all(np.abs(y[np.isfinite(y)]) <= 1.0)
    np.testing.assert_array_equal(np.signbit(y[x == 0]), np.signbit(x[x == 0]))


def test_sin_f64_all_magnitudes():
    x = cases(np.float64)
    y = fn("(SIN X)", "f64")(x)
    with np.errstate(invalid="ignore"):
        ref = np.sin(x)
    assert np.array_equal(np.isnan(y), ~np.isfinite(x))
    err = ulps(y, ref)
    assert err.max() <= 4.0, (err.max(), x[np.argmax(err)])
    np.testing.assert_array_equal(np.signbit(y[x == 0]), np.signbit(x[x == 0]))


def test_sin_f64_vs_mpmath():
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(3)
    x = np.concatenate([10.0 ** rng.uniform(-5, 308, 400), near_pi_multiples(np.float64, rng, 100),
                        [F64_MAX, 6381956970095103 * 2.0**797, 1e22, 2.0**1000]])
    x = x * rng.choice([-1.0, 1.0], x.size)
    y = fn("(SIN X)", "f64")(x)
    with mpmath.workprec(2400):
        ref = np.array([float(mpmath.sin(mpmath.mpf(float(v)))) for v in x])
    err = ulps(y, ref)
    assert err.max() <= 2.0, (err.max(), x[np.argmax(err)])


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_sin_low_precision_huge(dt):
    import ml_dtypes

    npdt = np.float16 if dt == "f16" else ml_dtypes.bfloat16
    x = np.array([65504.0, -65504.0, 1e4, 3.0e4, 0.5, -0.0] if dt == "f16" else [3.3e38, -3.3e38, 1e30, 2.5, -0.0],
                 dtype=npdt)
    y = fn("(SIN X)", dt)(x)
    ref = np.sin(x.astype(np.float64)).astype(np.float32).astype(npdt)
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=1e-2, atol=1e-2)


def test_library_sin_cos_huge():
    x = cases(np.float32, seed=1)
    x = x[np.isfinite(x)]
    y = fn("(sin X)", "f32")(x)
    ref = np.sin(x.astype(np.float64)).astype(np.float32)
    assert ulps(y, ref).max() <= 2.0
    # library cos: sin(x + pi/2) with the shift in f64 up to 2**20, 1 - 2 sin(x/2)**2 beyond
    y = fn("(cos X)", "f32")(x)
    ref = np.cos(x.astype(np.float64))
    mid = np.abs(x) < 2.0 ** 20
    assert ulps(y[mid], ref[mid].astype(np.float32)).max() <= 2.0
    np.testing.assert_allclose(y, ref, rtol=0, atol=6e-7)  # the half-angle form: ~5 ulp of 1 at worst
    assert np.all(np.abs(y) <= 1.0)


@pytest.mark.parametrize("cpu", ["rocketlake", "znver3"])
def test_sin_vectorized_no_libm(monkeypatch, cpu):
    """Straight-line code: no libm call; the 1/pi table is a private constant read by index; the
    loop vectorizes. Compiled for each ISA on any host (no code runs): LLVM reads the table with
    vector gathers for AVX-512 and, its cost model finding AVX2's gathers slow on Zen, with
    scalar loads for znver3. (One thread: the loop stays in the kernel's own function, whose
    blocks the test reads.)"""
    from caten.runtimes.llvm_rt import RUNTIME

    monkeypatch.setenv("CATEN_NUM_THREADS", "1")
    opts = Options(target=cpu)
    for dt, ty in (("f32", "float"), ("f64", "double")):
        prog = caten.loads(f"(composite f ((X{{{dt}}}[N]) -> (Y{{{dt}}}[N])) (SIN X))", runtime="llvm").f.elaborate({})
        ir = pipeline.emit(RUNTIME, prog, "source", opts)[".ll"]
        assert re.search(r"@caten_lut_\w+ = private unnamed_addr constant \[\d+ x i64\]", ir)
        assert "@sin" not in ir and "@llvm.sin" not in ir and " br i1" not in ir.split("lb2:")[1].split("br label")[0]
        opt = pipeline.emit(RUNTIME, prog, "opt-ir", opts)[".ll"]
        assert re.search(rf"<\d+ x {ty}> @llvm\.fma", opt)  # the polynomial, vectorized
        if cpu == "rocketlake":
            assert "masked.gather" in opt or "x i64> @llvm" in opt  # vectorized table reads
