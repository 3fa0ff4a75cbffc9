"""ONNX lowerings of indexing ops (gathers, scans, triangles, one-hot, einsum, resize)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, ax_list, const_tensor, dims, handler
from caten.frontends.onnx.wide import in_f32
from caten.frontends.text import lit


@handler("Gather")
def _gather(n: N) -> str:
    return f"(take {n.x(0)} {n.x(1)} :axis {n.a('axis', 0)})"


@handler("GatherElements")
def _gather_elements(n: N) -> str:
    xs, ishape = n.shape(0), n.shape(1)
    ax = n.a("axis", 0) % len(xs)
    x = n.x(0)
    if any(a != b for i, (a, b) in enumerate(zip(xs, ishape)) if i != ax):
        specs = " ".join(f"[0 {ishape[i] if i != ax else xs[i]} 1]" for i in range(len(xs)))
        x = n.let(f"(contiguous (slice {x} {specs}))")
    return f"(take-along-axis {x} {n.x(1)} :axis {ax})"


@handler("CumSum", "CumProd")
def _cumsum(n: N) -> str:
    ax = int(np.asarray(n.c(1, "axis")).reshape(-1)[0])
    f = "cumsum" if n.op == "CumSum" else "cumprod"
    ex = "true" if n.a("exclusive", 0) else "false"
    rev = "true" if n.a("reverse", 0) else "false"
    return f"({f} {n.x(0)} :axis {ax} :exclusive {ex} :reverse {rev})"


@handler("Trilu")
def _trilu(n: N) -> str:
    k = int(np.asarray(n.c(1, "k")).reshape(-1)[0]) if n.has(1) else 0
    f = "triu" if n.a("upper", 1) else "tril"
    return f"({f} {n.x(0)} :k {k})"


@handler("OneHot")
def _onehot(n: N) -> str:
    depth = int(np.asarray(n.c(1, "depth")).reshape(-1)[0])
    r = n.rank(0) + 1
    ax = n.a("axis", -1) % r
    idx = n.x(0)
    i = n.let(f"(cast {idx} i64)")
    i = n.let(f"(unsqueeze (where (< {i} 0) (+ {i} {depth}) {i}) {ax})")
    shp = [1] * r
    shp[ax] = depth
    vals = n.x(2)
    off, on = f"(slice {vals} [0 1 1])", f"(slice {vals} [1 2 1])"
    return f"(where (= (reshape (arange {depth}) {dims(shp)}) {i}) (reshape {on} []) (reshape {off} []))"


@handler("DepthToSpace")
def _depth_to_space(n: N) -> str:
    b, c, h, w = n.int_shape()
    k = n.a("blocksize")
    x = n.x(0)
    if n.a("mode", "DCR") == "DCR":
        t = f"(permute (reshape {x} [{b} {k} {k} {c // (k * k)} {h} {w}]) [0 3 4 1 5 2])"
    else:
        t = f"(permute (reshape {x} [{b} {c // (k * k)} {k} {k} {h} {w}]) [0 1 4 2 5 3])"
    return f"(reshape (contiguous {t}) [{b} {c // (k * k)} {h * k} {w * k}])"


@handler("SpaceToDepth")
def _space_to_depth(n: N) -> str:
    b, c, h, w = n.int_shape()
    k = n.a("blocksize")
    perm = "[0 1 3 5 2 4]" if n.a("mode", "DCR") == "CRD" else "[0 3 5 1 2 4]"
    t = f"(permute (reshape {n.x(0)} [{b} {c} {h // k} {k} {w // k} {k}]) {perm})"
    return f"(reshape (contiguous {t}) [{b} {c * k * k} {h // k} {w // k}])"


@handler("Einsum")
@in_f32
def _einsum(n: N) -> str:
    """Any einsum: an ellipsis becomes fresh letters (right-aligned, broadcast), a letter repeated in
    one operand takes that operand's diagonal; then every operand is broadcast to the union of
    letters (in order of appearance), multiplied, and the letters not in the output are summed."""
    eq = n.a("equation").replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:
        rhs = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    if "." in eq:
        terms, rhs = _expand_ellipsis(n, eq, terms, rhs, bool(arrow))
    letters: list[str] = []
    for t in terms:
        for ch in t:
            if ch not in letters:
                letters.append(ch)
    for ch in rhs:
        if ch not in letters:
            raise n.fail(f"output letter `{ch}` is in no operand")
    order = list(rhs) + [ch for ch in letters if ch not in rhs]
    acc = None
    for i, t in enumerate(terms):
        x, s = n.x(i), n.shape(i)
        if len(set(t)) != len(t):
            x, t, s = _diagonal(n, x, t, n.int_shape(i))
        have = [ch for ch in order if ch in t]
        perm = [t.index(ch) for ch in have]
        x = f"(permute {x} {ax_list(perm)})" if perm != list(range(len(t))) else x
        full = [s[t.index(ch)] if ch in t else 1 for ch in order]
        x = f"(reshape {x} {dims(full)})"
        acc = x if acc is None else f"(* {acc} {x})"
    red = list(range(len(rhs), len(order)))
    if not red:
        return f"(contiguous {acc})"
    return f"(sum {acc} :axis {ax_list(red)})"


def _expand_ellipsis(n: N, eq: str, terms: list[str], rhs: str, arrow: bool) -> tuple[list[str], str]:
    """The equation with each `...` spelled as fresh letters: an operand's ellipsis covers its
    trailing broadcast dims, the output's (implicit: leading) all of them."""
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    ell = [n.rank(i) - (len(t) - 3) if "..." in t else 0 for i, t in enumerate(terms)]
    if any(e < 0 for e in ell):
        raise n.fail("an operand has fewer dims than its subscripts")
    e = max(ell)
    fresh = free[:e]
    terms = [t.replace("...", "".join(fresh[e - k:])) for t, k in zip(terms, ell)]
    rhs = rhs.replace("...", "".join(fresh)) if arrow else "".join(fresh) + rhs
    return terms, rhs


def _diagonal(n: N, x: str, t: str, s: list[int]) -> tuple[str, str, list[int]]:
    """The operand x with subscripts t reduced to one axis per letter: a repeated letter's axes are
    moved last, merged, and read with step d + 1 (the diagonal)."""
    s = list(s)
    while len(set(t)) != len(t):
        ch = next(c for c in t if t.count(c) > 1)
        i = t.index(ch)
        j = t.index(ch, i + 1)
        if s[i] != s[j]:
            raise n.fail(f"einsum letter `{ch}` spans dims of sizes {s[i]} and {s[j]}")
        d = s[i]
        rest = [a for a in range(len(t)) if a not in (i, j)]
        keep = [s[a] for a in rest]
        flat = f"(reshape (contiguous (permute {x} {ax_list(rest + [i, j])})) {dims(keep + [d * d])})"
        spec = " ".join(f"[0 {v} 1]" for v in keep)
        x = n.let(f"(slice {flat} {spec} [0 {d * d} {d + 1}])")
        t, s = "".join(t[a] for a in rest) + ch, keep + [d]
    return x, t, s


@handler("Resize", "Upsample")
def _resize(n: N) -> str:
    """Resize as one constant interpolation matrix per resized axis (nearest, linear or cubic
    taps; the coefficients depend only on the sizes), applied with matmul."""
    s = n.int_shape()
    r = len(s)
    mode = n.a("mode", "nearest")
    if n.op == "Upsample":
        scales = [float(v) for v in (np.asarray(n.c(1, "scales")).reshape(-1) if n.has(1) else n.a("scales"))]
        sizes = [int(np.floor(d * sc)) for d, sc in zip(s, scales)]
        opts = {"ctm": "asymmetric", "near": "floor", "a": -0.75, "excl": 0}
    else:
        if n.a("antialias", 0) and mode == "nearest":
            raise n.fail("antialias is not defined for nearest resizing")
        policy = n.a("keep_aspect_ratio_policy", "stretch")
        axes = [a % r for a in n.a("axes", list(range(r)))]
        rois = [(0.0, 1.0)] * r
        if n.a("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
            roi = [float(v) for v in np.asarray(n.c(1, "roi")).reshape(-1)]
            k = len(roi) // 2
            rois = list(rois)
            for j, a in enumerate(axes if k == len(axes) else range(r)):
                rois[a] = (roi[j], roi[j + k])
        scales_in = np.asarray(n.c(2, "scales")).reshape(-1) if n.has(2) else np.zeros(0)
        sizes_in = np.asarray(n.c(3, "sizes")).reshape(-1) if n.has(3) else None
        scales, sizes = [1.0] * r, list(s)
        for j, a in enumerate(axes):
            if scales_in.size:
                scales[a] = float(scales_in[j])
                sizes[a] = int(np.floor(s[a] * scales[a]))
            else:
                sizes[a] = int(sizes_in[j])
                scales[a] = sizes[a] / s[a]
        if policy != "stretch" and sizes_in is not None:
            pick = min if policy == "not_larger" else max
            sc = pick(scales[a] for a in axes)
            for a in axes:
                scales[a], sizes[a] = sc, int(np.round(sc * s[a]))
        opts = {"ctm": n.a("coordinate_transformation_mode", "half_pixel"),
                "near": n.a("nearest_mode", "round_prefer_floor"), "a": n.a("cubic_coeff_a", -0.75),
                "excl": n.a("exclude_outside", 0), "rois": rois, "extra": n.a("extrapolation_value", 0.0),
                "aa": n.a("antialias", 0)}
    if mode not in ("nearest", "linear", "cubic"):
        raise n.fail(f"resize mode `{mode}` is not supported")
    if not n.is_float() and mode != "nearest":
        raise n.fail("linear/cubic resizing of integers is not supported")
    # f16 / bf16 interpolate in f32 and round once, as the reference (f64, one final cast)
    wide = mode != "nearest" and n.dt() in ("f16", "bf16")
    x = f"(cast {n.x(0)} f32)" if wide else n.x(0)
    # innermost axis first: a point outside tf_crop_and_resize's box is the extrapolation value
    # along the axis that puts it there, as the reference's recursion over axes
    for a in reversed(range(r)):
        if sizes[a] == s[a] and scales[a] == 1.0 and opts.get("rois", [(0.0, 1.0)] * r)[a] == (0.0, 1.0):
            continue
        m, outside = _interp_matrix(mode, s[a], sizes[a], scales[a], opts, a)
        if outside.any():
            x = n.let(_resize_axis(n, x, m, a, r, mode))
            shp = [1] * r
            shp[a] = sizes[a]
            mask = const_tensor(n, outside.reshape(shp))
            x = n.let(f"(where {mask} {lit(opts['extra'], 'f32' if wide else n.dt())} {x})")
            continue
        x = n.let(_resize_axis(n, x, m, a, r, mode))
    return f"(cast {x} {n.dt()})" if wide else f"(contiguous {x})"


def _resize_axis(n: N, x: str, m: np.ndarray, a: int, r: int, mode: str) -> str:
    """x resized along axis a by the matrix m (a gather for nearest)."""
    if mode == "nearest":
        return f"(take {x} {const_tensor(n, m.argmax(axis=1).astype(np.int64))} :axis {a})"
    perm = [i for i in range(r) if i != a] + [a]
    back = [perm.index(i) for i in range(r)]
    mt = const_tensor(n, m.T.astype(np.float64 if n.dt() == "f64" else np.float32))
    return f"(permute (matmul (permute {x} {ax_list(perm)}) {mt}) {ax_list(back)})"


def _source_coord(i: int, d_in: int, d_out: int, scale: float, ctm: str, roi: tuple = (0.0, 1.0)) -> float:
    """The input coordinate of output i, as the reference: its `output_width` is scale * d_in, unrounded."""
    out_f = scale * d_in
    if ctm == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if ctm == "align_corners":
        return i * (d_in - 1) / (out_f - 1) if out_f != 1 else 0.0
    if ctm == "tf_crop_and_resize":
        if out_f == 1:
            return (roi[1] - roi[0]) * (d_in - 1) / 2 + roi[0] * (d_in - 1)
        return i * (roi[1] - roi[0]) * (d_in - 1) / (out_f - 1) + roi[0] * (d_in - 1)
    if ctm == "asymmetric":
        return i / scale
    if ctm == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if d_out > 1 else 0.0
    if ctm == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    if ctm == "half_pixel_symmetric":
        adj = d_out / (scale * d_in)
        center = d_in / 2
        offset = center * (1 - adj)
        return offset + (i + 0.5) / scale - 0.5
    raise ValueError(ctm)


def _interp_matrix(mode: str, d_in: int, d_out: int, scale: float, o: dict, ax: int) -> tuple:
    """M[out, in]: output i = sum_j M[i, j] * input j along axis ax; and which outputs lie outside
    tf_crop_and_resize's box (those take the extrapolation value)."""
    if o.get("aa"):
        return _antialias_matrix(mode, d_in, d_out, scale, o, ax)
    m = np.zeros((d_out, d_in), np.float64)
    outside = np.zeros(d_out, bool)
    for i, x in _coords(d_in, d_out, scale, o, ax, outside):
        if mode == "nearest":
            near = o["near"]
            k = {"floor": np.floor(x), "ceil": np.ceil(x), "round_prefer_ceil": np.floor(x + 0.5)}.get(
                near, np.ceil(x - 0.5))
            m[i, min(max(int(k), 0), d_in - 1)] = 1.0
        elif mode == "linear":
            x = min(max(x, 0.0), d_in - 1)
            x0 = int(np.floor(x))
            x1 = min(x0 + 1, d_in - 1)
            w = x - x0
            m[i, x0] += 1 - w
            m[i, x1] += w
        else:
            x0 = int(np.floor(x))
            t = x - x0
            a = o["a"]
            taps = {x0 - 1: _cubic(1 + t, a), x0: _cubic(t, a), x0 + 1: _cubic(1 - t, a), x0 + 2: _cubic(2 - t, a)}
            if o["excl"]:
                taps = {j: w for j, w in taps.items() if 0 <= j < d_in}
                total = sum(taps.values())
                taps = {j: w / total for j, w in taps.items()}
            for j, w in taps.items():
                m[i, min(max(j, 0), d_in - 1)] += w
    return m, outside


def _coords(d_in: int, d_out: int, scale: float, o: dict, ax: int, outside: np.ndarray):
    """(output index, source coordinate) of each output along axis ax that reads the input; the
    ones outside tf_crop_and_resize's box are marked in `outside` and skipped."""
    for i in range(d_out):
        x = _source_coord(i, d_in, d_out, scale, o["ctm"], o.get("rois", [(0.0, 1.0)] * (ax + 1))[ax])
        if o["ctm"] == "tf_crop_and_resize" and (x < 0 or x > d_in - 1):
            outside[i] = True
            continue
        yield i, x


def _antialias_taps(mode: str, ratio: float, scale: float, a: float) -> np.ndarray:
    """The reference's _linear_coeffs_antialias / _cubic_coeffs_antialias: the filter stretched by
    1 / scale when downsampling, normalized to sum 1."""
    s = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        c = np.array([_cubic(s * (j - ratio), a) for j in range(start, 2 - start)])
    return c / c.sum()


def _antialias_matrix(mode: str, d_in: int, d_out: int, scale: float, o: dict, ax: int) -> tuple:
    """_interp_matrix for antialias=1, as the reference's _interpolate_1d_along_axis: the taps sit on
    the n input indices nearest x (ties to the smaller), edge-clamped; exclude_outside renormalizes."""
    m = np.zeros((d_out, d_in), np.float64)
    outside = np.zeros(d_out, bool)
    for i, x in _coords(d_in, d_out, scale, o, ax, outside):
        xi = np.floor(x)
        c = _antialias_taps(mode, 1.0 if x == xi else x - xi, scale, o["a"])
        k = len(c)
        pw = -(-k // 2)
        p = int(np.floor(x + pw))
        frac = x + pw - p
        off = (-(k // 2) if frac == 0 else -(k // 2) + 1) if k % 2 == 0 else -((k - 1) // 2) + (frac > 0.5)
        idx = p + off + np.arange(k) - pw
        if o["excl"]:
            c = np.where((idx < 0) | (idx >= d_in), 0.0, c)
            c = c / (c.sum() or 1.0)
        np.add.at(m[i], np.clip(idx, 0, d_in - 1), c)
    return m, outside


def _cubic(x: float, a: float) -> float:
    x = abs(x)
    if x <= 1:
        return (a + 2) * x**3 - (a + 3) * x**2 + 1
    if x < 2:
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
    return 0.0
