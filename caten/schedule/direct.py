"""Direct convolution: whether a GEMM's b reads a buffer through sliding windows that its
register tiles can load straight from memory, with no packed copy.

A stride-1 convolution whose output keeps its input's width ("same" padding) reads, for each
reduced (channel, kh, kw), its input at the output's merged position q = h*W + w plus a fixed
offset: b[k, q] = x[base + coef . k + q] where the padding's bounds on h + kh and w + kw hold,
zero elsewhere. A tile of consecutive q is then one (masked) vector load per k from the image
itself -- the packed-panel GEMM copies that image nine times over (im2col) before it multiplies.
The analysis composes b's views into one affine index and a set of bounds over the source axes
of the contraction; `Direct` records them, with the reduced axes split into taps (the window
positions, a static few, each with its offset and its lane bounds) and an inner axis (the
channels, a plain stride)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.ir.view import contiguous_strides

MAX_TAPS = 49  # window positions a tile function unrolls (7x7): larger windows keep the packed GEMM

Affine = tuple[dict[int, Dim], Dim]  # (source axis -> coefficient, constant)


@dataclass(frozen=True)
class Bound:
    """lo <= lane + sum(shift * tap) < hi: a padding bound on the lane coordinate `lane` (0: the
    output row q // width, 1: the column q % width) shifted by the window position."""
    lane: int
    shifts: tuple[int, ...]  # per tap axis (`Direct.taps`)
    lo: Dim
    hi: Dim


@dataclass(frozen=True)
class Direct:
    """How a direct tile reads b: element (batch, tap, inner, q) of b is base[index] with
    index = const + sum(coef[a] * coordinate a) + q, valid where every bound holds."""
    base: Node  # what b's views read: a buffer (the schedule realizes it if it is not one)
    taps: tuple[int, ...]  # reduced axes walked as window positions, outermost first
    extents: tuple[int, ...]
    inner: int | None  # the reduced axis of a tap's inner loop (input channels), if any
    coef: tuple[tuple[int, Dim], ...]  # index coefficient per batch, tap and inner axis
    const: Dim
    width: Dim  # q = row * width + column
    bounds: tuple[Bound, ...]

    def positions(self) -> list[tuple[int, ...]]:
        """Each tap's coordinates, in the order of the K index (the inner axis outer, taps inner)."""
        return list(itertools.product(*(range(e) for e in self.extents)))

    def coefficient(self, axis: int) -> Dim:
        return dict(self.coef).get(axis, 0)

    @property
    def red(self) -> tuple[int, ...]:
        """The reduced axes in K's order: the inner axis, then the taps (a channel's window
        positions side by side: they read the same lines of the image)."""
        return ((self.inner,) if self.inner is not None else ()) + self.taps


def _eq(a: Dim, b: Dim) -> bool:
    return D.add(a, D.mul(b, -1)) == 0


def _nonneg(d: Dim) -> bool:
    lo = D.least(d)
    return lo is not None and lo >= 0


def _range(f: Affine, ext: Sequence[Dim]) -> tuple[Dim, Dim] | None:
    """The least and greatest value of f over the source axes (each in [0, ext - 1])."""
    terms, const = f
    lo = hi = const
    for a, c in terms.items():
        s = D.sign_of(c)
        if s is None:
            return None
        span = D.mul(c, D.add(ext[a], -1))
        lo, hi = (lo, D.add(hi, span)) if s > 0 else (D.add(lo, span), hi)
    return lo, hi


def _unflatten(flat: Affine, shape: Sequence[Dim], ext: Sequence[Dim]) -> list[Affine] | None:
    """The coordinates in `shape` (contiguous) of a flat offset, when each term falls into one
    axis with no carry (windows over a padded image: n, c, h + kh, w + kw); None otherwise."""
    cs = contiguous_strides(shape)  # (0 for a size-1 axis, which takes no term)
    out: list[Affine] = [({}, 0) for _ in shape]
    terms, const = flat
    for a, c in terms.items():
        for t, (n, s) in enumerate(zip(shape, cs)):
            q = D.exact_div(c, s) if n != 1 else None
            if q is not None:
                out[t][0][a] = D.add(out[t][0].get(a, 0), q)
                break
        else:
            return None
    if const != 0:
        if isinstance(const, int) and all(isinstance(s, int) for s in cs):
            if const < 0:
                return None
            for t, s in enumerate(cs):
                if shape[t] != 1:
                    q, const = divmod(const, s)
                    out[t] = (out[t][0], q)
        else:
            t = next((t for t, s in enumerate(cs) if shape[t] != 1 and D.exact_div(const, s) is not None), None)
            if t is None:
                return None
            out[t] = (out[t][0], D.exact_div(const, cs[t]))
    for f, n in zip(out, shape):  # no carry: every coordinate stays in its axis
        r = _range(f, ext)
        if r is None or not _nonneg(r[0]) or not _nonneg(D.add(D.add(n, -1), D.mul(r[1], -1))):
            return None
    return out


def compose(b: Node, ext: Sequence[Dim]) -> tuple[Node, Affine, list[tuple[Affine, Dim, Dim]]] | None:
    """b's chain of views as (the node they read, its affine index, [(coordinate, lo, hi)]
    bounds from the views' masks), over the source axes of extents `ext`."""
    coords: list[Affine] = [({a: 1}, 0) for a in range(len(ext))]
    bounds: list[tuple[Affine, Dim, Dim]] = []
    node = b
    while node.op is Op.VIEW:
        v = node.arg
        if v.mask is not None:
            for f, (lo, hi), n in zip(coords, v.mask, v.shape):
                if lo != 0 or hi != n:
                    bounds.append((f, lo, hi))
        terms: dict[int, Dim] = {}
        const = v.offset
        for (ft, fc), s in zip(coords, v.strides):
            if s == 0:
                continue
            for a, c in ft.items():
                terms[a] = D.add(terms.get(a, 0), D.mul(c, s))
            const = D.add(const, D.mul(fc, s))
        terms = {a: c for a, c in terms.items() if c != 0}
        nxt = node.src[0]
        if nxt.op is Op.VIEW:
            un = _unflatten((terms, const), nxt.shape, ext)
            if un is None:
                return None
            coords = un
        node = nxt
        flat = (terms, const)
    if node is b:
        return None
    return node, flat, bounds


def analyze(src: Node, bi: int, js: Sequence[int], red: Sequence[int], dtype_ok: bool = True) -> Direct | None:
    """The direct reading of operand `bi` of the contraction's product `src` whose merged
    columns are `js` (row, column or column alone) and reduced axes `red`, or None."""
    ext = src.shape
    if len(js) > 2 or not dtype_ok:
        return None
    got = compose(src.src[bi], ext)
    if got is None:
        return None
    base, (terms, const), raw = got
    if base.op in (Op.CONST, Op.INDEX) or base.dtype != src.dtype:
        return None
    jw = js[-1]
    jh = js[0] if len(js) == 2 else None
    width = ext[jw]
    if not _eq(terms.get(jw, 0), 1) or (jh is not None and not _eq(terms.get(jh, 0), width)):
        return None
    live = [a for a in red if ext[a] != 1]
    bounded = set()
    pending = []
    for (ft, fc), lo, hi in raw:
        ft = {a: c for a, c in ft.items() if c != 0 and ext[a] != 1}
        lanes = [a for a in ft if a in js]
        if len(lanes) != 1 or not _eq(ft[lanes[0]], 1) or any(a not in red for a in ft if a not in js):
            return None  # a bound on a batch axis, or on two lanes
        shifts = {a: c for a, c in ft.items() if a not in js}
        if any(not isinstance(c, int) for c in shifts.values()):
            return None
        bounded |= set(shifts)
        pending.append((0 if lanes[0] == jh else 1, shifts, D.add(lo, D.mul(fc, -1)), D.add(hi, D.mul(fc, -1))))
    free = [a for a in live if a not in bounded]
    if len(free) > 1:
        return None
    inner = free[0] if free else None
    taps = tuple(a for a in live if a != inner)
    extents = tuple(ext[a] for a in taps)
    if any(not isinstance(e, int) for e in extents):
        return None
    count = 1
    for e in extents:
        count *= e
    if count > MAX_TAPS or (not taps and not pending):
        return None  # no window (a plain GEMM packs as well), or too many positions to unroll
    bounds = tuple(Bound(lane, tuple(s.get(a, 0) for a in taps), lo, hi) for lane, s, lo, hi in pending)
    coef = tuple((a, c) for a, c in sorted(terms.items()) if a not in js and ext[a] != 1)
    return Direct(base, taps, extents, inner, coef, const, width, bounds)
