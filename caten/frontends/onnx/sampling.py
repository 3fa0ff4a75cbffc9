"""ONNX GridSample (nearest, linear, cubic; zeros, border, reflection padding; any number of spatial
dims) as onnx's reference computes it, in caten forms.

Per spatial dim the grid coordinate is denormalized in f32, rounded (nearest), mapped into the
borders when outside them (border clamps, reflection reflects), then split into taps: an integer
position with a weight. Each tap position is mapped once more by the padding mode (zeros: outside is
0) and the taps of every dim are combined into flat indices gathered with `take-along-axis` from the
input flattened to [N, C, prod(dims)]. The weighted sum runs innermost dim first, as the reference's
recursion, so the rounding matches it."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, const_tensor, dims, handler
from caten.frontends.text import lit

__all__: list[str] = []

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
_A = -0.75  # the reference's (and torch's) cubic coefficient


def _f(v: float) -> str:
    return lit(float(v), "f32")


def _wide(n: N) -> str:
    """The dtype to compute in: f16 and bf16 in f32, rounded once at the end (the reference rounds
    every weight and product to the narrow type, off by ulps in either direction)."""
    return "f32" if n.dt() in ("f16", "bf16") else n.dt()


def _as(n: N, i: int, dt: str) -> str:
    return n.x(i) if n.dt(i) == dt else f"(cast {n.x(i)} {dt})"


def _reflect(n: N, x: str, lo: float, hi: float) -> str:
    """The reference's _gs_reflect: x reflected by the nearer border until within [lo, hi]."""
    rng = hi - lo
    if rng == 0:
        raise n.fail("reflection padding over a dim of size 1 with align_corners divides by zero")
    below = n.let(f"(< {x} {_f(lo)})")
    dx = n.let(f"(where {below} (- {_f(lo)} {x}) (- {x} {_f(hi)}))")
    k = n.let(f"(trunc (/ {dx} {_f(rng)}))")
    r = n.let(f"(- {dx} (* {k} {_f(rng)}))")
    even = n.let(f"(= (fmod {k} {_f(2)}) {_f(0)})")
    near, far = f"(+ {_f(lo)} {r})", f"(- {_f(hi)} {r})"
    moved = f"(where {below} (where {even} {near} {far}) (where {even} {far} {near}))"
    return n.let(f"(where (or {below} (> {x} {_f(hi)})) {moved} {x})")


def _clamp(x: str, d: int) -> str:
    return f"(where (< {x} {_f(0)}) {_f(0)} (where (> {x} {_f(d - 1)}) {_f(d - 1)} {x}))"


def _pixel(n: N, p: str, d: int, pad: str, lo: float, hi: float) -> tuple[str, str | None]:
    """The index (f32, integer-valued) that tap position p reads along a dim of size d, and for zeros
    padding whether it lies inside (else the tap reads 0)."""
    if pad == "zeros":
        ok = n.let(f"(and (>= {p} {_f(0)}) (<= {p} {_f(d - 1)}))")
        return n.let(f"(where {ok} {p} {_f(0)})"), ok
    if pad == "border":
        return n.let(_clamp(p, d)), None
    return n.let(f"(trunc {_reflect(n, p, lo, hi)})"), None


def _cubic(t: str) -> list[str]:
    """The reference's _gs_get_cubic_coeffs for t = x - floor(x) in [0, 1)."""
    a = _f(_A)

    def far(v: str) -> str:
        return f"(- (* (+ (* (- (* {a} {v}) {_f(5 * _A)}) {v}) {_f(8 * _A)}) {v}) {_f(4 * _A)})"

    def near(v: str) -> str:
        return f"(+ (* (* (- (* {_f(_A + 2)} {v}) {_f(_A + 3)}) {v}) {v}) {_f(1)})"

    return [far(f"(+ {t} {_f(1)})"), near(t), near(f"(- {_f(1)} {t})"), far(f"(- {_f(2)} {t})")]


@handler("GridSample")
def _grid_sample(n: N) -> str:
    xs, gs = n.int_shape(0), n.int_shape(1)
    k = len(xs) - 2
    mode = _MODES.get(n.a("mode", "linear" if not n.opset_lt(20) else "bilinear"))
    pad = n.a("padding_mode", "zeros")
    align = bool(n.a("align_corners", 0))
    if mode is None:
        raise n.fail(f"mode `{n.a('mode')}` is not one of nearest, linear, cubic")
    if pad not in ("zeros", "border", "reflection"):
        raise n.fail(f"padding_mode `{pad}` is not one of zeros, border, reflection")
    if k < 1 or len(gs) != k + 2 or gs[-1] != k or gs[0] != xs[0]:
        raise n.fail(f"input {xs} and grid {gs} do not match (grid [N, *out, {k}])")
    if not n.is_float() or not n.is_float(1):
        raise n.fail("GridSample takes floating input and grid")
    sp, outs = xs[2:], gs[1:-1]
    b, c = xs[0], xs[1]
    o, p = int(np.prod(outs, dtype=np.int64)), int(np.prod(sp, dtype=np.int64))
    if min(sp) == 0:
        raise n.fail(f"empty spatial dims {sp}")
    if b * c * o == 0:
        return f"(full {dims([b, c, *outs])} 0 :dtype {n.dt()})"
    grid = n.x(1) if n.dt(1) == "f32" else f"(cast {n.x(1)} f32)"
    grid = n.let(f"(reshape {grid} [{b} {o} {k}])")
    # f16 / bf16 interpolate in f32 and round once (the reference rounds each weight and product)
    wide = _wide(n) != n.dt()
    xflat = n.let(f"(reshape {_as(n, 0, _wide(n))} [{b} {c} {p}])")
    taps_per_dim = []
    for i, d in enumerate(sp):  # outermost first; the grid's last component is the innermost dim
        comp = n.let(f"(reshape (slice {grid} [0 {b} 1] [0 {o} 1] [{k - 1 - i} {k - i} 1]) [{b} {o}])")
        if align:
            x = n.let(f"(* (/ (+ {comp} {_f(1)}) {_f(2)}) {_f(d - 1)})")
            lo, hi = 0.0, d - 1.0
        else:
            x = n.let(f"(/ (- (* (+ {comp} {_f(1)}) {_f(d)}) {_f(1)}) {_f(2)})")
            lo, hi = -0.5, d - 0.5
        if mode == "nearest":
            x = n.let(f"(round {x})")
        if pad == "border":
            x = n.let(f"(where (or (< {x} {_f(lo)}) (> {x} {_f(hi)})) {_clamp(x, d)} {x})")
        elif pad == "reflection":
            x = _reflect(n, x, lo, hi)
        if mode == "nearest":
            taps_per_dim.append([(_pixel(n, n.let(f"(trunc {x})"), d, pad, lo, hi), None)])
            continue
        x0 = n.let(f"(floor {x})")
        t = n.let(f"(- {x} {x0})")
        if mode == "linear":
            pos, ws = [x0, f"(+ {x0} {_f(1)})"], [f"(- {_f(1)} {t})", t]
        else:
            pos = [f"(+ {x0} {_f(j)})" for j in (-1, 0, 1, 2)]
            ws = _cubic(t)
        if n.dt() == "f64":
            ws = [f"(cast {w} f64)" for w in ws]
        taps_per_dim.append([(_pixel(n, n.let(q), d, pad, lo, hi), n.let(f"(reshape {w} [{b} 1 {o}])"))
                             for q, w in zip(pos, ws)])
    strides = [int(np.prod(sp[i + 1:], dtype=np.int64)) for i in range(k)]
    zero = lit(0, "f32" if wide else n.dt())

    def gather(chosen: list) -> str:
        flat = None
        for (idx, _), s in zip(chosen, strides):
            term = f"(* (cast {idx} i64) {s})" if s != 1 else f"(cast {idx} i64)"
            flat = term if flat is None else f"(+ {flat} {term})"
        ix = f"(expand (reshape {flat} [{b} 1 {o}]) [{b} {c} {o}])"
        v = f"(take-along-axis {xflat} {ix} :axis 2)"
        oks = [ok for (_, ok) in chosen if ok is not None]
        if oks:
            ok = oks[0] if len(oks) == 1 else "(and " + " ".join(oks) + ")"
            v = f"(where (reshape {ok} [{b} 1 {o}]) {v} {zero})"
        return n.let(v)

    def interp(i: int, chosen: list) -> str:
        if i == k:
            return gather(chosen)
        terms = [(interp(i + 1, chosen + [pix]), w) for pix, w in taps_per_dim[i]]
        if terms[0][1] is None:
            return terms[0][0]
        acc = f"(* {terms[0][1]} {terms[0][0]})"
        for v, w in terms[1:]:
            acc = f"(+ {acc} (* {w} {v}))"
        return n.let(acc)

    y = f"(reshape {interp(0, [])} {dims([b, c, *outs])})"
    return f"(cast {y} {n.dt()})" if wide else y


def _roi_grid(n: N) -> tuple[int, int]:
    """The samples per bin along h and w: sampling_ratio, or (0) the reference's ceil(roi size / bins),
    which must then be the same for every roi of constant rois (the grid's shape is static)."""
    sr = int(n.a("sampling_ratio", 0))
    if sr > 0:
        return sr, sr
    try:
        rois = np.asarray(n.c(1, "rois (with sampling_ratio=0)"), np.float64).reshape(-1, 4)
    except Exception:
        raise n.fail("sampling_ratio=0 takes the samples per bin from the rois' values; "
                     "caten needs them constant (or a sampling_ratio > 0)") from None
    half = n.a("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    scale = float(n.a("spatial_scale", 1.0))
    size = (rois[:, 2:] - rois[:, :2]) * scale
    if not half:
        size = np.maximum(size, 1.0)
    gh = {int(np.ceil(v / n.a("output_height", 1))) for v in size[:, 1]}
    gw = {int(np.ceil(v / n.a("output_width", 1))) for v in size[:, 0]}
    if len(gh) != 1 or len(gw) != 1:
        raise n.fail("sampling_ratio=0 with rois of different sample counts is not supported")
    return max(gh.pop(), 0), max(gw.pop(), 0)


def _roi_taps(n: N, dt: str, start: str, end: str, bins: int, grid: int, d: int, half: bool) -> list:
    """Along one axis of every roi: the low and high rows (f32, integer-valued) [R, bins*grid] of each
    sample and their weights, 0 for a sample outside [-1, d] (the reference's pre_calc)."""
    size = n.let(f"(- {end} {start})")
    if not half:
        size = n.let(f"(where (< {size} {lit(1, dt)}) {lit(1, dt)} {size})")
    step = n.let(f"(/ {size} {lit(bins, dt)})")
    np_dt = {"f16": np.float16, "f64": np.float64}.get(dt, np.float32)
    p = const_tensor(n, np.repeat(np.arange(bins), grid).astype(np_dt).reshape(1, -1))
    q = const_tensor(n, np.tile(np.arange(grid) + 0.5, bins).astype(np_dt).reshape(1, -1))
    yy = n.let(f"(+ (+ {start} (* {p} {step})) (/ (* {q} {step}) {lit(grid, dt)}))")
    ok = n.let(f"(not (or (< {yy} {lit(-1, dt)}) (> {yy} {lit(d, dt)})))")
    y = n.let(f"(where (< {yy} {lit(0, dt)}) {lit(0, dt)} {yy})")
    lo = n.let(f"(floor {y})")
    edge = n.let(f"(>= {lo} {lit(d - 1, dt)})")
    top = lit(d - 1, dt)
    lo, hi, y = (n.let(f"(where {edge} {top} {lo})"), n.let(f"(where {edge} {top} (+ {lo} {lit(1, dt)}))"),
                 n.let(f"(where {edge} {top} {y})"))
    frac = n.let(f"(- {y} {lo})")
    zero = lit(0, dt)
    return [(lo, n.let(f"(where {ok} (- {lit(1, dt)} {frac}) {zero})")), (hi, n.let(f"(where {ok} {frac} {zero})"))]


@handler("RoiAlign")
def _roi_align(n: N) -> str:
    """RoiAlign as the reference: per roi and bin, grid x grid bilinear samples, the four corners
    gathered from the roi's image; avg sums them / the sample count, max takes the largest weighted
    corner value."""
    b, c, h, w = n.int_shape(0)
    r = n.int_shape(1)[0]
    ph, pw = int(n.a("output_height", 1)), int(n.a("output_width", 1))
    mode = n.a("mode", "avg")
    half = n.a("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    if mode not in ("avg", "max"):
        raise n.fail(f"mode `{mode}` is not one of avg, max")
    if not n.is_float():
        raise n.fail("RoiAlign takes floating input")
    gh, gw = _roi_grid(n)
    if r == 0 or c == 0 or gh * gw == 0:
        raise n.fail("empty rois, channels or sample grid are not supported")
    dt = _wide(n)
    rois = _as(n, 1, dt)
    scale, off = lit(float(n.a("spatial_scale", 1.0)), dt), lit(0.5 if half else 0.0, dt)
    cols = [n.let(f"(- (* (reshape (slice {rois} [0 {r} 1] [{j} {j + 1} 1]) [{r} 1]) {scale}) {off})")
            for j in range(4)]
    ys = _roi_taps(n, dt, cols[1], cols[3], ph, gh, h, half)
    xs = _roi_taps(n, dt, cols[0], cols[2], pw, gw, w, half)
    img = n.let(f"(take (reshape {_as(n, 0, dt)} [{b} {c} {h * w}]) (cast {n.x(2)} i64) :axis 0)")
    m = ph * gh * pw * gw
    vals = []
    for yi, wy in ys:
        for xi, wx in xs:
            flat = (f"(+ (* (cast (reshape {yi} [{r} {ph * gh} 1]) i64) {w}) "
                    f"(cast (reshape {xi} [{r} 1 {pw * gw}]) i64))")
            ix = f"(expand (reshape {flat} [{r} 1 {m}]) [{r} {c} {m}])"
            v = f"(reshape (take-along-axis {img} {ix} :axis 2) [{r} {c} {ph * gh} {pw * gw}])"
            wt = f"(* (reshape {wy} [{r} 1 {ph * gh} 1]) (reshape {wx} [{r} 1 1 {pw * gw}]))"
            vals.append(n.let(f"(* {wt} {v})"))
    acc = vals[0]
    for v in vals[1:]:
        acc = n.let(f"(+ {acc} {v})" if mode == "avg" else f"(where (> {v} {acc}) {v} {acc})")
    grid = f"(reshape {acc} [{r} {c} {ph} {gh} {pw} {gw}])"
    y = f"(/ (sum {grid} :axis [3 5]) {lit(gh * gw, dt)})" if mode == "avg" else f"(max {grid} :axis [3 5])"
    return y if dt == n.dt() else f"(cast {y} {n.dt()})"


@handler("DeformConv")
def _deform_conv(n: N) -> str:
    """2-D DeformConv as the reference: every kernel tap of every output position samples its input
    channel bilinearly (zeros outside) at the tap's position plus its offset, is scaled by the mask,
    and the samples are contracted with the weights per group by one batched matmul."""
    xs, ws, os_ = n.int_shape(0), n.int_shape(1), n.int_shape(2)
    if len(xs) != 4:
        raise n.fail("only 2-D DeformConv is defined (by onnx's reference)")
    if not n.is_float():
        raise n.fail("DeformConv takes floating input")
    b, c, h, w = xs
    oc, cg, kh, kw = ws
    g, og = int(n.a("group", 1)), int(n.a("offset_group", 1))
    oh, ow = os_[2:]
    sh, sw = n.a("strides", [1, 1])
    dh, dw = n.a("dilations", [1, 1])
    pads = n.a("pads", [0, 0, 0, 0])
    if c != cg * g or oc % g or c % og or os_[1] != og * kh * kw * 2:
        raise n.fail(f"input {xs}, weight {ws}, offset {os_}, group {g} and offset_group {og} do not match")
    want = [(h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1,
            (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1]
    if [oh, ow] != want:
        raise n.fail(f"offset's spatial dims {[oh, ow]} are not the output's of pads, strides and dilations")
    if h < 2 or w < 2:
        raise n.fail("the reference normalizes positions by (size - 1): input dims of 1 divide by zero")
    if b * oc * oh * ow == 0:
        raise n.fail("empty DeformConv is not supported")
    dt = _wide(n)
    np_dt = np.float64 if dt == "f64" else np.float32
    k, p = kh * kw, oh * ow
    m = k * p
    off = n.let(f"(reshape {_as(n, 2, dt)} [{b} {og} {k} 2 {p}])")
    coords = []
    for axis, (stride, dil, kk, pad, d) in enumerate(((sh, dh, kh, pads[0], h), (sw, dw, kw, pads[1], w))):
        tap = np.arange(kk) * dil
        tap = np.repeat(tap, kw) if axis == 0 else np.tile(tap, kh)  # [k], row-major over (kh, kw)
        out = np.arange(oh if axis == 0 else ow) * stride - pad
        out = np.repeat(out, ow) if axis == 0 else np.tile(out, oh)  # [p]
        base = const_tensor(n, (tap[:, None] + out[None, :]).astype(np_dt).reshape(1, 1, k, p))
        part = (f"(reshape (slice {off} [0 {b} 1] [0 {og} 1] [0 {k} 1] [{axis} {axis + 1} 1] [0 {p} 1]) "
                f"[{b} {og} {k} {p}])")
        pos = n.let(f"(reshape (+ {base} {part}) [{b} {og} {m}])")
        lo = n.let(f"(floor {pos})")
        t = n.let(f"(- {pos} {lo})")
        taps = []
        for q, wt in ((lo, f"(- {lit(1, dt)} {t})"), (n.let(f"(+ {lo} {lit(1, dt)})"), t)):
            ok = n.let(f"(and (>= {q} {lit(0, dt)}) (<= {q} {lit(d - 1, dt)}))")
            taps.append((n.let(f"(cast (where {ok} {q} {lit(0, dt)}) i64)"), ok, n.let(wt)))
        coords.append(taps)
    img = n.let(f"(reshape {_as(n, 0, dt)} [{b} {og} {c // og} {h * w}])")
    zero = lit(0, dt)
    rows = []
    for yi, yok, wy in coords[0]:
        row = None
        for xi, xok, wx in coords[1]:
            ix = f"(expand (reshape (+ (* {yi} {w}) {xi}) [{b} {og} 1 {m}]) [{b} {og} {c // og} {m}])"
            ok = f"(reshape (and {yok} {xok}) [{b} {og} 1 {m}])"
            v = f"(where {ok} (take-along-axis {img} {ix} :axis 3) {zero})"
            term = f"(* (reshape {wx} [{b} {og} 1 {m}]) {v})"
            row = term if row is None else f"(+ {row} {term})"
        rows.append(f"(* (reshape {wy} [{b} {og} 1 {m}]) {n.let(row)})")
    val = f"(+ {rows[0]} {rows[1]})"
    if n.has(4):
        val = f"(* {val} (reshape {_as(n, 4, dt)} [{b} {og} 1 {m}]))"
    ocg = oc // g
    v = f"(reshape (permute (reshape {n.let(val)} [{b} {g} {cg * k} {p}]) [1 2 0 3]) [{g} {cg * k} {b * p}])"
    wt = f"(reshape {_as(n, 1, dt)} [{g} {ocg} {cg * k}])"
    y = f"(permute (reshape (matmul {wt} (contiguous {v})) [{g} {ocg} {b} {p}]) [2 0 1 3])"
    y = f"(reshape (contiguous {y}) [{b} {oc} {oh} {ow}])"
    if n.has(3):
        y = f"(+ {y} (reshape {_as(n, 3, dt)} [1 {oc} 1 1]))"
    return y if dt == n.dt() else f"(cast {y} {n.dt()})"
