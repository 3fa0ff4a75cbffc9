"""Run the gradient cases (gradcases.py) on one runtime against an f64 reference.

The reference of each variant, per dtype column (each has its own sizes), is the central finite
difference of its f64 loss on the numpy runtime (step h = 1e-5 max(1, |x|)). The point is chosen
where that is meaningful: the loss is finite and, along random directions, differences at h and
2h agree with each other and with the elementwise ones (no kink, jump or tie within 2h); the domains of
values.GRAD_DOMAINS are tried in turn, two seeds each. Where torch is installed and the row has
a counterpart (torchref.py), torch's f64 autograd gradient at the same point is a second oracle.

Each runtime computes `value-and-grad` at f32 and f64 (one compiled program per row and dtype);
a gradient passes when every element is within RTOL * (|ref| + max|ref| + 1e-3) of the
reference (and of torch's). Why these bounds: the f64 reference errs by ~1e-9 relative
(truncation h^2 f'''/6, rounding ~eps|L|/h); an f32 gradient errs by a few ULPs per operation times
the graph's depth and condition (~1e-6 here, more where a sum cancels), so 1e-3 leaves margin
while a wrong rule (a missing term, a factor, an axis) is off by O(1). f64 gets 1e-6.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.conformance import cases as C
from caten.conformance import gradcases as G
from caten.conformance.values import GRAD_DOMAINS, generate, seed_of, smooth_values
from caten.errors import Error
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.plugin import Runtime

RTOL: dict[str, float] = {"f32": 1e-3, "f64": 1e-6}
FLOOR = 1e-3  # the absolute part of the bound, relative to 1 (gradients that are all ~0)
# differences at h and 2h further apart than this (relative): a kink, or curvature so high (tan
# near a pole) that the differences' truncation error, about a third of the gap, nears the f64 bound
KINK = 1e-6
STEP = 1e-5  # the finite-difference step, relative to max(1, |x|)


@dataclass
class GradCell:
    op: str
    dtype: str
    status: str  # pass | fail | unsupported | compile-only
    max_err: float | None = None  # vs the finite differences, in units of the bound's scale
    torch_err: float | None = None  # vs torch.autograd; None where there is no counterpart
    reason: str = ""

    def json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not np.isfinite(x) else float(x)

        return {"op": self.op, "dtype": self.dtype, "status": self.status, "max_err": num(self.max_err),
                "torch_err": num(self.torch_err)}


@dataclass
class Point:
    """One variant's reference at one call size."""
    arrays: dict[str, np.ndarray]  # every loss parameter (f64 floats, ints, bools), R included
    grads: list[np.ndarray]  # finite differences, per wrt parameter
    torch: list[np.ndarray] | None = None
    unstable: str = ""  # why no smooth point was found


@dataclass
class RowRef:
    grow: G.GradRow
    points: dict[str, dict[str, Point]] = field(default_factory=dict)  # tag -> dtype column -> point
    dropped: dict[str, str] = field(default_factory=dict)  # tag -> why the reference rejects it


def err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / (|want| + max|want| + FLOOR); inf on a shape or nan mismatch."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return float("inf")
    if w.size == 0:
        return 0.0
    if not np.isfinite(g).all():
        return float("inf")
    scale = float(np.abs(w).max()) + FLOOR
    return float((np.abs(g - w) / (np.abs(w) + scale)).max())


def _shape(dims: tuple, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(D.evaluate(d if not isinstance(d, str) else (int(d) if d.lstrip("-").isdigit() else D.sym(d)),
                                sizes)) for d in dims)


def _draw(gv: G.GradVariant, row: str, si: str, domain: str, attempt: int) -> dict[str, np.ndarray]:
    sizes = G.SIZES[si]
    out = {}
    for p in gv.v.params:
        shape = _shape(p.dims, sizes)
        seed = seed_of(row, "grad", p.name, si, attempt)
        if G._float_param(p):
            out[p.name] = smooth_values(shape, seed, domain)
        else:  # an index (small: in range or near it) or a condition
            out[p.name] = generate(T.lookup(p.dtype) or T.i64, shape, seed, "ordinary", "small")
    for k, shp in enumerate(gv.shapes):
        out[G.r_name(gv, k)] = smooth_values(_shape(shp, sizes), seed_of(row, "grad-R", k, si), "")
    return out


def _fd(f: Callable[[dict], float], arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
    """Central differences at step h = STEP max(1, |x|), element by element."""
    x = arrays[name]
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        h = STEP * max(1.0, abs(float(x[idx])))
        vals = []
        for step in (h, -h):
            a = dict(arrays)
            a[name] = x.copy()
            a[name][idx] += step
            vals.append(f(a))
        out[idx] = (vals[0] - vals[1]) / (2 * h)
    return out


def _smooth(f: Callable[[dict], float], arrays: dict[str, np.ndarray], wrt: list, grads: list[np.ndarray],
            seed: int) -> str:
    """'' if the loss is smooth around the point, else why not. Along two random directions s
    (each element moved by +-max(1, |x|)), the central differences at steps h and 2h must agree
    with each other and with <grads, s>: a kink, jump or tie within 2h of the point (where the
    elementwise differences would mean nothing) makes them differ. Four loss evaluations per
    direction instead of two more per element."""
    rng = np.random.default_rng(seed)
    for _ in range(2):
        s = {p.name: np.where(rng.random(arrays[p.name].shape) < 0.5, -1.0, 1.0)
             * np.maximum(1.0, np.abs(arrays[p.name])) for p in wrt}

        def at(t: float, s: dict = s) -> float:
            return f({**arrays, **{n: arrays[n] + t * d for n, d in s.items()}})

        d1 = (at(STEP) - at(-STEP)) / (2 * STEP)
        d2 = (at(2 * STEP) - at(-2 * STEP)) / (4 * STEP)
        lin = sum(float((g * s[p.name]).sum()) for p, g in zip(wrt, grads))
        scale = sum(float(np.abs(g * s[p.name]).sum()) for p, g in zip(wrt, grads)) + FLOOR
        if not abs(d1 - d2) <= KINK * scale:
            return "the loss's differences at steps h and 2h differ (a kink or jump within 2h)"
        if not abs(d1 - lin) <= KINK * scale:
            return "the elementwise differences disagree with a directional one (a kink or jump within h)"
    return ""


def reference(grow: G.GradRow, torch_ok: bool = True) -> RowRef:
    """The f64 reference points of every variant of the row (dropping those the reference rejects)."""
    import caten
    from caten.conformance import torchref

    ref = RowRef(grow)
    if not grow.variants:
        return ref
    # columns with the same sizes share one reference (the finite differences are most of the cost)
    first = {tuple(sorted(sz.items())): key for key, sz in G.SIZES.items()}
    mods = {key: caten.loads(G.source(grow.variants, T.f64, G.SIZES[key]), runtime="numpy", opt_level=0,
                             use_cache=False) for key in first.values()}
    for gv in grow.variants:
        pts = {}
        try:
            for key, sizes in G.SIZES.items():
                own = first[tuple(sorted(sizes.items()))]
                if own in pts:
                    pts[key] = pts[own]
                    continue
                comp = getattr(mods[own], f"l{gv.tag}")
                names = [n for n, _, _ in G.params_of(gv, T.f64, sizes)]

                def f(a: dict, comp: Any = comp, names: list[str] = names) -> float:
                    with np.errstate(all="ignore"):
                        return float(comp(*(a[n] for n in names)))

                pts[key] = _point(gv, grow.row.name, own, f, torch_ok and torchref.available())
        except Exception as e:  # noqa: BLE001 - e.g. a 3x3 kernel on a smaller image
            ref.dropped[gv.tag] = f"the reference rejects it: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            grow.dropped[gv.v.expr] = ref.dropped[gv.tag]
            continue
        ref.points[gv.tag] = pts
    return ref


def _point(gv: G.GradVariant, row: str, si: str, f: Callable[[dict], float], use_torch: bool) -> Point:
    from caten.conformance import torchref

    last: Point | None = None
    for domain in GRAD_DOMAINS:
        for attempt in range(2):
            arrays = _draw(gv, row, si, domain, attempt)
            if not np.isfinite(f(arrays)):
                continue
            grads = [_fd(f, arrays, p.name) for p in gv.wrt]
            finite = all(np.isfinite(g).all() for g in grads)
            bad = _smooth(f, arrays, gv.wrt, grads, seed_of(row, "dir", si, attempt)) if finite else \
                "the finite differences are not finite"
            last = Point(arrays, grads, unstable=bad)
            if not bad:
                if use_torch:
                    last.torch = torchref.grads(gv, arrays, G.SIZES[si], f(arrays))
                return last
    if last is None:
        raise Error("the f64 loss is not finite at any tried point")
    return last


def run_grad_cell(ref: RowRef, rt: Runtime, dt: DType, compile_only: bool, target: Callable[..., tuple],
                  opt: int = 2) -> GradCell | None:
    """One row at one dtype on the runtime under test; None if no variant applies. `target` runs
    a case on the runtime (runner.target_case's protocol, in a worker process or not)."""
    name = ref.grow.row.name
    vs = [gv for gv in ref.grow.variants if gv.tag in ref.points and dt.name in gv.out_dtypes]
    if not vs:
        return None
    sizes = G.SIZES[dt.name]
    src = G.source(vs, dt, sizes)
    args = []
    for gv in vs:
        pt = ref.points[gv.tag][dt.name]
        for n, d, _ in G.params_of(gv, dt, sizes):
            a = pt.arrays[n]
            want = dt if d == "T" else T.lookup(d)
            args.append(a.astype(want.np) if want is not None and want.is_float else a)
    msg = (rt.name, opt, src, dt.name, compile_only, [args])
    reply = target(*msg)
    if reply[0] == "unsupported":
        return GradCell(name, dt.name, "unsupported", reason="; ".join(reply[1][:4]))
    if reply[0] == "fail":
        return GradCell(name, dt.name, "fail", reason=reply[1])
    if reply[0] == "compiled":
        return GradCell(name, dt.name, "compile-only")
    return _judge(ref, vs, dt, reply[1])


def _judge(ref: RowRef, vs: list[G.GradVariant], dt: DType, outs: list) -> GradCell:
    name, rtol = ref.grow.row.name, RTOL[dt.name]
    max_err, torch_err, failure, has_torch = 0.0, 0.0, "", False
    where = " ".join(f"{k}={v}" for k, v in G.SIZES[dt.name].items())
    for got in outs:
        if isinstance(got, str):
            return GradCell(name, dt.name, "fail", reason=f"run failed at {where}: {got}")
        pos = 0
        for gv in vs:
            pt = ref.points[gv.tag][dt.name]
            gs = got[pos + 1:pos + 1 + len(gv.wrt)]
            pos += 1 + len(gv.wrt)
            if pt.unstable and not failure:
                failure = f"`{gv.v.expr}` ({gv.v.label}; {where}): no smooth point found: {pt.unstable}"
            for k, (p, g) in enumerate(zip(gv.wrt, gs)):
                e = err(g, pt.grads[k])
                max_err = max(max_err, e)
                if e > rtol and not failure:
                    failure = (f"`{gv.v.expr}` ({gv.v.label}; {where}): d/d{p.name} off by {e:.3g} "
                               f"(bound {rtol:g}) from the finite differences; {_worst(g, pt.grads[k])}")
                if pt.torch is not None:
                    has_torch = True
                    te = err(g, pt.torch[k]) if pt.torch else float("inf")
                    torch_err = max(torch_err, te)
                    if te > rtol and not failure:
                        failure = (f"`{gv.v.expr}` ({gv.v.label}; {where}): d/d{p.name} off by {te:.3g} "
                                   f"(bound {rtol:g}) from torch.autograd"
                                   + ("" if pt.torch else " (torch's loss differs: the counterpart is wrong)"))
    status = "fail" if failure else "pass"
    return GradCell(name, dt.name, status, max_err, torch_err if has_torch else None, failure)


def _worst(got: np.ndarray, want: np.ndarray) -> str:
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return f"shape {g.shape}, expected {w.shape}"
    if g.size == 0:
        return ""
    d = np.where(np.isfinite(g), np.abs(g - w), np.inf)
    i = np.unravel_index(int(np.argmax(d)), d.shape)
    return f"e.g. at {tuple(int(j) for j in i)} got {float(g[i]):.9g}, expected {float(w[i]):.9g}"


def run_grads(rt: Runtime, rows: list[C.Row], compile_only: bool, target: Callable[..., tuple],
              progress: Callable[[str, int], None] | None = None) -> tuple[list[GradCell], list[G.GradRow]]:
    """Every gradient cell of the rows; also the rows' gradient derivations (for the report)."""
    cells: list[GradCell] = []
    grows: list[G.GradRow] = []
    for row in rows:
        if progress:
            progress(f"d {row.name}", 0)
        grow = G.derive(row)
        grows.append(grow)
        if grow.variants:
            try:
                ref = reference(grow)
            except Exception as e:  # noqa: BLE001 - a broken reference is reported, not raised
                cells += [GradCell(row.name, dt.name, "fail", reason=f"the reference failed: {e}")
                          for dt in G.GRAD_DTYPES]
                ref = None
            if ref is not None:
                if not ref.points:
                    grow.note = "; ".join(sorted(set(ref.dropped.values())))[:300]
                for dt in G.GRAD_DTYPES:
                    cell = run_grad_cell(ref, rt, dt, compile_only, target)
                    if cell is not None:
                        cells.append(cell)
        if progress:
            progress(f"d {row.name}", 1)
    return cells, grows
