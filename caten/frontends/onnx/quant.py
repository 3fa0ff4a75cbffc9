"""ONNX lowerings of (de)quantization: QuantizeLinear and DequantizeLinear, per tensor or per axis."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler
from caten.frontends.text import lit


def _per_axis(n: N, i: int, r: int) -> str:
    """Input i (a scalar or a 1-D per-axis vector) shaped to broadcast against the rank-r data."""
    shape = n.shape(i)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return f"(reshape {n.x(i)} [])"
    if n.a("block_size", 0):
        raise n.fail("blocked quantization is not supported")
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
