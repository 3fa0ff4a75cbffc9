"""Key blocks: the layout math of a row-block split whose block count moves to the front.

Attention's backward sums over the query rows for dK and dV (`dV = Pᵀ dO`): their cones carry the
key axis `j`, not the query axis, so caten.schedule.rowblock splits `j` there. The stages' shapes
are [h, i, j] though, and the scheduler's shared loops are shape prefixes: a split of `j` in place,
[h, i, nb, B], would share only the head loop and keep a head's S² scores in scratch. So the
block count `nb` moves to position `p` (after the shared head axes): [h, nb, i, B]. Every split
value is laid out that way, which changes its flat layout, so a view over it is re-strided here
(a view indexes its source's flat layout). The row statistics the cone reads (row max, row sum,
the softmax-gradient's row dot) reduce over `j`: they cannot be computed in a key block and are
read from their row-blocked values instead (rowblock.row_blocks).
"""

from __future__ import annotations

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.view import View, contiguous_strides


class Unmovable(Exception):
    """A view whose strides mix the moved axes: keep the graph."""


def split_shape(shape: tuple[Dim, ...], i: int, p: int, rows: int, block: int) -> tuple[Dim, ...]:
    """`shape` with axis i (rows) split into (rows/block, block), the count at position p <= i."""
    return shape[:p] + (rows // block,) + shape[p:i] + (block,) + shape[i + 1:]


def axis(k: int, p: int) -> int:
    """Where an unsplit axis k (not the split one) lands in the split shape."""
    return k if k < p else k + 1


def leaf_view(shape: tuple[Dim, ...], i: int, p: int, rows: int, block: int) -> View:
    """A leaf (its flat layout as it is) seen in the split shape."""
    v = View.of(shape).reshape(shape[:i] + (rows // block, block) + shape[i + 1:])
    assert v is not None
    perm = list(range(p)) + [i] + list(range(p, i)) + list(range(i + 1, len(shape) + 1))
    return v.permute(perm)


def moved_view(v: View, src_shape: tuple[Dim, ...], b: int | None, i: int, p: int, rows: int, block: int,
               moved: bool) -> View:
    """View `v` (its axis i walks source axis b whole, or broadcasts: b None) over the split source,
    its own axis i split with the count at p. `moved`: the source was split with its count moved
    too, so its flat layout changed and v's other strides and offset are re-expressed in it."""
    nb = rows // block
    st = v.strides[i]
    mask = None if v.mask is None else v.mask[:p] + ((0, nb),) + v.mask[p:i] + ((0, block),) + v.mask[i + 1:]
    if moved and b is not None:
        rest, offset = _restride(v, src_shape, b, i, p, rows, block)
        count = contiguous_strides(split_shape(src_shape, b, p, rows, block))[p]
    else:
        rest, offset = [x for k, x in enumerate(v.strides) if k != i], v.offset
        count = D.mul(st, block)
    strides = rest[:p] + [count] + rest[p:i] + [st] + rest[i:]
    return View(split_shape(v.shape, i, p, rows, block), tuple(strides), offset, mask)


def _restride(v: View, src: tuple[Dim, ...], b: int, i: int, p: int, rows: int,
              block: int) -> tuple[list[Dim], int]:
    """v's strides (all but axis i's) and offset over the source's moved layout. Strides within
    the axes after b keep their values; one over the axes before b must step one source axis
    (its stride there scales by 1/nb for the axes from p on); no walk may carry from one source
    axis into the next (the moved layout would tear it). Else Unmovable."""
    nb = rows // block
    if v.mask is not None or not isinstance(v.offset, int) or \
            not all(isinstance(d, int) for d in src) or not all(isinstance(x, int) for x in v.strides):
        raise Unmovable
    cs = [int(c) for c in contiguous_strides(src)]
    st = cs[b]
    new_c = [c if k < p else c // nb for k, c in enumerate(cs[:b])]
    inner = v.offset % st
    rem = v.offset - inner
    digits = []
    for k in range(b):
        d = rem // cs[k] if src[k] > 1 else 0
        digits.append(d)
        rem -= d * cs[k]
    if rem or any(not 0 <= d < n for d, n in zip(digits, src)):
        raise Unmovable
    lo, hi = list(digits), list(digits)
    ilo = ihi = inner
    out: list[Dim] = []
    for k, (x, d) in enumerate(zip(v.strides, v.shape)):
        if k == i:
            continue
        if x == 0 or d == 1:
            out.append(x)
            continue
        walk = x * (d - 1)
        if abs(walk) < st:
            ilo, ihi = ilo + min(0, walk), ihi + max(0, walk)
            out.append(x)
            continue
        ax = next((a for a in reversed(range(b)) if src[a] > 1 and x % cs[a] == 0 and abs(x) < cs[a] * src[a]),
                  None)
        if ax is None:
            raise Unmovable
        m = x // cs[ax]
        lo[ax], hi[ax] = lo[ax] + min(0, m * (d - 1)), hi[ax] + max(0, m * (d - 1))
        out.append(m * new_c[ax])
    if ilo < 0 or ihi >= st or any(not (0 <= a and z < n) for a, z, n in zip(lo, hi, src)):
        raise Unmovable
    return out, sum(d * c for d, c in zip(digits, new_c)) + inner
