"""Kernel fusion and memory planning.

`schedule(program)` picks the nodes that must live in memory ("realized": outputs, REDUCE,
COPY, and the few elementwise nodes too costly to recompute under a broadcast or in several
stages, see `realize_set`), inlines
everything else into its consumers (VIEWs become index arithmetic), and groups realized
nodes into kernels: nodes sharing their leading ("outer") loop dims run as stages inside
one outer loop nest, so a row softmax or layernorm is one kernel that reads each row from
cache (at most MAX_STAGES stages a kernel). Intermediates get offsets in one arena, reused by liveness (best fit).
`Schedule.dump()` is what `--emit schedule` prints.
"""

from __future__ import annotations

from collections.abc import Callable

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.graph import Node, toposort
from caten.ir.ops import FREE, HEAVY, TRANSCENDENTAL, Op
from caten.ir.program import Program
from caten.schedule import causal, softnorm
from caten.schedule import control as CF
from caten.schedule.arena import plan_arena
from caten.schedule.dots import outward
from caten.schedule.layout import orient
from caten.schedule.model import Buffer, Kernel, Schedule, Stage, Unfusable
from caten.schedule.plan import gemm_plan, gemm_shaped, invariant_inputs, on_gpu, thread_slots
from caten.schedule.reduce_plan import max_outer, plan_reduce
from caten.schedule.rowblock import row_blocks
from caten.schedule.split import outer_either, outer_split, small_gemms, stagewise, sum_split

_HEAVY = HEAVY  # the op table's cost classes
_TRANSC = TRANSCENDENTAL
MAX_STAGES = 32  # stages per kernel: fusing is checked by lowering the group (quadratic in its size),
#                  and one huge function is superlinear to optimize; longer runs start a new kernel
BODY_MAX = 1024  # ops in one loop body: a longer chain is stored in parts (LLVM's time per body is superlinear)
OPERAND_MAX = 4  # ops a packed GEMM operand may cost before it is stored first
OVERLAP_MIN = 3  # ops a value read through overlapping windows may cost before it is stored first
INLINE_MAX = 64  # ops an inlined value may cost before several readers get it from memory instead
READS_MAX = 6  # buffers an inlined value may read before several readers get it from memory instead (a
#               residual stream, a sum of every earlier layer's output, re-read by each later norm)
BROADCAST_MIN = 4  # ops a value read through a broadcast of BROADCAST_FACTOR or more copies may cost
BROADCAST_FACTOR = 4  # before it is stored first (a causal mask built per [S, S], read per head)
BROADCAST_MAX_ELEMS = 1 << 22  # ... unless it is larger than this: memory linear in the tokens beats a few ops


def _is_leafish(n: Node) -> bool:
    while n.op is Op.VIEW:
        n = n.src[0]
    return n.op in (Op.BUFFER, Op.CONST, Op.INDEX)


def _expands(n: Node) -> bool:
    v = n.arg
    return any(s == 0 and d != 1 for s, d in zip(v.strides, v.shape))


def _small_value(n: Node) -> bool:
    """Whether storing n costs at most BROADCAST_MAX_ELEMS elements."""
    size = D.prod(n.shape)
    return isinstance(size, int) and size <= BROADCAST_MAX_ELEMS


def _of_indices(n: Node) -> bool:
    """n computes from indices and constants alone, cheaply (a causal mask of `<=` on aranges):
    recomputed where read, its compares become loop bounds (caten.lower.loadsplit) rather than
    loads of a stored mask."""
    cone = toposort([n])
    return len(cone) <= 16 and all(m.op in (Op.INDEX, Op.CONST, Op.VIEW) or
                                   m.op in (Op.CMPLT, Op.CMPNE, Op.NOT, Op.AND, Op.OR, Op.ADD, Op.MUL) for m in cone)


def _copies(n: Node) -> int:
    """How many times an expanding view reads each element of its source (symbolic: many)."""
    out = 1
    for st, d in zip(n.arg.strides, n.arg.shape):
        if st == 0 and d != 1:
            out *= d if isinstance(d, int) else BROADCAST_FACTOR
    return out


def _overlaps(n: Node) -> bool:
    """A view that reads some element of its source more than once: overlapping sliding windows
    (a convolution's, or its transpose's). Symbolic strides or sizes: not known, so no."""
    v = n.arg
    reach = 0
    for st, d in sorted((abs(st), d) for st, d in zip(v.strides, v.shape)
                        if isinstance(st, int) and isinstance(d, int) and d > 1 and st != 0):
        if st <= reach:
            return True
        reach += st * (d - 1)
    return False


def cone_size(n: Node, realized: set[Node], cap: int) -> int:
    """Ops computed when n is: n and its operands' cone up to realized nodes, each counted once
    (or `cap` if that is more: the walk stops there, so the check costs at most cap steps)."""
    _free = FREE
    seen: set[Node] = {n}
    stack = [s for s in n.src if s not in realized]
    count = int(n.op not in _free)
    while stack and count < cap:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        count += x.op not in _free
        stack.extend(s for s in x.src if s not in realized)
    return min(count, cap)


def _union(sets: list[frozenset]) -> frozenset:
    """The sets' union, or its first READS_MAX + 1 elements (all a caller compares with)."""
    out: set = set()
    for x in sets:
        out |= x
        if len(out) > READS_MAX:
            return frozenset(list(out)[:READS_MAX + 1])
    return frozenset(out)


def realize_set(outputs: list[Node]) -> tuple[list[Node], set[Node]]:
    """The nodes that live in memory. Besides outputs and REDUCE/COPY/EXTERN: heavy values read
    through a broadcast or by several views, transcendentals a reduction and another stage both
    read, and any value whose inlined computation grew past INLINE_MAX ops and that several
    stages read: each would recompute it, so a chain of k normalizations would cost O(k^2) ops
    (and compile time) instead of O(k). One pass in operand-before-user order, no recursion."""
    order = toposort(outputs)
    realized: set[Node] = set(outputs)
    view_users: dict[Node, list[Node]] = {}
    users: dict[Node, set[Node]] = {}
    for n in order:
        for x in n.src:
            users.setdefault(x, set()).add(n)
        if n.op in (Op.REDUCE, Op.COPY, Op.EXTERN, Op.SCATTER, Op.SORT):
            realized.add(n)
        if n.op in CF.CONTROL:  # (its operands are buffers: caten.schedule.control.materialize)
            realized.add(n)
            realized.update(s for s in n.src if s.op is not Op.BUFFER)
        if n.op is Op.VIEW:
            view_users.setdefault(n.src[0], []).append(n)
    gpu = on_gpu()  # (a GPU recomputes transcendentals a reduction reads)
    operands: set[Node] = set()  # what a packed GEMM reads (through views): its packing loop computes it
    for n in order:
        g = gemm_plan(n) if n.op is Op.REDUCE else None
        if g is not None and g.direct is not None and g.direct.base.op is not Op.BUFFER:
            realized.add(g.direct.base)  # direct tiles load the image from memory
        if g is not None:
            for x in n.src[0].src:
                while x.op is Op.VIEW:
                    x = x.src[0]
                operands.add(x)
    readers: dict[Node, int] = {}  # consumers, counting through views (reverse order: users first)
    for n in reversed(order):
        readers[n] = sum(readers[u] if u.op is Op.VIEW else 1 for u in users.get(n, ()))
    heavy: dict[Node, bool] = {}  # a heavy op is computed when n is (realized operands are loads)
    cost: dict[Node, int] = {}  # an upper bound of cone_size (shared operands counted per use): cheap
    reads: dict[Node, frozenset] = {}  # what computing n inline reads from memory (up to READS_MAX + 1 of it)
    for n in order:
        live = [s for s in n.src if s not in realized]
        reads[n] = _union([frozenset((s,)) if s in realized or s.op is Op.BUFFER else reads[s] for s in n.src])
        heavy[n] = n.op in _HEAVY or any(heavy[s] for s in live)
        if n.op is Op.VIEW:
            cost[n] = cost[n.src[0]] if live else 0
        elif n.op not in (Op.BUFFER, Op.CONST, Op.INDEX):
            cost[n] = min(1 + sum(cost[s] for s in live), 1 << 30)
        else:
            cost[n] = 0
        if n in realized or n.op in (Op.BUFFER, Op.CONST, Op.INDEX, Op.VIEW) or _is_leafish(n):
            continue
        vus = view_users.get(n, [])
        if (len(vus) >= 2 or any(_expands(v) for v in vus)) and heavy[n]:
            realized.add(n)
        elif n in operands and (heavy[n] or cost[n] >= OPERAND_MAX):
            realized.add(n)  # packing loops run scalar: a costly operand is computed in a (vector) loop of its own
        elif cost[n] >= BROADCAST_MIN and any(_copies(v) >= BROADCAST_FACTOR for v in vus) \
                and _small_value(n) and not _of_indices(n):
            realized.add(n)  # computed once, not once per copy (a mask of [S, S] read by each head; not
            #                  at 16k tokens: 256 MB of mask, where recomputing it is a compare)
        elif cost[n] >= OVERLAP_MIN and any(_overlaps(v) for v in vus):
            realized.add(n)  # each window would compute it again: KH*KW times for a convolution's transpose
        elif n.op in _TRANSC and len(users.get(n, ())) >= 2 and any(u.op is Op.REDUCE for u in users[n]) \
                and not gpu:
            realized.add(n)  # e.g. softmax's exp: computed once into a row-local scratch buffer (a GPU
            #                  computes it twice: cheaper than the scratch's trip through memory)
        elif cost[n] > INLINE_MAX and readers[n] >= 2 and cone_size(n, realized, INLINE_MAX + 1) > INLINE_MAX:
            realized.add(n)
        elif len(reads[n]) > READS_MAX and readers[n] >= 2:
            realized.add(n)
        elif cost[n] > BODY_MAX and cone_size(n, realized, BODY_MAX + 1) > BODY_MAX:
            realized.add(n)
    return order, realized


def deps(n: Node, realized: set[Node]) -> set[Node]:
    """Realized nodes (and input BUFFERs) that computing n reads."""
    out: set[Node] = set()
    seen: set[Node] = set()
    stack = list(n.src)
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        if s in realized or s.op is Op.BUFFER:
            out.add(s)
        else:
            stack.extend(s.src)
    return out


def _overwritable(n: Node, members: list[Node], p: int, realized: set[Node], node_buf: dict[Node, str],
                  buffers: dict[str, Buffer], stages: list[Stage]) -> str | None:
    """The kernel-local buffer that store stage n may write its values over: a GEMM's output in
    its kernel (same dtype, same slice size) that n reads only element for element (directly or
    through contiguous reshapes), with no later stage reading it, and n read later only by GEMMs
    (the Mixer's activation between its two GEMMs: 1.6 MB an image). None if there is none. Each
    element is read before it is written, in the same iteration of the same loop; n's readers
    being GEMMs, whose packing loops index with variables of their own, no renderer can take a
    load of n's buffer for one of the GEMM output it replaced (equal loads are shared within a
    function)."""
    later = members[members.index(n) + 1:]
    readers = [x for x in later if n in deps(x, realized)]
    if not readers or not all(x.op is Op.REDUCE and gemm_plan(x) is not None for x in readers):
        return None
    modes = {st.node: st.mode for st in stages}
    for m in deps(n, realized):
        name = node_buf.get(m)
        b = buffers.get(name) if name else None
        if b is None or b.local != p or modes.get(m) != "tiled" or b.dtype != n.dtype \
                or D.prod(b.shape[p:]) != D.prod(n.shape[p:]):
            continue
        sharers = {x for x, nm in node_buf.items() if nm == name}
        if any(sharers & deps(x, realized) for x in later) or not _elementwise_reads(n, m, realized):
            continue
        return name
    return None


def _elementwise_reads(n: Node, m: Node, realized: set[Node]) -> bool:
    """Whether every read of realized node m in n's (unrealized) cone is at n's own element: the
    paths from n to m cross only elementwise ops and contiguous reshapes of m's size."""
    # n's unrealized cone, each node after its sources
    cone = toposort([n], lambda x: [s for s in x.src if s is not m and s not in realized and s.op is not Op.BUFFER])
    reaches = {x: False for x in cone}
    for x in cone:
        reaches[x] = any(s is m or reaches.get(s, False) for s in x.src)
    for x in cone:
        if not reaches[x]:
            continue
        if x.op is Op.VIEW:
            if not (x.arg.contiguous and D.prod(x.shape) == D.prod(m.shape)):
                return False
        elif x.op is Op.REDUCE or x.op in (Op.COPY, Op.EXTERN, Op.RAND, Op.GATHER, Op.SCATTER, Op.SORT):
            return False
    return True


def _epilogue(g: Node, n: Node, realized: set[Node]) -> bool:
    """Whether store stage n may join GEMM g's kernel though they share no outer loop (a 2-D
    GEMM's bias and activation): n is elementwise over g's output and reads it only at its own
    element, so the lowering runs it over each output block as the block is done
    (caten.lower.epilogue), not as a kernel of its own that reads the whole output back."""
    plan = gemm_plan(g) if g.op is Op.REDUCE else None
    if plan is None or plan.direct is not None or plan.i is None or len(plan.js) != 1 or n.op is Op.REDUCE:
        return False
    return plan.epilogue_axes(g.shape, n.shape) is not None and g in deps(n, realized) \
        and _elementwise_reads(n, g, realized)


def stage_shape(n: Node) -> tuple[Dim, ...]:
    return n.src[0].shape if n.op is Op.REDUCE else n.shape


def schedule(program: Program, check: Callable | None, threads: int = 1) -> Schedule:
    """`_schedule` with the plans knowing a loop body's invariant inputs (plan.invariant_inputs)."""
    with invariant_inputs(program):
        return _schedule(program, check, threads)


def _schedule(program: Program, check: Callable | None, threads: int = 1) -> Schedule:
    """Group `program` into kernels. `check(members, outer, realized)` may veto a fusion by
    raising Unfusable (the pipeline passes the lowering's trial, `caten.lower.trial.check_group`, so
    that no group is committed that cannot be lowered; None: no veto).
    `threads` > 1 gives every GEMM stage one set of packed panels per thread; on a GPU
    (`plan.gpu_schedule`) it is the work-groups a full sum is cut into, and nothing else."""
    gpu = on_gpu()
    given = check
    check = check or (lambda members, outer, realized: None)
    check = getattr(check, "fresh", lambda: check)()  # a checker with state gets its own for this schedule
    outs: list[Node] = []
    seen_out: set[Node] = set()
    # first: a reoriented output may become a plain reshape
    nodes = softnorm.defer(CF.materialize(orient(outward(list(program.nodes)))))
    cuts: dict = {}
    keyed: set[Node] = set()
    if not gpu:
        nodes, cuts, keyed = row_blocks(nodes)  # a long-row softmax (attention) a block of rows at a time
    for i, n in enumerate(nodes):
        if n.op is Op.BUFFER or n in seen_out:
            n = Node.make(Op.COPY, n.dtype, n.shape, (n,), ("out", i))
        elif n.op is Op.VIEW and n.arg.contiguous and D.prod(n.shape) == D.prod(n.src[0].shape) \
                and n.src[0].op not in (Op.BUFFER, Op.CONST) and n.src[0] not in seen_out \
                and n.src[0] not in nodes:
            # a reshape of a computed node: compute straight into the output (only when the view
            # covers all of it: a contiguous prefix, a slice, would write past the output's end)
            n = n.src[0]
        seen_out.add(n)
        outs.append(n)
    order, realized = realize_set(outs)
    late = {n: (c.unsafe,) for n, c in cuts.items() if c.unsafe is not None and c.unsafe in causal.LATE}
    if late:  # a stage cut under a check of the row blocks' statistics reads the check: after it
        order = toposort(outs, lambda x: (*x.src, *late.get(x, ())))
    rnodes = [n for n in order if n in realized]
    first_pass: set[Node] = set()
    if any(n in causal.APART for n in rnodes):  # (the causal guards' and checks' passes: first of all)
        first_pass = set(toposort([n for n in rnodes if n in causal.APART]))
        rnodes = [n for n in rnodes if n in first_pass] + [n for n in rnodes if n not in first_pass]

    groups: list[tuple[list[Node], int]] = []
    body = 0  # ops in the last group's stages
    loops: dict[tuple, int] = {}  # a loop's (or branch's) results: one kernel
    for n in rnodes:
        if n.op in CF.CONTROL:
            gi = loops.setdefault(CF.sibling_key(n), len(groups))
            if gi == len(groups):
                groups.append(([n], 0))
            else:
                groups[gi][0].append(n)
            body = BODY_MAX + 1  # nothing fuses after it
            continue
        if n in first_pass or n in causal.LATE:  # a causal guard's or check's pass over V: before the row
            # blocks, not among them (a check of their statistics: after them)
            groups.append(([n], max_outer(n)))
            body = BODY_MAX + 1
            continue
        placed = False
        if groups:
            members, p = groups[-1]
            q = min(p, max_outer(n))
            sh, gsh = stage_shape(n), stage_shape(members[0])
            while q > 0 and tuple(sh[:q]) != tuple(gsh[:q]):
                q -= 1
            size = cone_size(n, realized, BODY_MAX + 1)
            # (on a GPU a GEMM is a kernel of its own: its grid is the output's blocks, where a
            # fused one would run in one work-group per outer iteration)
            alone = gpu and (gemm_shaped(n) or gemm_shaped(members[-1]))
            epi = q == 0 and p == 0 and _epilogue(members[-1], n, realized)
            alone = alone or any((m in keyed) != (n in keyed) for m in members)  # (key blocks apart)
            if (q >= 1 or epi) and len(members) < MAX_STAGES and body + size <= BODY_MAX and not alone:
                try:
                    if check is not None:
                        check(members + [n], q, realized)
                    groups[-1] = (members + [n], q)
                    placed = True
                    body += size
                except Unfusable:
                    pass
        if not placed:
            groups.append(([n], max_outer(n)))
            body = cone_size(n, realized, BODY_MAX + 1)

    # buffers ---------------------------------------------------------------------------------
    buffers: dict[str, Buffer] = {}
    node_buf: dict[Node, str] = {}
    for i, spec in enumerate(program.inputs):
        buffers[f"in{i}"] = Buffer(f"in{i}", spec.dtype, tuple(spec.shape), "in", i)
    for n in order:
        if n.op is Op.BUFFER:
            node_buf[n] = f"in{n.arg[1]}"
    for i, n in enumerate(outs):
        name = f"out{i}"
        buffers[name] = Buffer(name, n.dtype, tuple(n.shape), "out", i)
        node_buf[n] = name
    group_of: dict[Node, int] = {}
    for gi, (members, _) in enumerate(groups):
        for n in members:
            group_of[n] = gi
    readers: dict[Node, set[int]] = {}
    for n in rnodes:
        for d in deps(n, realized):
            readers.setdefault(d, set()).add(group_of[n])
    kernels: list[Kernel] = []
    ntemp = 0
    for gi, (members, p) in enumerate(groups):
        k = Kernel(f"{program.name}_k{gi}", p, tuple(stage_shape(members[0])[:p]))
        scratch: dict = {}
        for n in members:
            if n.op is Op.REDUCE:
                src = n.src[0]
                st = Stage(n, "reduce", plan=plan_reduce(n, p, src not in realized or src in members))
            elif n.op in CF.CONTROL:
                st = Stage(n, "control")
            else:
                st = Stage(n, "store")
            others = readers.get(n, set()) - {gi}
            needs_mem = st.kind in ("store", "control") or st.mode in ("memory", "tiled") or bool(others) \
                or n in node_buf
            if st.kind == "reduce" and st.mode == "register" and any(
                    a not in n.arg[1] for a in range(p, n.src[0].rank)):
                needs_mem = True
            if needs_mem:
                if n not in node_buf:
                    local = (st.kind == "store" or st.mode == "tiled") and not others and p > 0
                    over = _overwritable(n, members, p, realized, node_buf, buffers, k.stages) \
                        if local and st.kind == "store" else None
                    if over is not None:  # (an elementwise stage writes over the slice it alone reads)
                        node_buf[n] = over
                    else:
                        name = f"t{ntemp}"
                        ntemp += 1
                        buffers[name] = Buffer(name, n.dtype, tuple(n.shape), "temp")
                        if local:
                            buffers[name].local = p
                        node_buf[n] = name
                st.buffer = node_buf[n]
            k.stages.append(st)
        if k.stages[0].kind == "control":
            def temp(dt: object, shape: tuple) -> str:
                nonlocal ntemp
                name = f"t{ntemp}"
                ntemp += 1
                buffers[name] = Buffer(name, dt, shape, "temp")
                return name
            cp = CF.plan(members, program, f"{program.name}_l{gi}", node_buf, temp,
                         lambda sub: schedule(sub, given, threads))
            k.stages[0].control = cp
            k.stages[0].scratch = tuple(b for pair in cp.state for b in pair) + tuple(
                b for b in (cp.flag, cp.arena) if b)
            kernels.append(k)
            continue
        alone = small_gemms(k, threads)  # GEMMs run whole on each thread: no shared panels packed once
        either = outer_either(k, threads)  # that, or shared rows, chosen at run time: room for both
        slots: dict = {}  # dtype -> one thread's slot, sized for the kernel's largest GEMM of it
        for st in k.stages:
            n = st.node
            if n.op is Op.SORT:  # a merge sort's ping-pong: keys and indices twice, in row-local layout
                st.scratch = ()
                for dt in (n.src[0].dtype, n.src[0].dtype, T.i64, T.i64):
                    name = f"t{ntemp}"
                    ntemp += 1
                    buffers[name] = Buffer(name, dt, (D.prod(n.shape),), "temp")
                    st.scratch += (name,)
            plan = st.plan.gemm if st.plan is not None else None
            if plan is not None:  # packed panels: shared by the GEMMs of a kernel (they run in turn)
                names = scratch.get(n.dtype)
                if names is None:
                    names = scratch[n.dtype] = []
                    for _ in range(2):
                        name = f"t{ntemp}"
                        ntemp += 1
                        buffers[name] = Buffer(name, n.dtype, (0,), "temp")
                        names.append(name)
                local = any(a >= p and n.src[0].shape[a] != 1 for a in plan.batch)
                if (alone or either) and n.dtype not in slots:
                    slots[n.dtype] = thread_slots([x.plan.gemm for x in k.stages if x.plan is not None
                                                   and x.node.dtype == n.dtype])
                if alone:
                    pa_size, pb_size = slots[n.dtype]
                else:
                    pa_size, pb_size = plan.thread_packs(threads, local)
                    # (once: its own buffer)
                    pa_size, pb_size = (0 if plan.a_once else pa_size), \
                        (0 if plan.b_once or plan.direct is not None else pb_size)
                    if either:
                        pa_size, pb_size = D.dmax(pa_size, slots[n.dtype][0]), D.dmax(pb_size, slots[n.dtype][1])
                for name, size in zip(names, (pa_size, pb_size)):
                    buffers[name].shape = (D.dmax(buffers[name].shape[0], D.mul(size, threads)),)
                st.scratch = tuple(names)
                # packed whole: kept across the outer loops (under an outer split, packed before the
                # threads start; a direct convolution's threads then pack their own)
                if (plan.a_once or plan.b_once) and not (alone and plan.direct is not None):
                    name = f"t{ntemp}"
                    ntemp += 1
                    buffers[name] = Buffer(name, n.dtype, (plan.whole("a" if plan.a_once else "b"),), "temp")
                    st.scratch += (name,)
                if not alone and plan.splits_k(threads, local):  # the threads' partial outputs of a split K
                    name = f"t{ntemp}"
                    ntemp += 1
                    buffers[name] = Buffer(name, n.dtype, (D.mul(threads, D.mul(plan.M, plan.N)),), "temp")
                    st.scratch += (name,)
        if threads > 1 and p == 0:  # full sums: a wide partial per thread
            for st in k.stages:
                if sum_split(st):
                    name = f"t{ntemp}"
                    ntemp += 1
                    buffers[name] = Buffer(name, T.f64, (threads,), "temp")  # (a block sum's wide dtype)
                    st.scratch = (name,)
                    k.split = threads
        kernels.append(k)
    pos = {n: i for i, n in enumerate(order)}
    for gi, (members, _) in enumerate(groups):
        rd: list[str] = []
        for n in members:
            for d in sorted(deps(n, realized), key=pos.__getitem__):  # a stable order: dumps are reproducible
                b = node_buf.get(d)
                if b is not None and b not in rd and d not in members:
                    rd.append(b)
        kernels[gi].reads = rd
        kernels[gi].writes = [s.buffer for s in kernels[gi].stages if s.buffer]
        kernels[gi].writes += list(dict.fromkeys(b for s in kernels[gi].stages for b in s.scratch))
    for gi, k in enumerate(kernels):
        for b in k.writes:
            buf = buffers[b]
            if buf.first < 0:
                buf.first = gi
            buf.last = max(buf.last, gi)
        for b in k.reads:
            buffers[b].last = max(buffers[b].last, gi)
    if cuts:
        causal.apply(kernels, cuts, threads)  # a causal attention's blocks stop at their last key
    for k in kernels:
        if k.outer > 0 and not gpu:  # (a GPU's grid takes the outer loops)
            k.split = outer_split(k, threads)
        for s in k.stages:
            if s.buffer and buffers[s.buffer].local >= 0 and (not stagewise(k, threads) or outer_either(k, threads)):
                buffers[s.buffer].copies = k.split
    for k in kernels:  # a b packed on a loop's first trip lives across the trips: no other temp shares it
        for st in k.stages:
            g = st.plan.gemm if st.plan is not None else None
            if g is not None and g.hoisted and st.scratch:
                keep = buffers[st.scratch[2]]
                keep.first, keep.last = 0, max(len(kernels) - 1, 0)
    arena, peak = plan_arena([b for b in buffers.values() if b.role == "temp"])
    return Schedule(program, kernels, buffers, node_buf, arena, peak, outs, threads)
