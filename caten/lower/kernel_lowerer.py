"""Lowering: a scheduled kernel (a group of realized nodes sharing outer loops) -> loop IR.

Every realized node becomes a stage inside the kernel's outer loops: a store loop nest, a
register reduction (accumulator, then one store), or a memory reduction (accumulate into
the output slab, the loop order of the source so the innermost loop stays contiguous).
Inlined nodes are computed where they are used; VIEWs become index arithmetic with masks.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import REDUCERS, Op
from caten.ir.walk import Visit, drive
from caten.loopir import X
from caten.lower.chunks import Chunk, chunk, threads_for
from caten.lower.conv import direct
from caten.lower.gemm import gemm, tiled
from caten.lower.index import Aff, Coords, flatten
from caten.lower.kernel_memo import kernel_key, renamed, scan
from caten.lower.loadsplit import split_loads
from caten.lower.masksplit import split_masks
from caten.lower.numerics_narrow import saturating
from caten.lower.reduce import Blocked, identity
from caten.lower.scatter import scatter_stage
from caten.lower.sort import sort_stage
from caten.schedule.causal import Cut
from caten.schedule.model import Schedule, Unfusable
from caten.schedule.plan import LOWP, on_gpu
from caten.schedule.reduce_plan import ReducePlan
from caten.schedule.split import EVEN_EACH, outer_either, stagewise, work

_REDUCE_ALU = REDUCERS
UNROLL_TAPS = 64  # window positions a register reduction unrolls (8x8)


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
                 bufname: Callable[[Node], str | None], plan: Callable[[Node], ReducePlan],
                 local: set[Node] | None = None, scratch: dict[Node, tuple] | None = None, threads: int = 1,
                 split: tuple[int, Dim] = (1, 0), stagewise: bool = False, either: bool = False,
                 outputs: frozenset[str] = frozenset(), cuts: dict[Node, Cut] | None = None):
        self.name, self.members, self.p, self.realized = name, members, outer, realized
        self.cuts = cuts or {}  # causal cuts of stages (caten.schedule.causal): their key loops stop early
        self.outputs = outputs  # the program's output buffers (what the caller reads)
        self.threads = threads
        self.scratch = scratch or {}
        self.bufname = bufname
        self.plan = plan  # each REDUCE's plan, decided by the schedule (caten.schedule.plan)
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
        self.par: tuple[int, Chunk, X] | None = None
        self.prologue: list = []  # each thread's share of the packed-once operands, before the outer split
        self._ptid: X | None = None
        self.stage_threads = 1  # > 1: store stages split their first loop (a kernel with a GEMM)
        self.outer_on: X | None = None  # with both splits (`either`): whether the outer one runs
        if split[0] > 1 and outer > 0:
            if stagewise:
                self.stage_threads = split[0]
            if not stagewise or either:
                self._split(*split, even=either)

    def _split(self, most: int, work: Dim, even: bool = False) -> None:
        """Chunks of the first non-unit outer loop on up to `most` threads (caten.schedule.split):
        that loop's coordinate becomes the thread's start + u, and each thread's local scratch is
        its own slice (`index`). `even`: only when the loop shares out evenly at run time
        (caten.schedule.split.even_outer); else its GEMMs and stages split (`inner`)."""
        a = next(a for a, d in enumerate(self.outer_shape) if d != 1)
        ext = L.dim(self.outer_shape[a])
        teff = threads_for(work, most)
        if even:
            t = L.const(most)
            rem = L.isub(ext, L.imul(X.make("idiv", L.IDX, (ext, t)), t))
            ok = L.land(L.alu(Op.NOT, T.bool_, L.icmplt(ext, t)),
                        L.alu(Op.OR, T.bool_, L.icmplt(rem, L.const(1)),
                              L.alu(Op.NOT, T.bool_, L.icmplt(ext, L.const(EVEN_EACH * most)))))
            # (no minimum of work: the kernel has GEMMs; a short condition, as every stage reads it)
            teff = L.alu(Op.WHERE, L.IDX, ok, L.const(most), L.const(1))
            self.outer_on = ok
        ch = chunk(self.newvar("tid", most), ext, teff)
        u = self.newvar(f"o{a}u", self.outer_shape[a])
        self.outer_vars[a] = self.at(L.iadd(ch.start, u), self.outer_shape[a])
        self.par = (a, ch, u)

    def prologue_tid(self) -> X:
        """The thread variable of the parallel loop that runs `prologue` (before the outer split)."""
        if self._ptid is None:
            self._ptid = self.newvar("ptid", self.threads)
        return self._ptid

    def inner(self, teff: X) -> X:
        """Threads for a split inside one outer iteration: `teff`, or 1 while the outer loop's
        split runs (`outer_on`)."""
        if self.outer_on is None:
            return teff
        return L.alu(Op.WHERE, L.IDX, self.outer_on, L.const(1), teff)

    def at(self, e: X, extent: Dim) -> X:
        """Index e, known to lie in [0, extent)."""
        self.ranges[e] = (0, D.add(extent, -1))
        return e

    def reads_scalars(self, n: Node) -> bool:
        """Whether computing n reads a register reduction's value (an accumulator of this thread)."""
        stack, seen = list(n.src), set()
        while stack:
            m = stack.pop()
            if m in seen:
                continue
            seen.add(m)
            if m in self.scalars:
                return True
            if m not in self.done and m not in self.realized:
                stack.extend(m.src)
        return False

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
        """The flat index of n's element at c in its buffer (a kernel-local one: this thread's slice)."""
        return self.index_aff(n, c).expr()

    def index_aff(self, n: Node, c: Coords) -> Aff:
        """`index` as an affine form of c's atoms (caten.lower.panels reads its coefficients)."""
        if n in self.local:
            idx = flatten(c.axes(self.ranges)[self.p:], n.shape[self.p:])
            if self.par is not None:  # one slice per thread
                idx = idx.add(Aff({self.par[1].tid: D.prod(n.shape[self.p:])}))
            return idx
        return c.flat()

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
            ctr = (c.flat().expr(),)
            if not n.src:
                return X.make("rand", T.u32, ctr, n.arg[1])
            seed = yield self._visit(n.src[0], Coords((), flat=Aff(const=0)))  # a scalar, read as a broadcast
            return X.make("rand", T.u32, ctr + (L.alu(Op.CAST, T.u64, seed),), n.arg[1])
        if op is Op.COPY:
            return (yield self._visit(n.src[0], c))
        if op is Op.GATHER:
            return (yield from self.gather(n, c))
        if op is Op.VIEW:
            return (yield from self.view(n, c))
        if op in (Op.REDUCE, Op.EXTERN, Op.SCATTER, Op.SORT):
            raise NotImplementedError(f"{op.value} inside an expression")
        srcs = []
        for s in n.src:
            srcs.append((yield self._visit(s, c)))
        if op is Op.CAST:
            return srcs[0] if n.src[0].dtype == n.dtype else saturating(srcs[0], n.dtype)  # (float8: ONNX's)
        if op is Op.BITCAST:  # a bool's byte is its value 0/1: a cast says it on every runtime
            cast = n.src[0].dtype.is_bool or n.src[0].dtype == n.dtype
            return L.alu(Op.CAST, n.dtype, srcs[0]) if cast else X.make("bitcast", n.dtype, (srcs[0],))
        return L.alu(op, n.dtype, *srcs)

    def gather(self, n: Node, c: Coords) -> Visit[X]:
        """GATHER: the index read at c, then the data at c with the axis replaced by it. An index
        outside [-n, n), or a position past the data's other axes, reads element 0 and gives 0, so
        no address leaves the data (data that may be empty is not read there at all)."""
        x, ix = n.src
        ax = n.arg
        i = yield self._visit(ix, c)
        i = i if ix.dtype == T.i64 else L.alu(Op.CAST, T.i64, i)
        size = L.dim(x.shape[ax])
        i = L.alu(Op.WHERE, T.i64, L.icmplt(i, L.const(0)), L.iadd(i, size), i)
        ok = L.land(L.alu(Op.NOT, T.bool_, L.icmplt(i, L.const(0))), L.icmplt(i, size))
        axes = list(c.axes(self.ranges))
        for d, (xd, id_) in enumerate(zip(x.shape, ix.shape)):
            if d != ax and xd != id_:  # the index's extent may pass the data's: read there only inside
                ok = L.land(ok, L.icmplt(axes[d].expr(), L.dim(xd)))
        for d, (xd, id_) in enumerate(zip(x.shape, ix.shape)):
            if d != ax and xd != id_:
                axes[d] = Aff.of(L.alu(Op.WHERE, T.i64, ok, axes[d].expr(), L.const(0)))
        axes[ax] = Aff.of(L.alu(Op.WHERE, T.i64, ok, i, L.const(0)))
        v = yield self._visit(x, Coords(x.shape, axes=axes))
        if not all(isinstance(d, int) and d > 0 for d in x.shape):  # data that may be empty: element 0
            return X.make("masked", n.dtype, (ok, v))  # is no address either, so the read waits for ok
        zero = L.const(False if n.dtype.is_bool else 0.0 if n.dtype.is_float else 0, n.dtype)
        return L.alu(Op.WHERE, n.dtype, ok, v, zero)

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

    def nest(self, vs: list[X], shape_of: list[Dim | X], body: list) -> list:
        for v, d in reversed(list(zip(vs, shape_of))):
            body = [L.Loop(v.arg, d if isinstance(d, X) else L.dim(d), body)]
        return body

    def extents(self, n: Node, shape: Sequence[Dim], axes: Sequence[int]) -> list[Dim | X]:
        """The loop extents of `axes` of n's stage shape: a causally cut stage's key axis runs to
        its block's last key (caten.schedule.causal), the others whole."""
        c = self.cuts.get(n)
        return [self.key_end(c) if c is not None and a == c.axis else shape[a] for a in axes]

    def key_end(self, c: Cut) -> X:
        """J = min(size, (nb + 1) * block + reach) of the cut c (down: size - nb * block + reach),
        nb the block's outer loop; with a bounds check (caten.schedule.bounds), plus size where it
        failed: every key."""
        if c.down:
            end = L.isub(L.const(c.size + c.reach), L.imul(self.outer_vars[c.outer], L.const(c.block)))
        else:
            end = L.iadd(L.imul(self.outer_vars[c.outer], L.const(c.block)), L.const(c.block + c.reach))
        if c.unsafe is not None:
            buf = self.bufname(c.unsafe)
            self.bufs[buf] = c.unsafe.dtype
            end = L.iadd(end, L.imul(L.load(buf, L.const(0), c.unsafe.dtype), L.const(c.size)))
        return L.imin(L.const(c.size), end)

    def taps(self, vs: list[X], extents: list[Dim], upd: X, acc: X, keep: bool) -> list:
        """A reduction over a few static positions (a convolution's or a pooling's window) as one
        update that nests each position's term in the loops' order: the loop over the kept axis
        around it is then the innermost one, which the renderers vectorize, and `split_loads` sees
        each position's bounds. (One update, not one per position: equal updates, such as a count
        of ones, would be one value to a renderer that computes each expression once.) A longer or
        symbolic reduction, or one with no kept axis, keeps its loops."""
        if not keep or not all(isinstance(e, int) for e in extents) or not 1 < math.prod(extents) <= UNROLL_TAPS:
            return self.nest(vs, extents, [L.SetAcc(acc.arg, upd)])
        total = acc
        for pos in itertools.product(*(range(e) for e in extents)):
            u = upd
            for v, c in zip(vs, pos):
                u = L.subst(u, v, L.const(c))
            total = L.subst(u, acc, total)
        return [L.SetAcc(acc.arg, total)]

    def stage(self, n: Node, si: int) -> list:
        p = self.p
        if n.op is Op.SCATTER:
            return scatter_stage(self, n, si)
        if n.op is Op.SORT:
            return sort_stage(self, n, si)
        if n.op is not Op.REDUCE:
            inner = list(range(p, n.rank))
            shapes = [n.shape[a] for a in inner]
            ends = self.extents(n, n.shape, inner)
            ch = None
            if self.stage_threads > 1 and inner and shapes[0] != 1 and not self.reads_scalars(n):
                first = ends[0] if isinstance(ends[0], X) else L.dim(shapes[0])
                ch = chunk(self.newvar(f"s{si}tid", self.stage_threads), first,
                           self.inner(threads_for(D.prod(shapes), self.stage_threads)))
                u = self.newvar(f"s{si}a{p}u", shapes[0])
            vs = [self.newvar(f"s{si}a{a}", n.shape[a]) for a in inner[bool(ch):]]
            if ch:
                vs.insert(0, self.at(L.iadd(ch.start, u), shapes[0]))
            c = Coords(n.shape, axes=[Aff.of(v) for v in self.outer_vars + vs])
            val = self.val(n, c, root=True)
            buf = self.bufname(n)
            self.bufs[buf] = n.dtype
            self.done.add(n)
            store = [L.Store(buf, self.index(n, c), val)]
            if ch:
                return ch.wrap(u, self.nest(vs[1:], ends[1:], store), self.stage_threads)
            return self.nest(vs, ends, store)
        src = n.src[0]
        rop, axes = n.arg
        plan = self.plan(n)
        mode = plan.mode
        acc_dt = T.f32 if n.dtype.name in LOWP else n.dtype  # (the plan never puts it in memory)
        alu = _REDUCE_ALU[rop]
        if rop == "max" and n.dtype.is_bool:
            alu = Op.OR
        buf = self.bufname(n)
        if mode == "tiled":
            if plan.gemm is not None and plan.gemm.direct is not None:
                return direct(self, n, si, buf, plan.gemm)
            if plan.gemm is not None:
                return gemm(self, n, si, buf, plan.gemm)
            return tiled(self, n, si, alu, buf, plan.tile)
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
            return init + self.nest(vs, self.extents(n, src.shape, range(p, src.rank)), [L.Store(buf, idx, upd)])
        keep = [a for a in range(p, src.rank) if a not in axes]
        red = [a for a in range(p, src.rank) if a in axes]
        kvs = [self.newvar(f"s{si}k{a}", src.shape[a]) for a in keep]
        cut = plan.block
        part = self.scratch.get(n, (None,))[0]  # the thread partials of a split full sum
        blocked = Blocked(self, si, red, [src.shape[a] for a in red], cut, part,
                          self.extents(n, src.shape, red)) if cut else None
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
            body += self.taps(rvs, self.extents(n, src.shape, red), upd, L.var(acc, acc_dt), bool(keep))
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
        return self.nest(kvs, self.extents(n, src.shape, keep), body)

    def lower(self) -> list:
        body: list = []
        for si, n in enumerate(self.members):
            if n not in self.done:  # (a GEMM's epilogue is lowered with it: caten.lower.epilogue)
                body += self.stage(n, si)
        if self.par is None:
            return self.nest(self.outer_vars, list(self.outer_shape), body)
        a, ch, u = self.par
        body = ch.wrap(u, self.nest(self.outer_vars[a + 1:], list(self.outer_shape[a + 1:]), body), self.threads)
        pro = []
        if self.prologue:  # (renderers may outline the stages inside the threads' loop, not it whole)
            body = [dataclasses.replace(body[0], hint="outer")]
            pro = [L.Parallel(self.prologue_tid().arg, L.const(self.threads), self.prologue, most=self.threads)]
        return pro + self.nest(self.outer_vars[:a], list(self.outer_shape[:a]), body)


MEMO = True  # lower each distinct kernel once per program (caten.lower.kernel_memo); tests turn it off


def lower(sched: Schedule) -> list[L.Kernel]:
    """Loop-IR kernels of a schedule, one per scheduled kernel, in execution order; a kernel equal
    to an earlier one but for its buffers is that one's loop IR renamed (caten.lower.kernel_memo)."""
    out: list[L.Kernel] = []
    realized = {s.node for k in sched.kernels for s in k.stages}
    outputs = frozenset(b for b, x in sched.buffers.items() if x.role == "out")
    # (outputs written into inputs, or a loop body's invariant inputs: lowered by more than the key spells)
    memo: dict | None = {} if MEMO and not sched.program.aliases and not sched.program.invariant else None
    spelled: dict = {}
    for k in sched.kernels:
        if k.stages[0].kind == "control":  # a loop or branch: a statement of the entry plan
            continue
        plans = {s.node: s.plan for s in k.stages if s.kind == "reduce"}
        local = {s.node for s in k.stages if s.buffer and sched.buffers[s.buffer].local >= 0}
        scratch = {s.node: s.scratch for s in k.stages if s.scratch}
        members = [s.node for s in k.stages]
        split = (k.split, work(k)), stagewise(k, sched.threads), outer_either(k, sched.threads)
        key = kernel_key(sched, k, realized, local, outputs, split, spelled) if memo is not None else None
        hit = _usable(memo.get(key[0]), sched) if key is not None else None  # type: ignore[union-attr]
        if hit is not None:
            names = dict(zip(hit[2], key[1]))  # type: ignore[index]
            body = renamed(hit[0], names, hit[3])
            params = [dataclasses.replace(p, name=names[p.name]) for p in hit[1]]
            out.append(L.Kernel(k.name, params, list(sched.program.dims), body))
            continue
        kl = KernelLowerer(k.name, members, k.outer, realized,
                           lambda n: sched.node_buf.get(n), plans.__getitem__, local, scratch,
                           sched.threads, *split, outputs, {s.node: s.cut for s in k.stages if s.cut})
        body = split_masks(kl.lower())
        if not on_gpu():  # (a device maps the output loops to its grid: a work-item masks its own loads)
            body = split_loads(body)
        params = [L.BufParam(b, sched.buffers[b].dtype, sched.buffers[b].role) for b in kl.bufs if b is not None]
        if key is not None:
            memo[key[0]] = [body, params, key[1], None]  # type: ignore[index]
        out.append(L.Kernel(k.name, params, list(sched.program.dims), body))
    return out


def _usable(entry: list | None, sched: Schedule) -> list | None:
    """A memo entry [body, params, buffers, reads], `reads` (the expressions that read a buffer:
    what a copy rebuilds) found on its first hit (most kernels have no copy); None if the body
    names a buffer the key does not map."""
    if entry is not None and entry[3] is None:
        reads, names = scan(entry[0], sched.buffers)
        entry[3] = reads if names | {p.name for p in entry[1]} <= set(entry[2]) else False
    return entry if entry is not None and entry[3] is not False else None
