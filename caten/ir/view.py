"""Views: shape + strides + offset + mask over a source laid out contiguously.

Every movement op (reshape, permute, expand, shrink, pad, flip, step) is a `View`, never a
copy. A view indexes its source as if the source were a contiguous array of its own logical
shape; positions outside `mask` read as zero. Movement ops compose into one view when they
can (all but some reshapes); `None` from `reshape` tells the caller to stack a new view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from caten.ir import dims as D
from caten.ir.dims import Dim


def contiguous_strides(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    out: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        out.append(0 if d == 1 else acc)
        acc = D.mul(acc, d)
    return tuple(reversed(out))


@dataclass(frozen=True)
class View:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0
    mask: tuple[tuple[Dim, Dim], ...] | None = None

    @staticmethod
    def of(shape: Sequence[Dim]) -> View:
        return View(tuple(shape), contiguous_strides(shape))

    def __post_init__(self) -> None:
        if self.mask is not None and all(lo == 0 and hi == d for (lo, hi), d in zip(self.mask, self.shape)):
            object.__setattr__(self, "mask", None)
        # a size-1 axis is never stepped along: canonical stride 0 makes equal views hash equal
        object.__setattr__(self, "strides", tuple(0 if d == 1 else s for d, s in zip(self.shape, self.strides)))

    @property
    def contiguous(self) -> bool:
        return self.offset == 0 and self.mask is None and self.strides == contiguous_strides(self.shape)

    def _full_mask(self) -> tuple[tuple[Dim, Dim], ...]:
        return self.mask if self.mask is not None else tuple((0, d) for d in self.shape)

    # movement ------------------------------------------------------------------------
    def permute(self, perm: Sequence[int]) -> View:
        m = self.mask
        return View(tuple(self.shape[p] for p in perm), tuple(self.strides[p] for p in perm), self.offset,
                    None if m is None else tuple(m[p] for p in perm))

    def expand(self, shape: Sequence[Dim]) -> View:
        strides = tuple(s if old == new else 0 for old, new, s in zip(self.shape, shape, self.strides))
        mask = None
        if self.mask is not None:
            # a size-1 axis is valid everywhere or nowhere (lo <= 0 < hi, with lo >= 0 here): an
            # empty mask such as (1, 1) must stay empty, not become (0, new)
            mask = tuple(m if old == new else (D.mul(D.dmin(m[0], 1), new), D.mul(D.dmax(D.dmin(m[1], 1), 0), new))
                         for old, new, m in zip(self.shape, shape, self.mask))
        return View(tuple(shape), strides, self.offset, mask)

    def shrink(self, bounds: Sequence[tuple[Dim, Dim]]) -> View:
        offset = self.offset
        for (s, _), st in zip(bounds, self.strides):
            offset = D.add(offset, D.mul(s, st))
        shape = tuple(D.add(e, D.mul(s, -1)) for s, e in bounds)
        mask = None
        if self.mask is not None:
            mask = tuple((D.dmax(D.add(lo, D.mul(s, -1)), 0), D.dmin(D.add(hi, D.mul(s, -1)), n))
                         for (lo, hi), (s, _), n in zip(self.mask, bounds, shape))
        return View(shape, self.strides, offset, mask)

    def pad(self, widths: Sequence[tuple[Dim, Dim]]) -> View:
        offset = self.offset
        for (lo, _), st in zip(widths, self.strides):
            offset = D.add(offset, D.mul(D.mul(lo, -1), st))
        shape = tuple(D.add(D.add(d, lo), hi) for d, (lo, hi) in zip(self.shape, widths))
        mask = tuple((D.add(mlo, lo), D.add(mhi, lo)) for (mlo, mhi), (lo, _) in zip(self._full_mask(), widths))
        return View(shape, self.strides, offset, mask)

    def flip(self, axes: Sequence[int]) -> View:
        strides, offset = list(self.strides), self.offset
        mask = list(self._full_mask())
        for a in axes:
            offset = D.add(offset, D.mul(D.add(self.shape[a], -1), strides[a]))
            strides[a] = D.mul(strides[a], -1)
            lo, hi = mask[a]
            mask[a] = (D.add(self.shape[a], D.mul(hi, -1)), D.add(self.shape[a], D.mul(lo, -1)))
        return View(self.shape, tuple(strides), offset, tuple(mask))

    def step(self, steps: Sequence[int]) -> View:
        """Every k-th element along each axis (k >= 1), starting at 0."""
        def ceil_div(a: Dim, k: int) -> Dim:
            return D.floordiv(D.add(a, k - 1), k)
        shape = tuple(ceil_div(d, k) for d, k in zip(self.shape, steps))
        strides = tuple(D.mul(s, k) for s, k in zip(self.strides, steps))
        mask = None
        if self.mask is not None:
            mask = tuple((ceil_div(lo, k), ceil_div(hi, k)) for (lo, hi), k in zip(self.mask, steps))
        return View(shape, strides, self.offset, mask)

    def reshape(self, shape: Sequence[Dim]) -> View | None:
        """The merged view, or None when the reshape needs a view of its own on top."""
        shape = tuple(shape)
        if self.contiguous:
            return View.of(shape)
        if [d for d in self.shape if d != 1] == [d for d in shape if d != 1]:
            # only size-1 axes come or go: carry each real axis across
            real = iter([(s, m) for d, s, m in zip(self.shape, self.strides, self._full_mask()) if d != 1])
            strides, mask = [], []
            for d in shape:
                if d == 1:
                    strides.append(0)
                    mask.append((0, 1))
                else:
                    s, m = next(real)
                    strides.append(s)
                    mask.append(m)
            # a size-1 axis whose one position lies outside its mask (an empty mask: (0, 0), (1, 1),
            # or one a shrink left inverted, such as (0, -1)) makes the whole view read zeros
            dead = self.mask is not None and any(
                isinstance(lo, int) and isinstance(hi, int) and not lo <= 0 < hi
                for d, (lo, hi) in zip(self.shape, self.mask) if d == 1)
            if dead:
                return None
            return View(shape, tuple(strides), self.offset, None if self.mask is None else tuple(mask))
        if self.mask is None:
            strides = _restride(self.shape, self.strides, shape)
            if strides is not None:
                return View(shape, strides, self.offset)
        return None

    # reference evaluation ------------------------------------------------------------
    def apply(self, src: np.ndarray, env: Mapping[str, int]) -> np.ndarray:
        """Index `src` (any layout, read in logical order) through this view."""
        shape = tuple(D.evaluate(d, env) for d in self.shape)
        flat = np.ascontiguousarray(src).reshape(-1)
        idx = np.full(shape, D.evaluate(self.offset, env), dtype=np.int64)
        valid = np.ones(shape, dtype=bool)
        for ax, n in enumerate(shape):
            r = np.arange(n, dtype=np.int64).reshape([n if i == ax else 1 for i in range(len(shape))])
            idx = idx + r * D.evaluate(self.strides[ax], env)
            if self.mask is not None:
                lo, hi = (D.evaluate(b, env) for b in self.mask[ax])
                valid = valid & (r >= lo) & (r < hi)
        if flat.size == 0:
            return np.zeros(shape, dtype=src.dtype)
        out = flat[np.clip(idx, 0, flat.size - 1)]
        if self.mask is not None:
            out = np.where(valid, out, np.zeros((), dtype=src.dtype))
        return out.astype(src.dtype, copy=False)

    def __str__(self) -> str:
        s = f"shape=[{' '.join(map(str, self.shape))}] strides=[{' '.join(map(str, self.strides))}]"
        if self.offset != 0:
            s += f" offset={self.offset}"
        if self.mask is not None:
            s += " mask=[" + " ".join(f"{lo}:{hi}" for lo, hi in self.mask) + "]"
        return s


def _restride(old: Sequence[Dim], strides: Sequence[Dim], new: Sequence[Dim]) -> tuple[int, ...] | None:
    """Strides that give the reshape of an unmasked strided view without a second view (numpy's
    no-copy reshape): each group of old axes that merges or splits must be contiguous within
    itself. Static sizes only; None when some group is not (the caller stacks a view)."""
    if not all(isinstance(d, int) and d > 0 for d in (*old, *new)) or not all(isinstance(x, int) for x in strides):
        return None
    axes = [(d, st) for d, st in zip(old, strides) if d != 1]
    out = [0] * len(new)
    ni, nj, oi, oj = 0, 1, 0, 1
    while ni < len(new) and oi < len(axes):
        np_, op = new[ni], axes[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= axes[oj][0]
                oj += 1
        if any(axes[k][1] != axes[k + 1][0] * axes[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = axes[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    return tuple(out)
