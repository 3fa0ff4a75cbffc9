"""A GEMM's packed panels: the operands packed whole once per call (`pack_whole`), and which
panels pack by a copy statement: those whose operand is read from a buffer, through
views without masks, at an index that is affine in two of the panel's variables, one of them
contiguous. A row panel of a row-major a (k contiguous: the Mixer's activations, e1's left
matrix) packs by a transposing copy (`loopir.PackT`: vectors of k transposed in registers); a
column panel of a row-major b (columns contiguous: the Mixer's weights), or a row panel of a
column-major a, by a straight one (`loopir.PackN`: whole rows moved by vector loads). The plain
loops they replace read and write a float at a time, and every GEMM rendered its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.chunks import chunk
from caten.lower.index import Aff, Coords
from caten.schedule.plan import GemmPlan

if TYPE_CHECKING:
    from caten.lower.kernel_lowerer import KernelLowerer


def pack_whole(kl: KernelLowerer, si: int, plan: GemmPlan, side: str, pw: str, node: Node, coords, split,
               teff: X | None, once: bool = True, tid: X | None = None) -> list:
    """Operand `side` packed whole, [K block][panel][k][width] zero-padded (panels of mr rows of
    a, or of nr columns of b), shared among the threads (which pack its panels), at the first
    iteration of the kernel's outer loops (it reads none of them: `GemmPlan.a_once`, `b_once`),
    or where the caller puts it (`once` False; `tid`: the thread variable, when the caller
    merges several packs into one parallel loop). The operand is `node` at `coords(at)`."""

    def value(at: dict[int, Aff]) -> X:
        return kl.val(node, coords(at))
    kc = plan.kc
    width, size, axes = (plan.mr, plan.M, (plan.i,)) if side == "a" else (plan.nr, plan.N, plan.js)
    ext, K = L.dim(size), L.dim(plan.K)
    npanels = ceil_div(ext, width)

    def var(hint: str, d: Dim) -> X:
        return kl.newvar(f"s{si}{hint}", d)

    kb = var("wkc", D.floordiv(D.add(plan.K, kc - 1), kc))
    jp = var("wp", D.floordiv(D.add(size, width - 1), width))
    kk, cc, cz = var("wk", kc), var("wc", width), var("wz", width)
    ch = chunk(tid or var("wtid", kl.threads), npanels, teff) if teff is not None else None  # panels per thread
    g = L.iadd(ch.start, jp) if ch else jp
    kl.ranges[g] = (0, D.add(D.floordiv(D.add(size, width - 1), width), -1))
    first = L.imul(g, L.const(width))
    cv = L.imin(L.const(width), L.isub(ext, first))
    klen = L.imin(L.const(kc), L.isub(K, L.imul(kb, L.const(kc))))
    at = split(L.iadd(first, cc), axes, size) | split(L.iadd(L.imul(kb, L.const(kc)), kk), plan.red, plan.K)
    zeroed = set(plan.batch) | set(plan.js if side == "a" else ()) | ({plan.i} if side == "b" and plan.i is not None
                                                                      else set())
    at |= {a: Aff() for a in zeroed}
    base = L.iadd(L.imul(L.iadd(L.imul(kb, npanels), g), L.const(kc * width)), L.imul(kk, L.const(width)))
    zero = L.const(0.0, kl.bufs[pw])
    val = value(at)
    body = panel_copy(kl, node, coords(at), val, kk, cc, at[axes[0]], at, plan, si, kl.bufs[pw], width, pw,
                      L.subst(base, kk, L.const(0)), cv, klen) if len(axes) == 1 else None
    body = body or [L.Loop(kk.arg, klen, panel_rows(cc, cz, cv, width, L.Store(pw, L.iadd(base, cc), val),
                                                L.Store(pw, L.iadd(base, L.iadd(cv, cz)), zero)))]
    body = [L.Loop(kb.arg, ceil_div(K, kc), body)]
    body = ch.wrap(jp, body, kl.threads) if ch else [L.Loop(jp.arg, npanels, body)]
    return once_per_call(kl, var("wonce", 1), body) if once else body


def once_per_call(kl: KernelLowerer, v: X, body: list) -> list:
    """body at the first iteration of the kernel's outer loops only (loop variable v)."""
    once = None
    for o, d in zip(kl.outer_vars, kl.outer_shape):
        if d != 1:
            once = L.land(once, L.icmplt(o, L.const(1)))
    if once is None:
        return body
    return [L.Loop(v.arg, L.alu(Op.WHERE, L.IDX, once, L.const(1), L.const(0)), body, "cold")]


def panel_copy(kl: KernelLowerer, node: Node, c: Coords, value: X, k: X, lane: X, lane_aff: Aff,
               k_coords: dict[int, Aff], plan: GemmPlan, si: int, dt, width: int, dst: str, doff: X, lanes: X,
               klen: X) -> list | None:
    """A panel's k rows as one straight copy (PackN), when `value` (the operand at c) is a buffer
    read at soff + k*ld + lane; None otherwise. (A b read with k contiguous stays in loops: its
    transposing copy, 32 lanes wide, cost more compile time than its loops and ran no faster.)"""
    k_aff = k_coords.get(plan.red[0]) if len(plan.red) == 1 else None
    if not dt.is_float or dt.bits not in (32, 64) or k_aff is None or len(k_aff.terms) != 1 \
            or len(lane_aff.terms) != 1:
        return None
    src = strided_panel(kl, node, c, value, k, lane, next(iter(k_aff.terms)), next(iter(lane_aff.terms)))
    if src is None:
        return None
    kl.nvar += 1
    return [L.PackN(f"s{si}pn{kl.nvar}", dt, width, dst, doff, src[0], src[1], src[2], lanes, klen)]


def panel_rows(cc: X, cz: X, cv: X, width: int, store: L.Store, zero: L.Store) -> list:
    """One k row of a packed panel: `store` for its cv valid lanes, `zero` for the rest; a full
    panel (the common case) runs a loop of constant length `width` (a renderer unrolls it into
    vector moves, where a variable count becomes a call of memcpy)."""
    full = L.alu(Op.NOT, T.bool_, L.icmplt(cv, L.const(width)))
    cp = L.var(f"{cc.arg}p")  # (a loop variable is bound once in a kernel)
    part = L.Store(store.buf, L.subst(store.idx, cc, cp), L.subst(store.value, cc, cp))
    return [L.Loop(f"{cc.arg}_full", L.alu(Op.WHERE, L.IDX, full, L.const(1), L.const(0)),
                   [L.Loop(cc.arg, L.const(width), [store])]),
            L.Loop(f"{cc.arg}_part", L.alu(Op.WHERE, L.IDX, full, L.const(0), L.const(1)),
                   [L.Loop(cp.arg, cv, [part]), L.Loop(cz.arg, L.isub(L.const(width), cv), [zero], "cold")])]


def row_runs(c0: X, count: X, wl: X, sg: X) -> tuple[X, X, X, X, X]:
    """Merged columns [c0, c0 + count) of rows wl wide (a convolution's output rows and columns)
    as one run per row they touch, run sg the row's part: (its row, the number of runs, the
    row's first merged index, and its columns [lo, hi) within the row). A B panel's copy and a
    direct convolution's epilogue walk them so that a merged index is divided once a row."""
    r0 = X.make("idiv", L.IDX, (c0, wl))
    end = L.iadd(c0, count)
    runs = L.iadd(L.isub(X.make("idiv", L.IDX, (L.isub(end, L.const(1)), wl)), r0), L.const(1))
    row = L.iadd(r0, sg)
    start = L.imul(row, wl)
    return row, runs, start, L.imax(L.const(0), L.isub(c0, start)), L.imin(wl, L.isub(end, start))


def strided_panel(kl: KernelLowerer, n: Node, c: Coords, value: X, slow: X, fast: X, slow_at: X,
                  fast_at: X) -> tuple[str, X, X] | None:
    """(buffer, soff, ld) such that `value`, n's value at c, is buffer[soff + slow*ld + fast],
    where one of c's coordinates is the atom `slow_at` (base + slow) and one `fast_at` (base +
    fast); None if it is not that (a view with a mask, a computed value, a strided or merged
    fast index)."""
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
    ld = aff.terms.get(slow_at)
    if ld is None or aff.terms.get(fast_at) != 1:
        return None
    rest = [a for a in aff.terms if a is not slow_at and a is not fast_at]
    if any(x.op == "var" and x.arg in (slow.arg, fast.arg) for a in rest for x in L.nodes(a)):
        return None
    soff = L.subst(L.subst(aff.expr(), slow, L.const(0)), fast, L.const(0))
    return buf, soff, L.dim(ld)


def ceil_div(a: X, k: int) -> X:
    """ceil(a / k) for a >= 0 (counts of whole tiles, panels and blocks)."""
    if a.op == "const":
        return L.const(-(-a.arg // k))
    if k == 1:
        return a
    return X.make("idiv", L.IDX, (L.iadd(a, L.const(k - 1)), L.const(k)))
