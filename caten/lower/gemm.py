"""Lowering of contractions: register-tiled reductions (`tiled`) and packed GEMMs (`gemm`:
BLIS-style panels of A and B in the arena, a `MacroMM` of register tiles per block, rows split
over threads), the stages `KernelLowerer.stage` hands over when a REDUCE is a contraction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower import epilogue, gemm_pairs
from caten.lower.chunks import chunk, threads_for
from caten.lower.empty import zeros_if_empty
from caten.lower.index import Aff, Coords, contiguous_strides
from caten.lower.panels import ceil_div, pack_whole, panel_copy, panel_rows, row_runs, strided_panel
from caten.lower.reduce import identity
from caten.schedule.plan import GemmPlan, axis_deps, on_gpu, thread_slots
from caten.schedule.split import GEMM_THREAD_MIN

if TYPE_CHECKING:
    from caten.lower.kernel_lowerer import KernelLowerer



def tiled(kl: KernelLowerer, n: Node, si: int, alu: Op, buf: str, tile: tuple[int, int]) -> list:
    """Register tiling of a contraction: batch, j0, i0, reduced axes, ii (MR), jj (NR vector),
    with tails for sizes that do not divide; the tile of the output (mr x nr, planned by the
    schedule) stays in registers."""
    src = n.src[0]
    rop, axes = n.arg
    rank = src.rank
    j = rank - 1
    nonred = [a for a in range(rank) if a not in axes]
    i = nonred[-2] if len(nonred) >= 2 else None
    batch = [a for a in nonred if a not in (i, j)]
    mr, nr = tile
    init_vs = [kl.newvar(f"s{si}i{a}", n.shape[a]) for a in range(n.rank)]
    ci = Coords(n.shape, axes=[Aff.of(v) for v in init_vs])
    out = kl.nest(init_vs, list(n.shape), [L.Store(buf, ci.flat().expr(), identity(rop, n.dtype))])
    kl.bufs[buf] = n.dtype

    def parts(axis, step):
        if axis is None:
            return [(None, [], [], Aff())]
        size = src.shape[axis]
        if step == 1:
            v = kl.newvar(f"s{si}t{axis}", size)
            return [(None, [], [(v, size)], Aff.of(v))]
        nmain = D.floordiv(size, step)
        v0 = kl.newvar(f"s{si}b{axis}", nmain)
        v1 = kl.newvar(f"s{si}u{axis}", step)
        main = (v0, [(v0, nmain)], [(v1, step)], Aff({v0: step, v1: 1}))
        rem = D.mod(size, step)
        vt = kl.newvar(f"s{si}r{axis}", rem)
        tail = (None, [], [(vt, rem)], Aff({vt: 1}, D.mul(nmain, step)))
        return [p for p, ext in ((main, nmain), (tail, rem)) if ext != 0]  # (not a loop known to be empty)

    nj, ni = len(parts(j, nr)), len(parts(i, mr))
    for jk in range(nj):
        for ik in range(ni):
            jp, ip = parts(j, nr)[jk], parts(i, mr)[ik]
            bvs = [kl.newvar(f"s{si}a{a}", src.shape[a]) for a in batch]
            ch = None
            if batch and kl.threads > 1 and kl.par is None and not on_gpu():
                # the first batch loop in chunks over the threads (each its own outputs): a
                # matrix-vector product of packed codes (matmul-nbits) batches its rows
                d0 = src.shape[batch[0]]
                ch = chunk(kl.newvar(f"s{si}tid", kl.threads), L.dim(d0),
                           kl.inner(threads_for(D.prod(src.shape), kl.threads)))
                u = kl.newvar(f"s{si}a{batch[0]}u", d0)
                bvs[0] = kl.at(L.iadd(ch.start, u), d0)
            rvs = [kl.newvar(f"s{si}k{a}", src.shape[a]) for a in axes]
            coord: dict[int, Aff] = {a: Aff.of(v) for a, v in zip(batch, bvs)}
            coord.update({a: Aff.of(v) for a, v in zip(axes, rvs)})
            coord[j] = jp[3]
            if i is not None:
                coord[i] = ip[3]
            cs = Coords(src.shape, axes=[coord[a] for a in range(rank)])
            co = Coords(n.shape, axes=[Aff() if a in axes else coord[a] for a in range(rank)])
            idx = co.flat().expr()
            upd = L.alu(alu, n.dtype, L.load(buf, idx, n.dtype), kl.val(src, cs), arg="acc")
            body = [L.Store(buf, idx, upd)]
            inner = ip[2] + jp[2]
            body = kl.nest([v for v, _ in inner], [d for _, d in inner], body)
            body = kl.nest(rvs, [src.shape[a] for a in axes], body)
            outer = [(v, d) for v, d in zip(bvs, [src.shape[a] for a in batch])] + jp[1] + ip[1]
            if ch is not None:
                out += ch.wrap(u, kl.nest([v for v, _ in outer[1:]], [d for _, d in outer[1:]], body), kl.threads)
            else:
                out += kl.nest([v for v, _ in outer], [d for _, d in outer], body)
    kl.done.add(n)
    return out

def gemm(kl: KernelLowerer, n: Node, si: int, buf: str, plan: GemmPlan) -> list:
    """BLIS-style: N blocks (nc) > K blocks (kc; pack B) > M blocks (mc; pack A) > nr x mr
    micro-tiles (TileMM), each summing one K block into the output (the first one stores)."""
    src = n.src[0]
    dt = n.dtype
    opa, opb = src.src[plan.a], src.src[plan.b]
    pa, pb, *whole = kl.scratch.get(n, ("pa", "pb"))
    a_once, once = plan.a_once and bool(whole), plan.b_once and bool(whole)
    if a_once:
        pa = whole[0]
    if once:
        pb = whole[0]
    kl.bufs[pa] = dt
    kl.bufs[pb] = dt
    kl.bufs[buf] = dt
    mr, nr, kc, mc, nc = plan.mr, plan.nr, plan.kc, plan.mc, plan.nc
    M, N, K = L.dim(plan.M), L.dim(plan.N), L.dim(plan.K)
    cut = kl.cuts.get(n)
    if cut is not None:  # a causal cut (caten.schedule.causal): the keys are the columns or the sum
        # (or a key block's query rows, the rows)
        assert plan.js == (cut.axis,) or plan.red == (cut.axis,) or plan.i == cut.axis, (plan, cut)
        if plan.js == (cut.axis,):
            N = kl.key_end(cut)
        elif plan.i == cut.axis:
            M = kl.key_end(cut)
        else:
            K = kl.key_end(cut)
    coord, loops, baxes = batch_loops(kl, si, plan, src)

    def var(hint: str, ext: Dim) -> X:
        return kl.newvar(f"s{si}{hint}", ext)

    # the threads split the rows M in multiples of mr, each thread with its own packed panels
    # (B is packed once per thread; that is K*N against M*N*K/T) -- or a batch loop, when B
    # changes with it (a convolution's image rows: each thread then packs only its own rows'
    # B, not every thread all of them) or M is too short to share; or the columns, when M is
    # short and there is no batch loop (a dW's few output channels)
    # under a kernel whose outer loop the threads split (`small_gemms`), the GEMM runs on its
    # thread alone, in that thread's own packed panels
    T_ = 1 if kl.par is not None and kl.outer_on is None else kl.threads
    tid = var("tid", T_) if T_ > 1 else None
    m_lo: X = L.const(0)
    m_hi: X = M
    poff_a: X = L.const(0)
    poff_b: X = L.const(0)
    n_lo: X = L.const(0)
    n_hi: X = N
    short = tid is not None and isinstance(plan.M, int) and plan.M < 4 * mr * T_
    by_batch = _by_batch(plan, loops, short, T_) if tid is not None else None
    # columns: when M is short, or a is packed once and shared (a convolution's weights: each
    # thread then packs only its own columns' B and nothing twice)
    by_cols = (short or plan.a_once) and by_batch is None \
        and (not isinstance(plan.N, int) or plan.N >= 2 * nr * T_)
    # a long K over an M and N too short to share: the threads take the K blocks (GemmPlan.splits_k)
    # (not when an outer split may run: its threads would share the partials)
    ksplit = tid is not None and plan.splits_k(T_, bool(loops)) and kl.outer_on is None and cut is None
    if tid is not None:
        work = L.imul(L.imul(M, N), K)
        for _, e in loops:
            work = L.imul(work, e)
        small = L.icmplt(work, L.const(GEMM_THREAD_MIN))
        if not by_cols and not ksplit:  # (rows split only when each thread gets two micro-tiles of them or more)
            few = L.icmplt(M, L.const(4 * mr * T_))
            if by_batch is not None:
                few = L.land(L.alu(Op.NOT, T.bool_, by_batch), few)
            small = L.alu(Op.OR, T.bool_, small, few)
        teff = kl.inner(L.alu(Op.WHERE, L.IDX, small, L.const(1), L.const(T_)))
        if ksplit:  # (neither rows nor columns are cut: each thread takes its K blocks, below)
            pass
        elif by_cols:  # columns [n_lo, n_hi) in whole panels
            chunk = L.imul(ceil_div(X.make("idiv", L.IDX, (L.iadd(N, L.isub(teff, L.const(1))), teff)), nr),
                           L.const(nr))
            n_lo = L.imin(N, L.imul(tid, chunk))
            n_hi = L.imin(N, L.iadd(n_lo, chunk))
        else:
            chunk = L.imul(ceil_div(X.make("idiv", L.IDX, (L.iadd(M, L.isub(teff, L.const(1))), teff)), mr),
                           L.const(mr))
            m_lo = L.imin(M, L.imul(tid, chunk))
            m_hi = L.imin(M, L.iadd(m_lo, chunk))
        if by_batch is not None:  # batch indices [tid*chunk, ...) of the first batch loop (when by_batch holds)
            a0, e0 = baxes[0], loops[0][1]
            bchunk = X.make("idiv", L.IDX, (L.iadd(e0, L.isub(teff, L.const(1))), teff))
            start = L.imul(tid, bchunk)
            u = var("bu", src.shape[a0])
            size = L.imax(L.imin(bchunk, L.isub(e0, start)), L.const(0))
            if not _is(by_batch, True):
                start, size = _pick(by_batch, start, L.const(0)), _pick(by_batch, size, e0)
                m_lo, m_hi = _pick(by_batch, L.const(0), m_lo), _pick(by_batch, M, m_hi)
            else:
                m_lo, m_hi = L.const(0), M
            coord[a0] = exact_range(kl, L.iadd(start, u), src.shape[a0])
            loops[0] = (u, size)
        poff_a, poff_b = (L.imul(tid, L.dim(size)) for size in plan.thread_packs(T_, bool(loops)))
    if kl.par is not None:  # under an outer split: the outer thread's slot, sized as the schedule sized it
        slots = thread_slots([kl.plan(m).gemm for m in kl.members if m.op is Op.REDUCE and m.dtype == dt])
        oa, ob = (L.imul(kl.par[1].tid, L.dim(size)) for size in slots)
        # (with both splits one of the two thread numbers is 0: the schedule made room for either)
        poff_a, poff_b = (oa, ob) if tid is None else (L.iadd(poff_a, oa), L.iadd(poff_b, ob))
    # a thread's rows of a packed once per K block, before its column blocks, in slabs of at
    # most slab_rows rows (GemmPlan.slab)
    slab = plan.slab(T_, bool(loops)) and kl.par is None
    s_lo = m_lo
    if slab:
        sb = var("sb", D.floordiv(D.add(plan.M, plan.slab_rows - 1), plan.slab_rows))
        s_lo = L.iadd(m_lo, L.imul(sb, L.const(plan.slab_rows)))
        s_hi = L.imin(m_hi, L.iadd(s_lo, L.const(plan.slab_rows)))
    nkc = ceil_div(K, kc)
    jc, kcv = var("jc", D.floordiv(D.add(plan.N, nc - 1), nc)), var("kc", D.floordiv(D.add(plan.K, kc - 1), kc))
    klen = L.imin(L.const(kc), L.isub(K, L.imul(kcv, L.const(kc))))
    j0 = L.imul(jc, L.const(nc)) if not by_cols else L.iadd(n_lo, L.imul(jc, L.const(nc)))
    npj = ceil_div(L.imin(L.const(nc), L.isub(n_hi, j0)), nr)

    def exact(e: X, size: Dim) -> Aff:
        return exact_at(kl, e, size)

    def split(rem: X, axes: tuple[int, ...], total: Dim) -> dict[int, Aff]:
        return merged_coords(kl, src, rem, axes, total)

    def kcoords(kk: X) -> None:
        coord.update(split(L.iadd(L.imul(kcv, L.const(kc)), kk), plan.red, plan.K))

    def coords_at(at: dict[int, Aff]) -> Coords:
        return Coords(src.shape, axes=[at.get(a, coord.get(a, Aff())) for a in range(src.rank)])

    def operand(node: Node, at: dict[int, Aff]) -> X:
        return kl.val(node, coords_at(at))

    zero = L.const(0.0, dt)
    # pack B: panels of nr columns, k-major, zero-padded past N
    jp, kk, cc, cz = var("jp", nc // nr), var("bk", kc), var("bc", nr), var("bz", nr)
    kcoords(kk)
    jb = L.iadd(j0, L.imul(jp, L.const(nr)))
    cv = L.imin(L.const(nr), L.isub(n_hi, jb))
    bbase = L.iadd(poff_b, L.iadd(L.imul(jp, L.const(kc * nr)), L.imul(kk, L.const(nr))))
    no_i = {plan.i: Aff()} if plan.i is not None else {}
    pad = L.Store(pb, L.iadd(bbase, L.iadd(cv, cz)), zero)
    if len(plan.js) > 1:
        # merged columns (a convolution's output rows and columns): one contiguous copy per
        # row the panel touches, so that a merged index is divided once a row, not per element
        wd = src.shape[plan.j]
        wl, rows = L.dim(wd), D.prod([src.shape[a] for a in plan.js[:-1]])
        sg, t = var("bs", rows), var("bt", wd)
        row_at, nseg, rw, lo, hi = row_runs(jb, cv, wl, sg)
        w = L.iadd(lo, t)
        at = split(row_at, plan.js[:-1], rows) | {plan.j: exact(w, wd)} | no_i
        row = [L.Loop(sg.arg, nseg, [L.Loop(t.arg, L.isub(hi, lo), [
                   L.Store(pb, L.iadd(bbase, L.isub(L.iadd(rw, w), jb)), operand(opb, at))])]),
               L.Loop(cz.arg, L.isub(L.const(nr), cv), [pad], "cold")]
    else:
        bat = split(L.iadd(jb, cc), plan.js, plan.N) | no_i
        bval = operand(opb, bat)
        row = panel_rows(cc, cz, cv, nr, L.Store(pb, L.iadd(bbase, cc), bval), pad)
    straight = None
    if len(plan.js) == 1 and not plan.pairs:  # b read from a buffer: one copy statement (caten.lower.panels)
        straight = panel_copy(kl, opb, coords_at(bat), bval, kk, cc, bat[plan.js[0]], coord, plan, si, dt, nr, pb,
                              L.subst(bbase, kk, L.const(0)), cv, klen)
    pack_b = [L.Loop(jp.arg, npj, straight or [L.Loop(kk.arg, klen, row)])]
    # pack A: panels of mr rows, k-major, zero-padded past M
    ic = var("ic", D.floordiv(D.add(plan.M, mc - 1), mc))
    i0 = L.iadd(s_lo, L.imul(ic, L.const(mc)))
    npi = ceil_div(L.imin(L.const(mc), L.isub(m_hi, i0)), mr)
    p0, npack = (s_lo, ceil_div(L.isub(s_hi, s_lo), mr)) if slab else (i0, npi)
    ip = var("ip", plan.slab_rows // mr if slab else mc // mr)
    rr, rz, ka, kz = var("ar", mr), var("az", mr), var("ak", kc), var("akz", kc)
    ib = L.iadd(p0, L.imul(ip, L.const(mr)))
    rv = L.imin(L.const(mr), L.isub(m_hi, ib))
    kcoords(ka)
    at = {a: Aff() for a in plan.js}
    if plan.i is not None:
        at[plan.i] = exact(L.iadd(ib, rr), plan.M)
    aval = operand(opa, at)
    abase = L.iadd(poff_a, L.imul(ip, L.const(kc * mr)))
    # k outer, the panel's rows inner: the packed panel is written in order, and a transposed a
    # (a weight gradient's activations, contiguous along the rows) is read in order too (rows
    # outer read it a cache line per element: dW3 of the Mixer 271 -> 292-300 GF/s; e1 0.96-0.98x
    # -> 1.03-1.04x numpy; row-major a reads mr rows side by side, each line reused over k)
    i_at = at[plan.i].terms if plan.i is not None else {}
    k_at = coord[plan.red[0]].terms if len(plan.red) == 1 else {}
    rowp = None
    if len(i_at) == 1 and len(k_at) == 1 and not plan.pairs:
        rowp = strided_panel(kl, opa, coords_at(at), aval, rr, ka, next(iter(i_at)), next(iter(k_at)))
    if rowp is not None:  # a row-major a: a transposing copy (caten.lower.panels), then the rows past M zeroed
        copy = [L.PackT(f"s{si}pk{kl.nvar}", dt, mr, pa, abase, rowp[0], rowp[1], rowp[2], rv, klen),
                L.Loop(rz.arg, L.isub(L.const(mr), rv), [L.Loop(kz.arg, klen, [
                    L.Store(pa, L.iadd(abase, L.iadd(L.imul(kz, L.const(mr)), L.iadd(rv, rz))), zero)], "cold")],
                       "cold")]
        kl.nvar += 1
    else:  # (a full panel's row a loop of constant length, vector moves: a count of rv became a
        # call of memcpy per k row, 56 bytes each, 4.5% of a Mixer training step)
        arow = L.iadd(abase, L.imul(ka, L.const(mr)))
        copy = [L.Loop(ka.arg, klen, panel_rows(rr, rz, rv, mr, L.Store(pa, L.iadd(arow, rr), aval),
                                                L.Store(pa, L.iadd(arow, L.iadd(rv, rz)), zero)))]
    pack_a = [L.Loop(ip.arg, npack, copy)]
    packed_from = epilogue.read_by(row) | epilogue.loaded(aval)
    kw = kc // 2 if plan.pairs else kc  # words of a panel's k rows per lane (pairs: two k a word)
    if plan.pairs:  # (the panels above are not used: words of k pairs instead, caten.lower.gemm_pairs)
        def b_at(k: X, c: X) -> X:
            kcoords(k)
            return operand(opb, split(L.iadd(jb, c), plan.js, plan.N) | no_i)

        def a_at(k: X, r: X) -> X:
            kcoords(k)
            return operand(opa, {a: Aff() for a in plan.js} | ({plan.i: exact(L.iadd(ib, r), plan.M)}
                                                                if plan.i is not None else {}))

        pack_b = [L.Loop(jp.arg, npj, gemm_pairs.panel(var, b_at, pb, L.iadd(poff_b, L.imul(jp, L.const(kw * nr))),
                                                       nr, cv, klen, "bq", kw))]
        pack_a = [L.Loop(ip.arg, npack, gemm_pairs.panel(var, a_at, pa, L.iadd(poff_a, L.imul(ip, L.const(kw * mr))),
                                                         mr, rv, klen, "aq", kw))]
        packed_from = epilogue.read_by(pack_b + pack_a)
    # micro-tiles of the block at (i0, j0)

    def out_offset(i_at: X, j_at: X) -> X:
        return out_index(kl, n, plan, coord, i_at, j_at)

    ooff = out_offset(i0, j0)
    ostride = out_stride(kl, n, plan)
    beta = L.const(False, T.bool_) if nkc.op == "const" and nkc.arg == 1 else L.icmplt(L.const(0), kcv)
    if once:  # the block's panels in the whole packed b: [K block][column panel][k][nr]
        poff_b = L.imul(L.iadd(L.imul(kcv, ceil_div(L.dim(plan.N), nr)), X.make("idiv", L.IDX, (j0, L.const(nr)))),
                        L.const(kc * nr))  # (the whole pack's layout: every column, a causal cut's too)
        pack_b = []
    if a_once:  # likewise a: [K block][row panel][k][mr]
        poff_a = L.imul(L.iadd(L.imul(kcv, ceil_div(L.dim(plan.M), mr)), X.make("idiv", L.IDX, (i0, L.const(mr)))),
                        L.const(kc * mr))
        pack_a = []
    target, final = buf, []
    if ksplit:  # thread tid sums K blocks [lo, lo + per) into its partial [M, N]; the partials are added after
        part = whole[0]
        kl.bufs[part] = dt
        per = L.imax(L.const(1), X.make("idiv", L.IDX, (L.iadd(nkc, L.isub(teff, L.const(1))), teff)))
        lo = L.imul(tid, per)
        mine = L.land(L.alu(Op.NOT, T.bool_, L.icmplt(kcv, lo)), L.icmplt(kcv, L.iadd(lo, per)))
        beta = L.icmplt(lo, kcv)
        target, ostride, plane = part, L.const(plan.N), L.const(plan.M * plan.N)
        ooff = L.iadd(L.imul(tid, plane), L.iadd(L.imul(i0, ostride), j0))
        # buf = partial 0 + the partials of the other threads that had K blocks
        fi, fj, ft = var("ki", plan.M), var("kj", plan.N), var("kt", kl.threads)
        at, o = L.iadd(L.imul(fi, ostride), fj), out_offset(fi, fj)
        used = X.make("idiv", L.IDX, (L.iadd(nkc, L.isub(per, L.const(1))), per))
        add = L.alu(Op.ADD, dt, L.load(buf, o, dt), L.load(part, L.iadd(at, L.imul(L.iadd(ft, L.const(1)), plane)), dt))
        final = [L.Loop(fi.arg, M, [L.Loop(fj.arg, N, [
            L.Store(buf, o, L.load(part, at, dt)),
            L.Loop(ft.arg, L.isub(used, L.const(1)), [L.Store(buf, o, add)])])])]
        # (no K block at all: the partials hold nothing, and the output keeps its zeros)
        final = [L.Loop(var("kany", 1).arg, L.alu(Op.WHERE, L.IDX, L.icmplt(L.const(0), nkc), L.const(1),
                                                   L.const(0)), final)]
    if slab:  # (block ic's panels in the thread's slab)
        poff_a = L.iadd(poff_a, L.imul(ic, L.const(mc * kw)))
    ktiles = L.iadd(gemm_pairs.halves(klen)[0], gemm_pairs.halves(klen)[1]) if plan.pairs else klen
    tiles = [L.MacroMM(f"s{si}_{kl.nvar}", dt, mr, nr, ktiles, pa, poff_a, kw * mr, pb, poff_b, kw * nr, target,
                       ooff, ostride, npi, npj, L.isub(m_hi, i0), L.isub(n_hi, j0), beta, plan.pairs)]
    kl.nvar += 1
    # the next stage, when elementwise on this output, over each block once its last K block is in
    epi = epilogue.candidate(kl, n, si, plan) if not ksplit else None
    kloops = nkc
    if epi is not None:
        kl.done.add(n)  # (the epilogue reads n from its buffer)
        # (an empty K runs one K block of no k: its tiles store zeros, then the epilogue runs)
        kloops = L.imax(nkc, L.const(1)) if not (isinstance(plan.K, int) and plan.K > 0) else nkc
        last = None if kloops.op == "const" and kloops.arg == 1 else \
            L.alu(Op.NOT, T.bool_, L.icmplt(kcv, L.isub(kloops, L.const(1))))
        block = epilogue.fuse(kl, n, epi, si, plan, coord, (i0, L.imin(L.const(mc), L.isub(m_hi, i0))),
                              (j0, L.imin(L.const(nc), L.isub(n_hi, j0))), last,
                              packed_from, split)
        if block is None:
            epi, kloops = None, nkc
        else:
            tiles += block
    # a that no batch loop changes, in one M block and one K block (a convolution's weights), is
    # packed once, before the batch loops, not once per image
    hoist = bool(loops) and nkc.op == "const" and nkc.arg == 1 and isinstance(plan.M, int) and plan.M <= mc \
        and not (axis_deps(opa) & set(baxes)) and not a_once
    if hoist:
        body = [L.Loop(jc.arg, ceil_div(L.isub(n_hi, n_lo), nc), pack_b + tiles)]
    elif slab:  # (a slab's M blocks: whole ones but the thread's last, slab_rows being a multiple of mc)
        body = [L.Loop(kcv.arg, kloops, pack_a + [L.Loop(jc.arg, ceil_div(L.isub(n_hi, n_lo), nc), pack_b + [
            L.Loop(ic.arg, ceil_div(L.isub(s_hi, s_lo), mc), tiles)])])]
        body = [L.Loop(sb.arg, ceil_div(L.isub(m_hi, m_lo), plan.slab_rows), body)]
    else:
        body = pack_b + [L.Loop(ic.arg, ceil_div(L.isub(m_hi, m_lo), mc), pack_a + tiles)]
        if ksplit:  # (only this thread's K blocks)
            body = [L.Loop(f"{kcv.arg}_mine", L.alu(Op.WHERE, L.IDX, mine, L.const(1), L.const(0)), body)]
        body = [L.Loop(jc.arg, ceil_div(L.isub(n_hi, n_lo), nc), [L.Loop(kcv.arg, kloops, body)])]
    for v, e in reversed(loops):
        body = [L.Loop(v.arg, e, body)]
    if hoist:  # ic and kc take their one value 0 around the whole nest
        body = [L.Loop(ic.arg, L.const(1), [L.Loop(kcv.arg, L.const(1), pack_a + body)])]
    if tid is not None:
        body = [L.Parallel(tid.arg, teff, body, most=T_)] + final
    if once or a_once:
        side, node, pw = ("b", opb, pb) if once else ("a", opa, pa)
        if kl.par is not None:  # under an outer split: packed before the threads start, shared by them
            pack = pack_whole(kl, si, plan, side, pw, node, coords_at, split,
                              L.const(kl.threads), once=False, tid=kl.prologue_tid())
            outer = {v.arg for v in kl.outer_vars if v.op == "var"} | {kl.par[1].tid.arg, kl.par[2].arg}
            assert not outer & L.stmt_vars(pack), f"{n}: a packed-once operand reads an outer loop"
            kl.prologue += pack[0].body  # (one parallel loop packs them all: KernelLowerer.lower)
        else:
            pack = pack_whole(kl, si, plan, side, pw, node, coords_at, split, teff if tid is not None else None)
            if plan.hoisted and once:  # a loop's invariant b: packed on its first trip, kept for the others
                pack = [L.Loop(var("first", D.sym(plan.hoisted)).arg, L.dim(D.sym(plan.hoisted)), pack)]
            body = pack + body
    kl.done.add(n)
    return (zeros_if_empty(kl, n, si, buf, plan.K, Coords) if epi is None else []) + body


def batch_loops(kl: KernelLowerer, si: int, plan: GemmPlan, src: Node) -> tuple[dict[int, Aff], list, list[int]]:
    """The batch axes' coordinates (the kernel's outer loops', or 0 for a size-1 axis) and the
    loops the GEMM runs itself for the others: (coordinates, [(var, extent)], their axes)."""
    coord: dict[int, Aff] = {}
    loops: list[tuple[X, X]] = []
    axes: list[int] = []
    for a in plan.batch:
        if a < kl.p:
            coord[a] = Aff.of(kl.outer_vars[a])
        elif src.shape[a] == 1:
            coord[a] = Aff()
        else:
            v = kl.newvar(f"s{si}g{a}", src.shape[a])
            coord[a] = Aff.of(v)
            loops.append((v, L.dim(src.shape[a])))
            axes.append(a)
    return coord, loops, axes


def exact_at(kl: KernelLowerer, e: X, size: Dim) -> Aff:
    """A coordinate known to lie in [0, size) (loops stop at the valid part of a block)."""
    if e.op == "var":
        lo, hi = kl.ranges[e]
        if isinstance(hi, int) and isinstance(size, int):
            kl.ranges[e] = (0, min(hi, size - 1))
    else:
        kl.ranges[e] = (0, D.add(size, -1))
    return Aff.of(e)


def merged_coords(kl: KernelLowerer, src: Node, rem: X, axes: tuple[int, ...], total: Dim) -> dict[int, Aff]:
    """The coordinates along `axes` (outermost first) of a merged index in [0, total)."""
    if len(axes) == 1:
        return {axes[0]: exact_at(kl, rem, total)}
    out = {}
    for a in reversed(axes[1:]):
        d = src.shape[a]
        out[a] = exact_at(kl, X.make("imod", L.IDX, (rem, L.dim(d))), d)
        rem = X.make("idiv", L.IDX, (rem, L.dim(d)))
    out[axes[0]] = exact_at(kl, rem, src.shape[axes[0]])  # (what is left is below the outermost size)
    return out


def _out_shape(kl: KernelLowerer, n: Node) -> tuple[list[Dim], int]:
    """The output's indexed shape (a kernel-local one drops the outer axes) and its first axis."""
    local = n in kl.local
    return list(n.shape[kl.p:] if local else n.shape), kl.p if local else 0


def out_index(kl: KernelLowerer, n: Node, plan: GemmPlan, coord: dict[int, Aff], i_at: X, j_at: X) -> X:
    """The GEMM output's index of row i_at, merged column j_at (the batch axes at `coord`)."""
    oshape, off = _out_shape(kl, n)
    ostr = contiguous_strides(oshape)
    o: X = L.const(0)
    for a in range(n.rank):
        if a < off or oshape[a - off] == 1:
            continue
        s = L.dim(ostr[a - off])  # the j axes are innermost and contiguous: the merged one has stride 1
        if a == plan.j:
            o = L.iadd(o, L.imul(j_at, s))
        elif a in plan.js:
            continue
        elif a == plan.i:
            o = L.iadd(o, L.imul(i_at, s))
        elif a in coord:
            o = L.iadd(o, L.imul(coord[a].expr(), s))
    if off and kl.par is not None:  # this thread's slice of a kernel-local output (KernelLowerer.index)
        o = L.iadd(o, L.imul(kl.par[1].tid, L.dim(D.prod(n.shape[kl.p:]))))
    return o


def out_stride(kl: KernelLowerer, n: Node, plan: GemmPlan) -> X:
    """The output's index step from one GEMM row to the next."""
    oshape, off = _out_shape(kl, n)
    ostr = contiguous_strides(oshape)
    return L.dim(ostr[plan.i - off]) if plan.i is not None and plan.i >= off else L.const(0)


def _by_batch(plan: GemmPlan, loops: list[tuple[X, X]], short: bool, threads: int) -> X | None:
    """Whether the threads split the first batch loop rather than the rows: None for never, else
    a (static or runtime) condition. Worth it when the loop gives every thread some of it and
    either B changes with it (else each thread would pack every B: a convolution's im2col rows)
    or M is too short to share."""
    if not loops or not (short or not plan.b_once):
        return None
    e0 = loops[0][1]
    if e0.op == "const":
        return L.const(True, T.bool_) if e0.arg >= threads else None
    return L.alu(Op.NOT, T.bool_, L.icmplt(e0, L.const(threads)))


def _is(c: X, value: bool) -> bool:
    return c.op == "const" and c.arg is value


def _pick(c: X, yes: X, no: X) -> X:
    return L.alu(Op.WHERE, L.IDX, c, yes, no)


def exact_range(kl: KernelLowerer, e: X, size: Dim) -> Aff:
    """A coordinate known to lie in [0, size) (a thread's share of a loop stops at its end)."""
    kl.ranges[e] = (0, D.add(size, -1))
    return Aff.of(e)
