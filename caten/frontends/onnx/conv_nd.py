"""N-D convolution (3-D and up) and N-D transposed convolution (1-D, 3-D and up): the padded (for
the transposed one: zero-dilated) input seen as [N C *out *kernel] windows, contracted with the
kernel per group by one batched matmul."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, ax_list, dims
from caten.frontends.onnx.pool_nd import _conv_pads, _windows


def _transpose_pads(n: N, s: list, k: list, st: list, dl: list, op: list) -> list[int]:
    """ConvTranspose's pads (all begins, then all ends), from output_shape / auto_pad when given."""
    r = len(k)
    pads = list(n.a("pads", [0] * (2 * r)))
    out_shape, auto = n.a("output_shape"), n.a("auto_pad", "NOTSET")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = list(out_shape)[-r:] if out_shape is not None else [s[2 + i] * st[i] for i in range(r)]
        for i in range(r):
            total = st[i] * (s[2 + i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - outs[i]
            big, small = total - total // 2, total // 2
            pads[i], pads[i + r] = (small, big) if auto == "SAME_UPPER" else (big, small)
    return pads


def conv_transpose_nd(n: N, s: list) -> str:
    """A transposed convolution over any number of spatial dims: the zero-dilated, padded input seen
    as [N C *out *kernel] windows, contracted with the flipped kernel per group by one batched matmul."""
    s = n.int_shape()
    w = n.int_shape(1)
    r = len(s) - 2
    g = n.a("group", 1)
    k = w[2:]
    st = list(n.a("strides", [1] * r))
    dl = list(n.a("dilations", [1] * r))
    op = list(n.a("output_padding", [0] * r))
    pads = _transpose_pads(n, s, k, st, dl, op)
    b, c, sp = s[0], s[1], s[2:]
    x = n.x(0)
    if any(v != 1 for v in st):
        split = [b, c] + [v for i in range(r) for v in (sp[i], 1)]
        widths = [[0, 0], [0, 0]] + [p for i in range(r) for p in ([0, 0], [0, st[i] - 1])]
        grown = dims([b, c] + [sp[i] * st[i] for i in range(r)])
        up = f"(reshape (pad (reshape {x} {dims(split)}) {dims(widths)}) {grown})"
        keep = " ".join(f"[0 {(sp[i] - 1) * st[i] + 1} 1]" for i in range(r))
        x = n.let(f"(slice {up} [0 {b} 1] [0 {c} 1] {keep})")
    size = [(sp[i] - 1) * st[i] + 1 for i in range(r)]
    lo = [dl[i] * (k[i] - 1) - pads[i] for i in range(r)]
    hi = [dl[i] * (k[i] - 1) - pads[i + r] + op[i] for i in range(r)]
    if any(v > 0 for v in lo + hi):
        x = n.let(f"(pad {x} {dims([[0, 0], [0, 0]] + [[max(lo[i], 0), max(hi[i], 0)] for i in range(r)])})")
        size = [size[i] + max(lo[i], 0) + max(hi[i], 0) for i in range(r)]
    if any(v < 0 for v in lo + hi):
        specs = " ".join(f"[{-min(lo[i], 0)} {size[i] + min(hi[i], 0)} 1]" for i in range(r))
        x = n.let(f"(slice {x} [0 {b} 1] [0 {c} 1] {specs})")
        size = [size[i] + min(lo[i], 0) + min(hi[i], 0) for i in range(r)]
    og, cg, pk = w[1], c // g, int(np.prod(k))
    wt = (f"(reshape (permute (reshape (flip {n.x(1)} :axis {ax_list(range(2, 2 + r))}) [{g} {cg} {og} {pk}]) "
          f"[0 1 3 2]) [{g} {cg * pk} {og}])")
    return grouped_conv(n, x, [b, c] + size, k, [1] * r, dl, g, wt, g * og)


def grouped_conv(n: N, x: str, shape: list[int], k: list[int], strides: list[int], dil: list[int], g: int,
                 wt: str, oc: int) -> str:
    """The convolution of x (already padded) with the weights wt as [g, cin/g * prod(k), oc/g]: its
    [N C *out *kernel] windows contracted per group by one batched matmul, plus input 2 as bias."""
    b, c, r = shape[0], shape[1], len(k)
    try:
        win = _windows(x, shape, k, strides, dil)
    except ValueError as e:
        raise n.fail(str(e)) from None
    out = [(shape[2 + i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(r)]
    po, pk, cg, ocg = int(np.prod(out)), int(np.prod(k)), c // g, oc // g
    a = f"(reshape (permute (reshape {win} [{b} {g} {cg} {po} {pk}]) [1 0 3 2 4]) [{g} {b * po} {cg * pk}])"
    y = f"(permute (reshape (matmul (contiguous {a}) (contiguous {wt})) [{g} {b} {po} {ocg}]) [1 0 3 2])"
    y = f"(reshape (contiguous {y}) {dims([b, oc] + out)})"
    if n.has(2):
        y = f"(+ {y} (reshape {n.x(2)} {dims([1, oc] + [1] * r)}))"
    return y


def conv_nd(n: N, s: list[int]) -> str:
    """Conv over any number of spatial dims (3-D and up) as grouped_conv of the zero-padded input."""
    s = n.int_shape()
    w = n.int_shape(1)
    r = len(s) - 2
    g = int(n.a("group", 1))
    k = w[2:]
    strides = list(n.a("strides", [1] * r))
    dil = list(n.a("dilations", [1] * r))
    pads = _conv_pads(n, s[2:], k, strides, dil)
    x = n.x(0)
    if any(pads):
        x = n.let(f"(pad {x} {dims([[0, 0], [0, 0]] + [[pads[i], pads[i + r]] for i in range(r)])})")
    size = [s[2 + i] + pads[i] + pads[i + r] for i in range(r)]
    oc, pk = w[0], int(np.prod(k))
    wt = f"(permute (reshape {n.x(1)} [{g} {oc // g} {w[1] * pk}]) [0 2 1])"
    return grouped_conv(n, x, [s[0], s[1]] + size, k, strides, dil, g, wt, oc)
