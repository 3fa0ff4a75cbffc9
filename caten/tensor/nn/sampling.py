"""torch.nn.functional's sampling at computed positions and its distances: affine_grid, grid_sample
(bilinear, nearest and bicubic over 4-D inputs; zeros, border and reflection padding), cosine_similarity and
pairwise_distance.

grid_sample gathers by data-dependent flat indices (`take-along-axis`, whose gradient scatter-adds
into the input) and weighs the corners exactly as torch's kernel; the border and reflection
coordinate maps are written with `where` so their gradients are torch's (0 at and beyond a clip).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.nn.pooling import FLOATS, const
from caten.tensor.tensor import Tensor, apply

__all__ = ["affine_grid", "grid_sample", "cosine_similarity", "pairwise_distance"]


def _zero(x: Tensor) -> Tensor:
    return const(x, np.zeros((), np_dtype(x.dtype)))


def _norm2(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    """sqrt(sum x^2) whose gradient is x / norm, 0 where the norm is 0 (torch's norm backward)."""
    s = (x * x).sum(dim=dim, keepdim=keepdim)
    pos = s > 0
    return Tensor.where(pos, Tensor.where(pos, s, 1.0).sqrt(), 0.0)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """torch's: sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps))) along dim, the clamp made under
    no_grad (the norm's gradient passes as if unclamped)."""
    for t in (x1, x2):
        if t.dtype not in FLOATS:
            raise Error(f"cosine_similarity: takes floating tensors, got {t.dtype}")
    shape = tuple(np.broadcast_shapes(x1.shape, x2.shape))
    a = x1.expand(*shape) if x1.shape != shape else x1
    b = x2.expand(*shape) if x2.shape != shape else x2

    def clamped(t: Tensor) -> Tensor:
        n = _norm2(t, dim, True)
        return Tensor.where(n >= eps, n, (n - n.detach()) + eps)

    return ((a / clamped(a)) * (b / clamped(b))).sum(dim=dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """torch's: the p-norm of x1 - x2 + eps along the last dim."""
    d = x1 - x2 + eps
    dim = -1 if d.ndim else 0
    if d.ndim == 0:
        raise Error("pairwise_distance: takes tensors of at least one dim")
    if p == 2:
        return _norm2(d, dim, keepdim)
    if p == 1:
        return d.abs().sum(dim=dim, keepdim=keepdim)
    if p == float("inf"):
        return d.abs().amax(dim=dim, keepdim=keepdim)
    if p <= 0:
        raise Error(f"pairwise_distance: p = {p} is not supported", hint="p > 0 or inf")
    return (d.abs() ** p).sum(dim=dim, keepdim=keepdim) ** (1.0 / p)


# grids -------------------------------------------------------------------------------------------
def _base(n: int, align: bool) -> np.ndarray:
    """torch's linspace_from_neg_one."""
    if n <= 1:
        return np.zeros(max(n, 0))
    g = np.linspace(-1.0, 1.0, n)
    return g if align else g * (n - 1) / n


def affine_grid(theta: Tensor, size: Any, align_corners: bool | None = None) -> Tensor:
    """The [N, H, W, 2] (or [N, D, H, W, 3]) sampling grid of the affine maps theta [N, 2, 3] ([N, 3, 4])."""
    size = [int(s) for s in size]
    if theta.dtype not in FLOATS:
        raise Error(f"affine_grid: theta must be floating, got {theta.dtype}")
    nd = len(size) - 2
    if nd not in (2, 3) or theta.shape != (size[0], nd, nd + 1):
        raise Error(f"affine_grid: theta {list(theta.shape)} for size {size}",
                    hint="theta [N, 2, 3] with a 4-D size, or [N, 3, 4] with a 5-D size")
    align = bool(align_corners)
    sp = size[2:]
    mesh = np.meshgrid(*[_base(n, align) for n in sp], indexing="ij")
    coords = [mesh[nd - 1 - i] for i in range(nd)] + [np.ones(sp)]  # x (the last dim) first
    base = np.stack(coords, -1).reshape(-1, nd + 1)  # [prod(sp), nd + 1]
    grid = const(theta, base) @ theta.permute(0, 2, 1)  # [N, prod(sp), nd]
    return grid.reshape(size[0], *sp, nd)


def _unnormalize(c: Tensor, n: int, align: bool) -> Tensor:
    return (c + 1) / 2 * (n - 1) if align else ((c + 1) * n - 1) / 2


def _clip(c: Tensor, n: int) -> Tensor:
    """torch's clip_coordinates with its gradient: 0 at and beyond the ends."""
    return Tensor.where(c <= 0, 0.0, Tensor.where(c >= n - 1, float(n - 1), c))


def _reflect(c: Tensor, lo2: int, hi2: int) -> Tensor:
    """torch's reflect_coordinates over [lo2 / 2, hi2 / 2]."""
    if lo2 == hi2:
        return c * 0
    mn, span = lo2 / 2, (hi2 - lo2) / 2
    v = (c - mn).abs()
    flips = (v / span).floor()
    extra = v.fmod(span)
    even = flips.fmod(2) == 0
    return Tensor.where(even, extra + mn, (span - extra) + mn)


def _source(c: Tensor, n: int, padding_mode: str, align: bool) -> Tensor:
    return _pad_coord(_unnormalize(c, n, align), n, padding_mode, align)


def _pad_coord(c: Tensor, n: int, padding_mode: str, align: bool) -> Tensor:
    """torch's compute_coordinates: border clips, reflection reflects then clips."""
    if padding_mode == "border":
        return _clip(c, n)
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (n - 1)) if align else _reflect(c, -1, 2 * n - 1)
        return _clip(c, n)
    return c


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """torch's grid_sample for input [N, C, H, W] and grid [N, Ho, Wo, 2] of (x, y) in [-1, 1]."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise Error(f"grid_sample: mode {mode!r} is not one of bilinear, nearest, bicubic")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise Error(f"grid_sample: padding_mode {padding_mode!r} is not one of zeros, border, reflection")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise Error(f"grid_sample: input {list(input.shape)} and grid {list(grid.shape)}",
                    hint="input [N, C, H, W] and grid [N, Ho, Wo, 2] (5-D volumes are not supported)")
    if input.dtype not in FLOATS or grid.dtype != input.dtype:
        raise Error(f"grid_sample: input {input.dtype} and grid {grid.dtype} must be the same floating dtype")
    h, w = int(input.shape[2]), int(input.shape[3])
    if h == 0 or w == 0:
        raise Error(f"grid_sample: empty spatial dims {[h, w]}")
    align = bool(align_corners)
    if mode == "bicubic":
        return _bicubic(input, grid, padding_mode, align)
    ix = _source(grid[..., 0], w, padding_mode, align)
    iy = _source(grid[..., 1], h, padding_mode, align)

    def corner(xi: Tensor, yi: Tensor) -> Tensor:
        return _at(input, xi, yi)

    if mode == "nearest":
        return corner(ix.round(), iy.round())
    x0, y0 = ix.floor().detach(), iy.floor().detach()
    x1, y1 = x0 + 1, y0 + 1
    nw, ne = (x1 - ix) * (y1 - iy), (ix - x0) * (y1 - iy)
    sw, se = (x1 - ix) * (iy - y0), (ix - x0) * (iy - y0)
    out = corner(x0, y0) * nw.unsqueeze(1) + corner(x1, y0) * ne.unsqueeze(1)
    return out + corner(x0, y1) * sw.unsqueeze(1) + corner(x1, y1) * se.unsqueeze(1)


def _at(input: Tensor, xi: Tensor, yi: Tensor) -> Tensor:
    """input [N, C, H, W] at the integer-valued float positions (xi, yi) [N, Ho, Wo], 0 outside."""
    n, c, h, w = (int(s) for s in input.shape)
    ho, wo = int(xi.shape[1]), int(xi.shape[2])
    inb = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
    idx = Tensor.where(inb, yi * w + xi, 0.0).cast("i64").reshape(n, 1, ho * wo).expand(n, c, ho * wo)
    v = apply("take-along-axis", [input.reshape(n, c, h * w), idx], {"axis": 2}).reshape(n, c, ho, wo)
    return Tensor.where(inb.unsqueeze(1), v, _zero(input))


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """torch's get_cubic_upsample_coefficients with A = -0.75 (Keys)."""
    A = -0.75

    def c1(v: Tensor) -> Tensor:
        return ((A + 2) * v - (A + 3)) * v * v + 1

    def c2(v: Tensor) -> Tensor:
        return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A

    return [c2(t + 1), c1(t), c1(1 - t), c2(2 - t)]


def _bicubic(input: Tensor, grid: Tensor, padding_mode: str, align: bool) -> Tensor:
    """torch's bicubic grid_sample: 4x4 taps around the unpadded source point, each tap's position
    mapped by the padding mode, rows interpolated first, then the column."""
    h, w = int(input.shape[2]), int(input.shape[3])
    ix, iy = _unnormalize(grid[..., 0], w, align), _unnormalize(grid[..., 1], h, align)
    x0, y0 = ix.floor().detach(), iy.floor().detach()
    wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)
    out = None
    for j in range(4):
        yj = _pad_coord(y0 + (j - 1), h, padding_mode, align).detach()
        row = None
        for i in range(4):
            xi = _pad_coord(x0 + (i - 1), w, padding_mode, align).detach()
            term = _at(input, xi, yj) * wx[i].unsqueeze(1)
            row = term if row is None else row + term
        out = row * wy[j].unsqueeze(1) if out is None else out + row * wy[j].unsqueeze(1)
    return out
