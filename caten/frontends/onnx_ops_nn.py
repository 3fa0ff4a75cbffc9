"""ONNX lowerings of movement, reduction and neural-network ops."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.onnx import DTYPES, lit
from caten.frontends.onnx_ops import N, ax_list, dims, handler


# ---- movement ---------------------------------------------------------------------------------
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


def _opset_lt(self: N, v: int) -> bool:
    return self.g.opset < v


N.opset_lt = _opset_lt  # type: ignore[attr-defined]


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


# ---- reductions ---------------------------------------------------------------------------------
_RED = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
        "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sumsq", "ReduceLogSum": "logsum",
        "ReduceLogSumExp": "logsumexp"}


@handler(*_RED)
def _reduce(n: N) -> str:
    kind = _RED[n.op]
    axes = n.ints(1, "axes")
    keep = "true" if n.a("keepdims", 1) else "false"
    x = n.x(0)
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and n.a("noop_with_empty_axes", 0):
        return f"(contiguous {x})"
    ax = "nil" if axes is None else ax_list(axes)
    if 0 in n.shape() and kind in ("max", "min"):
        raise n.fail("max/min over an empty tensor")
    kw = f":axis {ax} :keepdims {keep}"
    if kind in ("sum", "mean", "max", "min", "prod"):
        if n.dt() == "bool" and kind in ("sum", "prod"):
            raise n.fail("sum of bool")
        return f"({kind} {x} {kw})"
    if kind == "l1":
        return f"(sum (abs {x}) {kw})"
    if kind == "l2":
        return f"(sqrt (sum (* {x} {x}) {kw}))" if n.is_float() else \
            f"(cast (sqrt (cast (sum (* {x} {x}) {kw}) f64)) {n.dt()})"
    if kind == "sumsq":
        return f"(sum (* {x} {x}) {kw})"
    if kind == "logsum":
        return f"(log (sum {x} {kw}))"
    m = n.let(f"(max {x} :axis {ax} :keepdims true)")
    s = f"(+ (log (sum (exp (- {x} {m})) :axis {ax} :keepdims true)) {m})"
    return s if keep == "true" else f"(squeeze {s} {ax if axes is not None else ax_list(range(n.rank()))})"


@handler("ArgMax", "ArgMin")
def _argmax(n: N) -> str:
    f = "argmax" if n.op == "ArgMax" else "argmin"
    ax = n.a("axis", 0)
    keep = "true" if n.a("keepdims", 1) else "false"
    x = n.x(0)
    if n.a("select_last_index", 0):
        d = n.shape()[ax]
        i = n.let(f"({f} (flip {x} :axis {ax}) :axis {ax} :keepdims {keep})")
        return f"(- {d - 1} {i})"
    return f"({f} {x} :axis {ax} :keepdims {keep})"


# ---- nn ---------------------------------------------------------------------------------------------
@handler("MatMul")
def _matmul(n: N) -> str:
    return f"(matmul {n.x(0)} {n.x(1)})"


@handler("Gemm")
def _gemm(n: N) -> str:
    a, b = n.x(0), n.x(1)
    if n.a("transA", 0):
        a = f"(transpose {a})"
    if n.a("transB", 0):
        b = f"(transpose {b})"
    y = f"(matmul {a} {b})"
    if n.a("alpha", 1.0) != 1.0:
        y = f"(* {n.lit(n.a('alpha', 1.0))} {y})"
    if n.has(2):
        c = n.x(2)
        if n.a("beta", 1.0) != 1.0:
            c = f"(* {n.lit(n.a('beta', 1.0))} {c})"
        y = f"(+ {y} {c})"
    return y


def _softmax_like(n: N, f: str) -> str:
    r = n.rank()
    if not n.opset_lt(13):
        return f"({f} {n.x(0)} :axis {n.a('axis', -1)})"
    # before opset 13 the input is coerced to 2-D at :axis
    a = n.a("axis", 1) % max(r, 1)
    s = n.int_shape()
    left, right = int(np.prod(s[:a])), int(np.prod(s[a:]))
    return f"(reshape ({f} (reshape {n.x(0)} [{left} {right}]) :axis 1) {dims(s)})"


@handler("Softmax")
def _softmax(n: N) -> str:
    return _softmax_like(n, "softmax")


@handler("LogSoftmax")
def _log_softmax(n: N) -> str:
    return _softmax_like(n, "log-softmax")


@handler("Hardmax")
def _hardmax(n: N) -> str:
    r = n.rank()
    x = n.x(0)
    if n.opset_lt(13):
        a = n.a("axis", 1) % max(r, 1)
        s = n.int_shape()
        left, right = int(np.prod(s[:a])), int(np.prod(s[a:]))
        x2 = n.let(f"(reshape {x} [{left} {right}])")
        i = n.let(f"(argmax {x2} :axis 1 :keepdims true)")
        return f"(reshape (cast (= (arange {right}) {i}) {n.dt()}) {dims(s)})"
    a = n.a("axis", -1) % r
    i = n.let(f"(argmax {x} :axis {a} :keepdims true)")
    shp = [1] * r
    shp[a] = n.shape()[a]
    return f"(cast (= (reshape (arange {shp[a]}) {dims(shp)}) {i}) {n.dt()})"


def _conv_pads(n: N, spatial: list, kernel: list, strides: list, dil: list) -> list[int]:
    auto = n.a("auto_pad", "NOTSET")
    k = len(spatial)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * k)
        for i in range(k):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + k] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return pads
    if auto == "VALID":
        return [0] * (2 * k)
    return list(n.a("pads", [0] * (2 * k)))


def spatial(n: N) -> list:
    """The input shape; the batch and channel dims may be symbolic, the spatial ones may not."""
    s = n.shape(0)
    if not all(isinstance(d, int) for d in s[2:]):
        raise n.fail(f"needs static spatial dims, got {s}")
    return s


@handler("Conv")
def _conv(n: N) -> str:
    s = spatial(n)
    w = n.int_shape(1)
    k = len(s) - 2
    if k not in (1, 2):
        raise n.fail(f"{k}-D convolution is not supported (1-D and 2-D are)")
    kernel = w[2:]
    strides = list(n.a("strides", [1] * k))
    dil = list(n.a("dilations", [1] * k))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    x, wt = n.x(0), n.x(1)
    if k == 1:
        x, wt = f"(unsqueeze {x} 2)", f"(unsqueeze {wt} 2)"
        strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = f"(pad {x} [[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])"
        pads = [0, 0, 0, 0]
    b = f" {n.x(2)}" if n.has(2) else ""
    y = (f"(conv2d {x} {wt}{b} :stride [{strides[0]} {strides[1]}] :padding [{pads[0]} {pads[1]}] "
         f":dilation [{dil[0]} {dil[1]}] :groups {n.a('group', 1)})")
    return f"(squeeze {y} 2)" if k == 1 else y


def _pool(n: N, kind: str) -> str:
    s = spatial(n)
    if len(s) == 3:
        return f"(squeeze {_pool2d(_as_2d(n), kind)} 2)"
    if len(s) != 4:
        raise n.fail("only 1-D and 2-D pooling are supported")
    return _pool2d(n, kind)


class _Pool1d(N):
    """A 1-D pool seen as a 2-D one over [N C 1 W]."""

    def __init__(self, n: N):
        super().__init__(n.g, n.node)
        self._x = n.let(f"(unsqueeze {n.x(0)} 2)")
        self._attrs = {k: ([1] + list(v) if isinstance(v, (list, tuple)) else v) for k, v in
                       ((k, n.a(k)) for k in ("kernel_shape", "strides", "dilations")) if v is not None}
        p = n.a("pads")
        if p is not None:
            self._attrs["pads"] = [0, p[0], 0, p[1]]

    def x(self, i: int) -> str:
        return self._x

    def shape(self, i: int = 0) -> list:
        s = super().shape(i)
        return [s[0], s[1], 1, s[2]]

    def a(self, name: str, default=None):
        return self._attrs.get(name, super().a(name, default))


def _as_2d(n: N) -> N:
    return _Pool1d(n)


def _pool2d(n: N, kind: str) -> str:
    s = spatial(n)
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1, 1]))
    dil = list(n.a("dilations", [1, 1]))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    if n.a("ceil_mode", 0):
        for i in range(2):
            span = s[2 + i] + pads[i] + pads[i + 2] - ((kernel[i] - 1) * dil[i] + 1)
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= s[2 + i] + pads[i]:
                out -= 1
            extra = (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - (s[2 + i] + pads[i] + pads[i + 2])
            pads[i + 2] += max(0, extra)
    x = n.x(0)
    widths = f"[[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]]"
    win = f":kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] :dilation [{dil[0]} {dil[1]}]"
    if kind == "max":
        if not n.is_float():
            raise n.fail("max pooling of integers is not supported")
        if dil == [1, 1] and pads[0] == pads[2] and pads[1] == pads[3]:
            return (f"(max-pool2d {x} :kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] "
                    f":padding [{pads[0]} {pads[1]}])")
        xp = n.let(f"(pad {x} {widths} :value -inf)") if any(pads) else x
        return f"(squeeze (max (windows {xp} {win}) :axis [5 6]) 1)"
    xp = n.let(f"(pad {x} {widths})") if any(pads) else x
    total = n.let(f"(squeeze (sum (windows {xp} {win}) :axis [5 6]) 1)")
    if n.a("count_include_pad", 0):
        # padding counts, but not the extra cells ceil_mode adds past the explicit pads
        base = n.a("pads", [0] * 4) if n.a("auto_pad", "NOTSET") == "NOTSET" else pads
        h, w = s[2] + base[0] + base[2], s[3] + base[1] + base[3]
        cnt = (f"(pad (full [1 1 {h} {w}] 1 :dtype {n.dt()}) "
               f"[[0 0] [0 0] [0 {pads[0] + pads[2] + s[2] - h}] [0 {pads[1] + pads[3] + s[3] - w}]])")
    else:
        cnt = (f"(pad (full [1 1 {s[2]} {s[3]}] 1 :dtype {n.dt()}) "
               f"[[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])")
    c = n.let(f"(squeeze (sum (windows {cnt} {win}) :axis [5 6]) 1)")
    return f"(/ {total} {c})"


@handler("MaxPool")
def _maxpool(n: N) -> list[str]:
    if len(n.node.output) > 1 and n.node.output[1]:
        raise n.fail("MaxPool's Indices output is not supported")
    if n.a("storage_order", 0):
        raise n.fail("storage_order is not supported")
    return [_pool(n, "max")]


@handler("AveragePool")
def _avgpool(n: N) -> str:
    return _pool(n, "avg")


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: N) -> str:
    axes = ax_list(range(2, n.rank()))
    f = "mean" if n.op == "GlobalAveragePool" else "max"
    return f"({f} {n.x(0)} :axis {axes} :keepdims true)"


def _chan(n: N, i: int, r: int) -> str:
    return f"(reshape {n.x(i)} [1 -1 {' '.join(['1'] * (r - 2))}])"


@handler("BatchNormalization")
def _batchnorm(n: N) -> list[str]:
    if n.a("training_mode", 0):
        from caten.frontends.onnx_ops_extra import _bn_training

        return _bn_training(n)
    r = n.rank()
    eps = n.lit(n.a("epsilon", 1e-5))
    sc, b, m, v = (_chan(n, i, r) for i in (1, 2, 3, 4))
    return [f"(+ (* (/ (- {n.x(0)} {m}) (sqrt (+ {v} {eps}))) {sc}) {b})"]


@handler("InstanceNormalization")
def _instnorm(n: N) -> str:
    r = n.rank()
    axes = ax_list(range(2, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    var = f"(mean (* {d} {d}) :axis {axes} :keepdims true)"
    return f"(+ (* (/ {d} (sqrt (+ {var} {eps}))) {_chan(n, 1, r)}) {_chan(n, 2, r)})"


@handler("LayerNormalization")
def _layernorm(n: N) -> list[str]:
    r = n.rank()
    a = n.a("axis", -1) % r
    axes = ax_list(range(a, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    inv = n.let(f"(rsqrt (+ (mean (* {d} {d}) :axis {axes} :keepdims true) {eps}))")
    y = f"(* (* {d} {inv}) {n.x(1)})"
    if n.has(2):
        y = f"(+ {y} {n.x(2)})"
    return [y, mu, inv]


@handler("RMSNormalization")
def _rmsnorm(n: N) -> str:
    r = n.rank()
    a = n.a("axis", -1) % r
    axes = ax_list(range(a, r))
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    return f"(* (* {x} (rsqrt (+ (mean (* {x} {x}) :axis {axes} :keepdims true) {eps}))) {n.x(1)})"


@handler("GroupNormalization")
def _groupnorm(n: N) -> str:
    s = n.int_shape()
    g = n.a("num_groups")
    x, eps = n.x(0), n.lit(n.a("epsilon", 1e-5))
    xg = n.let(f"(reshape {x} [{s[0]} {g} -1])")
    mu = n.let(f"(mean {xg} :axis 2 :keepdims true)")
    d = n.let(f"(- {xg} {mu})")
    y = n.let(f"(reshape (/ {d} (sqrt (+ (mean (* {d} {d}) :axis 2 :keepdims true) {eps}))) {dims(s)})")
    r = len(s)
    if n.shape(1)[0] != s[1]:  # opset 18's per-group scale/bias
        sc_t = f"(reshape (expand (reshape {n.x(1)} [{g} 1]) [{g} {s[1] // g}]) [1 {s[1]} {' '.join(['1'] * (r - 2))}])"
        b_t = f"(reshape (expand (reshape {n.x(2)} [{g} 1]) [{g} {s[1] // g}]) [1 {s[1]} {' '.join(['1'] * (r - 2))}])"
        return f"(+ (* {y} {sc_t}) {b_t})"
    return f"(+ (* {y} {_chan(n, 1, r)}) {_chan(n, 2, r)})"


@handler("LpNormalization")
def _lpnorm(n: N) -> str:
    x, a, p = n.x(0), n.a("axis", -1), n.a("p", 2)
    norm = f"(sqrt (sum (* {x} {x}) :axis {a} :keepdims true))" if p == 2 else \
        f"(sum (abs {x}) :axis {a} :keepdims true)"
    return f"(/ {x} {norm})"


@handler("MeanVarianceNormalization")
def _mvn(n: N) -> str:
    x = n.x(0)
    axes = ax_list(n.a("axes", [0, 2, 3]))
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    return f"(/ {d} (+ (sqrt (mean (* {d} {d}) :axis {axes} :keepdims true)) 1e-09))"


@handler("ConstantOfShape")
def _const_of_shape(n: N) -> str:
    shape = n.ints(0, "input")
    v = n.a("value")
    from onnx import numpy_helper

    arr = numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)
    dt = DTYPES.get(v.data_type if v is not None else 1)
    if dt is None:
        raise n.fail("the fill value's dtype is not one caten has")
    return f"(full {dims(shape)} {lit(arr.reshape(-1)[0], dt)} :dtype {dt})"


@handler("EyeLike")
def _eyelike(n: N) -> str:
    s = n.int_shape()
    k = n.a("k", 0)
    dt = DTYPES.get(n.a("dtype")) if n.a("dtype") is not None else n.dt()
    return f"(cast (= (+ (reshape (arange {s[0]}) [{s[0]} 1]) {k}) (reshape (arange {s[1]}) [1 {s[1]}])) {dt})"


@handler("Range")
def _range(n: N) -> str:
    s, e, d = (np.asarray(n.c(i, "bound")).reshape(-1)[0] for i in range(3))
    cnt = max(int(np.ceil((e - s) / d)), 0)
    dt = n.dt()
    return f"(+ (* (cast (arange {cnt}) {dt}) {lit(d, dt)}) {lit(s, dt)})"


@handler("Shape")
def _shape(n: N) -> str:
    s = n.shape()
    start, end = n.a("start", 0), n.a("end", None)
    part = s[slice(start, end)]
    if not part:
        return "(full [0] 0 :dtype i64)"
    return f"(concat {' '.join(f'(full [1] {d} :dtype i64)' for d in part)} :axis 0)"


@handler("Size")
def _size(n: N) -> str:
    s = n.shape()
    expr = " ".join(str(d) for d in s)
    return f"(full [] (* 1 {expr}) :dtype i64)" if s else "(full [] 1 :dtype i64)"
