"""SORT's kernel: a stable bottom-up merge sort of each line along the axis (the loops over the
other axes are independent: a device spreads them). Keys and indices ping-pong between two pairs
of scratch buffers in a line-contiguous layout; pass p merges runs of w = 2**p, up to 64 passes,
each running no blocks once w reaches the line's length, and a block's merge walks its two runs
with two cursors held in accumulators. The order is then copied out of whichever pair holds it.

Ties take the left run's element (stable); a nan sorts after every number (before, descending),
as torch's sort."""

from __future__ import annotations

from typing import Any

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.index import Aff, Coords, flatten

PASSES = 64  # passes of a line of up to 2**63 elements (each does nothing once w >= n)


def _not(a: X) -> X:
    return L.alu(Op.NOT, T.bool_, a)


def _or(a: X, b: X) -> X:
    return L.alu(Op.OR, T.bool_, a, b)


def before(b: X, a: X, descending: bool) -> X:
    """Whether key b sorts strictly before key a."""
    dt = a.dtype
    lt = L.alu(Op.CMPLT, T.bool_, a, b) if descending else L.alu(Op.CMPLT, T.bool_, b, a)
    if not dt.is_float:
        return lt
    nan_a, nan_b = L.alu(Op.CMPNE, T.bool_, a, a), L.alu(Op.CMPNE, T.bool_, b, b)
    return _or(lt, L.land(nan_b, _not(nan_a)) if descending else L.land(nan_a, _not(nan_b)))


def _merge_pass(kl: Any, si: int, tag: str, base: X, n: X, w: X, src: tuple[str, str], dst: tuple[str, str],
                kdt: T.DType, descending: bool) -> list:
    """One pass: runs of w from src merged into runs of 2w in dst (no blocks once w >= n)."""
    two = L.imul(w, L.const(2))
    nb = L.alu(Op.WHERE, L.IDX, L.icmplt(w, n), X.make("idiv", L.IDX, (L.isub(L.iadd(n, two), L.const(1)), two)),
               L.const(0))
    b = L.var(f"s{si}b{tag}_{kl.nvar}")
    kl.nvar += 1
    lo = L.imul(b, two)
    mid, hi = L.imin(L.iadd(lo, w), n), L.imin(L.iadd(lo, two), n)
    ia, ib = f"s{si}ia{tag}_{kl.nvar}", f"s{si}ib{tag}_{kl.nvar}"
    k = L.var(f"s{si}k{tag}_{kl.nvar}")
    kl.nvar += 1
    va, vb = L.icmplt(L.var(ia), mid), L.icmplt(L.var(ib), hi)
    pa = L.iadd(base, L.alu(Op.WHERE, L.IDX, va, L.var(ia), lo))
    pb = L.iadd(base, L.alu(Op.WHERE, L.IDX, vb, L.var(ib), lo))
    ka, kb = L.load(src[0], pa, kdt), L.load(src[0], pb, kdt)
    takeb = L.land(vb, _or(_not(va), before(kb, ka, descending)))
    at = L.iadd(base, L.iadd(lo, k))
    step = L.alu(Op.CAST, T.i64, takeb)
    # the winner read again from its selected address: an integer select, where a select of the
    # keys themselves compiles to a branch that random data mispredicts half the time
    won = L.alu(Op.WHERE, L.IDX, takeb, pb, pa)
    body = [L.Store(dst[0], at, L.load(src[0], won, kdt)),
            L.Store(dst[1], at, L.load(src[1], won, T.i64)),
            L.SetAcc(ia, L.iadd(L.var(ia), L.isub(L.const(1), step))),
            L.SetAcc(ib, L.iadd(L.var(ib), step))]
    return [L.Loop(b.arg, nb, [L.Acc(ia, T.i64, lo), L.Acc(ib, T.i64, mid),
                               L.Loop(k.arg, L.isub(hi, lo), body, "serial")])]


def sort_stage(kl: Any, n: Node, si: int) -> list:
    """The loop IR of SORT node n (a kernel of its own) into its buffer."""
    x = n.src[0]
    ax, descending = n.arg
    out = kl.bufname(n)
    kl.bufs[out] = T.i64
    k1, k2, i1, i2 = kl.scratch[n]
    kdt = x.dtype
    for b, dt in ((k1, kdt), (k2, kdt), (i1, T.i64), (i2, T.i64)):
        kl.bufs[b] = dt
    if x.rank == 0:
        kl.done.add(n)
        return [L.Store(out, L.const(0), L.const(0))]
    others = [a for a in range(x.rank) if a != ax]
    rv = {a: kl.newvar(f"s{si}r{a}", x.shape[a]) for a in others}
    size = x.shape[ax]
    nx = L.dim(size)
    base = L.imul(flatten([Aff.of(rv[a]) for a in others], [x.shape[a] for a in others]).expr(), nx)
    j = kl.newvar(f"s{si}j", size)

    def at(v: X) -> Coords:
        return Coords(x.shape, axes=[Aff.of(v if a == ax else rv[a]) for a in range(x.rank)])

    init = [L.Loop(j.arg, nx, [L.Store(k1, L.iadd(base, j), kl.val(x, at(j))), L.Store(i1, L.iadd(base, j), j)])]
    w, npass = f"s{si}w_{kl.nvar}", f"s{si}np_{kl.nvar}"
    q = f"s{si}q_{kl.nvar}"
    kl.nvar += 1
    wv = L.var(w)
    grow = [L.SetAcc(npass, L.iadd(L.var(npass), L.alu(Op.CAST, T.i64, L.icmplt(wv, nx)))),
            L.SetAcc(w, L.imul(wv, L.const(2)))]
    passes = [L.Acc(w, T.i64, L.const(1)), L.Acc(npass, T.i64, L.const(0)),
              L.Loop(q, L.const(PASSES // 2),
                     _merge_pass(kl, si, "a", base, nx, wv, (k1, i1), (k2, i2), kdt, descending) + grow +
                     _merge_pass(kl, si, "b", base, nx, wv, (k2, i2), (k1, i1), kdt, descending) + grow,
                     "serial")]
    j2 = kl.newvar(f"s{si}o", size)
    odd = L.alu(Op.CMPNE, T.bool_, L.alu(Op.AND, T.i64, L.var(npass), L.const(1)), L.const(0))
    pick = L.alu(Op.WHERE, T.i64, odd, L.load(i2, L.iadd(base, j2), T.i64), L.load(i1, L.iadd(base, j2), T.i64))
    copy = [L.Loop(j2.arg, nx, [L.Store(out, at(j2).flat().expr(), pick)])]
    body = init + passes + copy
    for a in reversed(others):
        body = [L.Loop(rv[a].arg, L.dim(x.shape[a]), body)]
    kl.done.add(n)
    return body
