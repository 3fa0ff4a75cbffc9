"""ONNX lowerings of indexing ops (gathers, scans, triangles, one-hot, einsum, resize)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx_ops import N, ax_list, dims, handler


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
    t = f"(permute (reshape {n.x(0)} [{b} {c} {h // k} {k} {w // k} {k}]) [0 3 5 1 2 4])"
    return f"(reshape (contiguous {t}) [{b} {c * k * k} {h // k} {w // k}])"


@handler("Einsum")
def _einsum(n: N) -> str:
    """Any einsum without repeated letters in one operand: broadcast every operand to the
    union of letters (in order of appearance), multiply, and sum the letters not in the output."""
    eq = n.a("equation").replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if "." in eq:
        raise n.fail("einsum with ellipsis is not supported")
    if "->" not in eq:
        rhs = "".join(sorted(c for c in set(lhs) if c != "," and lhs.count(c) == 1))
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
        if len(set(t)) != len(t):
            raise n.fail("einsum with a repeated letter in one operand (a diagonal or trace) is not supported")
        s = n.shape(i)
        have = [ch for ch in order if ch in t]
        perm = [t.index(ch) for ch in have]
        x = f"(permute {n.x(i)} {ax_list(perm)})" if perm != list(range(len(t))) else n.x(i)
        full = [s[t.index(ch)] if ch in t else 1 for ch in order]
        x = f"(reshape {x} {dims(full)})"
        acc = x if acc is None else f"(* {acc} {x})"
    red = list(range(len(rhs), len(order)))
    if not red:
        return f"(contiguous {acc})"
    return f"(sum {acc} :axis {ax_list(red)})"


@handler("Resize", "Upsample")
def _resize(n: N) -> str:
    """Nearest-neighbour resizing (the scale or the output size constant): a gather per axis."""
    mode = n.a("mode", "nearest")
    if mode != "nearest":
        raise n.fail(f"resize mode `{mode}` is not supported (nearest is)")
    s = n.int_shape()
    r = len(s)
    if n.op == "Upsample":
        scales = [float(v) for v in (np.asarray(n.c(1, "scales")).reshape(-1) if n.has(1) else n.a("scales"))]
        sizes = [int(np.floor(d * sc)) for d, sc in zip(s, scales)]
        ctm, near = "asymmetric", "floor"
    else:
        if n.a("antialias", 0) or n.a("keep_aspect_ratio_policy", "stretch") != "stretch" or n.has(1) and \
                np.asarray(n.c(1, "roi")).size:
            raise n.fail("roi, antialias and keep_aspect_ratio_policy are not supported")
        axes = n.a("axes", list(range(r)))
        scales_in = np.asarray(n.c(2, "scales")).reshape(-1) if n.has(2) else None
        sizes_in = np.asarray(n.c(3, "sizes")).reshape(-1) if n.has(3) else None
        scales = [1.0] * r
        sizes = list(s)
        for j, a in enumerate(axes):
            a %= r
            if scales_in is not None and scales_in.size:
                scales[a] = float(scales_in[j])
                sizes[a] = int(np.floor(s[a] * scales[a]))
            else:
                sizes[a] = int(sizes_in[j])
                scales[a] = sizes[a] / s[a]
        ctm, near = n.a("coordinate_transformation_mode", "half_pixel"), n.a("nearest_mode", "round_prefer_floor")
    x = n.x(0)
    for a in range(r):
        if sizes[a] == s[a] and scales[a] == 1.0:
            continue
        idx = [_src_index(i, s[a], sizes[a], scales[a], ctm, near) for i in range(sizes[a])]
        x = n.let(f"(take {x} {_index_tensor(n, idx)} :axis {a})")
    return f"(contiguous {x})"


def _index_tensor(n: N, idx: list[int]) -> str:
    """A constant i64 index vector, passed to the composite as a weight."""
    name = f"__resize_idx_{len(n.g.consts)}"
    n.g.consts[name] = np.asarray(idx, np.int64)
    return n.g.tensor(name)


def _src_index(i: int, d_in: int, d_out: int, scale: float, ctm: str, near: str) -> int:
    if ctm == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif ctm == "align_corners":
        x = i * (d_in - 1) / (d_out - 1) if d_out > 1 else 0.0
    elif ctm == "asymmetric":
        x = i / scale
    elif ctm == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if d_out > 1 else 0.0
    elif ctm == "tf_half_pixel_for_nn":
        x = (i + 0.5) / scale
    else:
        x = (i + 0.5) / scale - 0.5
    if near == "floor":
        k = int(np.floor(x))
    elif near == "ceil":
        k = int(np.ceil(x))
    elif near == "round_prefer_ceil":
        k = int(np.floor(x + 0.5))
    else:  # round_prefer_floor
        k = int(np.ceil(x - 0.5))
    return min(max(k, 0), d_in - 1)

