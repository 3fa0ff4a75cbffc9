"""Lowerings of torch's decomposed quantization ops (`quantized_decomposed.*`, what PT2E quantization
leaves in an exported graph), each as its Python definition in torch.ao.quantization.fx._decomposed
computes it: x times the scale's reciprocal (not x / scale, as ONNX), rounded half to even, plus
the zero point in float, clamped to [quant_min, quant_max]; dequantizing is (q - zero point) times
the scale. What caten has no dtype for is refused, naming the node."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.frontends.text import float_text
from caten.frontends.torch.context import Ctx, aten, dtype_of, lst, meta

_QDTYPES = {"u8", "i8", "i16"}


def _refuse(n: Any, what: str) -> Error:
    return Error(f"torch.export node `{n.name}`: {what}", None, "docs/import.md lists the supported ATen ops")


def _qdtype(n: Any, dt: Any) -> str:
    try:
        out = dtype_of(dt)
    except Error:
        out = str(dt)
    if out not in _QDTYPES:
        raise _refuse(n, f"quantizing to {out} is not supported (uint8, int8 and int16 are)")
    return out


def _f32_input(c: Ctx, n: Any, x: Any) -> str:
    dt = dtype_of(meta(x).dtype)
    if dt not in ("f32", "f16", "bf16"):
        raise _refuse(n, f"quantize expects a float32 input, got {dt}")
    return c.arg(x) if dt == "f32" else f"(cast {c.arg(x)} f32)"


def _scalar_of(c: Ctx, n: Any, v: Any) -> str:
    """A Python number, or a one-element tensor node as a rank-0 value."""
    if isinstance(v, (int, float)):
        return float_text(float(v))
    if int(np.prod(meta(v).shape)) != 1:
        raise _refuse(n, "a per-tensor scale or zero point must have one element")
    return f"(reshape {c.arg(v)} [])"


def _clamped(y: str, zp: str, qmin: int, qmax: int, out: str) -> str:
    """clamp(round(y) + zp, qmin, qmax).to(out), in y's float dtype."""
    return f"(cast (min (max (+ (round {y}) {zp}) {float_text(float(qmin))}) {float_text(float(qmax))}) {out})"


@aten("quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.quantize_per_tensor.tensor")
def _quantize_per_tensor(c: Ctx, n: Any) -> str:
    """clamp(round(x * (1 / scale)) + zero_point, quant_min, quant_max).to(dtype), in f32: torch
    takes the scale and zero point as Python numbers (`.item()` of tensors) and a Python number
    meets an f32 tensor as f32."""
    x, scale, zp, qmin, qmax, dt = n.args[:6]
    out = _qdtype(n, dt)
    xv = _f32_input(c, n, x)
    if isinstance(scale, (int, float)):
        inv = float_text(float(np.float32(1.0 / float(scale))))
    else:  # 1.0 / scale.item() in double, then f32
        inv = f"(cast (/ 1.0 (cast {_scalar_of(c, n, scale)} f64)) f32)"
    z = float_text(float(zp)) if isinstance(zp, (int, float)) else f"(cast {_scalar_of(c, n, zp)} f32)"
    return _clamped(f"(* {xv} {inv})", z, qmin, qmax, out)


@aten("quantized_decomposed.dequantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.tensor")
def _dequantize_per_tensor(c: Ctx, n: Any) -> str:
    """(q.to(out_dtype) - zero_point) * scale (out_dtype f32 by default), the numbers as
    out_dtype."""
    q, scale, zp = n.args[:3]
    _qdtype(n, meta(q).dtype)
    out = dtype_of(n.kwargs.get("out_dtype") or "float32")
    s = float_text(float(scale)) if isinstance(scale, (int, float)) else f"(cast {_scalar_of(c, n, scale)} {out})"
    z = float_text(float(zp)) if isinstance(zp, (int, float)) else f"(cast {_scalar_of(c, n, zp)} {out})"
    return f"(* (- (cast {c.arg(q)} {out}) {z}) {s})"


def _per_channel(c: Ctx, n: Any, t: Any, axis: int, rank: int) -> str:
    shape = [1] * rank
    shape[axis] = meta(t).shape[0]
    return f"(reshape {c.arg(t)} {lst(shape)})"


_FLOAT_RANK = {"f32": 0, "f64": 1}


@aten("quantized_decomposed.quantize_per_channel.default")
def _quantize_per_channel(c: Ctx, n: Any) -> str:
    """clamp(round(x * (1.0 / scales)) + zero_points, ...).to(dtype) with scales and zero points
    along `axis`: the reciprocal in the scales' dtype, the product in torch's promotion of f32 and it."""
    x, scales, zps, axis, qmin, qmax, dt = n.args[:7]
    out = _qdtype(n, dt)
    rank = meta(x).dim()
    axis %= rank
    sdt = dtype_of(meta(scales).dtype)
    if sdt not in _FLOAT_RANK:
        raise _refuse(n, f"scales of dtype {sdt} are not supported (float32 and float64 are)")
    xv = _f32_input(c, n, x)
    w = sdt  # f32 * f32 -> f32, f32 * f64 (a tensor of rank >= 1) -> f64
    inv = f"(/ 1.0 {_per_channel(c, n, scales, axis, rank)})"
    y = f"(* {xv if w == 'f32' else f'(cast {xv} f64)'} {inv})"
    z = f"(cast {_per_channel(c, n, zps, axis, rank)} {w})"
    return _clamped(y, z, qmin, qmax, out)


@aten("quantized_decomposed.dequantize_per_channel.default")
def _dequantize_per_channel(c: Ctx, n: Any) -> str:
    """((q - zero_points) * scales).to(out_dtype): the difference in int64, the product in the
    scales' dtype."""
    q, scales, zps, axis = n.args[:4]
    _qdtype(n, meta(q).dtype)
    rank = meta(q).dim()
    axis %= rank
    sdt = dtype_of(meta(scales).dtype)
    if sdt not in _FLOAT_RANK:
        raise _refuse(n, f"scales of dtype {sdt} are not supported (float32 and float64 are)")
    out = dtype_of(n.kwargs.get("out_dtype") or "float32")
    d = f"(cast {c.arg(q)} i64)"
    if zps is not None:
        d = f"(- {d} (cast {_per_channel(c, n, zps, axis, rank)} i64))"
    y = f"(* (cast {d} {sdt}) {_per_channel(c, n, scales, axis, rank)})"
    return y if out == sdt else f"(cast {y} {out})"
