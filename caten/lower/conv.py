"""Lowering of a direct convolution (`GemmPlan.direct`, caten.schedule.direct): a's panels
packed with all of K in one block, then `DirectMM` tiles that read the image in place -- no
im2col copy. The threads share the columns (output positions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower import epilogue
from caten.lower.chunks import chunk
from caten.lower.empty import zeros_if_empty
from caten.lower.gemm import batch_loops, exact_at, merged_coords, out_index, out_stride
from caten.lower.index import Aff, Coords
from caten.lower.panels import ceil_div, once_per_call
from caten.schedule.plan import GemmPlan, thread_slots
from caten.schedule.scheduler import deps
from caten.schedule.split import GEMM_THREAD_MIN

if TYPE_CHECKING:
    from caten.lower.kernel_lowerer import KernelLowerer

# channels per pass of the tiles over a column tile (each pass adds the output the last one
# stored): a bound on the image rows the row tiles re-read from L2 (smaller passes lost more to
# the output's reloads than they gained, conv f with 64 channels: 4.84 ms in one pass, 5.00 in
# two, 5.34 in four)
CHANNEL_BLOCK = 64


def direct(kl: KernelLowerer, n: Node, si: int, buf: str, plan: GemmPlan) -> list:
    """M blocks (mc rows; a packed unless packed whole once) > the direct tiles of a thread's
    columns; the batch loops the GEMM runs itself outside."""
    d = plan.direct
    assert d is not None
    src, dt = n.src[0], n.dtype
    pa, _pb, *whole = kl.scratch.get(n, ("pa", "pb"))
    kl.bufs[pa] = dt
    kl.bufs[buf] = dt
    mr, nr, mc = plan.mr, plan.nr, plan.mc
    M, N, K = L.dim(plan.M), L.dim(plan.N), L.dim(plan.K)

    def var(hint: str, ext: Dim) -> X:
        return kl.newvar(f"s{si}{hint}", ext)

    coord, loops, _ = batch_loops(kl, si, plan, src)
    T_ = 1 if kl.par is not None else kl.threads
    tid = var("tid", T_) if T_ > 1 else None
    n_lo, n_hi = L.const(0), N
    teff = None
    if tid is not None:
        work = L.imul(L.imul(M, N), K)
        for _, e in loops:
            work = L.imul(work, e)
        teff = L.alu(Op.WHERE, L.IDX, L.icmplt(work, L.const(GEMM_THREAD_MIN)), L.const(1), L.const(T_))
        # the columns (output positions), in whole tiles: each thread reads its part of the
        # image, for every batch index (a convolution's images are the kernel's outer loops)
        tiles = X.make("idiv", L.IDX, (L.iadd(N, L.const(nr - 1)), L.const(nr)))
        ch = chunk(tid, tiles, teff)
        n_lo = L.imin(N, L.imul(ch.start, L.const(nr)))
        n_hi = L.imin(N, L.iadd(n_lo, L.imul(ch.count, L.const(nr))))
    shared = plan.a_once and bool(whole) and kl.par is None
    if shared:  # a packed whole, once per call, its panels shared out among the threads
        aw = whole[0]
        kl.bufs[aw] = dt
        pack = _pack_a(kl, si, plan, src, aw, L.const(0), M, K, None if tid is None else (var("wtid", T_), teff))
        pre = once_per_call(kl, var("wonce", 1), pack)
    else:
        pre = []
    # the M blocks
    ic = var("ic", D.floordiv(D.add(plan.M, mc - 1), mc))
    i0 = L.imul(ic, L.const(mc))
    rows = L.imin(L.const(mc), L.isub(M, i0))
    if shared:
        aname, aoff, block = aw, L.imul(X.make("idiv", L.IDX, (i0, L.const(mr))), L.imul(K, L.const(mr))), []
        exact = _finite(aw, L.const(0), M, K, mr, dt)
    else:
        poff = L.const(0)
        if kl.par is not None:  # under an outer split: the outer thread's slot
            slots = thread_slots([kl.plan(m).gemm for m in kl.members if m.op is Op.REDUCE and m.dtype == dt])
            poff = L.imul(kl.par[1].tid, L.dim(slots[0]))
        elif tid is not None:
            poff = L.imul(tid, L.dim(plan.pack_sizes(T_)[0]))
        aname, aoff = pa, poff
        block = _pack_a(kl, si, plan, src, pa, poff, rows, K, None, i0)
        exact = _finite(pa, poff, rows, K, mr, dt)
    bname = kl.bufname(d.base)
    kl.bufs[bname] = d.base.dtype
    flat = Aff()
    for a, c in d.coef:
        if a in coord:
            flat = flat.add(coord[a].scale(c))
    boff = L.iadd(kl.index(d.base, Coords(d.base.shape, flat=flat)), L.dim(d.const))
    sizes = {a: c for a, c in d.coef}
    # (a kernel-local image is a slice per thread: no whole-vector loads from it, only masked ones)
    blen = L.const(0) if d.base in kl.local else L.dim(D.prod(d.base.shape))
    tiles = L.DirectMM(f"s{si}_{kl.nvar}", dt, mr, nr, CHANNEL_BLOCK, tuple(d.positions()),
                       tuple((b.lane, b.shifts) for b in d.bounds),
                       aname, aoff, L.imul(K, L.const(mr)),
                       bname, boff, blen, exact, n_lo,
                       L.dim(src.shape[d.inner]) if d.inner is not None else L.const(1),
                       L.dim(sizes.get(d.inner, 0)) if d.inner is not None else L.const(0),
                       tuple(L.dim(sizes.get(a, 0)) for a in d.taps), L.dim(d.width),
                       tuple(L.dim(x) for b in d.bounds for x in (b.lo, b.hi)),
                       buf, out_index(kl, n, plan, coord, i0, n_lo), out_stride(kl, n, plan),
                       ceil_div(rows, mr), ceil_div(L.isub(n_hi, n_lo), nr), rows, L.isub(n_hi, n_lo),
                       _streamed(kl, n, buf, plan))
    kl.nvar += 1
    # the next stage, when elementwise on this output (a bias, an activation), over each block
    epi = epilogue.candidate(kl, n, si, plan)
    after = []
    if epi is not None:
        kl.done.add(n)  # (the epilogue reads n from its buffer)
        after = epilogue.fuse(kl, n, epi, si, plan, coord, (i0, rows), (n_lo, L.isub(n_hi, n_lo)), None,
                              epilogue.read_by(pre + block) | {bname}, lambda e, axes, size: merged_coords(
                                  kl, src, e, axes, size)) or []
    body = [L.Loop(ic.arg, ceil_div(M, mc), block + [tiles] + after)]
    for v, e in reversed(loops):
        body = [L.Loop(v.arg, e, body)]
    if tid is not None:
        body = [L.Parallel(tid.arg, teff, body, most=T_)]
    kl.done.add(n)
    return zeros_if_empty(kl, n, si, buf, plan.K, Coords) + pre + body


def _streamed(kl: KernelLowerer, n: Node, buf: str, plan: GemmPlan) -> X | None:
    """Where the tiles may store n past the caches: n is an output of the program that no stage
    of its kernel reads back (through views too: the epilogue of `(return c (relu c))`), and
    (at run time) too large for the cores' L2s together, so a later reader gets it from memory
    either way; a smaller one is left in cache for it."""
    if plan.l2 <= 0 or buf not in kl.outputs or any(n in deps(m, kl.realized) for m in kl.members if m is not n):
        return None
    size, least = D.prod(n.shape), -(-kl.threads * plan.l2 // n.dtype.itemsize)
    if isinstance(size, int):
        return L.const(1) if size >= least else None
    return L.alu(Op.WHERE, L.IDX, L.icmplt(L.dim(size), L.const(least)), L.const(0), L.const(1))


def _pack_a(kl: KernelLowerer, si: int, plan: GemmPlan, src: Node, pw: str, base: X, rows: X, K: X,
            threads: tuple[X, X] | None, i0: X | None = None) -> list:
    """Rows [i0, i0 + rows) of a as panels of mr rows, each with all of K (k in the direct
    tile's order: the inner axis, then the taps), zero rows past the end: pw[base + (panel*K +
    k)*mr + r]; then, after the panels, the sum of every packed value times 0 (`_finite`).
    `threads`: (tid, count) to share the panels out."""
    mr, opa = plan.mr, src.src[plan.a]
    i0 = L.const(0) if i0 is None else i0
    npanels = ceil_div(rows, mr)

    def var(hint: str, ext: Dim) -> X:
        return kl.newvar(f"s{si}{hint}", ext)

    pv, kk, rr, rz = var("dp", D.floordiv(D.add(plan.M, mr - 1), mr)), var("dk", plan.K), var("dr", mr), var("dz", mr)
    ch = chunk(threads[0], npanels, threads[1]) if threads else None
    g = L.iadd(ch.start, pv) if ch else pv
    first = L.iadd(i0, L.imul(g, L.const(mr)))
    rv = L.imin(L.const(mr), L.isub(L.iadd(i0, rows), first))
    at = merged_coords(kl, src, kk, plan.red, plan.K)
    at[plan.i] = exact_at(kl, L.iadd(first, rr), plan.M)
    for a in plan.js + plan.batch:
        at.setdefault(a, Aff())
    c = Coords(src.shape, axes=[at.get(a, Aff()) for a in range(src.rank)])
    at_k = L.iadd(base, L.imul(L.iadd(L.imul(g, K), kk), L.const(mr)))
    zero = L.const(0.0, kl.bufs[pw])
    body = [L.Loop(kk.arg, K, [
        L.Loop(rr.arg, rv, [L.Store(pw, L.iadd(at_k, rr), kl.val(opa, c))], "cold"),
        L.Loop(rz.arg, L.isub(L.const(mr), rv), [L.Store(pw, L.iadd(at_k, L.iadd(rv, rz)), zero)], "cold")])]
    out = ch.wrap(pv, body, kl.threads) if ch else [L.Loop(pv.arg, npanels, body)]
    size = L.imul(L.imul(npanels, K), L.const(mr))
    fv, acc = var("df", D.mul(plan.K, plan.M)), L.var(f"s{si}_fin_{kl.nvar}", kl.bufs[pw])
    kl.nvar += 1
    dt = kl.bufs[pw]
    term = L.alu(Op.MUL, dt, L.load(pw, L.iadd(base, fv), dt), L.const(0.0, dt))
    return out + [L.Acc(acc.arg, dt, L.const(0.0, dt)),
                  L.Loop(fv.arg, size, [L.SetAcc(acc.arg, L.alu(Op.ADD, dt, acc, term, arg="acc"))]),
                  L.Store(pw, L.iadd(base, size), acc)]


def _finite(pw: str, base: X, rows: X, K: X, mr: int, dt) -> X:
    """0 if a's packed rows are all finite, else 1, from the sum `_pack_a` stored after them (a
    value times 0 is 0, or NaN for an infinity or a NaN): a tile that drops its padding lanes
    from the multiply-adds skips 0 * w, which is NaN for such a weight, so those take the
    exact path (zeros loaded, multiplied)."""
    f = L.load(pw, L.iadd(base, L.imul(L.imul(ceil_div(rows, mr), K), L.const(mr))), dt)
    return L.alu(Op.WHERE, L.IDX, L.alu(Op.CMPNE, T.bool_, f, f), L.const(1), L.const(0))
