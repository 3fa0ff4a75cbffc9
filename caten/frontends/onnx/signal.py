"""ONNX lowerings of the window functions (Hann, Hamming, Blackman), LRN, and the spectral ops
(DFT, STFT, MelWeightMatrix)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler
from caten.frontends.onnx.types import DTYPES


@handler("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(n: N) -> str:
    """The window is a function of its (shape-deciding, so known) length alone: computed once
    here in float64 as the reference computes it, then rounded to the output dtype."""
    size = int(np.asarray(n.c(0, "size")).reshape(-1)[0])
    to = DTYPES.get(n.a("output_datatype", 1))
    if to is None or to == "bool":
        raise n.fail("the output dtype is not one caten has")
    m = size if n.a("periodic", 1) else size - 1
    i = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = 2 * np.pi * i / m
        if n.op == "HannWindow":
            w = 0.5 - 0.5 * np.cos(t)
        elif n.op == "HammingWindow":
            w = 25.0 / 46.0 - (1 - 25.0 / 46.0) * np.cos(t)
        else:
            w = 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)
    np_dt = {"bf16": "float32"}.get(to, None)
    name = f"__window_{len(n.g.consts)}"
    n.g.consts[name] = w.astype(np.dtype(np_dt or _NP[to]))
    x = n.g.tensor(name)
    return f"(cast {x} {to})" if np_dt else f"(contiguous {x})"


_NP = {"f16": "float16", "f32": "float32", "f64": "float64", "i8": "int8", "i16": "int16", "i32": "int32",
       "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64"}


@handler("LRN")
def _lrn(n: N) -> str:
    """x / (bias + alpha/size * sum of x^2 over the channels c - floor((size-1)/2) .. c + ceil((size-1)/2))."""
    s = n.int_shape()
    size = int(n.a("size"))
    alpha, beta, bias = n.a("alpha", 0.0001), n.a("beta", 0.75), n.a("bias", 1.0)
    lo, hi = (size - 1) // 2, size // 2
    x = n.x(0)
    widths = "[[0 0] [" + f"{lo} {hi}" + "]" + " [0 0]" * (len(s) - 2) + "]"
    sq = n.let(f"(pad (* {x} {x}) {widths})")
    rest = " ".join(f"[0 {d} 1]" for d in s[2:])
    acc = " ".join(f"(slice {sq} [0 {s[0]} 1] [{j} {j + s[1]} 1] {rest})" for j in range(size))
    total = n.let(f"(+ {acc})" if size > 1 else f"(contiguous {acc})")
    den = f"(pow (+ {n.lit(bias)} (* {n.lit(alpha / size)} {total})) {n.lit(beta)})"
    return f"(/ {x} {den})"


# ---- DFT, STFT, MelWeightMatrix ----
# A DFT of a known length is a product with cos/sin matrices: they are computed here in f64 from the
# exact angle 2 pi ((j k) mod L) / L, and the product runs in f64, rounded once to the input's dtype.


def _const(n: N, v: np.ndarray, tag: str) -> str:
    name = f"__{tag}_{len(n.g.consts)}"
    n.g.consts[name] = np.ascontiguousarray(v)
    return n.g.tensor(name)


def dft(n: N, x: str, s: list[int], ax: int, length: int, inverse: bool, onesided: bool, dt: str) -> str:
    """The DFT of x ([..., 1] real or [..., 2] complex, static shape s) along ax, as onnx's reference
    (numpy.fft.fft / ifft / irfft with n=length): [..., 2], or [..., 1] for a onesided inverse."""
    r, c, d = len(s), s[-1], s[ax]
    if c not in (1, 2) or ax == r - 1:
        raise n.fail(f"needs [..., 1] or [..., 2] input and a signal axis before the last, got {s} axis {ax}")
    if length < 1:
        raise n.fail(f"dft_length {length} is not positive")
    if inverse and not onesided and dt != "f64":
        # exactly zero outputs (the Nyquist bin of a real signal) come out of the reference's f32 FFT
        # (numpy's pocketfft) with ~1e-7 of rounding, beyond the tests' atol; caten's f64 sum differs
        raise n.fail(f"an inverse complex DFT of {dt} data is not supported (f64 is; or a onesided inverse)")
    if inverse and onesided:
        m, kk = min(d, length // 2 + 1), length
    else:
        m, kk = min(d, length), (length // 2 + 1 if onesided and not inverse else length)
    j = np.arange(m, dtype=np.int64)[:, None]
    k = np.arange(kk, dtype=np.int64)[None, :]
    q = (j * k) % length
    theta = 2 * np.pi * q / length
    cos, sin = np.cos(theta), np.sin(theta)
    sin[(2 * q) % length == 0] = 0.0  # exact zeros at multiples of pi and pi/2 (np.sin(pi) is 1e-16)
    cos[(4 * q) % length == length] = 0.0
    if inverse and onesided:  # irfft: the bins 1 .. L/2 - 1 stand for their mirror images too
        w = np.full((m, 1), 2.0)
        w[0] = 1.0
        if length % 2 == 0 and length // 2 < m:
            w[length // 2] = 1.0
        cos, sin = cos * w / length, sin * w / length
        sin[0] = 0.0  # the imaginary parts of the DC and Nyquist bins are ignored, as numpy's irfft
        if length % 2 == 0 and length // 2 < m:
            sin[length // 2] = 0.0
    elif inverse:
        cos, sin = cos / length, sin / length
    rank = r - 1
    pre = " ".join(f"[0 {v} 1]" for v in s[:-1])
    cut = list(s[:-1])
    cut[ax] = m
    sel = " ".join(f"[0 {v} 1]" for v in cut)

    def comp(i: int) -> str:
        part = n.let(f"(reshape (slice (cast {x} f64) {pre} [{i} {i + 1} 1]) {dims(s[:-1])})")
        return n.let(f"(slice {part} {sel})") if m < d else part

    perm = [i for i in range(rank) if i != ax] + [ax]
    inv = [perm.index(i) for i in range(rank)]

    def prod(t: str, mat: np.ndarray) -> str:
        p = n.let(f"(permute {t} {dims(perm)})")
        return f"(matmul {p} {_const(n, mat, 'dft')})"

    xr = comp(0)
    xi = comp(1) if c == 2 else None
    sgn = "+" if not inverse else "-"
    re = prod(xr, cos) if xi is None else f"({sgn} {prod(xr, cos)} {prod(xi, sin)})"
    out = list(s[:-1])
    out[ax] = kk
    parts = [re]
    if not (inverse and onesided):
        if xi is None:
            im = f"(* {prod(xr, sin)} {'-1.0' if not inverse else '1.0'})"
        else:
            im = f"({'-' if not inverse else '+'} {prod(xi, cos)} {prod(xr, sin)})"
        parts.append(im)
    cols = [f"(reshape (permute {p} {dims(inv)}) {dims(out + [1])})" for p in parts]
    y = cols[0] if len(cols) == 1 else f"(concat {cols[0]} {cols[1]} :axis -1)"
    return f"(cast {y} {dt})"


@handler("DFT")
def _dft(n: N) -> str:
    s = n.int_shape(0)
    if n.opset_lt(20):
        ax = n.a("axis", 1)
    else:
        ax = int(np.asarray(n.c(2, "axis")).reshape(-1)[0]) if n.has(2) else -2
    ax %= len(s)
    inverse, onesided = bool(n.a("inverse", 0)), bool(n.a("onesided", 0))
    if n.has(1):
        length = int(np.asarray(n.c(1, "dft_length")).reshape(-1)[0])
    else:
        length = 2 * (s[ax] - 1) if inverse and onesided else s[ax]
    return dft(n, n.x(0), s, ax, length, inverse, onesided, n.dt())


@handler("STFT")
def _stft(n: N) -> str:
    """Frames of the signal [batch, length, 1|2] every frame_step samples, each times the window,
    then their DFT (onesided by default): [batch, frames, bins, 2], as the reference."""
    s = n.int_shape(0)
    if len(s) != 3:
        raise n.fail(f"needs a [batch, length, 1 or 2] signal, got {s}")
    step = int(np.asarray(n.c(1, "frame_step")).reshape(-1)[0])
    win = n.int_shape(2)[0] if n.has(2) else None
    flen = int(np.asarray(n.c(3, "frame_length")).reshape(-1)[0]) if n.has(3) else (win or s[1])
    if win is not None and win != flen:
        raise n.fail(f"a window of {win} samples for frames of {flen} is not supported")
    if step < 1 or flen < 1 or flen > s[1]:
        raise n.fail(f"frame_step {step} / frame_length {flen} for a signal of {s[1]} samples")
    frames = 1 + (s[1] - flen) // step
    idx = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(flen, dtype=np.int64)[None, :]
    x = n.let(f"(take {n.x(0)} {_const(n, idx, 'stft')} :axis 1)")
    if n.has(2):
        x = n.let(f"(* {x} (reshape {n.x(2)} [1 1 {flen} 1]))")
    return dft(n, x, [s[0], frames, flen, s[2]], 2, flen, False, bool(n.a("onesided", 1)), n.dt())


@handler("MelWeightMatrix")
def _mel(n: N) -> list[None]:
    """The [dft_length // 2 + 1, num_mel_bins] triangular filters, computed here from the (constant
    or specialized) scalar inputs exactly as the reference (its integer bin edges decide the shape)."""
    v = [np.asarray(n.c(i, name)).reshape(-1)[0] for i, name in
         enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"))]
    mels, length, rate, lo, hi = v
    to = DTYPES.get(n.a("output_datatype", 1))
    if to is None or to in ("bool", "bf16"):
        raise n.fail("the output dtype is not one caten has")
    mels, length = int(mels), int(length)
    bins = np.arange(0, mels + 2)
    lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
    hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
    step = (hi_mel - lo_mel) / bins.shape[0]
    f = 700 * np.expm1((bins * step + lo_mel) / 2595 * np.log(10))
    edge = (((length + 1) * f) // rate).astype(int)
    out = np.zeros((length // 2 + 1, mels))
    for i in range(mels):
        a, c, b = edge[i], edge[i + 1], edge[i + 2]
        if c == a:
            out[c, i] = 1
        else:
            for j in range(a, c + 1):
                out[j, i] = float(j - a) / float(c - a)
        for j in range(c, b):
            out[j, i] = float(b - j) / float(b - c)
    n.g.consts[n.node.output[0]] = out.astype(np.dtype(_NP[to]))
    return [None]


@handler("CausalConvWithState")
def _causal_conv(n: N) -> list[str]:
    """Depthwise causal 1-D convolution over [past_state (or zeros), input], as the reference: the
    products summed in f32 for half types and rounded once (numpy's matmul), the bias added in the
    input's dtype, SiLU in f32; present_state is the last k - 1 positions."""
    from caten.frontends.onnx.quant import conv
    from caten.frontends.onnx.wide import NARROW

    s, w = n.int_shape(0), n.int_shape(1)
    if len(s) != 3 or len(w) != 3 or w[0] != s[1] or w[1] != 1:
        raise n.fail(f"needs input [B, C, L] and weight [C, 1, k], got {s} and {w}")
    act = n.a("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise n.fail(f"activation `{act}` is not supported")
    dt, k = n.dt(), w[2]
    past = n.x(3) if n.has(3) else f"(full {dims([s[0], s[1], k - 1])} 0 :dtype {dt})"
    padded = n.let(f"(concat {past} {n.x(0)} :axis 2)")
    wide = dt in NARROW
    xs, ws = (f"(cast {padded} f32)", f"(cast {n.x(1)} f32)") if wide else (padded, n.x(1))
    shp = [s[0], s[1], s[2] + k - 1]
    attrs = {"group": s[1], "pads": [0, 0], "strides": [1], "dilations": [1], "auto_pad": "NOTSET"}
    y = conv(n, {0: (shp, xs), 1: (w, ws)}, "f32" if wide else dt, attrs)
    y = n.let(f"(cast {y} {dt})") if wide else y
    if n.has(2):
        y = n.let(f"(+ {y} (reshape {n.x(2)} [{s[1]} 1]))")
    if act != "none":
        c = n.let(f"(cast {y} f32)")
        y = f"(cast (* {c} (/ 1.0 (+ 1.0 (exp (neg {c}))))) {dt})"
    state = f"(contiguous (slice {padded} [0 {s[0]} 1] [0 {s[1]} 1] [{s[2]} {s[2] + k - 1} 1]))"
    return [y, state]
