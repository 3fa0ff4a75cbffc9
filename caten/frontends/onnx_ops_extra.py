"""ONNX lowerings of transposed convolution, Lp pooling, (de)quantization and batch-norm training."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx_node import N, ax_list, dims, handler
from caten.frontends.onnx_ops_conv import spatial
from caten.frontends.onnx_types import lit


@handler("ConvTranspose")
def _conv_transpose(n: N) -> str:
    """A strided transposed convolution as a stride-1 convolution of the zero-dilated input with the
    flipped, transposed kernel (padded by d*(k-1) - pad on each side)."""
    s = spatial(n)
    if len(s) != 4:
        raise n.fail("only 2-D transposed convolution is supported")
    w = n.int_shape(1)
    g = n.a("group", 1)
    k = w[2:]
    st = list(n.a("strides", [1, 1]))
    dl = list(n.a("dilations", [1, 1]))
    op = list(n.a("output_padding", [0, 0]))
    pads = list(n.a("pads", [0, 0, 0, 0]))
    out_shape = n.a("output_shape")
    auto = n.a("auto_pad", "NOTSET")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = list(out_shape)[-2:] if out_shape is not None else [s[2] * st[0], s[3] * st[1]]
        for i in range(2):
            total = st[i] * (s[2 + i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - outs[i]
            if auto == "SAME_UPPER":
                pads[i], pads[i + 2] = total // 2, total - total // 2
            else:
                pads[i], pads[i + 2] = total - total // 2, total // 2
    x = n.x(0)
    h, wd = s[2], s[3]
    if st != [1, 1]:
        x6 = f"(reshape {x} [{s[0]} {s[1]} {h} 1 {wd} 1])"
        up = f"(pad {x6} [[0 0] [0 0] [0 0] [0 {st[0] - 1}] [0 0] [0 {st[1] - 1}]])"
        x = n.let(f"(slice (reshape {up} [{s[0]} {s[1]} {h * st[0]} {wd * st[1]}]) "
                  f"[0 {s[0]} 1] [0 {s[1]} 1] [0 {(h - 1) * st[0] + 1} 1] [0 {(wd - 1) * st[1] + 1} 1])")
    lo = [dl[i] * (k[i] - 1) - pads[i] for i in range(2)]
    hi = [dl[i] * (k[i] - 1) - pads[i + 2] + op[i] for i in range(2)]
    if any(v > 0 for v in lo + hi):
        x = n.let(f"(pad {x} [[0 0] [0 0] [{max(lo[0], 0)} {max(hi[0], 0)}] [{max(lo[1], 0)} {max(hi[1], 0)}]])")
    if any(v < 0 for v in lo + hi):
        hh = (h - 1) * st[0] + 1 + max(lo[0], 0) + max(hi[0], 0)
        ww = (wd - 1) * st[1] + 1 + max(lo[1], 0) + max(hi[1], 0)
        x = n.let(f"(slice {x} [0 {s[0]} 1] [0 {s[1]} 1] [{-min(lo[0], 0)} {hh + min(hi[0], 0)} 1] "
                  f"[{-min(lo[1], 0)} {ww + min(hi[1], 0)} 1])")
    c, og = w[0], w[1]
    wt = n.let(f"(flip (reshape (permute (reshape {n.x(1)} [{g} {c // g} {og} {k[0]} {k[1]}]) [0 2 1 3 4]) "
               f"[{g * og} {c // g} {k[0]} {k[1]}]) :axis [2 3])")
    b = f" {n.x(2)}" if n.has(2) else ""
    return f"(conv2d {x} (contiguous {wt}){b} :dilation [{dl[0]} {dl[1]}] :groups {g})"


@handler("LpPool")
def _lppool(n: N) -> str:
    from caten.frontends.onnx_ops_conv import _as_2d

    s = spatial(n)
    if len(s) == 3:
        return f"(squeeze {_lppool2d(_as_2d(n))} 2)"
    if len(s) != 4:
        raise n.fail("only 1-D and 2-D Lp pooling is supported")
    return _lppool2d(n)


def _lppool2d(n: N) -> str:
    from caten.frontends.onnx_ops_conv import _conv_pads

    s = spatial(n)
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1, 1]))
    dil = list(n.a("dilations", [1, 1]))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    p = n.a("p", 2)
    x = n.x(0)
    powed = f"(* {x} {x})" if p == 2 else f"(pow (abs {x}) {n.lit(float(p))})"
    xp = n.let(f"(pad {powed} [[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])" if any(pads) else powed)
    win = f":kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] :dilation [{dil[0]} {dil[1]}]"
    total = n.let(f"(squeeze (sum (windows {xp} {win}) :axis [5 6]) 1)")
    return f"(sqrt {total})" if p == 2 else f"(pow {total} {n.lit(1.0 / p)})"


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
    from caten.frontends.onnx_narrow import NARROW, cast_to

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


@handler("Atan", "Asin", "Acos")
def _atan(n: N) -> str:
    if not n.is_float():
        raise n.fail("needs a float operand")
    return f"({n.op.lower()} {n.x(0)})"


def _bn_training(n: N) -> list[str]:
    r = n.rank()
    axes = ax_list([0] + list(range(2, r)))
    x, eps, mom = n.x(0), n.lit(n.a("epsilon", 1e-5)), n.a("momentum", 0.9)
    mu = n.let(f"(mean {x} :axis {axes} :keepdims true)")
    d = n.let(f"(- {x} {mu})")
    var = n.let(f"(mean (* {d} {d}) :axis {axes} :keepdims true)")
    ch = lambda i: f"(reshape {n.x(i)} [1 -1 {' '.join(['1'] * (r - 2))}])"
    y = f"(+ (* (/ {d} (sqrt (+ {var} {eps}))) {ch(1)}) {ch(2)})"
    flat = lambda v: f"(reshape {v} [-1])"
    rm = f"(+ (* {n.x(3)} {n.lit(mom)}) (* {flat(mu)} {n.lit(1 - mom)}))"
    rv = f"(+ (* {n.x(4)} {n.lit(mom)}) (* {flat(var)} {n.lit(1 - mom)}))"
    return [y, rm, rv]

