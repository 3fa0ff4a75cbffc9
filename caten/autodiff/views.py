"""The transpose of a view: the cotangent of a VIEW's source, built from movement ops and sums.

A VIEW reads its source as a contiguous array: element i of the view is `src.flat[offset +
sum(i_a * stride_a)]`, or zero outside the mask. Its VJP scatters the view's cotangent back,
adding where two positions read one element. Movement ops are merged into one view when built,
so the transpose works on the merged form, axis by axis:
- the mask: positions outside it read nothing, so the cotangent is shrunk to the mask's box;
- a stride of 0 (a broadcast) sums its axis; a negative stride (a flip) flips it;
- every other view axis walks one source axis b with a step k (its stride over b's contiguous
  stride); a view axis that walks several source axes at once (a merged reshape) is split first;
- the view axes over one source axis are merged when they tile it (k_outer = k_inner * n_inner);
  what is left over one axis is placed by interleaving k-1 zeros and padding to the offset;
- view axes that overlap (sliding windows: conv and pool) are enumerated along the shorter one,
  a sum of placed slices (k_h * k_w terms for a conv), which stays one elementwise kernel.
Symbolic sizes are fine; a symbolic stride must equal a source stride or tile with its
neighbour. What cannot be decomposed raises NotImplementedError (the caller's diagnostic).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caten.ir import build as B
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.ir.view import View, contiguous_strides

MAX_TERMS = 256  # overlapping axes are enumerated: a bound keeps a huge window from exploding the graph


@dataclass(frozen=True)
class _Axis:
    src: int  # the source axis it walks
    n: Dim  # its length
    k: Dim  # its step over the source axis


def unbroadcast(x: Node, shape: Sequence[Dim]) -> Node:
    """Sum x down to `shape` (the transpose of numpy broadcasting)."""
    shape = tuple(shape)
    lead = x.rank - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    r = B.reduce(x, "add", axes) if axes else x
    return B.reshape(r, shape) if r.shape != shape else r


def transpose(v: View, src_shape: Sequence[Dim], ct: Node) -> Node:
    """The cotangent of the source of `VIEW(src, v)` given the view's cotangent `ct`."""
    src_shape = tuple(src_shape)
    if 0 in src_shape or 0 in tuple(v.shape):  # nothing read, or nothing to read: an empty cotangent
        return B.const(0, ct.dtype, src_shape)
    if v.contiguous and D.prod(v.shape) == D.prod(src_shape):  # a plain reshape (a prefix is a shrink)
        return B.reshape(ct, src_shape)
    offset, strides, sizes = v.offset, list(v.strides), list(v.shape)
    if v.mask is not None and any(isinstance(lo, int) and isinstance(hi, int) and hi <= lo for lo, hi in v.mask):
        return B.const(0, ct.dtype, src_shape)  # an empty mask: the view reads nothing
    if v.mask is not None:  # positions outside the mask read nothing: keep the box inside it
        ct = B.shrink(ct, v.mask)
        for a, (lo, hi) in enumerate(v.mask):
            offset = D.add(offset, D.mul(lo, strides[a]))
            sizes[a] = D.add(hi, D.mul(lo, -1))
    bcast = tuple(a for a, s in enumerate(strides) if s == 0 and sizes[a] != 1)
    if bcast:
        ct = B.reduce(ct, "add", bcast)
        for a in bcast:
            sizes[a] = 1
    flips = []
    for a, s in enumerate(strides):
        sign = D.sign_of(s)
        if sign is None:
            raise NotImplementedError(f"a view stride of unknown sign ({s})")
        if sign < 0 and s != 0:
            flips.append(a)
            offset = D.add(offset, D.mul(D.add(sizes[a], -1), s))
            strides[a] = D.mul(s, -1)
    if flips:
        ct = B.flip(ct, flips)
    keep = [a for a in range(len(sizes)) if sizes[a] != 1]
    ct = B.reshape(ct, [sizes[a] for a in keep])
    walk = [(sizes[a], strides[a]) for a in keep]
    try:  # each view axis within one source axis
        axes, placed = _match(src_shape, list(walk), ct)
        offs = _offsets(src_shape, offset)
        _check_fits(src_shape, axes, offs)
        return _place(placed, axes, offs, src_shape)
    except _Misfit:  # a view that reads across source axes (a reshape of a permuted view): go flat
        flat = (D.prod(src_shape),)
        axes, placed = _match(flat, list(walk), ct)
        return B.reshape(_place(placed, axes, {0: offset}, flat), src_shape)


class _Misfit(NotImplementedError):
    """The view's axes do not each stay within one source axis."""


def _check_fits(src_shape: tuple[Dim, ...], axes: list[_Axis], offs: dict[int, Dim]) -> None:
    """Every source coordinate the view reaches lies inside its axis (else the axes do not match
    the source's, e.g. a stride 6 over rows of 4)."""
    for b, size in enumerate(src_shape):
        group = [a for a in axes if a.src == b]
        if not group:
            continue
        top: Dim = offs.get(b, 0)
        for a in group:
            top = D.add(top, D.mul(a.k, D.add(a.n, -1)))
        sign = D.sign_of(D.add(size, D.mul(D.add(top, 1), -1)))
        if sign is not None and sign < 0 and D.add(size, D.mul(D.add(top, 1), -1)) != 0:
            raise _Misfit(f"a view reaching {top} on an axis of {size}")
        if sign is None and not (len(group) == 1 and group[0].k == 1):
            raise _Misfit(f"a view whose reach {top} on an axis of {size} is not known")


def _real(src_shape: tuple[Dim, ...]) -> list[tuple[int, Dim]]:
    """(axis, contiguous stride) of the source axes longer than 1, outermost first."""
    cs = contiguous_strides(src_shape)
    return [(b, cs[b]) for b, d in enumerate(src_shape) if d != 1]


def _exact(s: Dim, c: Dim) -> Dim | None:
    """s / c when c divides s exactly (symbolically), else None."""
    if s == c:
        return 1
    if isinstance(s, int) and isinstance(c, int):
        return s // c if c and s % c == 0 else None
    if isinstance(c, int) and c > 0 and D.divides(s, c):
        return D.floordiv(s, c)
    return None


def _match(src_shape: tuple[Dim, ...], axes: list[tuple[Dim, Dim]], ct: Node) -> tuple[list[_Axis], Node]:
    """Assign every view axis (n, stride > 0) to the source axis it walks, splitting an axis
    that walks several source axes (a reshape merged into the view)."""
    real = _real(src_shape)
    out: list[_Axis] = []
    shape = list(ct.shape)
    i = 0
    while i < len(axes):
        n, s = axes[i]
        hit = next(((b, k) for b, c in real for k in [_exact(s, c)] if k is not None), None)
        if hit is None:
            raise _Misfit(f"a view stride {s} over a source of shape {list(src_shape)}")
        b, k = hit
        size = src_shape[b]
        outer = next((j for j, (bb, _) in enumerate(real) if bb == b), 0) - 1
        if k == 1 and isinstance(n, int) and isinstance(size, int) and n > size and n % size == 0 and outer >= 0:
            # walks b and then the source axes outside it: split into [n/size, size]
            shape[i:i + 1] = [n // size, size]
            ct = B.reshape(ct, shape)
            axes[i:i + 1] = [(n // size, D.mul(s, size)), (size, s)]
            continue
        out.append(_Axis(b, n, k))
        i += 1
    return out, ct


def _offsets(src_shape: tuple[Dim, ...], offset: Dim) -> dict[int, Dim]:
    """The view's offset as one start coordinate per source axis (mixed radix)."""
    real = _real(src_shape)
    out = {b: 0 for b, _ in real}
    if isinstance(offset, int):
        for b, c in real:
            if not isinstance(c, int):
                if offset == 0:
                    break
                raise _Misfit("a view offset over a source with symbolic inner sizes")
            out[b], offset = divmod(offset, c)
        if offset:
            raise _Misfit("a view offset outside its source")
        return out
    rest: Dim = offset
    for b, c in real:
        q = _exact(rest, c)
        if q is not None:
            out[b] = q
            return out
        if isinstance(c, int) and c > 1:
            terms = D.DimExpr.norm({m: co // c for m, co in D._terms(rest).items() if co % c == 0})
            if terms != 0:
                out[b] = terms
                rest = D.add(rest, D.mul(terms, -c))
    if rest != 0:
        raise _Misfit(f"a symbolic view offset {offset}")
    return out


def _merge(ct: Node, axes: list[_Axis]) -> tuple[Node, list[_Axis]]:
    """Order the axes by source axis (outer step first) and merge neighbours that tile."""
    order = sorted(range(len(axes)), key=lambda i: (axes[i].src, -_size_key(axes[i].k), i))
    if order != list(range(len(axes))):
        ct = B.permute(ct, order)
        axes = [axes[i] for i in order]
    merged = True
    while merged:
        merged = False
        for i in range(len(axes) - 1):
            a, b = axes[i], axes[i + 1]
            if a.src == b.src and a.k == D.mul(b.k, b.n):
                axes = axes[:i] + [_Axis(a.src, D.mul(a.n, b.n), b.k)] + axes[i + 2:]
                ct = B.reshape(ct, [x.n for x in axes])
                merged = True
                break
    return ct, axes


def _size_key(k: Dim) -> int:
    return k if isinstance(k, int) else 1 << 30


def _place(ct: Node, axes: list[_Axis], offs: dict[int, Dim], src_shape: tuple[Dim, ...]) -> Node:
    ct, axes = _merge(ct, axes)
    groups: dict[int, list[int]] = {}
    for i, a in enumerate(axes):
        groups.setdefault(a.src, []).append(i)
    crowded = [g for g in groups.values() if len(g) > 1]
    if crowded:  # overlapping axes over one source axis: enumerate the shortest, sum the slices
        cands = [i for g in crowded for i in g if isinstance(axes[i].n, int)]
        if not cands:
            raise NotImplementedError("overlapping view axes of symbolic length")
        e = min(cands, key=lambda i: axes[i].n)
        n = axes[e].n
        if n > MAX_TERMS:
            raise NotImplementedError(f"overlapping view axes of length {n} (more than {MAX_TERMS})")
        rest = axes[:e] + axes[e + 1:]
        total: Node | None = None
        for j in range(n):
            part = B.shrink(ct, [(j, j + 1) if i == e else (0, a.n) for i, a in enumerate(axes)])
            part = B.reshape(part, [a.n for a in rest])
            sub = dict(offs)
            sub[axes[e].src] = D.add(offs.get(axes[e].src, 0), D.mul(axes[e].k, j))
            term = _place(part, rest, sub, src_shape)
            total = term if total is None else B.alu(Op.ADD, total, term)
        assert total is not None
        return total
    # one view axis per source axis at most: interleave zeros for steps, then pad to place
    by_src = {a.src: (i, a) for i, a in enumerate(axes)}
    ct = B.reshape(ct, [by_src[b][1].n if b in by_src else 1 for b in range(len(src_shape))])
    for b, (_, a) in by_src.items():
        if a.k != 1:
            ct = _unstep(ct, b, a.n, a.k)
    widths = []
    for b, size in enumerate(src_shape):
        have = ct.shape[b]
        lo = offs.get(b, 0)
        hi = D.add(size, D.mul(D.add(lo, have), -1))
        sign = D.sign_of(hi)
        if sign is None:
            raise NotImplementedError(f"placing a view axis of {have} at {lo} in {size}")
        if sign < 0 and hi != 0:  # the interleaved zeros after the last element overrun: drop them
            ct = B.shrink(ct, [(0, D.add(have, hi)) if i == b else (0, d) for i, d in enumerate(ct.shape)])
            hi = 0
        widths.append((lo, hi))
    return B.pad(ct, widths)


def _unstep(ct: Node, axis: int, n: Dim, k: Dim) -> Node:
    """Element i of `axis` moved to position i*k, zeros between (the transpose of a step)."""
    if not isinstance(k, int):
        raise NotImplementedError(f"a symbolic view step {k}")
    shape = list(ct.shape)
    wide = B.reshape(ct, shape[:axis + 1] + [1] + shape[axis + 1:])
    wide = B.pad(wide, [(0, k - 1) if i == axis + 1 else (0, 0) for i in range(len(shape) + 1)])
    return B.reshape(wide, shape[:axis] + [D.mul(n, k)] + shape[axis + 1:])
