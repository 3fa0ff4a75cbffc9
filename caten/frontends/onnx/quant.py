"""ONNX lowerings of (de)quantization (QuantizeLinear, DequantizeLinear: per tensor, per axis, blocked)
and the integer matmul and convolution ops (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler
from caten.frontends.onnx.types import DTYPES, FLOAT8

_PROMOTE = {frozenset({"f16", "bf16"}): "f32"}


def _common_float(a: str, b: str) -> str:
    """numpy's promotion of two float dtypes (the reference divides x by the scale in it)."""
    if a == b:
        return a
    bits = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
    return _PROMOTE.get(frozenset({a, b})) or max(a, b, key=lambda d: bits[d])


def _keys(n: N) -> str:
    """The quantization axis and block size as the library composites' keywords."""
    return f":axis {n.a('axis', 1)} :block-size {n.a('block_size', 0) or 0}"


@handler("DequantizeLinear")
def _dequantize(n: N) -> str:
    """The library's `dequantize`: (x - zero point) in f32 times the scale, as the reference; a
    float8/float4 input ignores its zero point (which must be 0), as the reference does."""
    from caten.frontends.onnx.narrow import NARROW

    code = n.g.code(n.node.input[0])
    fmt = NARROW.get(code)
    sdt = n.dt(1)
    out = n.out_dt() or sdt
    s = n.x(1)
    if out != sdt and sdt in ("f16", "bf16"):  # the reference's f32 product, not rounded to the scale's dtype
        s, sdt = f"(cast {s} f32)", "f32"
    zp = f" :zero-point {n.x(2)}" if n.has(2) and code not in FLOAT8 and (fmt is None or fmt.modulus) else ""
    y = f"(dequantize {n.x(0)} {s}{zp} {_keys(n)})"
    return y if out == sdt else f"(cast {y} {out})"


@handler("QuantizeLinear")
def _quantize(n: N) -> str:
    """The library's `quantize` (x / scale rounded half to even, plus the zero point, saturated); a
    float8/float4 output rounds x / scale to the format instead."""
    from caten.frontends.onnx.narrow import NARROW, cast_float8, cast_to

    out = n.out_dt()
    code = n.g.code(n.node.output[0])
    fmt = NARROW.get(code)
    dt = _common_float(n.dt(0), n.dt(1))
    prec = n.a("precision", 0)
    if prec:
        from caten.frontends.onnx.narrow import carrier_dtype

        dt = carrier_dtype(prec) or dt
    x, s = n.x(0), n.x(1)
    x = x if n.dt(0) == dt else f"(cast {x} {dt})"
    s = s if n.dt(1) == dt else f"(cast {s} {dt})"
    if code in FLOAT8:  # x / scale cast to it (onnx's reference ignores a float8 zero point: spec 0)
        return cast_float8(f"(/ {x} (quant-param {s} {x} {_keys(n)}))", dt, DTYPES[code], bool(n.a("saturate", 1)))
    if fmt is not None and fmt.minifloat is not None:  # float4: x / scale (+ zero point), rounded to it
        q = n.let(f"(/ {x} (quant-param {s} {x} {_keys(n)}))")
        zp = f"(+ {q} (cast (quant-param {n.x(2)} {x} {_keys(n)}) {dt}))" if n.has(2) and fmt.saturates else q
        return cast_to(zp, dt, fmt, bool(n.a("saturate", 1)))
    rng = ""
    if fmt is not None and fmt.modulus:  # int2: saturated to the format's range, in its carrier
        lo = -(fmt.modulus // 2) if fmt.signed else 0
        rng = f" :qmin {lo} :qmax {lo + fmt.modulus - 1}"
    elif out in ("i4", "u4"):  # caten's own 4-bit dtypes, saturated to their range
        rng = " :qmin -8 :qmax 7" if out == "i4" else " :qmin 0 :qmax 15"
    elif fmt is not None or out not in ("u8", "i8", "u16", "i16"):
        raise n.fail(f"quantizing to {fmt.name if fmt else out} is not supported")
    if n.has(2):
        return f"(quantize {x} {s} :zero-point {n.x(2)} {_keys(n)}{rng})"
    return f"(quantize {x} {s} :dtype {out} {_keys(n)}{rng})"


@handler("DynamicQuantizeLinear")
def _dynamic_quantize(n: N) -> list[str]:
    """u8 quantization with the scale and zero point of x's range widened to hold 0, as the
    reference (an all-zero x gets the scale 1/255, where the function body would divide by 0)."""
    if n.dt() != "f32":
        raise n.fail(f"DynamicQuantizeLinear takes f32, got {n.dt()}")
    x = n.x(0)
    mx = n.let(f"(max (max {x}) 0.0)")
    mn = n.let(f"(min (min {x}) 0.0)")
    sc = n.let(f"(/ (where (= {mx} {mn}) 1.0 (- {mx} {mn})) 255.0)")
    zp = n.let(f"(cast (round (min (max (- 0.0 (/ {mn} {sc})) 0.0) 255.0)) u8)")
    return [f"(quantize {x} {sc} :zero-point {zp})", sc, zp]


# ---- integer matmul and convolution (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) ----
# Integer products summed in i32, as the reference (the library's matmul-int; the convolutions run
# Conv's lowering on i32 operands); the requantization is in f64, as numpy promotes int32 * float.


def _zero_point(n: N, i: int, zp: int, per_row: bool = False) -> str | None:
    """Input i's zero point zp as caten text broadcasting against it (None when absent): a scalar,
    a vector along the last axis (a column's, the reference's broadcast) or, with per_row, along
    the first (a filter's)."""
    if not n.has(zp):
        return None
    zs = n.int_shape(zp)
    z = n.x(zp)
    if int(np.prod(zs, dtype=np.int64)) == 1:
        return f"(reshape {z} [])"
    r = n.rank(i)
    if len(zs) == 1 and per_row and zs[0] == n.int_shape(i)[0]:
        return f"(reshape {z} {dims([zs[0]] + [1] * (r - 1))})"
    if len(zs) == 1 and not per_row and i != 0 and zs[0] == n.int_shape(i)[-1]:
        return z
    raise n.fail(f"a zero point of shape {zs} for input {i} of shape {n.shape(i)} is not supported")


def _centered(n: N, i: int, zp: int, per_row: bool = False) -> str:
    """(input i - its zero point) in i32."""
    z = _zero_point(n, i, zp, per_row)
    x = f"(cast {n.x(i)} i32)"
    return x if z is None else f"(- {x} (cast {z} i32))"


def _matmul_int(n: N, a: int, b: int, az: int, bz: int) -> str:
    za, zb = _zero_point(n, a, az), _zero_point(n, b, bz)
    keys = (f" :a-zero-point {za}" if za else "") + (f" :b-zero-point {zb}" if zb else "")
    return f"(matmul-int {n.x(a)} {n.x(b)}{keys})"


def _scalar(n: N, i: int) -> str:
    if int(np.prod(n.int_shape(i), dtype=np.int64)) != 1:
        raise n.fail(f"input {i} must be a scalar (per-row/per-column scales are not supported)")
    return f"(reshape {n.x(i)} [])"


def _requantize(n: N, acc: str, factor: str, zp: int, out: str) -> str:
    """The library's `quantize` of acc * factor (in f64, as numpy promotes int32 * float) with scale 1:
    rounded half to even, plus the zero point, saturated to the output's range."""
    if out not in ("u8", "i8", "u16", "i16"):
        raise n.fail(f"a quantized output of dtype {out} is not supported")
    z = f":zero-point {_scalar(n, zp)}" if n.has(zp) else f":dtype {out}"
    return f"(quantize (* {acc} (cast {factor} f64)) (full [] 1.0 :dtype f64) {z})"


@handler("MatMulInteger")
def _matmul_integer(n: N) -> str:
    return _matmul_int(n, 0, 1, 2, 3)


@handler("QLinearMatMul")
def _qlinear_matmul(n: N) -> str:
    acc = n.let(f"(cast {_matmul_int(n, 0, 3, 2, 5)} f64)")
    # the scales' product and quotient in their own dtype (f32 or f16), as the reference
    factor = f"(/ (* {_scalar(n, 1)} {_scalar(n, 4)}) {_scalar(n, 6)})"
    return _requantize(n, acc, factor, 7, n.out_dt() or n.dt(0))


class ConvView(N):
    """The node seen as a Conv of given operands of dtype dt: input i -> (its shape, its caten
    text), with the Conv attributes in `attrs` replacing the node's own."""

    def __init__(self, n: N, ins: dict[int, tuple[list, str]], dt: str, attrs: dict | None = None):
        super().__init__(n.g, n.node)
        self._ins, self._dt, self._attrs = ins, dt, attrs or {}

    def dt(self, i: int = 0) -> str:
        return self._dt

    def has(self, i: int) -> bool:
        return i in self._ins

    def x(self, i: int) -> str:
        return self._ins[i][1]

    def shape(self, i: int = 0) -> list:
        return self._ins[i][0]

    def a(self, name: str, default=None):
        return self._attrs[name] if name in self._attrs else super().a(name, default)


def conv(n: N, ins: dict[int, tuple[list, str]], dt: str, attrs: dict | None = None) -> str:
    """Caten's Conv lowering applied to the operands `ins` of dtype dt (see ConvView)."""
    from caten.frontends.onnx.node import HANDLERS

    return n.let(HANDLERS["Conv"](ConvView(n, ins, dt, attrs)))


@handler("ConvInteger")
def _conv_integer(n: N) -> str:
    ins = {0: (n.shape(0), _centered(n, 0, 2)), 1: (n.shape(1), _centered(n, 1, 3, per_row=True))}
    return conv(n, ins, "i32")


@handler("QLinearConv")
def _qlinear_conv(n: N) -> str:
    ins = {0: (n.shape(0), _centered(n, 0, 2)), 1: (n.shape(3), _centered(n, 3, 5, per_row=True))}
    if n.has(8):
        ins[2] = (n.shape(8), f"(cast {n.x(8)} i32)")
    acc = n.let(f"(cast {conv(n, ins, 'i32')} f64)")
    ws = n.int_shape(4)
    if int(np.prod(ws, dtype=np.int64)) == 1:
        w_scale = _scalar(n, 4)
    elif len(ws) == 1 and ws[0] == n.int_shape(3)[0]:
        w_scale = f"(reshape {n.x(4)} {dims([1, ws[0]] + [1] * (n.rank(0) - 2))})"
    else:
        raise n.fail(f"a filter scale of shape {ws} is not supported")
    factor = f"(/ (* {_scalar(n, 1)} {w_scale}) {_scalar(n, 6)})"
    return _requantize(n, acc, factor, 7, n.out_dt() or n.dt(0))
