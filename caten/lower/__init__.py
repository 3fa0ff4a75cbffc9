"""Lowering: a scheduled kernel (a group of realized nodes sharing outer loops) -> loop IR.

Every realized node becomes a stage inside the kernel's outer loops: a store loop nest, a
register reduction (accumulator, then one store), or a memory reduction (accumulate into
the output slab, the loop order of the source so the innermost loop stays contiguous).
Inlined nodes are computed where they are used; VIEWs become index arithmetic with masks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import REDUCERS, TABLE, Op
from caten.ir.walk import Visit, drive
from caten.lower import loopir as L
from caten.lower.empty import zeros_if_empty
from caten.lower.index import Aff, contiguous_strides, flatten, unflatten
from caten.lower.loopir import X
from caten.lower.reduce import Blocked, block_plan
from caten.schedule import LOWP, GemmPlan, Schedule, Unfusable, gemm_plan, max_outer, reduce_mode

_REDUCE_ALU = REDUCERS
GEMM_THREAD_MIN = 1 << 22  # multiply-adds below which a GEMM stays on one thread (~40 us of work)


def identity(op: str, dtype) -> X:
    return L.const(TABLE[_REDUCE_ALU[op]].identity(dtype), dtype)


class Coords:
    """Coordinates in a shape, held as per-axis affine forms, a flat offset, or both."""

    __slots__ = ("shape", "_axes", "_flat")

    def __init__(self, shape: Sequence[Dim], axes: list[Aff] | None = None, flat: Aff | None = None):
        self.shape, self._axes, self._flat = tuple(shape), axes, flat

    def flat(self) -> Aff:
        if self._flat is None:
            self._flat = flatten(self._axes, self.shape)
        return self._flat

    def axes(self, ranges) -> list[Aff]:
        if self._axes is None:
            self._axes = unflatten(self._flat, self.shape, ranges)
        return self._axes

    def key(self) -> tuple:
        return ("f", self.flat().key())


class _Ranges(dict):
    """Known ranges of index variables. `version` names the current set of facts (a fresh
    number for every update, the old one back on `restore`), so values memoized under one
    version were derived from exactly these facts."""

    _versions = itertools.count(1)
    version = 0

    def __setitem__(self, k: X, v: tuple[Dim, Dim]) -> None:
        self.version = next(self._versions)
        super().__setitem__(k, v)

    def save(self) -> tuple[dict, int]:
        return dict(self), self.version

    def restore(self, state: tuple[dict, int]) -> None:
        self.clear()
        self.update(state[0])
        self.version = state[1]


class KernelLowerer:
    def __init__(self, name: str, members: list[Node], outer: int, realized: set[Node],
                 bufname: Callable[[Node], str | None], modes: dict[Node, str] | None = None,
                 local: set[Node] | None = None, scratch: dict[Node, tuple] | None = None, threads: int = 1):
        self.name, self.members, self.p, self.realized = name, members, outer, realized
        self.threads = threads
        self.scratch = scratch or {}
        self.bufname = bufname
        self.modes = modes or {}
        self.local = local or set()
        self.done: set[Node] = set()
        self.scalars: dict[Node, X] = {}
        self.ranges = _Ranges()
        self.memo: dict = {}
        self.nvar = 0
        self.bufs: dict[str, tuple] = {}
        shape = members[0].src[0].shape if members[0].op is Op.REDUCE else members[0].shape
        self.outer_shape = tuple(shape[:outer])
        self.outer_vars = [self.newvar(f"o{i}", d) for i, d in enumerate(self.outer_shape)]

    def newvar(self, hint: str, extent: Dim) -> X:
        v = L.var(f"{hint}_{self.nvar}")
        self.nvar += 1
        self.ranges[v] = (0, D.add(extent, -1))
        return v

    # values -----------------------------------------------------------------------------------
    def check_outer(self, n: Node, c: Coords) -> None:
        axes = c.axes(self.ranges)
        for i, v in enumerate(self.outer_vars):
            if self.outer_shape[i] == 1:
                continue
            if axes[i] != Aff.of(v):
                raise Unfusable(f"{n} is read at other outer coordinates")

    def index(self, n: Node, c: Coords) -> X:
        if n in self.local:
            return flatten(c.axes(self.ranges)[self.p:], n.shape[self.p:]).expr()
        return c.flat().expr()

    def load(self, n: Node, c: Coords) -> X:
        buf = self.bufname(n)
        self.bufs[buf] = n.dtype
        return L.load(buf, self.index(n, c), n.dtype)

    def val(self, n: Node, c: Coords, root: bool = False) -> X:
        """The value of n at coordinates c (walked without recursion: caten.ir.walk)."""
        return drive(self._visit(n, c, root))

    def _visit(self, n: Node, c: Coords, root: bool = False) -> Visit[X]:
        if not root:
            if n in self.scalars:
                self.check_outer(n, c)
                return self.scalars[n]
            if n in self.done:
                self.check_outer(n, c)
                return self.load(n, c)
            if n in self.realized:
                if n in self.members:
                    raise Unfusable("a later stage is read")
                return self.load(n, c)
        key = (n, c.key(), root, self.ranges.version)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = yield from self._val(n, c)
        return hit

    def _val(self, n: Node, c: Coords) -> Visit[X]:
        op = n.op
        if op is Op.BUFFER:
            return self.load(n, c)
        if op is Op.CONST:
            v = n.arg
            if isinstance(v, (bool, int, float)):
                return L.const(v, n.dtype)
            return L.alu(Op.CAST, n.dtype, L.dim(v))
        if op is Op.INDEX:
            a = c.axes(self.ranges)[n.arg[1]].expr()
            return a if n.dtype == T.i64 else L.alu(Op.CAST, n.dtype, a)
        if op is Op.RAND:
            return X.make("rand", T.u32, (c.flat().expr(),), n.arg[1])
        if op is Op.COPY:
            return (yield self._visit(n.src[0], c))
        if op is Op.VIEW:
            return (yield from self.view(n, c))
        if op is Op.REDUCE or op is Op.EXTERN:
            raise NotImplementedError(f"{op.value} inside an expression")
        srcs = []
        for s in n.src:
            srcs.append((yield self._visit(s, c)))
        if op is Op.CAST:
            return srcs[0] if n.src[0].dtype == n.dtype else L.alu(Op.CAST, n.dtype, srcs[0])
        return L.alu(op, n.dtype, *srcs)

    def view(self, n: Node, c: Coords) -> Visit[X]:
        v = n.arg
        src = n.src[0]
        axes = c.axes(self.ranges)
        off = Aff(const=v.offset)
        for a, s in zip(axes, v.strides):
            if s != 0:
                off = off.add(a.scale(s))
        if v.mask is None:
            return (yield self._visit(src, Coords(src.shape, flat=off)))
        cond = None
        saved = self.ranges.save()
        for a, (lo, hi), d in zip(axes, v.mask, v.shape):
            e = a.expr()
            if lo != 0:
                cond = L.land(cond, L.alu(Op.NOT, T.bool_, L.icmplt(e, L.dim(lo))))
            if hi != d:
                cond = L.land(cond, L.icmplt(e, L.dim(hi)))
            if len(a.terms) == 1 and a.const == 0:
                (atom, k), = a.terms.items()
                if k == 1 and atom in self.ranges:
                    self.ranges[atom] = (lo, D.add(hi, -1))
        try:
            inner = yield self._visit(src, Coords(src.shape, flat=off))
        finally:
            self.ranges.restore(saved)
        if cond is None:
            return inner
        return X.make("masked", n.dtype, (cond, inner))

    # stages -------------------------------------------------------------------------------------
    def loops(self, shape: Sequence[Dim], axes: Sequence[int], hint: str) -> tuple[list[X], list]:
        """Loop vars for `axes` of shape; returns vars and a (outermost, innermost-body) pair."""
        vs = [self.newvar(f"{hint}{a}", shape[a]) for a in axes]
        return vs, vs

    def nest(self, vs: list[X], shape_of: list[Dim], body: list) -> list:
        for v, d in reversed(list(zip(vs, shape_of))):
            body = [L.Loop(v.arg, L.dim(d), body)]
        return body

    def stage(self, n: Node, si: int) -> list:
        p = self.p
        if n.op is not Op.REDUCE:
            inner = list(range(p, n.rank))
            vs = [self.newvar(f"s{si}a{a}", n.shape[a]) for a in inner]
            c = Coords(n.shape, axes=[Aff.of(v) for v in self.outer_vars + vs])
            val = self.val(n, c, root=True)
            buf = self.bufname(n)
            self.bufs[buf] = n.dtype
            self.done.add(n)
            return self.nest(vs, [n.shape[a] for a in inner], [L.Store(buf, self.index(n, c), val)])
        src = n.src[0]
        rop, axes = n.arg
        mode = self.modes.get(n) or reduce_mode(n, p)
        acc_dt = T.f32 if n.dtype.name in LOWP else n.dtype
        if acc_dt != n.dtype and mode in ("memory", "tiled"):
            mode = "register"  # a 16-bit buffer cannot carry the f32 accumulator: round once, at the end
        alu = _REDUCE_ALU[rop]
        if rop == "max" and n.dtype.is_bool:
            alu = Op.OR
        buf = self.bufname(n)
        if mode == "tiled":
            plan = gemm_plan(n)
            if plan is not None and p <= plan.lead:
                return self.gemm(n, si, buf, plan)
            return self.tiled(n, si, alu, buf)
        if mode == "memory":
            inner = list(range(p, n.rank))
            ivs = [self.newvar(f"s{si}i{a}", n.shape[a]) for a in inner]
            ci = Coords(n.shape, axes=[Aff.of(v) for v in self.outer_vars + ivs])
            init = self.nest(ivs, [n.shape[a] for a in inner],
                             [L.Store(buf, ci.flat().expr(), identity(rop, n.dtype))])
            vs = [self.newvar(f"s{si}a{a}", src.shape[a]) for a in range(p, src.rank)]
            allv = self.outer_vars + vs
            cs = Coords(src.shape, axes=[Aff.of(v) for v in allv])
            co = Coords(n.shape, axes=[Aff() if i in axes else Aff.of(v) for i, v in enumerate(allv)])
            idx = co.flat().expr()
            v = self.val(src, cs)
            upd = L.alu(alu, n.dtype, L.load(buf, idx, n.dtype), v, arg="acc")
            self.bufs[buf] = n.dtype
            self.done.add(n)
            return init + self.nest(vs, [src.shape[a] for a in range(p, src.rank)], [L.Store(buf, idx, upd)])
        keep = [a for a in range(p, src.rank) if a not in axes]
        red = [a for a in range(p, src.rank) if a in axes]
        kvs = [self.newvar(f"s{si}k{a}", src.shape[a]) for a in keep]
        cut = block_plan(rop, acc_dt, [src.shape[a] for a in red])
        blocked = Blocked(self, si, red, [src.shape[a] for a in red], cut) if cut else None
        rvs = blocked.vars if blocked else [self.newvar(f"s{si}r{a}", src.shape[a]) for a in red]
        vmap = dict(zip(range(p), self.outer_vars)) | dict(zip(keep, kvs)) | \
            (blocked.coords if blocked else dict(zip(red, rvs)))
        cs = Coords(src.shape, axes=[Aff.of(vmap[i]) for i in range(src.rank)])
        acc = f"acc{si}_{self.nvar}"
        self.nvar += 1
        v = self.val(src, cs)
        if acc_dt != n.dtype:
            v = L.alu(Op.CAST, acc_dt, v)
        upd = L.alu(alu, acc_dt, L.var(acc, acc_dt), v, arg="acc")
        if blocked:
            body, res = blocked.body(acc, acc_dt, identity(rop, acc_dt), upd)
        else:
            body = [L.Acc(acc, acc_dt, identity(rop, acc_dt))]
            body += self.nest(rvs, [src.shape[a] for a in red], [L.SetAcc(acc, upd)])
            res = L.var(acc, acc_dt)
        if res.dtype != n.dtype:
            res = L.alu(Op.CAST, n.dtype, res)
        if buf is not None:
            co = Coords(n.shape, axes=[Aff() if i in axes else Aff.of(vmap[i]) for i in range(n.rank)])
            body.append(L.Store(buf, co.flat().expr(), res))
            self.bufs[buf] = n.dtype
        if not keep:
            self.scalars[n] = res
        else:
            self.done.add(n)
        return self.nest(kvs, [src.shape[a] for a in keep], body)

    def tiled(self, n: Node, si: int, alu: Op, buf: str) -> list:
        """Register tiling of a contraction: batch, j0, i0, reduced axes, ii (MR), jj (NR vector),
        with tails for sizes that do not divide; the tile of the output stays in registers."""
        src = n.src[0]
        rop, axes = n.arg
        rank = src.rank
        j = rank - 1
        nonred = [a for a in range(rank) if a not in axes]
        i = nonred[-2] if len(nonred) >= 2 else None
        batch = [a for a in nonred if a not in (i, j)]
        item = n.dtype.itemsize
        nr = max(16, 256 // item)
        mr = 6 if i is not None else 1
        init_vs = [self.newvar(f"s{si}i{a}", n.shape[a]) for a in range(n.rank)]
        ci = Coords(n.shape, axes=[Aff.of(v) for v in init_vs])
        out = self.nest(init_vs, list(n.shape), [L.Store(buf, ci.flat().expr(), identity(rop, n.dtype))])
        self.bufs[buf] = n.dtype

        def parts(axis, step):
            if axis is None:
                return [(None, [], [], Aff())]
            size = src.shape[axis]
            if step == 1:
                v = self.newvar(f"s{si}t{axis}", size)
                return [(None, [], [(v, size)], Aff.of(v))]
            nmain = D.floordiv(size, step)
            v0 = self.newvar(f"s{si}b{axis}", nmain)
            v1 = self.newvar(f"s{si}u{axis}", step)
            main = (v0, [(v0, nmain)], [(v1, step)], Aff({v0: step, v1: 1}))
            rem = D.mod(size, step)
            vt = self.newvar(f"s{si}r{axis}", rem)
            tail = (None, [], [(vt, rem)], Aff({vt: 1}, D.mul(nmain, step)))
            return [main, tail]

        nj, ni = len(parts(j, nr)), len(parts(i, mr))
        for jk in range(nj):
            for ik in range(ni):
                jp, ip = parts(j, nr)[jk], parts(i, mr)[ik]
                bvs = [self.newvar(f"s{si}a{a}", src.shape[a]) for a in batch]
                rvs = [self.newvar(f"s{si}k{a}", src.shape[a]) for a in axes]
                coord: dict[int, Aff] = {a: Aff.of(v) for a, v in zip(batch, bvs)}
                coord.update({a: Aff.of(v) for a, v in zip(axes, rvs)})
                coord[j] = jp[3]
                if i is not None:
                    coord[i] = ip[3]
                cs = Coords(src.shape, axes=[coord[a] for a in range(rank)])
                co = Coords(n.shape, axes=[Aff() if a in axes else coord[a] for a in range(rank)])
                idx = co.flat().expr()
                upd = L.alu(alu, n.dtype, L.load(buf, idx, n.dtype), self.val(src, cs), arg="acc")
                body = [L.Store(buf, idx, upd)]
                inner = ip[2] + jp[2]
                body = self.nest([v for v, _ in inner], [d for _, d in inner], body)
                body = self.nest(rvs, [src.shape[a] for a in axes], body)
                outer = [(v, d) for v, d in zip(bvs, [src.shape[a] for a in batch])] + jp[1] + ip[1]
                out += self.nest([v for v, _ in outer], [d for _, d in outer], body)
        self.done.add(n)
        return out

    def gemm(self, n: Node, si: int, buf: str, plan: GemmPlan) -> list:
        """BLIS-style: N blocks (nc) > K blocks (kc; pack B) > M blocks (mc; pack A) > nr x mr
        micro-tiles (TileMM), each summing one K block into the output (the first one stores)."""
        src = n.src[0]
        p, dt = self.p, n.dtype
        opa, opb = src.src[plan.a], src.src[plan.b]
        pa, pb = self.scratch.get(n, ("pa", "pb"))
        self.bufs[pa] = dt
        self.bufs[pb] = dt
        self.bufs[buf] = dt
        mr, nr, kc, mc, nc = plan.mr, plan.nr, plan.kc, plan.mc, plan.nc
        M, N, K = L.dim(plan.M), L.dim(plan.N), L.dim(plan.K)
        loops: list[tuple[X, X]] = []
        coord: dict[int, Aff] = {}
        for a in plan.batch:
            if a < p:
                coord[a] = Aff.of(self.outer_vars[a])
            elif src.shape[a] == 1:
                coord[a] = Aff()
            else:
                v = self.newvar(f"s{si}g{a}", src.shape[a])
                coord[a] = Aff.of(v)
                loops.append((v, L.dim(src.shape[a])))

        def var(hint: str, ext: Dim) -> X:
            return self.newvar(f"s{si}{hint}", ext)

        # rows [m_lo, m_hi) of this thread: M split in multiples of mr over `teff` threads, each
        # with its own packed panels (B is packed once per thread; that is K*N against M*N*K/T)
        T_ = self.threads
        tid = var("tid", T_) if T_ > 1 else None
        m_lo: X = L.const(0)
        m_hi: X = M
        poff_a: X = L.const(0)
        poff_b: X = L.const(0)
        if tid is not None:
            work = L.imul(L.imul(M, N), K)
            for _, e in loops:
                work = L.imul(work, e)
            small = L.alu(Op.OR, T.bool_, L.icmplt(work, L.const(GEMM_THREAD_MIN)), L.icmplt(M, L.const(4 * mr * T_)))
            teff = L.alu(Op.WHERE, L.IDX, small, L.const(1), L.const(T_))
            chunk = L.imul(_ceil(X.make("idiv", L.IDX, (L.iadd(M, _sub(teff, L.const(1))), teff)), mr), L.const(mr))
            m_lo = L.imin(M, L.imul(tid, chunk))
            m_hi = L.imin(M, L.iadd(m_lo, chunk))
            poff_a, poff_b = L.imul(tid, L.const(mc * kc)), L.imul(tid, L.const(kc * nc))
        nkc = _ceil(K, kc)
        jc, kcv = var("jc", D.floordiv(D.add(plan.N, nc - 1), nc)), var("kc", D.floordiv(D.add(plan.K, kc - 1), kc))
        klen = L.imin(L.const(kc), _sub(K, L.imul(kcv, L.const(kc))))
        j0 = L.imul(jc, L.const(nc))
        npj = _ceil(L.imin(L.const(nc), _sub(N, j0)), nr)

        def exact(e: X, size: Dim) -> Aff:
            """A coordinate known to lie in [0, size) (loops stop at the valid part of a block)."""
            if e.op == "var":
                lo, hi = self.ranges[e]
                if isinstance(hi, int) and isinstance(size, int):
                    self.ranges[e] = (0, min(hi, size - 1))
            else:
                self.ranges[e] = (0, D.add(size, -1))
            return Aff.of(e)

        def kcoords(kk: X) -> None:
            rem = L.iadd(L.imul(kcv, L.const(kc)), kk)
            if len(plan.red) == 1:
                coord[plan.red[0]] = exact(rem, plan.K)
                return
            for a in reversed(plan.red):
                d = src.shape[a]
                coord[a] = exact(X.make("imod", L.IDX, (rem, L.dim(d))), d)
                rem = X.make("idiv", L.IDX, (rem, L.dim(d)))

        def operand(node: Node, at: dict[int, Aff]) -> X:
            c = Coords(src.shape, axes=[at.get(a, coord.get(a, Aff())) for a in range(src.rank)])
            return self.val(node, c)

        zero = L.const(0.0, dt)
        # pack B: panels of nr columns, k-major, zero-padded past N
        jp, kk, cc, cz = var("jp", nc // nr), var("bk", kc), var("bc", nr), var("bz", nr)
        kcoords(kk)
        jb = L.iadd(j0, L.imul(jp, L.const(nr)))
        cv = L.imin(L.const(nr), _sub(N, jb))
        bbase = L.iadd(poff_b, L.iadd(L.imul(jp, L.const(kc * nr)), L.imul(kk, L.const(nr))))
        bval = operand(opb, {plan.j: exact(L.iadd(jb, cc), plan.N)} | ({plan.i: Aff()} if plan.i is not None else {}))
        pack_b = [L.Loop(jp.arg, npj, [L.Loop(kk.arg, klen, [
            L.Loop(cc.arg, cv, [L.Store(pb, L.iadd(bbase, cc), bval)]),
            L.Loop(cz.arg, _sub(L.const(nr), cv), [L.Store(pb, L.iadd(bbase, L.iadd(cv, cz)), zero)], "cold")])])]
        # pack A: panels of mr rows, k-major, zero-padded past M
        ic = var("ic", D.floordiv(D.add(plan.M, mc - 1), mc))
        i0 = L.iadd(m_lo, L.imul(ic, L.const(mc)))
        npi = _ceil(L.imin(L.const(mc), _sub(m_hi, i0)), mr)
        ip, rr, rz, ka, kz = var("ip", mc // mr), var("ar", mr), var("az", mr), var("ak", kc), var("akz", kc)
        ib = L.iadd(i0, L.imul(ip, L.const(mr)))
        rv = L.imin(L.const(mr), _sub(m_hi, ib))
        kcoords(ka)
        at = {plan.j: Aff()}
        if plan.i is not None:
            at[plan.i] = exact(L.iadd(ib, rr), plan.M)
        aval = operand(opa, at)
        abase = L.iadd(poff_a, L.imul(ip, L.const(kc * mr)))
        pack_a = [L.Loop(ip.arg, npi, [
            L.Loop(rr.arg, rv, [L.Loop(ka.arg, klen, [
                L.Store(pa, L.iadd(abase, L.iadd(L.imul(ka, L.const(mr)), rr)), aval)], "cold")], "cold"),
            L.Loop(rz.arg, _sub(L.const(mr), rv), [L.Loop(kz.arg, klen, [
                L.Store(pa, L.iadd(abase, L.iadd(L.imul(kz, L.const(mr)), L.iadd(rv, rz))), zero)], "cold")],
                   "cold")])]
        # micro-tiles of the block at (i0, j0)
        local = n in self.local
        oshape = list(n.shape[p:] if local else n.shape)
        ostr = contiguous_strides(oshape)
        off = 0 if not local else p
        ooff: X = L.const(0)
        for a in range(n.rank):
            if a < off or oshape[a - off] == 1:
                continue
            s = L.dim(ostr[a - off])  # the j axis is innermost: its stride is 1
            if a == plan.j:
                ooff = L.iadd(ooff, L.imul(j0, s))
            elif a == plan.i:
                ooff = L.iadd(ooff, L.imul(i0, s))
            elif a in coord:
                ooff = L.iadd(ooff, L.imul(coord[a].expr(), s))
        ostride = L.dim(ostr[plan.i - off]) if plan.i is not None and plan.i >= off else L.const(0)
        beta = L.const(False, T.bool_) if nkc.op == "const" and nkc.arg == 1 else L.icmplt(L.const(0), kcv)
        tiles = [L.MacroMM(f"s{si}_{self.nvar}", dt, mr, nr, klen, pa, poff_a, kc * mr, pb, poff_b, kc * nr, buf,
                           ooff, ostride, npi, npj, _sub(m_hi, i0), _sub(N, j0), beta)]
        self.nvar += 1
        body = [L.Loop(ic.arg, _ceil(_sub(m_hi, m_lo), mc), pack_a + tiles)]
        body = [L.Loop(jc.arg, _ceil(N, nc), [L.Loop(kcv.arg, nkc, pack_b + body)])]
        for v, e in reversed(loops):
            body = [L.Loop(v.arg, e, body)]
        if tid is not None:
            body = [L.Parallel(tid.arg, teff, body, most=T_)]
        self.done.add(n)
        return zeros_if_empty(self, n, si, buf, plan.K, Coords) + body

    def lower(self) -> list:
        body: list = []
        for si, n in enumerate(self.members):
            body += self.stage(n, si)
        return self.nest(self.outer_vars, list(self.outer_shape), body)


def _sub(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return L.const(a.arg - b.arg)
    return L.iadd(a, L.imul(b, L.const(-1)))


def _ceil(a: X, k: int) -> X:
    if a.op == "const":
        return L.const(-(-a.arg // k))
    if k == 1:
        return a
    return X.make("idiv", L.IDX, (L.iadd(a, L.const(k - 1)), L.const(k)))


class GroupCheck:
    """The scheduler's veto: can these nodes share `outer` loops? It lowers the group and
    lets Unfusable escape. Incremental: the scheduler grows a group one node at a time, so
    when `members` is the last accepted group plus one node (same `outer`), only that node's
    stage is lowered on top of the kept lowering state. `fresh()` gives the state for one
    schedule."""

    def __init__(self) -> None:
        self.last: tuple[tuple[Node, ...], int, KernelLowerer] | None = None

    def fresh(self) -> GroupCheck:
        return GroupCheck()

    def __call__(self, members: list[Node], outer: int, realized: set[Node]) -> None:
        n = members[-1]
        if n.op is Op.REDUCE and max_outer(n) < outer:
            raise Unfusable("reduce axis inside the outer loops")
        last, self.last = self.last, None
        if last is not None and last[1] == outer and last[0] == tuple(members[:-1]):
            kl = last[2]
            kl.members.append(n)
            kl.stage(n, len(members) - 1)
        else:
            for m in members[:-1]:
                if m.op is Op.REDUCE and max_outer(m) < outer:
                    raise Unfusable("reduce axis inside the outer loops")
            kl = KernelLowerer("check", list(members), outer, realized, lambda n: "b")
            for si, m in enumerate(members):
                kl.stage(m, si)
        self.last = (tuple(members), outer, kl)


check_group = GroupCheck()


def lower(sched: Schedule) -> list[L.Kernel]:
    """Loop-IR kernels of a schedule, one per scheduled kernel, in execution order."""
    out: list[L.Kernel] = []
    realized = {s.node for k in sched.kernels for s in k.stages}
    for k in sched.kernels:
        modes = {s.node: s.mode for s in k.stages if s.kind == "reduce"}
        local = {s.node for s in k.stages if s.buffer and sched.buffers[s.buffer].local >= 0}
        scratch = {s.node: s.scratch for s in k.stages if s.scratch}
        kl = KernelLowerer(k.name, [s.node for s in k.stages], k.outer, realized,
                           lambda n: sched.node_buf.get(n), modes, local, scratch, sched.threads)
        body = kl.lower()
        params = [L.BufParam(b, sched.buffers[b].dtype, sched.buffers[b].role) for b in kl.bufs if b is not None]
        out.append(L.Kernel(k.name, params, list(sched.program.dims), body))
    return out
