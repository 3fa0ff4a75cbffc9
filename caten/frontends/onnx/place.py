"""ONNX lowerings that place values back into an image: Col2Im (the sum of each kernel offset's
column block, zero-dilated by the stride and shifted into place) and MaxUnpool (a scatter)."""

from __future__ import annotations

import itertools

import numpy as np

from caten.frontends.onnx.node import N, dims, handler


@handler("Col2Im")
def _col2im(n: N) -> str:
    s = n.int_shape(0)
    image = [int(v) for v in np.asarray(n.c(1, "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(n.c(2, "block_shape")).reshape(-1)]
    k = len(image)
    dil = list(n.a("dilations", [1] * k))
    st = list(n.a("strides", [1] * k))
    pads = list(n.a("pads", [0] * (2 * k)))
    full = [image[i] + pads[i] + pads[i + k] for i in range(k)]
    out = [(full[i] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(k)]
    nb, kk, ln = s
    c = kk // int(np.prod(block))
    if int(np.prod(out)) != ln or c * int(np.prod(block)) != kk:
        raise n.fail(f"input {s} does not match image {image} and block {block}")
    x = n.let(f"(reshape {n.x(0)} {dims([nb, c] + block + out)})")
    span = [(out[i] - 1) * st[i] + 1 for i in range(k)]
    pieces = []
    for off in itertools.product(*[range(b) for b in block]):
        sl = " ".join(f"[{o} {o + 1} 1]" for o in off)
        p = f"(reshape (slice {x} [0 {nb} 1] [0 {c} 1] {sl}) {dims([nb, c] + out)})"
        if any(v != 1 for v in st):
            inter = [v for i in range(k) for v in (out[i], 1)]
            widths = [[0, 0], [0, 0]] + [w for i in range(k) for w in ([0, 0], [0, st[i] - 1])]
            up = f"(reshape (pad (reshape {p} {dims([nb, c] + inter)}) {dims(widths)}) " \
                 f"{dims([nb, c] + [out[i] * st[i] for i in range(k)])})"
            p = f"(slice {up} [0 {nb} 1] [0 {c} 1] " + " ".join(f"[0 {v} 1]" for v in span) + ")"
        lo = [off[i] * dil[i] for i in range(k)]
        widths = [[0, 0], [0, 0]] + [[lo[i], full[i] - lo[i] - span[i]] for i in range(k)]
        pieces.append(n.let(f"(pad {p} {dims(widths)})"))
    total = n.let(f"(+ {' '.join(pieces)})" if len(pieces) > 1 else f"(contiguous {pieces[0]})")
    crop = " ".join(f"[{pads[i]} {pads[i] + image[i]} 1]" for i in range(k))
    return f"(contiguous (slice {total} [0 {nb} 1] [0 {c} 1] {crop}))"


@handler("MaxUnpool")
def _max_unpool(n: N) -> str:
    """Y = zeros, Y.flat[I] = X: I indexes the whole output tensor flattened, as MaxPool's Indices."""
    s = n.int_shape(0)
    k = len(s) - 2
    kernel = list(n.a("kernel_shape"))
    st = list(n.a("strides", [1] * k))
    pads = list(n.a("pads", [0] * (2 * k)))
    inferred = s[:2] + [(s[2 + i] - 1) * st[i] + kernel[i] - pads[i] - pads[i + k] for i in range(k)]
    total = int(np.prod(inferred, dtype=np.int64))
    zeros = f"(full [{total}] 0 :dtype {n.dt()})"
    flat = f"(scatter {zeros} (reshape {n.x(1)} [-1]) (reshape {n.x(0)} [-1]) :axis 0)"
    y = f"(reshape {flat} {dims(inferred)})"
    if not n.has(2):
        return y
    # a given output_shape holds the inferred block at its origin, zeros past it (the reference)
    shape = [int(v) for v in np.asarray(n.c(2, "output_shape")).reshape(-1)]
    if any(a < b for a, b in zip(shape, inferred)):
        raise n.fail(f"output_shape {shape} is smaller than the unpooled {inferred}")
    return f"(pad {y} {dims([[0, a - b] for a, b in zip(shape, inferred)])})"


@handler("AffineGrid")
def _affine_grid(n: N) -> str:
    """grid[n, *p] = theta[n] @ (x, y[, z], 1) at each output position p: the base grid (a function
    of the known size alone) is built here in float64 as the reference builds it, and the product
    is taken in float64 and rounded once."""
    size = [int(v) for v in np.asarray(n.c(1, "size")).reshape(-1)]
    sp = size[2:]
    k = len(sp)
    if k not in (2, 3):
        raise n.fail(f"a {k}-D affine grid is not defined")
    coords = []
    for d in sp:
        if n.a("align_corners", 0):
            a = np.arange(-1, 1 + 0.0001, 2.0 / (d - 1)) if d > 1 else np.array([-1.0])
        else:
            a = np.arange(-1 + 1.0 / d, 1, 2.0 / d)
        coords.append(a[:d])
    mesh = np.meshgrid(*coords, indexing="ij")  # D/H/W order
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=0)  # [k+1, P]
    name = f"__affine_{len(n.g.consts)}"
    n.g.consts[name] = base
    g = f"(matmul (cast {n.x(0)} f64) {n.g.tensor(name)})"  # [N k P]
    return f"(cast (reshape (permute {g} [0 2 1]) {dims([size[0]] + sp + [k])}) {n.dt()})"
