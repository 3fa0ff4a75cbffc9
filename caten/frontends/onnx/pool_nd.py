"""N-D pooling (3-D, integer max pooling of any rank, MaxPool's Indices) as one strided view of the
padded input: [N C *out *kernel] windows over its row-major layout, reduced over the kernel axes."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, ax_list, const_tensor, dims


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


def _pads(n: N, s: list[int], kernel: list[int], strides: list[int], dil: list[int]) -> tuple[list, list]:
    """The pads (ONNX order: all begins, then all ends) and those with ceil_mode's extra cells."""
    k = len(kernel)
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    base = list(pads)
    if n.a("ceil_mode", 0):
        for i in range(k):
            span = s[2 + i] + pads[i] + pads[i + k] - ((kernel[i] - 1) * dil[i] + 1)
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= s[2 + i] + pads[i]:
                out -= 1
            extra = (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - (s[2 + i] + pads[i] + pads[i + k])
            pads[i + k] += max(0, extra)
    return pads, base


def _windows(x: str, shape: list[int], kernel: list[int], strides: list[int], dil: list[int]) -> str:
    sp = shape[2:]
    k = len(sp)
    row = [int(np.prod(sp[i + 1:], dtype=np.int64)) for i in range(k)]
    out = [(sp[i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(k)]
    if min(out) < 1:
        raise ValueError("the kernel is larger than the padded input")
    plane = int(np.prod(sp, dtype=np.int64))
    size = shape[:2] + out + kernel
    stride = [shape[1] * plane, plane] + [row[i] * strides[i] for i in range(k)] + [row[i] * dil[i] for i in range(k)]
    return f"(strided-view (contiguous {x}) :size {dims(size)} :stride {dims(stride)})"


def _max_fill(n: N) -> str:
    if n.is_float():
        return "-inf"
    if n.dt() == "bool":
        raise n.fail("max pooling of bool is not supported")
    info = np.iinfo(np.dtype({"i": "int", "u": "uint"}[n.dt()[0]] + n.dt()[1:]))
    return str(int(info.min))


def max_pool_with_indices(n: N) -> list[str]:
    """MaxPool's values and Indices: the flat input index (batch and channel included; spatial dims
    row-major, or column-major for storage_order=1) of the first maximum in each window, as the
    reference's scan finds it. The first is the smallest row-major index among the window's cells
    equal to the maximum (padding cells excluded), found as a min over a constant index tensor.
    With NaNs the values and indices are torch's (the reference's scan skips NaNs, onnxruntime's too)."""
    s = n.int_shape()
    k = len(s) - 2
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1] * k))
    dil = list(n.a("dilations", [1] * k))
    order = n.a("storage_order", 0)
    if order and k != 2:
        raise n.fail("storage_order=1 is defined by the reference for 2-D pooling only")
    pads, _ = _pads(n, s, kernel, strides, dil)
    sp = s[2:]
    plane = int(np.prod(sp, dtype=np.int64))
    padded = [s[0], s[1]] + [sp[i] + pads[i] + pads[i + k] for i in range(k)]
    widths = [[0, 0], [0, 0]] + [[pads[i], pads[i + k]] for i in range(k)]
    xp = n.let(f"(pad {n.x(0)} {dims(widths)} :value {_max_fill(n)})") if any(pads) else n.x(0)
    red = ax_list(range(2 + k, 2 + 2 * k))
    big = plane + 1
    cells = np.full(padded[2:], big, np.int64)
    cells[tuple(slice(pads[i], pads[i] + sp[i]) for i in range(k))] = np.arange(plane).reshape(sp)
    try:
        vw = n.let(_windows(xp, padded, kernel, strides, dil))
        cw = _windows(const_tensor(n, cells.reshape([1, 1] + padded[2:])), [1, 1] + padded[2:], kernel, strides, dil)
    except ValueError as e:
        raise n.fail(str(e)) from None
    m = n.let(f"(max {vw} :axis {red} :keepdims true)")
    out = [s[0], s[1]] + [(padded[2 + i] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(k)]
    mo = n.let(f"(reshape {m} {dims(out)})")
    key = n.let(f"(min (where (= {vw} {m}) {cw} {big}) :axis {red})")
    if n.is_float():  # a NaN maximum (caten's max propagates NaN, as torch's) is the last NaN, as torch
        last = f"(max (where (not (= {vw} {vw})) {cw} -1) :axis {red})"
        key = n.let(f"(where (not (= {mo} {mo})) {last} {key})")
    if order:
        key = n.let(f"(+ (idiv {key} {sp[1]}) (* (mod {key} {sp[1]}) {sp[0]}))")
    offs = const_tensor(n, (np.arange(s[0] * s[1], dtype=np.int64) * plane).reshape(s[:2] + [1] * k))
    idx = f"(where (>= {key} {big}) -1 (+ {key} {offs}))"
    return [mo, idx]


def pool_nd(n: N, kind: str, x: str | None = None) -> str:
    """max / avg / sum ("lp": the caller powers x first) pooling over every spatial axis."""
    s = n.int_shape()
    k = len(s) - 2
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1] * k))
    dil = list(n.a("dilations", [1] * k))
    pads, base = _pads(n, s, kernel, strides, dil)
    x = n.x(0) if x is None else x
    widths = [[0, 0], [0, 0]] + [[pads[i], pads[i + k]] for i in range(k)]
    padded = [s[0], s[1]] + [s[2 + i] + pads[i] + pads[i + k] for i in range(k)]
    red = ax_list(range(2 + k, 2 + 2 * k))
    if kind == "max":
        if n.is_float():
            fill = "-inf"
        elif n.dt() == "bool":
            raise n.fail("max pooling of bool is not supported")
        else:
            info = np.iinfo(np.dtype({"i": "int", "u": "uint"}[n.dt()[0]] + n.dt()[1:]))
            fill = str(int(info.min))
        xp = n.let(f"(pad {x} {dims(widths)} :value {fill})") if any(pads) else x
        try:
            return f"(max {_windows(xp, padded, kernel, strides, dil)} :axis {red})"
        except ValueError as e:
            raise n.fail(str(e)) from None
    xp = n.let(f"(pad {x} {dims(widths)})") if any(pads) else x
    try:
        total = n.let(f"(sum {_windows(xp, padded, kernel, strides, dil)} :axis {red})")
    except ValueError as e:
        raise n.fail(str(e)) from None
    if kind == "sum":
        return total
    one = [1, 1] + s[2:]
    if n.a("count_include_pad", 0):
        # padding counts, but not the extra cells ceil_mode adds past the explicit pads
        inner = [1, 1] + [s[2 + i] + base[i] + base[i + k] for i in range(k)]
        cw = [[0, 0], [0, 0]] + [[0, padded[2 + i] - inner[2 + i]] for i in range(k)]
    else:
        inner, cw = one, widths
    cnt = n.let(f"(pad (full {dims(inner)} 1 :dtype {n.dt()}) {dims(cw)})")
    c = n.let(f"(sum {_windows(cnt, [1, 1] + padded[2:], kernel, strides, dil)} :axis {red})")
    return f"(/ {total} {c})"
