"""The plan of a contraction run as a packed GEMM (`GemmPlan`: micro-tile and cache blocks from the
target's vector width, threads, the packed slab), the GEMM tuning knobs, and the schedule's modes
(GPU, direct convolution tiles). How every other reduction runs, and the `ReducePlan` the scheduler
records on each stage for the lowering to read: caten.schedule.reduce_plan."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from caten import target
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.ir.walk import Visit, drive
from caten.schedule.direct import Direct, analyze
from caten.schedule.pairs import pair_gemm

LOWP = tuple(d.name for d in T.NARROW)  # accumulate in f32: caten.ir.dtypes


def axis_deps(n: Node, memo: dict | None = None) -> frozenset:
    """Axes of n's own coordinates its value may depend on (an over-approximation)."""
    return drive(_axis_deps(n, {} if memo is None else memo))


def _axis_deps(n: Node, memo: dict) -> Visit[frozenset]:
    hit = memo.get(n)
    if hit is not None:
        return hit
    op = n.op
    if op is Op.CONST:
        r: frozenset = frozenset()
    elif op is Op.INDEX:
        r = frozenset({n.arg[1]})
    elif op is Op.VIEW:
        v = n.arg
        r = set()
        if (yield _axis_deps(n.src[0], memo)):
            r |= {a for a, (st, d) in enumerate(zip(v.strides, v.shape)) if st != 0 and d != 1}
        if v.mask is not None:
            r |= {a for a, ((lo, hi), d) in enumerate(zip(v.mask, v.shape)) if lo != 0 or hi != d}
        r = frozenset(r)
    elif op in (Op.BUFFER, Op.REDUCE, Op.COPY, Op.EXTERN, Op.RAND, Op.GATHER, Op.SCATTER, Op.SORT) or not n.src:
        r = frozenset(a for a, d in enumerate(n.shape) if d != 1)
    else:  # elementwise: every source has n's shape
        r = frozenset()
        for x in n.src:
            r |= yield _axis_deps(x, memo)
    memo[n] = r
    return r


HOIST_COLS = 512  # GEMM columns below which a batch-free a is packed once for all batch loops
SLAB_ROWS = 2048  # rows of a GEMM's packed a slab at most (GemmPlan.slab_rows)


@dataclass(frozen=True)
class GemmPlan:
    """A contraction sum_k a[.., i, k] * b[.., k, j] run as a packed, register-tiled GEMM.
    Axes index the REDUCE's source; `a`/`b` pick the MUL operand (0 or 1); block sizes are in
    elements: micro-tile mr x nr, K blocks of kc, M blocks of mc, N blocks of nc. `js`: the
    kept axes merged into the GEMM's columns -- the innermost kept axis and the kept axes before
    it that only b reads (a convolution's output rows and columns, so that one GEMM covers the
    whole image, not one GEMM per output row repacking a each time); they are contiguous in the
    output, so a merged column index is a linear offset there."""
    i: int | None
    js: tuple[int, ...]
    a: int
    b: int
    batch: tuple[int, ...]
    red: tuple[int, ...]
    M: Dim
    N: Dim
    K: Dim
    mr: int
    nr: int
    kc: int
    mc: int
    nc: int
    a_batch_free: bool = False
    b_once: bool = False  # b reads no batch axis: packed whole, once per call, shared by the threads
    a_once: bool = False  # a reads no batch axis (a convolution's weights): likewise
    direct: Direct | None = None  # b read in place by direct tiles (caten.schedule.direct), never packed
    l2: int = 0  # one core's L2 bytes on the plan's target: an output larger than the cores' L2s
    #              together does not stay in them (direct tiles may stream it past the caches)
    hoisted: str | None = None  # b is a loop body's invariant input: packed whole (b_once) on the first trip
    #                             only, when this dim is 1 (caten.schedule.plan.invariant_inputs)
    pairs: bool = False  # an i32 sum of 16-bit products: panels of k pairs per word (caten.schedule.pairs)

    def __post_init__(self) -> None:
        # the packing writes whole micro-panels: a block that is not a whole number of them
        # would overrun its buffer
        assert self.mc % self.mr == 0 and self.nc % self.nr == 0, (self.mc, self.mr, self.nc, self.nr)

    @property
    def j(self) -> int:
        """The innermost column axis."""
        return self.js[-1]

    @property
    def lead(self) -> int:
        """How many leading source axes are batch axes (the most outer loops it can share). None
        when a reads no batch axis and the columns are few (a convolution's weights): the GEMM then runs its batch loops
        itself, packing a once for all of them and sharing them among the threads."""
        if self.a_batch_free:
            return 0
        q = 0
        while q in self.batch:
            q += 1
        return q

    def epilogue_axes(self, out: Sequence[Dim], stage: Sequence[Dim]) -> dict[int, int] | None:
        """A later elementwise stage's axes (shape `stage`) paired with this GEMM output's (shape
        `out`, the summed axes kept as 1), in order, where both are longer than 1 (a
        convolution's group axis of 1 is gone after its reshape); None if their extents differ
        (caten.lower.epilogue runs such a stage over each output block)."""
        red = set(self.red)
        oa = [a for a in range(len(out)) if a not in red and out[a] != 1]
        sa = [b for b in range(len(stage)) if stage[b] != 1]
        if [out[a] for a in oa] != [stage[b] for b in sa]:
            return None
        return dict(zip(sa, oa))

    def splits_cols(self, threads: int, batch_loops: bool) -> bool:
        """Whether `threads` share the columns (each packs only its own columns' B): when M is
        too short to share, or a is packed once for all (a convolution's weights, a transposed
        GEMM's); never with batch loops of its own (the threads may take those instead)."""
        short = isinstance(self.M, int) and self.M < 4 * self.mr * threads
        return threads > 1 and not batch_loops and (short or self.a_once) \
            and (not isinstance(self.N, int) or self.N >= 2 * self.nr * threads)

    def splits_k(self, threads: int, batch_loops: bool) -> bool:
        """Whether the threads share the K blocks, each summing its own into a partial M x N output
        (`threads` of them) that are added after: M and N too short to share, K long -- a weight
        gradient whose K merges the batch and the tokens (a digits classifier's 64x32 dW over
        64 examples x 64 tokens ran on one core at 40-60 GF/s). The lowering keeps a call whose
        K turns out short on one thread."""
        from caten.schedule.split import GEMM_THREAD_MIN

        M, N, K = self.M, self.N, self.K
        if threads < 2 or batch_loops or self.a_once or self.b_once or len(self.js) != 1 \
                or not (isinstance(M, int) and isinstance(N, int)):
            return False
        if M >= 4 * self.mr * threads or N >= 2 * self.nr * threads:
            return False
        return not isinstance(K, int) or (M * N * K >= GEMM_THREAD_MIN and K > self.kc)

    @property
    def slab_rows(self) -> int:
        """Rows of a slab (`slab`) at most: whole M blocks, ~2048 rows (2 MB a thread in f32 at
        kc 256), so that a tall a needs no scratch its size; each slab packs B again, 1/2048
        of its work."""
        return self.mc * max(1, SLAB_ROWS // self.mc)

    def slab(self, threads: int, batch_loops: bool) -> bool:
        """Whether each thread packs its rows of a once per K block, in slabs of `slab_rows`,
        for all the column blocks, rather than each M block once per column block: a plain GEMM
        whose columns may take several nc blocks (e2's 2048 columns are four, and packing a
        four times took 5% of its time on a 2-core Zen 4)."""
        if batch_loops or self.a_once or self.b_once or self.direct is not None or self.i is None:
            return False
        if self.splits_cols(threads, batch_loops) or self.splits_k(threads, batch_loops):
            return False
        one_block = (isinstance(self.N, int) and self.N <= self.nc) or (isinstance(self.M, int) and self.M <= self.mc)
        return not one_block

    def thread_packs(self, threads: int, batch_loops: bool) -> tuple[Dim, Dim]:
        """One thread's packed A and B (`pack_sizes`) in a kernel whose GEMM the threads share
        (`threads`; `batch_loops`: it runs batch loops of its own), as its lowering uses them."""
        return self.pack_sizes(threads, self.splits_cols(threads, batch_loops), self.slab(threads, batch_loops))

    def pack_sizes(self, threads: int = 1, by_cols: bool = False, slab: bool = False) -> tuple[Dim, Dim]:
        """Elements of one thread's packed A block and B block, none larger than its operand or
        its thread's share of the columns (`by_cols`): a symbolic N below nc would leave most of a
        kc x nc block unused, in each thread's copy (4 MB for a Mixer's transposed token GEMM).
        `slab`: A holds a slab (`slab`): the thread's share of the rows in whole micro-panels,
        at most `slab_rows`; that of a lone thread, when the GEMM is too small to share, is the
        slots of all threads together."""
        rows, cols = self.mc, self.nc
        if slab:
            rows = D.dmin(self.slab_rows, _ceil_to(D.floordiv(D.add(self.M, threads - 1), threads), self.mr))
        elif not isinstance(self.M, int):
            rows = D.dmin(rows, _ceil_to(self.M, self.mr))
        share = D.floordiv(D.add(self.N, threads - 1), threads) if by_cols else self.N
        if by_cols or not isinstance(self.N, int):
            cols = D.dmin(cols, _ceil_to(share, self.nr))
        if self.direct is not None:  # a block of rows with all of K and a flag after it; b is read in place
            return D.add(D.mul(rows, self.K), 1), 0
        return D.mul(rows, self.kc), D.mul(self.kc, cols)

    def whole(self, side: str) -> Dim:
        """Elements of operand `side` ("a" or "b") packed whole (`a_once`, `b_once`): every K
        block's row (column) panels, zero-padded."""
        size, w = (self.M, self.mr) if side == "a" else (self.N, self.nr)
        if self.direct is not None:  # (all of K in one block, and a flag after the panels)
            return D.add(D.mul(self.K, D.mul(D.floordiv(D.add(size, w - 1), w), w)), 1)
        kb = D.mul(D.floordiv(D.add(self.K, self.kc - 1), self.kc), self.kc)
        return D.mul(kb, D.mul(D.floordiv(D.add(size, w - 1), w), w))


def thread_slots(plans: Sequence[GemmPlan | None]) -> tuple[Dim, Dim]:
    """One thread's packed A and B slot for GEMMs of one kernel and dtype that different threads
    run at the same time (a kernel split over its outer loop, `small_gemms`): as large as the
    largest of them needs, so that no thread's GEMM reaches into another's slot."""
    sizes = [(_bounded(g, a), b) for g in plans if g is not None for a, b in [g.pack_sizes()]]
    slot_a, slot_b = sizes[0]
    for sa, sb in sizes[1:]:
        slot_a, slot_b = D.dmax(slot_a, sa), D.dmax(slot_b, sb)
    return slot_a, slot_b


def _bounded(g: GemmPlan, size: Dim) -> Dim:
    """A packed A block's size, its upper bound mc x kc where it is symbolic: a thread's slot
    (the stride of the threads' slots in every GEMM of the kernel) then holds no other GEMM's
    dims, and twin GEMMs over other dims (a Mixer's two channel-mixing products) are equal code
    (caten.lower.dimargs). At most mc x kc elements a thread: 112 KB in f32."""
    return size if isinstance(size, int) or g.direct is not None else g.mc * g.kc


def _ceil_to(x: Dim, m: int) -> Dim:
    """x rounded up to a multiple of m (symbolic)."""
    return D.mul(D.floordiv(D.add(x, m - 1), m), m)


def _roundup(x: int, m: int) -> int:
    """x rounded up to a multiple of m, at least m: a block size stays positive for empty dims."""
    return max(m, (x + m - 1) // m * m)


_PLANS: dict = {}
_DIRECT: contextvars.ContextVar[bool] = contextvars.ContextVar("caten_direct_tiles", default=False)
_GPU: contextvars.ContextVar[bool] = contextvars.ContextVar("caten_gpu_schedule", default=False)
# a loop body's inputs that every trip reads unchanged (its captures), and the dim that is 1 on
# the first trip (caten.ir.control): a GEMM operand made of them only is packed once per loop
_INVARIANT: contextvars.ContextVar[tuple[frozenset, str | None]] = contextvars.ContextVar(
    "caten_invariant_inputs", default=(frozenset(), None))


@contextlib.contextmanager
def _setting(var: contextvars.ContextVar[bool], on: bool) -> Iterator[None]:
    tok = var.set(on)
    try:
        yield
    finally:
        var.reset(tok)


def direct_tiles(on: bool) -> contextlib.AbstractContextManager[None]:
    """Plans made inside may read a convolution's image in place (`GemmPlan.direct`): for a
    renderer with direct tiles (`Capabilities.direct_conv`)."""
    return _setting(_DIRECT, on)


def gpu_schedule(on: bool) -> contextlib.AbstractContextManager[None]:
    """Schedules made inside are for a GPU (`Capabilities.gpu`): no GEMM plans (its renderer tiles
    a GEMM over thread blocks itself, caten.render.cstyle.gemm; a packed CPU plan there is one
    thread's loop nest), GEMM sums not cut into blocks, and a transcendental that a reduction and a
    later stage read computed twice rather than stored (caten.schedule.scheduler.realize_set)."""
    return _setting(_GPU, on)


def on_gpu() -> bool:
    return _GPU.get()


@contextlib.contextmanager
def invariant_inputs(program) -> Iterator[None]:
    """Plans made inside know which of `program`'s inputs a loop body reads unchanged every trip
    (`Program.invariant`) and its first-trip dim: a GEMM's b made of those alone is packed on the
    first trip only (`GemmPlan.hoisted`), into a buffer that lives across the trips."""
    inv = frozenset(program.invariant)
    first = next((d for d in program.dims if d.startswith("__f")), None) if inv else None
    tok = _INVARIANT.set((inv, first))
    try:
        yield
    finally:
        _INVARIANT.reset(tok)


def _invariant(x: Node, inv: frozenset) -> bool:
    """Whether x reads only the invariant inputs (by index) and constants naming no loop counter."""
    from caten.ir.walk import post_order

    for y in post_order([x]):
        if y.op is Op.BUFFER and y.arg[1] not in inv:
            return False
        if y.op in (Op.LOOP, Op.IF, Op.RAND):
            return False
        if y.op is Op.CONST and isinstance(y.arg, D.DimExpr) and any(
                s.startswith("__") for s in D.free_syms(y.arg)):
            return False
        if y.op is Op.VIEW and any(isinstance(d, D.DimExpr) and any(s.startswith("__") for s in D.free_syms(d))
                                   for d in (y.arg.offset,) + tuple(y.arg.strides) + tuple(y.arg.shape)):
            return False
    return True


def gemm_shaped(n: Node) -> bool:
    """Whether n is a GEMM (whatever the target: a packed plan for some CPU exists); asked per
    node and placement by a GPU's schedule, so kept with the plans."""
    if n.op is not Op.REDUCE:
        return False
    key = ("shaped", n)
    if key not in _PLANS:
        _PLANS[key] = _gemm_plan(n, 64, 1 << 20, {}) is not None
    return _PLANS[key]


def gemm_plan(n: Node) -> GemmPlan | None:
    """The GEMM plan of a REDUCE-add of a product whose operands each vary along one kept axis."""
    if _GPU.get():
        return None
    if n.op is not Op.REDUCE or n.arg[0] != "add" or not (n.dtype.name in ("f32", "f64") or pair_gemm(n)):
        return None
    t = target.current()
    vbytes, l2, knobs = (t.vector_bytes, t.l2_bytes, t.gemm) if t is not None else (64, 1 << 20, ())
    direct = _DIRECT.get()
    inv = _INVARIANT.get()
    key = (n, vbytes, l2, knobs, direct, inv)
    if key in _PLANS:
        return _PLANS[key]
    if len(_PLANS) > 4096:
        _PLANS.clear()
    plan = _gemm_plan(n, vbytes, l2, dict(knobs), direct)
    if plan is not None and plan.i is None and plan.direct is None:
        # one row (a vector times a matrix): packing b copies each element for its one use; the
        # register tiles read it in place (a 768 x 3072 GEMV 0.72 -> 0.45 ms on a 2-core Zen 3)
        plan = None
    _PLANS[key] = plan
    if plan is not None and inv[1] is not None and plan.direct is None and not plan.batch and not plan.pairs \
            and _invariant(n.src[0].src[plan.b], inv[0]):
        _PLANS[key] = plan = replace(plan, b_once=True, a_once=False, a_batch_free=False, hoisted=inv[1])
    return plan


# What `caten tune` may change, with the model's defaults: vectors per micro-tile row (`nv`, 2 or
# 4), rows per micro-tile (`mr`, at most the accumulators the vector registers hold), the K block
# (`kc`: blocks of at most this, a K up to 1.2x it whole), the rows of A packed per block (`mc`)
# and the share of one core's L2 the packed B block fills (`l2_pct`)
KNOBS = ("nv", "mr", "kc", "mc", "l2_pct")


def most_rows(vbytes: int, nv: int) -> int:
    """Rows of a micro-tile of `nv` vectors a row: its accumulators, one B load per vector and a
    broadcast in the 32 (AVX-512) or 16 (AVX2) vector registers (14x32 and 6x16 f32 at nv 2)."""
    return max(1, (target.vector_registers(vbytes) - nv - 1) // nv)


def knob_choices(vbytes: int, nv: int = 2) -> dict[str, list[int]]:
    """The values a tuning search tries for each knob (the default first) on a target of
    `vbytes` vector registers, the rows for tiles of `nv` vectors a row (a power of two: LLVM
    splits a 3-vector row into odd pieces, 8x slower on conv f)."""
    most = most_rows(vbytes, nv)
    rows = sorted({r for r in (most, most - 2, most - 4, most * 2 // 3, most // 2) if r > 0}, reverse=True)
    return {"nv": [2, 4] if vbytes >= 64 else [2], "mr": rows,
            "kc": [320, 192, 256, 448, 640], "mc": [120, 60, 240], "l2_pct": [50, 25, 75]}


def _gemm_plan(n: Node, vbytes: int, l2: int, knobs: dict[str, int], direct: bool = False) -> GemmPlan | None:
    """`vbytes`: the target's vector register width; a micro-tile row is two registers (6x16 f32
    on AVX2: 12 accumulators of its 16 ymm; 14x32 on AVX-512: 28 of its 32 zmm), a single-row
    tile four. `l2`: one core's L2 bytes, which the packed B block fills. `knobs`: a tuning's
    choices (KNOBS) over these defaults. `direct`: a stride-1 "same" convolution may read its
    image in place (caten.schedule.direct)."""
    src = n.src[0]
    if src.op is not Op.MUL or src.rank < 2:
        return None
    axes = tuple(sorted(n.arg[1]))
    kept = [a for a in range(src.rank) if a not in axes and src.shape[a] != 1]
    if not kept or not axes:
        return None
    memo: dict = {}
    d0, d1 = axis_deps(src.src[0], memo), axis_deps(src.src[1], memo)
    pairs = n.dtype.is_int
    if pairs:
        direct = False  # (pairs are packed; a direct tile reads b in place)
    j = kept[-1]
    if (j in d0) == (j in d1):
        return None
    ai, bi = (1, 0) if j in d0 else (0, 1)
    da, db = (d0, d1) if ai == 0 else (d1, d0)
    js = [j]
    item = n.dtype.itemsize
    nr_cols = (2 if kept[:-1] else 4) * vbytes // item
    # short rows (a small image's) are merged, and rows of symbolic length (packing divides a
    # merged index once per row it touches); static rows of two micro-tiles or more already
    # fill the tiles and stay apart
    while len(js) < len(kept) and kept[-len(js) - 1] in db and kept[-len(js) - 1] not in da \
            and _merges(src, j, nr_cols):
        js.insert(0, kept[-len(js) - 1])
    # a convolution read in place: its rows merge whatever their width (nothing is packed)
    wider = direct and len(js) == 1 and len(kept) >= 2 and kept[-2] in db and kept[-2] not in da
    dplan = None
    for cols in ([kept[-2]] + js, js) if wider else (js,) if direct else ():
        i = next((x for x in reversed(kept[:-len(cols)]) if x in da and x not in db), None)
        batch = tuple(x for x in range(src.rank) if x not in axes and x != i and x not in cols)
        if i is not None and not (da & set(batch)):
            dplan = analyze(src, bi, cols, axes)
            if dplan is not None:
                js = cols
                break
    i = next((x for x in reversed(kept[:-len(js)]) if x in da and x not in db), None)
    if i is None and src.rank - 1 in axes:
        return None  # dot products along the innermost axis (a layernorm gradient's row sums): a
        #              register reduction reads each element once; a one-row GEMM would pack b
    batch = tuple(x for x in range(src.rank) if x not in axes and x != i and x not in js)
    M = src.shape[i] if i is not None else 1
    N, K = D.prod([src.shape[a] for a in js]), D.prod([src.shape[a] for a in axes])
    # rows per tile: each B vector load from the L2-resident block serves mr rows; with 32
    # registers, 14 rows halve that traffic against 6 (one core's Mixer channel MLP 1568x512x2048:
    # 110 -> 156 GF/s on an AVX-512 Xeon, the block 67 -> 53 ms)
    # a tile row is `nv` vector accumulators (two by default): as many rows as the registers hold
    # besides one B load per vector and a broadcast (14x32 f32 of AVX-512's 32, 6x16 of AVX2's 16)
    # merged columns (an image's rows and columns, a convolution's) take rows of four vectors on
    # AVX-512 (6x64 tiles): each packed panel row is then one 64-wide copy from the image, not
    # two of 32 (conv f: 234 -> 256-260 GF/s on a 2-core Xeon; a 1024^3 matmul: 362 -> 321)
    wide = (len(js) > 1 or dplan is not None) and vbytes >= 64
    nv = knobs["nv"] if knobs.get("nv") in (2, 4) else 4 if wide else 2
    if dplan is not None:  # (direct tiles keep each vector apart: any count works)
        nv = knobs["nv"] if knobs.get("nv") in (2, 3, 4) else 2
    most = most_rows(vbytes, nv)
    mr = max(1, min(most, knobs.get("mr", most)))
    if dplan is not None and "mr" not in knobs:
        # as few row tiles as the registers allow, the rows shared out evenly among them: each
        # row tile reads the image again (conv f, 64 output channels on AVX-512: 13x32 tiles
        # 4.84 ms, 14x32 5.12, 11x32 4.98, 8x48 5.40, 6x64 5.54); a symbolic M is taken for 64
        # (channel counts are multiples of it, mostly: 13 rows waste 1.5% of each)
        rows = M if isinstance(M, int) and M > 0 else 64
        mr = -(-rows // -(-rows // most))
    mr, nr = (mr, nv * vbytes // item) if i is not None else (1, 4 * vbytes // item)
    kmax = max(16, knobs.get("kc", 320))
    if isinstance(K, int) and dplan is not None:
        kc = max(1, K)  # (a direct tile walks all of K: its taps)
    elif isinstance(K, int):
        kc = max(1, K) if K <= kmax * 6 // 5 else -(-K // -(-K // kmax))
    else:
        kc = 256 * kmax // 320
    if pairs:
        kc += kc % 2  # (whole pairs a block: only the last block may end in half a pair)
    mc = max(mr, knobs.get("mc", 120) // mr * mr)  # whole micro-panels: the packing fills them entirely
    if isinstance(M, int):
        mc = min(mc, _roundup(M, mr))
    # the tiles run over the B block's panels for each A panel (an A panel stays in L1, B
    # streams from L2): a kc x nc block of B fills half of one core's L2, the rest holding the
    # output tiles and the next A panels (a block filling all of it: conv f with static dims
    # 213-219 -> 229-237 GF/s on a 2 MB-L2 Xeon, 2 threads)
    nc = max(nr, min(2048, l2 * max(5, min(95, knobs.get("l2_pct", 50))) // 100 // (kc * item) // nr * nr))
    if isinstance(N, int):
        nc = min(nc, _roundup(N, nr))
    # packing a costs ~10 multiply-adds an element: worth hoisting out of the batch loops when
    # the columns are few (a small image); a large one keeps the shared loops (epilogue fusion)
    free = any(src.shape[x] != 1 for x in batch) and not (da & set(batch)) and isinstance(N, int) \
        and N < HOIST_COLS and isinstance(K, int) and K <= kc and isinstance(M, int) and M <= mc
    # b that no batch axis changes (a linear layer's weights under batch and token loops) is packed
    # whole once, not once per batch index and thread (its packing is K*N of M*N*K work a batch)
    repeats = any(src.shape[x] != 1 for x in batch)
    b_once = repeats and not (db & set(batch)) and not free and not pairs
    a_once = repeats and not (da & set(batch)) and i is not None and not b_once and not pairs
    if dplan is not None:  # a packed whole (once per call, K unblocked), b read in place
        return GemmPlan(i, tuple(js), ai, bi, batch, dplan.red, M, N, K, mr, nr, kc, mc, nc, False, False,
                        not (da & set(batch)), dplan, l2)
    return GemmPlan(i, tuple(js), ai, bi, batch, axes, M, N, K, mr, nr, kc, mc, nc, free, b_once, a_once,
                    pairs=pairs)


def _merges(src: Node, j: int, nr_cols: int) -> bool:
    """Whether rows of axis j are short enough to merge into the columns of a packed GEMM."""
    return not isinstance(src.shape[j], int) or src.shape[j] < 2 * nr_cols
