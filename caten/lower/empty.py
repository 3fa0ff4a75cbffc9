"""Empty reductions in the loop IR: a GEMM whose inner dim K is 0 runs no K block, and
the first K block is the one that stores, so without this its output would keep whatever
the buffer held. LANGUAGE.md 5.1: a matmul over an empty inner dim gives zeros."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.lower.index import Aff

if TYPE_CHECKING:
    from caten.lower.index import Coords
    from caten.lower.kernel_lowerer import KernelLowerer


def zeros_if_empty(kl: KernelLowerer, n: Node, si: int, buf: str, K: Dim, coords: type[Coords]) -> list:
    """Stores of 0 over this stage's part of `n`, run only when K == 0 (nothing when K is a
    positive constant; a loop of 0 or 1 iteration around the fill otherwise)."""
    if isinstance(K, int) and K > 0:
        return []
    inner = list(range(kl.p, n.rank))
    vs = [kl.newvar(f"s{si}e{a}", n.shape[a]) for a in inner]
    c = coords(n.shape, axes=[Aff.of(v) for v in kl.outer_vars + vs])
    zero = L.const(False if n.dtype.is_bool else 0.0 if n.dtype.is_float else 0, n.dtype)
    fill = kl.nest(vs, [n.shape[a] for a in inner], [L.Store(buf, kl.index(n, c), zero)])
    if isinstance(K, int):
        return fill
    once = L.alu(Op.WHERE, L.IDX, L.icmplt(L.dim(K), L.const(1)), L.const(1), L.const(0))
    return [L.Loop(kl.newvar(f"s{si}z", 1).arg, once, fill, "cold")]


__all__ = ["zeros_if_empty"]
