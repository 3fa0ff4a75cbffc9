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
    fused = _fused_layer(c, n)
    if fused is not None:
        return fused
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


# ---- PT2E layers as integer kernels ----------------------------------------------------------------
# dequantize_per_tensor(x_q) , dequantize_per_channel(w_q, axis 0) or _per_tensor -> linear (addmm/mm of
# the transposed weight) or conv2d (convolution) [-> relu] -> quantize_per_tensor (numbers as scale and
# zero point), what PT2E's convert leaves, runs as `matmul-int` / `conv2d-int` summed in i32, then
# f32(sum) * (sx * sw) (+ the f32 bias) quantized as torch does (times 1 / sy, rounded half to even,
# plus the zero point, clamped); relu is max with the clamped zero point (quantizing is monotone and
# maps 0 to it). The float layer differs from this by rounding only: within one quantum. The float
# nodes the layer replaces are left unused (and dropped by the compiler).

_DQ_T = "quantized_decomposed.dequantize_per_tensor.default"
_DQ_C = "quantized_decomposed.dequantize_per_channel.default"


def _op(node: Any, *names: str) -> bool:
    return getattr(node, "op", None) == "call_function" and str(node.target) in names


def _only_user(node: Any, user: Any) -> bool:
    return list(node.users) == [user]


def _quantized_input(c: Ctx, d: Any) -> tuple[str, float, int] | None:
    """(x_q, scale, zero point) of a per-tensor dequantize of u8/i8 with numbers as parameters."""
    if not _op(d, _DQ_T) or not isinstance(d.args[1], (int, float)) or not isinstance(d.args[2], int):
        return None
    if dtype_of(meta(d.args[0]).dtype) not in ("u8", "i8") or not _f32_out(d):
        return None
    return c.arg(d.args[0]), d.args[1], d.args[2]


def _f32_out(d: Any) -> bool:
    return str(d.kwargs.get("out_dtype")) in ("None", "torch.float32")


def _quantized_weight(c: Ctx, d: Any) -> tuple[str, str, str | None, bool] | None:
    """(w_q, its scale as f32 text, its zero point as text or None, whether these are per output
    channel) of the weight's dequantize: per tensor (numbers) or per output channel (axis 0, f32)."""
    if _op(d, _DQ_T):
        w = _quantized_input(c, d)
        return None if w is None else (w[0], float_text(float(np.float32(w[1]))), f"(full [] {w[2]} :dtype i32)", False)
    if not _op(d, _DQ_C) or d.args[3] % meta(d.args[0]).dim() != 0 or not _f32_out(d):
        return None
    if dtype_of(meta(d.args[0]).dtype) not in ("u8", "i8") or dtype_of(meta(d.args[1]).dtype) != "f32":
        return None
    return c.arg(d.args[0]), c.arg(d.args[1]), None if d.args[2] is None else c.arg(d.args[2]), True


def _fused_layer(c: Ctx, n: Any) -> str | None:
    """The integer kernel of the layer this quantize_per_tensor ends, or None if it ends none."""
    y, sy, zy, qmin, qmax, dt = n.args[:6]
    if not isinstance(sy, (int, float)) or not isinstance(zy, int) or _qdtype(n, dt) not in ("u8", "i8"):
        return None
    relu = y if _op(y, "aten.relu.default") and _only_user(y, n) else None
    if relu is not None:
        y = relu.args[0]
    if not _only_user(y, relu or n):
        return None
    flat = None  # a linear over [..., K]: view to 2-D, addmm, view back
    if _op(y, "aten.view.default") and _op(y.args[0], "aten.addmm.default", "aten.mm.default") \
            and _only_user(y.args[0], y):
        flat, y = y, y.args[0]
    conv = _op(y, "aten.convolution.default")
    if conv:
        xd, wd, b, stride, padding, dilation, transposed, _, groups = y.args
        if transposed or meta(xd).dim() != 4:
            return None
    elif _op(y, "aten.addmm.default", "aten.mm.default") and y.kwargs.get("beta", 1) == 1 \
            and y.kwargs.get("alpha", 1) == 1:
        b, xd, wt = y.args[:3] if len(y.args) == 3 else (None, *y.args[:2])
        if not (_op(wt, "aten.permute.default") and list(wt.args[1]) == [1, 0] and _only_user(wt, y)):
            return None
        wd = wt.args[0]
        if flat is not None:  # the input's own [..., K] and the result's [..., N] must be the views'
            if not _op(xd, "aten.view.default"):
                return None
            xd = xd.args[0]
            xs, ys, ws = (list(meta(v).shape) for v in (xd, flat, wd))
            if not all(isinstance(d, int) for d in xs + ys) or ys != xs[:-1] + ws[:1] or xs[-1:] != ws[1:]:
                return None
        elif meta(xd).dim() != 2:
            return None
    else:
        return None
    x, w = _quantized_input(c, xd), _quantized_weight(c, wd)
    if x is None or w is None or (b is not None and dtype_of(meta(b).dtype) != "f32"):
        return None
    (xq, sx, zx), (wq, sw, zw, channels) = x, w
    zx_t = f"(full [] {zx} :dtype i32)"
    if conv:
        keys = f" :x-zero-point {zx_t}" + (f" :w-zero-point {zw}" if zw else "")
        acc = (f"(conv2d-int {xq} {wq}{keys} :stride {lst(stride)} :padding {lst(padding)} "
               f":dilation {lst(dilation)} :groups {groups})")
        per_channel = lambda t: f"(reshape {t} [{meta(wd).shape[0]} 1 1])"  # noqa: E731
    else:
        acc = f"(matmul-int {xq} (transpose {wq}) :a-zero-point {zx_t}" + (f" :b-zero-point {zw})" if zw else ")")
        per_channel = lambda t: t  # noqa: E731
    sxw = f"(* {float_text(float(np.float32(sx)))} {per_channel(sw) if channels else sw})"
    yf = f"(* (cast {c.emit(n.name + '_acc', acc)} f32) {sxw})"
    if b is not None:
        yf = f"(+ {yf} {per_channel(c.arg(b))})"
    inv = float_text(float(np.float32(1.0 / float(sy))))
    q = _clamped(f"(* {yf} {inv})", float_text(float(zy)), qmin, qmax, dtype_of(dt))
    if relu is None:
        return q
    return f"(max {c.emit(n.name + '_q', q)} (full [] {min(max(zy, qmin), qmax)} :dtype {dtype_of(dt)}))"
