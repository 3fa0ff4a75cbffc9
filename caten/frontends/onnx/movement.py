"""ONNX lowerings of movement ops: reshape, transpose, squeeze, concat, slice, split, expand,
tile, pad."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.onnx.node import N, ax_list, dims, handler


@handler("Reshape")
def _reshape(n: N) -> str:
    raw: list = n.ints(1, "shape")
    src = n.shape(0)
    if not n.a("allowzero", 0):
        raw = [src[i] if d == 0 else d for i, d in enumerate(raw)]
    if -1 in raw and None not in src and None not in raw:
        raw[raw.index(-1)] = _infer_minus_one(src, raw)
    shape = [n.g.dim_text(d) if isinstance(d, str) else (d if d is not None else n.d(0, i))
             for i, d in enumerate(raw)]
    return f"(reshape {n.x(0)} {dims(shape)})"


def _infer_minus_one(src: list, tgt: list) -> Any:
    """The -1 of a reshape as a product of the source's symbols (N*36 / 36 is N), else -1."""
    from collections import Counter

    coef = lambda xs: int(np.prod([d for d in xs if isinstance(d, int) and d != -1]))
    ss = Counter(d for d in src if isinstance(d, str))
    ts = Counter(d for d in tgt if isinstance(d, str))
    cs, ct = coef(src), coef(tgt)
    if ts - ss or ct == 0 or cs % ct:
        return -1
    rest = list((ss - ts).elements())
    k = cs // ct
    if not rest:
        return k
    if k == 1 and len(rest) == 1:
        return rest[0]
    return -1


@handler("Flatten")
def _flatten(n: N) -> str:
    r = n.rank()
    a = n.a("axis", 1)
    a = a + r if a < 0 else a
    s = n.shape()
    left = "1" if a == 0 else (str(int(np.prod(s[:a]))) if all(isinstance(d, int) for d in s[:a]) else "-1")
    right = "-1" if left != "-1" else (str(int(np.prod(s[a:]))) if all(isinstance(d, int) for d in s[a:]) else None)
    if right is None:
        raise n.fail("both sides of the flatten axis have symbolic dims")
    return f"(reshape {n.x(0)} [{left} {right}])"


@handler("Transpose")
def _transpose(n: N) -> str:
    perm = n.a("perm") or list(reversed(range(n.rank())))
    return f"(permute {n.x(0)} {ax_list(perm)})"


@handler("Squeeze")
def _squeeze(n: N) -> str:
    axes = n.ints(1, "axes")
    s = n.shape()
    if axes is None:
        axes = [i for i, d in enumerate(s) if d == 1]
    if not axes:
        return f"(contiguous {n.x(0)})"
    return f"(squeeze {n.x(0)} {ax_list(axes)})"


@handler("Unsqueeze")
def _unsqueeze(n: N) -> str:
    axes = n.ints(1, "axes")
    r = n.rank() + len(axes)
    s: list = n.dims_of(0)
    for a in sorted(a % r for a in axes):
        s.insert(a, 1)
    return f"(reshape {n.x(0)} {dims(s)})"


@handler("Concat")
def _concat(n: N) -> str:
    xs = [n.x(i) for i in range(n.nin) if n.has(i) and 0 not in n.shape(i)]
    if not xs:
        xs = [n.x(0)]
    return f"(concat {' '.join(xs)} :axis {n.a('axis')})"


@handler("Slice")
def _slice(n: N) -> str:
    if n.opset_lt(10):
        starts, ends, axes, steps = n.a("starts"), n.a("ends"), n.a("axes"), None
    else:
        starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
        axes = n.ints(3, "axes") if n.has(3) else None
        steps = n.ints(4, "steps") if n.has(4) else None
    shape = n.shape()
    r = len(shape)
    axes = [a % r for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(starts)
    specs: list[str] = ["[0 " + str(d) + " 1]" for d in shape]
    flips = []
    big = 2**62
    for s, e, a, k in zip(starts, ends, axes, steps):
        d = shape[a]
        if not isinstance(d, int):
            raise n.fail("slicing a symbolic dim is not supported")
        s, e = max(min(s, big), -big), max(min(e, big), -big)
        lo, hi, st = slice(s, e, k).indices(d)
        if k > 0:
            specs[a] = f"[{lo} {max(hi, lo)} {k}]"
        else:
            # a negative step: flip the axis, then step forward from the mirrored start
            cnt = len(range(lo, hi, st))
            mlo = d - 1 - lo
            specs[a] = f"[{mlo} {mlo + cnt * (-k) if cnt else mlo} {-k}]"
            flips.append(a)
    x = n.x(0)
    if flips:
        x = f"(flip {x} :axis {ax_list(flips)})"
    return f"(contiguous (slice {x} {' '.join(specs)}))"


@handler("Split")
def _split(n: N) -> list[str]:
    s = n.shape()
    ax = n.a("axis", 0) % len(s)
    d = s[ax]
    if not isinstance(d, int):
        raise n.fail("splitting a symbolic dim is not supported")
    sizes = n.ints(1, "split")
    k = len(n.node.output)
    if sizes is None:
        parts = n.a("num_outputs", k)
        step = -(-d // parts)
        sizes = [min(step, d - i * step) for i in range(parts)]
    x, out, off = n.x(0), [], 0
    for sz in sizes:
        specs = " ".join(f"[0 {dd} 1]" for dd in s[:ax])
        out.append(f"(contiguous (slice {x} {specs} [{off} {off + sz} 1]))")
        off += sz
    return out


@handler("Expand")
def _expand(n: N) -> str:
    shape = n.ints(1, "shape")
    src = n.dims_of(0)
    r = max(len(shape), len(src))
    a = ["1"] * (r - len(src)) + src
    b = [1] * (r - len(shape)) + list(shape)
    out = [x if y == 1 else y for x, y in zip(a, b)]
    return f"(contiguous (expand {n.x(0)} {dims(out)}))"


@handler("Tile")
def _tile(n: N) -> str:
    reps = n.ints(1, "repeats")
    s = n.int_shape()
    inter = [v for d, k in zip(s, reps) for v in (1, d)]
    big = [v for d, k in zip(s, reps) for v in (k, d)]
    out = [d * k for d, k in zip(s, reps)]
    return f"(contiguous (reshape (expand (reshape {n.x(0)} {dims(inter)}) {dims(big)}) {dims(out)}))"


@handler("Pad")
def _pad(n: N) -> str:
    r = n.rank()
    pads = n.ints(1, "pads") if not n.opset_lt(11) else n.a("pads")
    mode = n.a("mode", "constant")
    axes = n.ints(3, "axes") if n.has(3) else list(range(r))
    axes = [a % r for a in axes]
    k = len(axes)
    widths = [[0, 0] for _ in range(r)]
    for j, a in enumerate(axes):
        widths[a] = [pads[j], pads[j + k]]
    if any(w < 0 for p in widths for w in p):
        raise n.fail("negative pads (cropping) are not supported")
    if n.opset_lt(11):
        value = n.a("value", 0.0)
    else:
        value = np.asarray(n.c(2, "constant_value")).reshape(-1)[0] if n.has(2) else 0
    x = n.x(0)
    if mode == "constant":
        return f"(pad {x} {dims(widths)} :value {n.lit(value)})"
    if mode in ("edge", "reflect", "wrap"):
        return _pad_gather(n, x, widths, mode)
    raise n.fail(f"pad mode `{mode}` is not supported")


def _pad_gather(n: N, x: str, widths: list, mode: str) -> str:
    """edge/reflect/wrap padding as a concat of slices per axis."""
    shape = n.int_shape()
    for a, (lo, hi) in enumerate(widths):
        if not lo and not hi:
            continue
        d = shape[a]
        pre = " ".join(f"[0 {shape[i]} 1]" for i in range(a))

        def one(i: int, pre: str = pre, x: str = x) -> str:
            return f"(slice {x} {pre} [{i} {i + 1} 1])"
        idx_lo = [_src(i - lo, d, mode) for i in range(lo)]
        idx_hi = [_src(d + i, d, mode) for i in range(hi)]
        parts = [one(i) for i in idx_lo] + [x] + [one(i) for i in idx_hi]
        x = n.let(f"(concat {' '.join(parts)} :axis {a})")
        shape[a] = d + lo + hi
    return f"(contiguous {x})"


def _src(i: int, d: int, mode: str) -> int:
    if mode == "edge":
        return min(max(i, 0), d - 1)
    if mode == "wrap":
        return i % d
    p = 2 * (d - 1) if d > 1 else 1
    i = i % p
    return i if i < d else p - i
