"""ONNX lowerings of the window functions (Hann, Hamming, Blackman) and of LRN."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, handler
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
