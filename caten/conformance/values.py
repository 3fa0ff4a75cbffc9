"""Test inputs that reach the edge cases of each dtype, and the ULP-based comparison.

Inputs are deterministic (seeded from the case), so a failure reproduces. Floats mix ordinary
values with zeros, signed zeros, halfway points, huge and tiny magnitudes, subnormals, inf and
nan; integers mix small values with the whole range and its overflow edges.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from caten.ir import dtypes as T
from caten.ir.dtypes import DType

# value profiles: the call that runs at size 1 and the large call use ordinary values (so
# reductions over many elements measure accuracy); the middle call mixes in the edge cases
ORDINARY, EDGES, EDGES_NO_HUGE, NEAR_ONE = "ordinary", "edges", "edges-no-huge", "near-one"
EDGES_PRODUCT = "edges-product"  # edges where a product's accumulation order decides over- and underflow


def finfo(dt: DType):
    return ml_dtypes.finfo(dt.np) if dt.name == "bf16" or dt in T.FLOAT8 else np.finfo(dt.np)


def seed_of(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def _float_specials(dt: DType) -> np.ndarray:
    fi = finfo(dt)
    big = {"f16": 3.0e4, "bf16": 1.0e30, "f32": 1.0e30, "f64": 1.0e200, "f8e4m3": 320.0, "f8e5m2": 4.0e4,
           "f8e4m3fnuz": 160.0, "f8e5m2fnuz": 4.0e4}[dt.name]
    return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.5, big, -big, float(fi.tiny), -float(fi.tiny),
                     float(fi.smallest_subnormal), float(fi.max), -float(fi.max), np.inf, -np.inf, np.nan],
                    dtype=np.float64)


def _int_specials(dt: DType) -> np.ndarray:
    ii = T.iinfo(dt)  # (i4: -8 -7 -2 -1 0 1 2 3 6 7; u4: 0 1 2 3 7 14 15)
    vals = {0, 1, 2, 3, ii.max, ii.max - 1, ii.min, ii.min + 1, 7}
    if ii.min < 0:
        vals |= {-1, -2, -7}
    return np.array(sorted(vals), dtype=object)


def generate(dt: DType, shape: tuple[int, ...], seed: int, profile: str, domain: str = "") -> np.ndarray:
    """An array of `dt` and `shape`. `domain` narrows the values: "castable" keeps floats where
    a cast to every integer dtype is defined (truncates into 0..127)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.is_bool:
        return rng.random(n).reshape(shape) < 0.5
    if dt.is_int:
        ii = T.iinfo(dt)
        small = rng.integers(max(ii.min, -20), min(ii.max, 20), size=n, endpoint=True, dtype=np.int64)
        if domain == "small":
            return small.astype(dt.np).reshape(shape)
        wide = rng.integers(ii.min, ii.max, size=n, endpoint=True, dtype=np.int64 if dt in T.INT4 else dt.np)
        out = np.where(rng.random(n) < 0.5, small.astype(wide.dtype), wide)
        if profile in (EDGES, EDGES_NO_HUGE, EDGES_PRODUCT) and n:
            sp = _int_specials(dt)
            k = max(1, n // 3)
            pos = rng.choice(n, size=min(k, n), replace=False)
            out[pos] = np.array([int(sp[i]) for i in rng.integers(0, len(sp), size=len(pos))], dtype=object)
        return out.astype(dt.np).reshape(shape)
    if domain == "castable":
        x = rng.uniform(-0.99, 127.9, size=n)
        if n:
            x[rng.random(n) < 0.1] = 0.0
        return x.astype(dt.np).reshape(shape)
    x = rng.standard_normal(n) * 3.0
    if profile in (NEAR_ONE, EDGES_PRODUCT):
        # products, whose overflow would depend on the accumulation order: magnitudes near 1,
        # closer for more factors (the log of a product of n is a walk of sd h sqrt(n / 3)):
        # every partial product of the n stays within e^+-8, far inside even f16's range
        h = min(0.5, 2.0 / np.sqrt(max(n, 1) / 3.0))
        x = np.where(x < 0, -1.0, 1.0) * np.exp(rng.uniform(-h, h, size=n))
    if domain == "positive":
        x = np.abs(x) + 0.1
    if profile in (EDGES, EDGES_NO_HUGE, EDGES_PRODUCT) and n:
        sp = _float_specials(dt)
        if profile == EDGES_NO_HUGE:  # where accumulation order decides overflow: a sum
            sp = sp[~np.isfinite(sp) | (np.abs(sp) <= 4)]
        elif profile == EDGES_PRODUCT:  # a product: order decides overflow and underflow (0 * inf)
            a = np.abs(sp)
            sp = sp[~np.isfinite(sp) | (a == 0) | ((a >= 0.25) & (a <= 4))]
        k = max(1, n // 3)
        pos = rng.choice(n, size=min(k, n), replace=False)
        x[pos] = sp[rng.integers(0, len(sp), size=len(pos))]
    with np.errstate(over="ignore"):
        return x.astype(dt.np).reshape(shape)


# comparison ---------------------------------------------------------------------------
# tolerance in units in the last place of the reference value, by dtype and by the kind of
# graph: "basic" (arithmetic, movement), "math" (EXP2/LOG2/SIN inside), "reduce" (a REDUCE
# inside: accumulation order may differ, so the floor scales with the result's magnitude)
ULPS: dict[str, dict[str, float]] = {
    "basic": {"f16": 2, "bf16": 2, "f32": 2, "f64": 2},
    "math": {"f16": 8, "bf16": 8, "f32": 64, "f64": 64},
    "reduce": {"f16": 16, "bf16": 16, "f32": 64, "f64": 64},
}
for _k in ULPS:  # float8 (3 or 2 mantissa bits): as the other narrow floats
    ULPS[_k].update({d.name: ULPS[_k]["bf16"] for d in T.FLOAT8})


@dataclass
class Outcome:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    reason: str = ""


def ulp(x: np.ndarray, dt: DType) -> np.ndarray:
    """The spacing of `dt` at |x| (computed in f64; subnormal spacing near zero)."""
    fi = finfo(dt)
    ax = np.abs(x.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    sp = np.exp2(e) * float(fi.eps)
    return np.maximum(np.where(ax > 0, sp, 0.0), float(fi.smallest_subnormal))


def _fmt(v: object) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.9g}"
    return str(v)


def _fmt17(v: object) -> str:
    """Enough digits to tell two f64 values apart (a footnote must show the difference)."""
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.17g}"
    return str(v)


LAMBDA = 8.0  # Higham & Mary's probabilistic bound lambda*sqrt(n)*u fails with probability < 2exp(-lambda^2/2)


def compare(got: np.ndarray, want: np.ndarray, dt: DType, kind: str, prec: DType | None = None,
            mag: np.ndarray | None = None, n_reduced: int = 1) -> Outcome:
    """Compare a runtime's output with the reference: exact for bool/int, ULPs for floats;
    nan matches nan and equal infinities match. `prec` is the float dtype whose ULPs count
    (the least precise float the output was computed in; default the output's own).
    For a graph with a float reduction, `mag` (the reference on |inputs|, e.g. sum|x|) scales the
    bound per element: summation in another order (another vector width, blocking, threads) errs
    by up to about n eps sum|x|, which is many ULPs of a result that cancels. With `n_reduced`
    elements combined per output, the bound also admits LAMBDA*sqrt(n)*eps*mag (a product's
    relative error grows so in any order: Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return Outcome(False, reason=f"shape {got.shape}, expected {want.shape}")
    if got.dtype != want.dtype:
        return Outcome(False, reason=f"dtype {got.dtype}, expected {want.dtype}")
    if want.size == 0:
        return Outcome(True)
    got, want = T.widen4(got), T.widen4(want)  # (i4/u4 compared as the integers they hold)
    if not dt.is_float:
        bad = np.asarray(got != want)
        if dt.is_bool:
            err = rel = bad.astype(np.float64)
        else:
            g, w = np.atleast_1d(got).astype(object), np.atleast_1d(want).astype(object)
            err = np.asarray(np.abs(g - w), dtype=np.float64)
            aw = np.asarray(np.abs(w), dtype=np.float64)
            rel = np.where(aw > 0, err / np.where(aw > 0, aw, 1), err)
        out = Outcome(not bad.any(), float(err.max()), float(rel.max()))
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            out.reason = (f"{int(bad.sum())}/{bad.size} elements differ; e.g. at {tuple(int(j) for j in i)} "
                          f"got {_fmt(got[i].item())}, expected {_fmt(want[i].item())}")
        return out
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    fin = np.isfinite(g) & np.isfinite(w)
    special_bad = ~fin & ~(gn & wn) & ~((g == w) & ~gn)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(fin, np.abs(g - w), 0.0)
        aw = np.abs(np.where(fin, w, 0.0))
        rel = np.where(aw > 0, err / np.where(aw > 0, aw, 1.0), err)
        pdt = prec if prec is not None and prec.is_float else dt
        tol = ULPS[kind][pdt.name]
        fi = finfo(pdt)
        scale = 1.0
        if kind == "reduce":
            finite_w = np.abs(w[np.isfinite(w)])
            scale = max(1.0, float(finite_w.max()) if finite_w.size else 1.0)
            m = np.abs(w)
            if mag is not None and np.shape(mag) == w.shape:
                m = np.maximum(m, np.abs(np.asarray(mag, dtype=np.float64)))
            m = np.where(np.isfinite(m), m, 0.0)
            scale = np.maximum(scale, m) * max(1.0, LAMBDA * float(np.sqrt(n_reduced)) / tol)
        limit = np.maximum(tol * ulp(w, pdt), tol * float(fi.eps) * scale)
        bad = special_bad | (fin & (err > limit))
    out = Outcome(not bad.any(), float(err.max()), float(rel.max()))
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        nb = int(bad.sum())
        if special_bad[i]:
            what = "a nan/inf mismatch"
            out.max_abs = out.max_rel = float("inf")
        else:
            lim = float(np.broadcast_to(limit, w.shape)[i])
            what = (f"error {float(err[i]):.17g} > bound {lim:.17g} "
                    f"({float(err[i]) / float(ulp(np.asarray(w[i]), pdt)):.3g} ulp; tolerance {tol:g})")
        out.reason = (f"{nb}/{bad.size} elements off ({what}); e.g. at {tuple(int(j) for j in i)} "
                      f"got {_fmt17(got[i].item())}, expected {_fmt17(want[i].item())}")
    return out


# gradient inputs ------------------------------------------------------------------------
# the domains tried in turn until the f64 loss is finite and smooth at the point (finite
# differences at two step sizes agree): ordinary values away from 0 (the kink of abs and relu),
# then positive ones (log, sqrt, a power's base), then magnitudes below 1 (asin, acos)
GRAD_DOMAINS = ("", "positive", "unit")


def smooth_values(shape: tuple[int, ...], seed: int, domain: str = "") -> np.ndarray:
    """f64 values that f32 represents exactly (the f32 and f64 cases see the same point), with
    magnitudes in [0.1, ~4] ("unit": [0.1, 0.9]); "positive" drops the sign."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    mag = rng.uniform(0.1, 0.9, size=n) if domain == "unit" else 0.1 + np.abs(rng.standard_normal(n))
    sign = np.ones(n) if domain == "positive" else np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (sign * mag).astype(np.float32).astype(np.float64).reshape(shape)
