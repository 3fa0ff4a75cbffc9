"""Row blocks: a big row-wise softmax computed a block of rows at a time, so its scratch is
linear in the rows, not quadratic.

Attention, `softmax(Q Kᵀ + bias) V`, is one kernel per head: its stages (the scores' GEMM, the
row max, the exponentials, the row sum, the division, the GEMM with V) each run over every query
row, so the scores of a whole head sit in scratch between them: S² floats per thread (6 GB at
16k tokens). Every stage treats each query row on its own, though. This pass splits the query
axis `i` of the output's cone into (blocks, rows of a block): the scheduler then finds
(head, block) as the kernel's shared outer loops, and the scratch is one block of rows by S.
The GEMMs stay GEMMs (a block of 128 rows against all keys), read K and V once per block, and
the exponentials stay in cache.

The split is a change of shapes only: a realized value of shape [.., nb, B, ..] is laid out as
[.., nb·B, ..], so every view keeps its strides (`View`s index their source's flat layout) and
gets its own axis split; leaves (inputs, constants, iotas) are reshaped where they carry `i`.
The pass follows `i` from the output down through elementwise ops, reductions over other axes
and views that keep `i` whole (stride and extent of one source axis); anything else (a
reduction over `i`, a gather, a loop, a masked or merged view of `i`) leaves the graph as it was.
It fires only where a max reduction over another axis `j` sees at least MIN_SCORES elements per
outer slice (a softmax over long rows): a plain GEMM keeps its schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.view import View, contiguous_strides
from caten.schedule import causal, keyblock, keycut
from caten.schedule.causal import Cut
from caten.schedule.layout import replace_nodes

MIN_SCORES = 1 << 19  # elements of one head's [i, j] scores from which rows are blocked (2 MB of f32)
MIN_ROWS = 256  # rows below which there is nothing to block
BLOCKS = (128, 96, 120, 64, 112, 80, 144, 160, 192, 100, 125, 200, 250, 256)  # rows of a block: the first that divides
_LEAVES = (Op.BUFFER, Op.CONST, Op.INDEX)
_ELEMENTWISE = ("unary", "binary", "ternary")


_CALLER = Node.make(Op.CONST, T.bool_, (), (), "caller")  # stands for the program's caller among the readers


class _Abort(Exception):
    """The cone holds something the split cannot follow: keep the graph."""


def row_blocks(nodes: list[Node]) -> tuple[list[Node], dict[Node, Cut], set[Node]]:
    """`nodes` (a program's outputs) with each output whose cone is a long-row softmax split into
    row blocks (see the module docstring), each whose cone sums such rows over the query axis (dK,
    dV) into key blocks (caten.schedule.keyblock), the others as they are. Also the causal cuts of
    the row-blocked stages (caten.schedule.causal), which the scheduler applies or drops together,
    and the key-blocked cones' nodes, which it keeps out of the row blocks' kernels (their block
    loops look alike, [head, blocks], but walk other axes: a value shared would be whole)."""
    users: dict[Node, list[Node]] = {}
    for n in toposort(nodes):
        for s in n.src:
            users.setdefault(s, []).append(n)
    for n in nodes:  # (the caller reads every output: a reader outside any cone)
        users.setdefault(n, []).append(_CALLER)
    out, plans, rowed, keyed = [], [], {}, set()
    for n in nodes:
        try:
            o, c, made = _split_output(n, lambda m: users.get(m, []), rowed)
            out.append(o)
            plans.append((c, made))
        except _Abort:
            out.append(n)
    cones: dict[int, _KeyCone] = {}
    for k, n in enumerate(nodes):
        if out[k] is n:
            try:
                cones[k] = _key_split(n, rowed, lambda m: users.get(m, []))
            except (_Abort, keyblock.Unmovable):
                pass
    planned = [kc.plan for kc in cones.values() if kc.plan is not None]
    unsafe = keycut.check(planned) if planned else None
    cuts: dict[Node, Cut] = {}  # (one plan for all key cones: they share values)
    made: set[Node] = set()
    alike = True
    for k, kc in cones.items():
        try:
            out[k], c, m = _key_build(kc, unsafe, keyed)
        except keyblock.Unmovable:
            continue
        alike = alike and all(cuts.get(n, x) == x for n, x in c.items())
        cuts.update(c)
        made |= m
    plans.append((cuts if alike else {}, made))  # (a value two cones cut unlike: none is cut)
    return out, _kept_cuts(out, plans), keyed


def _kept_cuts(out: list[Node], plans: list[tuple[dict[Node, Cut], set[Node]]]) -> dict[Node, Cut]:
    """The cuts of each split output whose partly computed values (those carrying the keys) no
    other cone reads: a value shared by two outputs' cones (hash-consed alike) would be read whole
    by the other. A reduction over the cut keys is whole (its left-out terms are zeros), and so is
    what reads it, anywhere. A plan dropped leaves its guards, exact either way."""
    if not any(cuts for cuts, _ in plans):
        return {}  # (most programs: no graph walk)
    readers: dict[Node, list[Node]] = {}
    for n in toposort(out):
        for s in n.src:
            readers.setdefault(s, []).append(n)
    for o in out:
        readers.setdefault(o, []).append(_CALLER)
    kept: dict[Node, Cut] = {}
    for cuts, made in plans:
        partial = [m for m, c in cuts.items() if not (m.op is Op.REDUCE and c.axis in m.arg[1])]
        if all(u in made for m in partial for u in readers.get(m, [])):
            kept.update(cuts)
    return kept


def _split_output(o: Node, users: Callable[[Node], list[Node]],
                  rowed: dict[Node, Node]) -> tuple[Node, dict[Node, Cut], set[Node]]:
    """o's cone split into row blocks, its causal cuts and the nodes it made; `rowed` learns each
    split reduction's row-blocked value, which a key-blocked cone reads (reshaped back) instead of
    reducing over the keys itself."""
    a, pos = _candidate(o)
    rows = o.shape[a]
    block = next(b for b in BLOCKS if rows % b == 0 and rows > b)
    cp = causal.plan(o, pos, rows, block, users)
    new: dict[Node, Node] = {}
    cuts: dict[Node, Cut] = {}
    pin = None if cp is None or cp.unsafe is None else \
        min((n for n in cp.cut if n.op is Op.REDUCE), key=lambda n: D.prod(n.shape), default=None)
    made: set[Node] = set()
    for n in toposort([o]):
        i = pos.get(n)
        new[n] = _rebuild(n, i, new, rows, block, None, pos)
        made.add(new[n])
        if cp is not None and n in cp.cut:
            cuts[new[n]] = _cut(n, cp, pos[n], block)
        if n is pin:
            new[n] = causal.pin(new[n], cp.unsafe)
        if cp is not None and n in cp.guard:
            v = cp.guard[n]
            new[n] = causal.guard(n, v, new[n], pos[n], pos[v], cp.jpos[v], block, cp.reach)
    for n, m in new.items():
        if n.op is Op.REDUCE and m is not n:
            rowed.setdefault(n, m)
    made.update(new.values())
    return B.reshape(new[o], o.shape), cuts, made  # (one view over the computed value: computed into the output)


def _key_split(o: Node, rowed: dict[Node, Node], users: Callable[[Node], list[Node]]) -> _KeyCone:
    """o's cone to be split into key blocks (caten.schedule.keyblock): o sums long softmax rows over
    the query axis, carrying the key axis; the row statistics it reads (reductions over the keys)
    come from their row-blocked values, row-blocked here if no other output's split made them.
    Built by `_key_build`, once every key cone's causal plan is known."""
    if not any(r.op is Op.REDUCE and r.arg[0] == "max" and _big(r) for r in toposort([o])):
        raise _Abort  # (no long-row softmax in the cone: the common case, decided in one walk)
    for a, rows, pos in _blockable(o):
        heavy = [f for f in _frontier(pos) if _heavy(f, set())]
        if not heavy or not any(n.op is Op.REDUCE and _big(n) for n in pos):
            continue
        todo = {}
        for r in toposort(heavy):  # (the statistics' reductions, inner ones first)
            if r.op is Op.REDUCE and r not in pos and _big(r):
                if r not in rowed:
                    try:
                        _split_output(r, users, rowed)
                    except _Abort:
                        continue
                todo[r] = B.reshape(rowed[r], r.shape)
        o2 = replace_nodes([o], todo)[0]
        pos = _follow(o2, a, rows)
        if any(_heavy(f, set(todo.values())) for f in _frontier(pos)):
            raise _Abort  # (a statistic no row-blocked value stands for)
        p = min(pos.values())
        if any(d != 1 for d in o.shape[p:a]):
            raise _Abort  # (the split output's layout must be the output's own)
        block = next(b for b in BLOCKS if rows % b == 0 and rows > b)
        o2, pos, cp = _flipped(o, o2, pos, todo, rows, block, a)
        return _KeyCone(o, o2, pos, cp, rows, block, p)
    raise _Abort


@dataclass
class _KeyCone:
    """A key-blocked cone before its split: the output, its graph (flipped when `plan` cuts it),
    where the key axis lies, the causal plan, the keys, the block and the block count's position."""
    o: Node
    o2: Node
    pos: dict[Node, int]
    plan: causal.Plan | None
    rows: int
    block: int
    p: int


def _key_build(kc: _KeyCone, unsafe: Node | None, keyed: set[Node]) -> tuple[Node, dict[Node, Cut], set[Node]]:
    """kc's cone split into key blocks, with its causal cuts under the check `unsafe`; `keyed`
    learns its nodes (kept out of the row blocks' kernels)."""
    cp, p, block, pos = kc.plan, kc.p, kc.block, kc.pos
    new: dict[Node, Node] = {}
    cuts: dict[Node, Cut] = {}
    # (the check is read through a row statistic broadcast over the keys, which the stages that
    # compute P read anyway)
    pin = None if cp is None else next((n for n in toposort([kc.o2]) if n in cp.jpos and n in pos
                                        and n.op is Op.VIEW and n.src[0].op not in _LEAVES
                                        and n.arg.strides[pos[n]] == 0), None)
    made: set[Node] = set()
    for n in toposort([kc.o2]):
        new[n] = _rebuild(n, pos.get(n), new, kc.rows, block, p, pos)
        made.add(new[n])
        if cp is not None and n in cp.cut:
            k = cp.jpos[n.src[0] if n.op is Op.REDUCE else n]
            cuts[new[n]] = Cut(keyblock.axis(k, p), p, block, cp.reach,
                               (n.src[0] if n.op is Op.REDUCE else n).shape[k], unsafe, down=True)
        if n is pin:
            new[n] = causal.pin(new[n], unsafe)
    keyed.update(new[n] for n in pos)
    return B.reshape(new[kc.o2], kc.o.shape), cuts, made | set(new.values())


def _flipped(o: Node, o2: Node, pos: dict[Node, int], todo: dict[Node, Node], rows: int, block: int,
             a: int) -> tuple[Node, dict[Node, int], causal.Plan | None]:
    """o2 (o with its statistics read from `todo`) with the query axis reversed where the cone
    reads it (leaf views, the statistics, the mask's condition), so that the rows each key block
    leaves out of a causal mask are its last (caten.schedule.causal.plan_keys cuts them); the
    sums over the rows do not see the order. o2 as it was and no plan when nothing is cut."""
    stats = frozenset(todo.values())
    try:
        ipos, w = keycut.query_axes(o2, pos, block, stats)
    except causal.No:
        return o2, pos, None
    cond = w.src[0]
    if cond.op is not Op.VIEW:
        return o2, pos, None
    flip: dict[Node, Node] = {cond: B.flip(cond, [ipos[w]])}
    for n, k in ipos.items():
        if n.op is Op.VIEW and (n in stats or _leaf(n)) and n.arg.strides[k] != 0:
            flip[n] = B.flip(n, [k])
    back = {t: r for r, t in todo.items()}
    o3 = replace_nodes([o], {back[t]: flip.get(t, t) for t in stats} | {
        n: f for n, f in flip.items() if n not in stats})[0]
    try:
        pos3 = _follow(o3, a, rows)
    except _Abort:
        return o2, pos, None
    sums = {flip.get(t, t): _is_sum(back[t]) for t in stats}
    cp = keycut.plan_keys(o3, pos3, rows, block, sums)
    return (o3, pos3, cp) if cp is not None else (o2, pos, None)


def _leaf(n: Node) -> bool:
    return n.src[0].op in _LEAVES


def _is_sum(r: Node) -> bool:
    """r sums exponentials (a softmax's denominator: > 0 where finite, checked at run time)."""
    return r.op is Op.REDUCE and r.arg[0] == "add" and r.src[0].op is Op.EXP2


def _frontier(pos: dict[Node, int]) -> set[Node]:
    """The computed values a split cone reads that do not carry the split axis."""
    return {s for n in pos if n.op not in _LEAVES for s in n.src if s not in pos and s.op not in _LEAVES}


def _big(r: Node) -> bool:
    return all(isinstance(d, int) for d in r.src[0].shape) and D.prod(r.src[0].shape) >= MIN_SCORES


def _heavy(n: Node, done: set[Node]) -> bool:
    """n reads a reduction over at least MIN_SCORES elements (a softmax's scale) not in `done`."""
    return any(r.op is Op.REDUCE and _big(r) for r in toposort([n], lambda x: () if x in done else x.src))


def _cut(n: Node, cp: causal.Plan, i: int, block: int) -> Cut:
    """n's cut in the split shapes: its stage's key axis (after the row axis i became (nb, B))."""
    j = cp.jpos[n.src[0] if n.op is Op.REDUCE else n]
    size = (n.src[0] if n.op is Op.REDUCE else n).shape[j]
    return Cut(j + (j > i), i, block, cp.reach, size, cp.unsafe)


def _candidate(o: Node) -> tuple[int, dict[Node, int]]:
    """The output axis to block (a static one of MIN_ROWS+ rows, with a block size, that a max
    reduction over long rows in the cone carries) and where it lies in the cone; else abort."""
    if not o.shape or o.op in _LEAVES:
        raise _Abort
    big = [r for r in toposort([o]) if r.op is Op.REDUCE and r.arg[0] == "max"
           and all(isinstance(d, int) for d in r.src[0].shape)]
    if not big:
        raise _Abort
    for a, rows, pos in _blockable(o):
        for r in big:
            i = pos.get(r)
            if i is None:
                continue
            cols = 1
            for ax in r.arg[1]:
                cols *= r.src[0].shape[ax]
            if rows * cols >= MIN_SCORES:
                return a, pos
    raise _Abort


def _blockable(o: Node) -> Iterator[tuple[int, int, dict[Node, int]]]:
    """Each output axis that can be blocked (static, MIN_ROWS+ rows, a block size divides it, the
    cone follows it): the axis, its rows, and where it lies in the cone."""
    for a, rows in enumerate(o.shape):
        if not isinstance(rows, int) or rows < MIN_ROWS or not any(rows % b == 0 and rows > b for b in BLOCKS):
            continue
        try:
            yield a, rows, _follow(o, a, rows)
        except _Abort:
            continue


def _follow(o: Node, a: int, rows: int) -> dict[Node, int]:
    """Where the blocked axis lies in each node of o's cone that carries it (consumers first)."""
    pos: dict[Node, int] = {o: a}
    for n in reversed(toposort([o])):
        i = pos.get(n)
        if i is None or n.op in _LEAVES:
            continue
        if n.shape[i] != rows:
            raise _Abort
        if n.op is Op.REDUCE:
            if i in n.arg[1]:
                raise _Abort
            _want(pos, n.src[0], i)
        elif n.op is Op.VIEW:
            b = _source_axis(n.arg, n.src[0], i, rows)
            if b is not None and n.src[0].op not in _LEAVES:  # (a leaf's flat layout is read as it is)
                _want(pos, n.src[0], b)
        elif n.op is Op.COPY or _group(n) in _ELEMENTWISE:
            for s in n.src:
                _want(pos, s, i)
        else:
            raise _Abort
    return pos


def _group(n: Node) -> str:
    from caten.ir.ops import info

    return info(n.op).group


def _want(pos: dict[Node, int], s: Node, i: int) -> None:
    if pos.get(s, i) != i:
        raise _Abort  # two consumers see the axis in different places
    pos[s] = i


def _source_axis(v: View, src: Node, a: int, rows: int) -> int | None:
    """The source axis that view axis `a` walks whole (None: a broadcast along it), else abort:
    its stride and extent must be exactly one source axis's, unmasked, and every other view axis
    must step either within that axis's inner part or over whole multiples of it."""
    if v.mask is not None and v.mask[a] != (0, rows):
        raise _Abort
    st = v.strides[a]
    if st == 0:
        return None
    if not all(isinstance(d, int) for d in src.shape) or not all(isinstance(x, int) for x in v.strides):
        raise _Abort
    cs = contiguous_strides(src.shape)
    b = next((k for k, (c, d) in enumerate(zip(cs, src.shape)) if c == st and d == rows), None)
    if b is None:
        raise _Abort
    for k, (d, x) in enumerate(zip(v.shape, v.strides)):
        if k == a or x == 0 or d == 1:
            continue
        inner = abs(x) * (d - 1) < st
        outer = abs(x) % (st * rows) == 0
        if not (inner or outer):
            raise _Abort
    if not isinstance(v.offset, int) or v.offset % (st * rows) >= st:
        raise _Abort  # the offset must not move within the blocked axis
    return b


def _rebuild(n: Node, i: int | None, new: dict[Node, Node], rows: int, block: int, p: int | None,
             pos: dict[Node, int]) -> Node:
    """n with its axis i split into (rows/block, block): in place (p None: every layout stays), or
    with the block count at axis p of every split value (keyblock: layouts move, views re-strided)."""
    if i is None:
        return n  # (a reader of a split value that does not carry the axis keeps the unsplit one)
    at = i if p is None else p
    shape = keyblock.split_shape(n.shape, i, at, rows, block)
    if n.op in _LEAVES:
        return Node.make(Op.VIEW, n.dtype, shape, (n,), keyblock.leaf_view(n.shape, i, at, rows, block))
    srcs = tuple(new[s] for s in n.src)
    if n.op is Op.REDUCE:
        op, axes = n.arg
        return Node.make(Op.REDUCE, n.dtype, shape, srcs, (op, tuple(keyblock.axis(x, at) for x in axes)))
    if n.op is Op.VIEW:
        s = n.src[0]
        b = None if s.op in _LEAVES else pos.get(s)
        moved = p is not None and b is not None and b > p
        nv = keyblock.moved_view(n.arg, s.shape, b, i, at, rows, block, moved)
        return Node.make(Op.VIEW, n.dtype, shape, srcs, nv)
    return Node.make(n.op, n.dtype, shape, srcs, n.arg)
