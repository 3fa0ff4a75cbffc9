"""Where a schedule's temporaries live in the one arena a call allocates: each at a 64-byte
aligned offset, placed best-fit by its live interval (temps whose kernels never overlap share
bytes), the symbolic sizes after the static part."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten.ir import dims as D
from caten.ir.dims import Dim

if TYPE_CHECKING:
    from caten.schedule.model import Buffer

ALIGN = 64


def _align(n: Dim) -> Dim:
    if isinstance(n, int):
        return (n + ALIGN - 1) // ALIGN * ALIGN
    return D.mul(D.floordiv(D.add(n, ALIGN - 1), ALIGN), ALIGN)


def plan_arena(temps: list[Buffer]) -> tuple[Dim, Dim]:
    """Best-fit placement of temps by live interval; symbolic sizes go after the static part."""
    static = [b for b in temps if isinstance(b.nbytes, int)]
    dynamic = [b for b in temps if not isinstance(b.nbytes, int)]
    placed: list[Buffer] = []
    end = 0
    for b in sorted(static, key=lambda b: (b.first, -b.nbytes)):
        size = _align(b.nbytes)
        live = sorted((x for x in placed if not (x.last < b.first or x.first > b.last)), key=lambda x: x.offset)
        best, best_gap, cur = None, None, 0
        for x in live:
            gap = x.offset - cur
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cur, gap
            cur = max(cur, x.offset + _align(x.nbytes))
        b.offset = best if best is not None else cur
        placed.append(b)
        end = max(end, b.offset + size)
    total: Dim = end
    for b in dynamic:
        b.offset = total
        total = D.add(total, _align(b.nbytes))
    return total, total
