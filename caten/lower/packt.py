"""Which GEMM row panels pack by a transposing copy (`loopir.PackT`): those whose a is read from
a buffer, through views without masks, at an index that is affine in the panel's row and k
with k contiguous (a row-major a: the Mixer's activations, e1's left matrix). Renderers then
move vectors of k and transpose them in registers, where the plain loops read a float at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.lower import loopir as L
from caten.lower.index import Aff, Coords
from caten.lower.loopir import X

if TYPE_CHECKING:
    from caten.lower import KernelLowerer


def row_panel(kl: KernelLowerer, n: Node, c: Coords, value: X, row: X, k: X, row_at: X,
              k_at: X) -> tuple[str, X, X] | None:
    """(buffer, soff, ld) such that `value`, n's value at c, is buffer[soff + row*ld + k], where
    c's row coordinate is the atom `row_at` (base + row) and its k coordinate `k_at` (base + k);
    None if it is not that (a view with a mask, a computed value, a strided or merged k)."""
    while n.op is Op.VIEW and n.arg.mask is None:  # (as KernelLowerer.view)
        v, axes = n.arg, c.axes(kl.ranges)
        off = Aff(const=v.offset)
        for a, s in zip(axes, v.strides):
            if s != 0:
                off = off.add(a.scale(s))
        n, c = n.src[0], Coords(n.src[0].shape, flat=off)
    if n in kl.scalars or not (n in kl.done or n.op is Op.BUFFER or (n in kl.realized and n not in kl.members)):
        return None
    buf = kl.bufname(n)
    if buf is None or value is not L.load(buf, kl.index(n, c), n.dtype):
        return None
    aff = kl.index_aff(n, c)
    ld = aff.terms.get(row_at)
    if ld is None or aff.terms.get(k_at) != 1:
        return None
    rest = [a for a in aff.terms if a is not row_at and a is not k_at]
    if any(x.op == "var" and x.arg in (row.arg, k.arg) for a in rest for x in L.nodes(a)):
        return None
    soff = L.subst(L.subst(aff.expr(), row, L.const(0)), k, L.const(0))
    return buf, soff, L.dim(ld)
