"""ONNX NonMaxSuppression: its output's length depends on the boxes' values, so (as NonZero and
Unique in dynamic.py) it is computed here, from constant or specialized inputs, exactly as onnx's
reference defines it (a run-time input is refused by `N.c`)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, handler


def _extent(b: np.ndarray, center: bool) -> tuple:
    """(x_min, x_max, y_min, y_max) of one box in its own dtype: corners [y1 x1 y2 x2] in either
    order, or [x_center y_center width height]."""
    if center:
        hw, hh = b[2] / 2, b[3] / 2
        return b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh
    x = (b[1], b[3]) if b[1] < b[3] else (b[3], b[1])
    y = (b[0], b[2]) if b[0] < b[2] else (b[2], b[0])
    return x[0], x[1], y[0], y[1]


def _overlaps(a: np.ndarray, b: np.ndarray, center: bool, iou: np.generic) -> bool:
    """Whether box a suppresses b: intersection over union > iou (degenerate boxes never do)."""
    ax0, ax1, ay0, ay1 = _extent(a, center)
    bx0, bx1, by0, by1 = _extent(b, center)
    ix0, ix1 = max(ax0, bx0), min(ax1, bx1)
    if ix1 <= ix0:
        return False
    iy0, iy1 = max(ay0, by0), min(ay1, by1)
    if iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    if inter <= 0:
        return False
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > iou)


def _first(n: N, i: int, what: str) -> np.generic | None:
    if not n.has(i):
        return None
    v = np.asarray(n.c(i, what)).reshape(-1)
    return v[0] if v.size else None


@handler("NonMaxSuppression")
def _nms(n: N) -> list[None]:
    boxes = np.asarray(n.c(0, "boxes (NonMaxSuppression's output length depends on them)"))
    scores = np.asarray(n.c(1, "scores (NonMaxSuppression's output length depends on them)"))
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
        raise n.fail(f"boxes {boxes.shape} and scores {scores.shape} are not [B, N, 4] and [B, C, N]")
    top = _first(n, 2, "max_output_boxes_per_class")
    top = 0 if top is None else max(int(top), 0)
    iou = _first(n, 3, "iou_threshold")
    iou = boxes.dtype.type(0) if iou is None else iou
    floor = _first(n, 4, "score_threshold")
    center = bool(n.a("center_point_box", 0))
    picked = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(s.shape[0]) if floor is None or s[i] > floor]
            cand.sort(key=lambda i: (-s[i], i))  # highest score first, the lower index among ties
            kept: list[int] = []
            for i in cand:
                if len(kept) >= top:
                    break
                if not any(_overlaps(boxes[b, i], boxes[b, k], center, iou) for k in kept):
                    kept.append(i)
                    picked.append((b, c, i))
    n.g.consts[n.node.output[0]] = np.array(picked, dtype=np.int64).reshape(-1, 3)
    return [None]
