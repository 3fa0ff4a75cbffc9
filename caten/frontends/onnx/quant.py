"""ONNX lowerings of (de)quantization (QuantizeLinear, DequantizeLinear: per tensor, per axis, blocked)
and the integer matmul and convolution ops (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler
from caten.frontends.text import lit


def _per_axis(n: N, i: int, r: int) -> str:
    """Input i (a scalar, a 1-D per-axis vector, or blocked: the data's shape but for the axis,
    ceil(d / block_size) there) shaped to broadcast against the rank-r data."""
    shape = n.shape(i)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return f"(reshape {n.x(i)} [])"
    block = n.a("block_size", 0)
    if block:
        ax = n.a("axis", 1) % r
        d = n.int_shape(0)[ax]
        if len(shape) != r or not isinstance(shape[ax], int) or shape[ax] != -(-d // block):
            raise n.fail(f"blocked scale of shape {shape} for data {n.shape(0)}, block_size {block}")
        name = f"__block_{len(n.g.consts)}"
        n.g.consts[name] = np.arange(d, dtype=np.int64) // block  # each element's block
        return f"(take {n.x(i)} {n.g.tensor(name)} :axis {ax})"
    ax = n.a("axis", 1) % r
    shp = [1] * r
    shp[ax] = shape[0]
    return f"(reshape {n.x(i)} {dims(shp)})"


@handler("DequantizeLinear")
def _dequantize(n: N) -> str:
    r = n.rank()
    out = n.out_dt() or n.dt(1)
    x = f"(cast {n.x(0)} {out})"
    if n.has(2):
        x = f"(- {x} (cast {_per_axis(n, 2, r)} {out}))"
    sc = _per_axis(n, 1, r)
    return f"(* {x} {sc})" if n.dt(1) == out else f"(* {x} (cast {sc} {out}))"


@handler("QuantizeLinear")
def _quantize(n: N) -> str:
    from caten.frontends.onnx.narrow import NARROW, cast_to

    r = n.rank()
    out = n.out_dt()
    fmt = NARROW.get(n.g.code(n.node.output[0]))
    x = n.x(0)
    dt = n.dt()
    sc = _per_axis(n, 1, r)
    if n.dt(1) != dt:
        sc = f"(cast {sc} {dt})"
    q = n.let(f"(/ {x} {sc})")
    if fmt is not None and fmt.minifloat is not None:  # float8/float4: x / scale (+ zero point), rounded to it
        # onnx's reference adds the zero point for float4 only; float8 zero points are ignored (spec: 0)
        zp = f"(+ {q} (cast {_per_axis(n, 2, r)} {dt}))" if n.has(2) and fmt.saturates else q
        return cast_to(zp, dt, fmt, bool(n.a("saturate", 1)))
    if fmt is not None and fmt.modulus:  # int4/int2: saturate to the format's range, in its carrier
        lo = -(fmt.modulus // 2) if fmt.signed else 0
        lo_hi = (lo, lo + fmt.modulus - 1)
    elif out in ("u8", "i8", "u16", "i16") and fmt is None:
        info = np.iinfo(np.dtype({"u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16"}[out]))
        lo_hi = (int(info.min), int(info.max))
    else:
        raise n.fail(f"quantizing to {fmt.name if fmt else out} is not supported")
    # round half to even, as the spec says
    fl = n.let(f"(idiv {q} {lit(1, dt)})")
    rnd = n.let(f"(let ((d (- {q} {fl}))) (where (< d 0.5) {fl} (where (< 0.5 d) (+ {fl} 1) "
                f"(+ {fl} (mod {fl} 2)))))")
    if n.has(2):
        rnd = n.let(f"(+ {rnd} (cast {_per_axis(n, 2, r)} {dt}))")
    return f"(cast (min (max {rnd} {lit(lo_hi[0], dt)}) {lit(lo_hi[1], dt)}) {out})"


# ---- integer matmul and convolution (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) ----
# The products of 8/16-bit integers and their sums are integers far below 2**53, so f64 carries
# them exactly: the matmul/convolution runs in f64 and is the reference's int32 result.


def _centered(n: N, i: int, zp: int, per_row: bool = False) -> str:
    """(input i - its zero point zp) in f64; a zero point is a scalar, or a vector along the last
    axis (a column's, the reference's broadcast) or, with per_row, along the first (a filter's)."""
    x = f"(cast {n.x(i)} f64)"
    if not n.has(zp):
        return x
    zs = n.int_shape(zp)
    z = f"(cast {n.x(zp)} f64)"
    if int(np.prod(zs, dtype=np.int64)) == 1:
        return f"(- {x} (reshape {z} []))"
    r = n.rank(i)
    if len(zs) == 1 and per_row and zs[0] == n.int_shape(i)[0]:
        return f"(- {x} (reshape {z} {dims([zs[0]] + [1] * (r - 1))}))"
    if len(zs) == 1 and not per_row and i != 0 and zs[0] == n.int_shape(i)[-1]:
        return f"(- {x} {z})"
    raise n.fail(f"a zero point of shape {zs} for input {i} of shape {n.shape(i)} is not supported")


def _scalar(n: N, i: int) -> str:
    if int(np.prod(n.int_shape(i), dtype=np.int64)) != 1:
        raise n.fail(f"input {i} must be a scalar (per-row/per-column scales are not supported)")
    return f"(reshape {n.x(i)} [])"


_RANGE = {"u8": (0, 255), "i8": (-128, 127), "u16": (0, 65535), "i16": (-32768, 32767)}


def _requantize(n: N, acc: str, factor: str, zp: int, out: str) -> str:
    """acc * factor (+ the zero point), all in f64 as numpy promotes int32 * float there, rounded
    half to even and saturated to the output's range."""
    if out not in _RANGE:
        raise n.fail(f"a quantized output of dtype {out} is not supported")
    lo, hi = _RANGE[out]
    d = f"(* {acc} (cast {factor} f64))"
    if n.has(zp):
        d = f"(+ {d} (cast {_scalar(n, zp)} f64))"
    return f"(cast (min (max (round-half-even {d}) {lit(lo, 'f64')}) {lit(hi, 'f64')}) {out})"


@handler("MatMulInteger")
def _matmul_integer(n: N) -> str:
    return f"(cast (matmul {_centered(n, 0, 2)} {_centered(n, 1, 3)}) i32)"


@handler("QLinearMatMul")
def _qlinear_matmul(n: N) -> str:
    acc = n.let(f"(matmul {_centered(n, 0, 2)} {_centered(n, 3, 5)})")
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
    return f"(cast {conv(n, ins, 'f64')} i32)"


@handler("QLinearConv")
def _qlinear_conv(n: N) -> str:
    ins = {0: (n.shape(0), _centered(n, 0, 2)), 1: (n.shape(3), _centered(n, 3, 5, per_row=True))}
    if n.has(8):
        ins[2] = (n.shape(8), f"(cast {n.x(8)} f64)")
    acc = conv(n, ins, "f64")
    ws = n.int_shape(4)
    if int(np.prod(ws, dtype=np.int64)) == 1:
        w_scale = _scalar(n, 4)
    elif len(ws) == 1 and ws[0] == n.int_shape(3)[0]:
        w_scale = f"(reshape {n.x(4)} {dims([1, ws[0]] + [1] * (n.rank(0) - 2))})"
    else:
        raise n.fail(f"a filter scale of shape {ws} is not supported")
    factor = f"(/ (* {_scalar(n, 1)} {w_scale}) {_scalar(n, 6)})"
    return _requantize(n, acc, factor, 7, n.out_dt() or n.dt(0))
