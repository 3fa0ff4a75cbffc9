"""torch's bilinear interpolation of uint8 images: its separable fixed-point kernel (the one
Pillow's resampling uses), not float math. Each axis's two taps have weights quantized to int16
at the precision torch picks, the sum is rounded by a half-unit and shifted, clamped to [0, 255]
and stored as uint8 before the next axis: the width first, then the height, an axis of unchanged
size skipped. The weights are computed here, host-side, with torch's own arithmetic; the sums
are exact integer ops, so every runtime gives torch's bytes."""

from __future__ import annotations

import numpy as np

from caten.tensor.nn.pooling import const, take_axis
from caten.tensor.tensor import Tensor


def _taps(n_in: int, n_out: int, align: bool, scale: float | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(source indices [n_out, 2], int16 weights [n_out, 2], precision bits) as torch's
    _compute_index_ranges_int16_weights for the triangle filter without antialiasing."""
    if align:
        s, delta = ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0), 0.5
    else:
        s, delta = (1.0 / scale if scale is not None and scale > 0 else n_in / n_out), 0.0
    idx = np.zeros((n_out, 2), np.int64)
    w = np.zeros((n_out, 2), np.float64)
    for i in range(n_out):
        center = s * (i + 0.5 - delta)
        lo = max(int(center - 1.0 + 0.5 + delta), 0)
        size = min(max(min(int(center + 1.0 + 0.5 + delta), n_in) - lo, 0), 2)
        ws = [max(0.0, 1.0 - abs(j + lo - center + 0.5 - delta)) for j in range(size)]
        total = sum(ws)
        idx[i] = lo
        for j, v in enumerate(ws):
            idx[i, j] = lo + j
            w[i, j] = v / total if total != 0.0 else v
    wt_max = float(w.max()) if w.size else 0.0
    prec = 0
    while prec < 22 and int(0.5 + wt_max * (1 << (prec + 1))) < (1 << 15):
        prec += 1
    q = w * (1 << prec)
    return idx, np.where(q < 0, (q - 0.5).astype(np.int64), (q + 0.5).astype(np.int64)), prec


def _axis(x: Tensor, ax: int, n_out: int, align: bool, scale: float | None) -> Tensor:
    idx, q, prec = _taps(int(x.shape[ax]), n_out, align, scale)
    taps = take_axis(x.cast("i32"), ax, idx)  # [..., n_out, 2, ...]
    shape = [1] * taps.ndim
    shape[ax], shape[ax + 1] = n_out, 2
    acc = (taps * const(taps, q.reshape(shape), np.int32)).sum(dim=ax + 1) + (1 << max(prec - 1, 0))
    return (acc // (1 << prec)).clamp(0, 255).cast("u8")


def bilinear_u8(x: Tensor, outs: list[int], scales: list[float | None], align: bool) -> Tensor:
    """[N, C, H, W] uint8 resized to outs, torch's bytes."""
    y = x
    for ax in (3, 2):
        if outs[ax - 2] != int(x.shape[ax]):
            y = _axis(y, ax, outs[ax - 2], align, scales[ax - 2])
    return y
