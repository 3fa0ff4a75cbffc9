"""Causal cuts: the keys a block of query rows never needs, left out of its loops.

A causal attention row i reads keys j <= i only: the mask `where(j <= i, s, -inf)` sends every
later score to -inf, its exponential to 0 and its product with V to 0. Row blocks
(caten.schedule.rowblock) compute a block of B query rows at a time; for block nb every key
j >= J(nb) = (nb + 1) B + reach is masked for all its rows, so the block's loops over the keys
stop at J(nb), which halves the work of a long causal attention.

That is exact, not an approximation, and this pass proves it before it cuts anything:

- the mask is a condition of indices alone (iotas and constants), evaluated here on its (i, j)
  plane, so any spelling of it (`<=` of aranges, tril, triu, an offset) gives J(nb), and every
  row must keep at least one key;
- an abstract evaluation gives each node carrying the key axis its value past J(nb): -inf
  (NEGINF), an exact zero (ZERO), or unknown. The rules follow IEEE arithmetic: -inf times a
  positive constant is -inf; the stable softmax's `s - max(s)` is -inf but for a row whose kept
  scores are all -inf or nan, and such a row is nan with or without the cut; exp2(-inf) is +0;
  0 / sum(exp) is 0 (a zero or nan sum makes the whole row nan too);
- every reduction over the keys must then see its identity past J(nb): -inf for max, a zero
  for a sum. Adding zeros to a sum that starts at +0 changes nothing.
- a sum of P * V with P zero is zero only where V is finite (0 * inf is nan). The cut sum gets a
  guard added: nan where V holds a non-finite value among the cut keys, +0 elsewhere, from one
  pass over V per head (the last non-finite key of each column against J(nb)).
- a sum of P * F with F computed (the softmax gradient's row dot, F = dP = dO Vᵀ) is zero only
  where F is finite, which an overflow breaks as well as an inf in dO or V: a magnitude bound of F
  from its leaves (caten.schedule.bounds) is checked at run time, and where it does not prove F
  finite the block's loops run over every key (J = size): the uncut computation.
- a WHERE on the mask's own condition (the gradient's `where(mask, g, 0)`) is its false branch.

The key blocks of the backward pass (dK, dV) are cut from the other end: caten.schedule.keycut.

The cuts are all or nothing: the scheduler applies them only when every cut stage lands in the
row-block kernel (caten.schedule.scheduler); the guard is exact either way.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op, info
from caten.ir.view import View, contiguous_strides
from caten.schedule import bounds

APART: weakref.WeakSet[Node] = weakref.WeakSet()  # the guards' passes over V: the scheduler keeps each apart
LATE: weakref.WeakSet[Node] = weakref.WeakSet()  # checks of the row statistics: apart, after the row blocks
MAX_PLANE = 1 << 28  # elements of a mask's (i, j) plane evaluated at compile time (16k x 16k)
NEGINF, ZERO, POS, FIN, ANY = "neginf", "zero", "pos", "fin", "any"  # a value past J(nb)
_ELEMENTWISE = ("unary", "binary", "ternary")
_LEAVES = (Op.BUFFER, Op.CONST, Op.INDEX)


@dataclass(frozen=True)
class Cut:
    """A stage's loop over the key axis `axis` (of caten.schedule.scheduler.stage_shape) runs
    to J = min(size, (nb + 1) * block + reach), nb being outer loop `outer` (the block number);
    `down`: over the (flipped) query axis of a key block, to J = min(size, size - nb * block + reach)."""
    axis: int
    outer: int
    block: int
    reach: int
    size: int
    unsafe: Node | None = None  # an i64 [1] (caten.schedule.bounds.safe): 1 runs the keys whole
    down: bool = False  # J = min(size, size - nb * block + reach): a key block's query rows, flipped


class No(Exception):
    """Nothing to cut: the graph stays as row blocks made it."""


@dataclass
class Plan:
    """What the split applies: cuts of pre-split nodes (key axis in their stage shapes, before
    the row axis is split) and the reductions that get the V guard (node -> its guard's V)."""
    jpos: dict[Node, int]
    cut: set[Node]
    guard: dict[Node, Node]
    reach: int
    unsafe: Node | None  # the run-time check of the bounded factors' finiteness (None: none)
    checks: tuple = ()  # (a key block's plan) (bound, dtype, must be > 0 too) of what `unsafe` must check


def plan(o: Node, pos: dict[Node, int], rows: int, block: int, users: Callable[[Node], list[Node]]) -> Plan | None:
    """The causal cuts of output o's cone, split at `pos` into blocks of `block` rows; None
    when nothing can be proven (see the module docstring)."""
    try:
        return _plan(o, pos, rows, block, users)
    except No:
        return None


def _plan(o: Node, pos: dict[Node, int], rows: int, block: int, users: Callable[[Node], list[Node]]) -> Plan:
    cone = set(toposort([o]))
    r = next((n for n in toposort([o]) if n.op is Op.REDUCE and n.arg[0] == "max" and len(n.arg[1]) == 1
              and pos.get(n) is not None), None)
    if r is None:
        raise No
    size = r.src[0].shape[r.arg[1][0]]
    if not isinstance(size, int) or size < 2 * block:
        raise No
    mask_of: dict[Node, Node] = {}
    jpos = _keys(r.src[0], r.arg[1][0], size, cone, users, mask_of)
    if o in jpos:
        raise No
    # the mask: an index-only condition choosing -inf past J(nb)
    masks = [w for w in mask_of if pos.get(w) is not None]
    if not masks:
        raise No
    w = masks[0]
    reach = _reach(w.src[0], pos[w], jpos[w], rows, block)
    cls: dict[Node, tuple] = {}
    for n in toposort([o]):
        if n in jpos:
            cls[n] = _classify(n, cls, jpos, w, pos)
    cut: set[Node] = set()
    guard: dict[Node, Node] = {}
    bounded: dict[Node, Node] = {}
    for n in toposort([o]):
        if n.op is Op.REDUCE and n.src[0] in jpos and jpos[n.src[0]] in n.arg[1]:
            if len(n.arg[1]) != 1 or pos.get(n) is None:
                raise No
            c = cls[n.src[0]]
            if n.arg[0] == "max" and c[0] == NEGINF or n.arg[0] == "add" and c[0] == ZERO:
                pass
            elif n.arg[0] == "add" and c[0] == "zmul" and _guardable(c[1], pos):
                guard[n] = c[1]
            elif n.arg[0] == "add" and c[0] == "zmul" and (c[1] in bounded or _bounded(c[1], bounded)):
                pass
            else:
                raise No
            cut.add(n)
        elif n in jpos and pos.get(n) is not None and n.op not in _LEAVES and not _leaf_view(n):
            cut.add(n)  # (another output reading the keys it leaves out: caten.schedule.rowblock drops the plan)
    unsafe = None
    if bounded:
        unsafe = bounds.safe(list(bounded.values()), [f.dtype for f in bounded])
        APART.add(unsafe)
    return Plan(jpos, cut, guard, reach, unsafe)


def _bounded(f: Node, bounded: dict[Node, Node]) -> bool:
    """Whether f's magnitude can be bounded at run time (recorded in `bounded`)."""
    b = bounds.bound(f)
    if b is not None:
        bounded[f] = b
    return b is not None


def _guardable(v: Node, pos: dict[Node, int]) -> bool:
    """v (the factor of a zero) is read the same by every query row: a view broadcasting it along
    the row axis, which `guard` checks once per head rather than once per row."""
    return v.op is Op.VIEW and pos.get(v) is not None and v.arg.strides[pos[v]] == 0


def _leaf_view(n: Node) -> bool:
    return n.op is Op.VIEW and n.src[0].op in _LEAVES


def _index_only(n: Node) -> bool:
    return all(m.op in _LEAVES and m.op is not Op.BUFFER or info(m.op).group in _ELEMENTWISE or m.op is Op.VIEW
               for m in toposort([n]))


def _keys(x: Node, j: int, size: int, cone: set[Node], users: Callable[[Node], list[Node]],
          mask_of: dict[Node, Node], stops: frozenset[Node] = frozenset()) -> dict[Node, int]:
    """Where the key axis lies in each node of the cone that carries it, from the scores x
    (producers and consumers both); the WHEREs whose condition is index-only go to mask_of, and
    their conditions are not followed (computed whole: they cost no key of V)."""
    jpos: dict[Node, int] = {x: j}
    todo = [x]

    def want(n: Node, a: int) -> None:
        if n not in cone:
            return
        if jpos.get(n, a) != a:
            raise No
        if n not in jpos:
            jpos[n] = a
            todo.append(n)

    while todo:
        n = todo.pop()
        a = jpos[n]
        if n.shape[a] != size:
            raise No
        if n in stops:
            continue  # (a value computed elsewhere, read as a leaf: caten.schedule.rowblock's statistics)
        # producers
        if n.op is Op.WHERE and _index_only(n.src[0]):
            mask_of[n] = n.src[0]
            want(n.src[1], a)
            want(n.src[2], a)
        elif n.op is Op.VIEW:
            if n.src[0].op not in _LEAVES:
                b = _source_axis(n.arg, n.src[0], a, size)
                if b is not None:
                    want(n.src[0], b)
        elif n.op is Op.REDUCE or n.op is Op.COPY or info(n.op).group in _ELEMENTWISE:
            if n.op is Op.REDUCE and a in n.arg[1]:
                raise No
            for s in n.src:
                want(s, a)
        elif n.op not in _LEAVES:
            raise No
        if n.op in _LEAVES or _leaf_view(n):
            continue  # (a leaf's readers are reached from the scores; shared constants are not followed)
        for u in users(n):
            if u not in cone:
                continue
            if u.op is Op.REDUCE:
                if a not in u.arg[1]:
                    want(u, a)
            elif u.op is Op.VIEW:
                ax = [k for k in range(u.rank) if _walks(u.arg, n, k, size) == a]
                if len(ax) != 1:
                    raise No
                want(u, ax[0])
            elif u.op is Op.WHERE and u.src[0] is n and _index_only(n):
                continue
            elif u.op is Op.COPY or info(u.op).group in _ELEMENTWISE:
                want(u, a)
            else:
                raise No
    return jpos


def _source_axis(v: View, src: Node, a: int, size: int) -> int | None:
    """The source axis that view axis a walks whole (None: a broadcast along it); else No."""
    if v.mask is not None or v.strides[a] != 0 and _walks(v, src, a, size) is None:
        raise No
    return _walks(v, src, a, size)


def _walks(v: View, src: Node, a: int, size: int) -> int | None:
    """The source axis that view axis a walks whole (stride and extent of one axis, unmasked),
    else None."""
    st = v.strides[a]
    if v.mask is not None or st == 0 or v.shape[a] != size or not isinstance(st, int) \
            or not all(isinstance(d, int) for d in src.shape):
        return None
    cs = contiguous_strides(src.shape)
    return next((k for k, (c, d) in enumerate(zip(cs, src.shape)) if c == st and d == size), None)


def _plane(cond: Node, i: int, j: int, rows: int) -> np.ndarray:
    """cond on its (i, j) plane (i the blocked axis, j the cut one), any() over other axes."""
    if rows * cond.shape[j] > MAX_PLANE:
        raise No
    v = _evaluate(cond, {})
    plane = np.asarray(v)
    # axes other than (i, j): broadcast ones are one value; others must agree with any()
    idx = []
    for k in range(plane.ndim):
        if k in (i, j):
            idx.append(slice(None))
        elif plane.strides[k] == 0:
            idx.append(0)
        else:
            idx.append(slice(None))
    plane = plane[tuple(idx)]
    keep = [k for k in range(cond.rank) if k in (i, j) or not isinstance(idx[k], int)]
    others = tuple(n for n, k in enumerate(keep) if k not in (i, j))
    if others:
        plane = plane.any(axis=others)
    return plane.T if i > j else plane


def _reach(cond: Node, i: int, j: int, rows: int, block: int) -> int:
    """The least `reach` with cond false at every key j >= (nb + 1) * block + reach of block nb,
    from cond evaluated on its (i, j) plane; No when a row keeps no key or nothing is cut."""
    plane = _plane(cond, i, j, rows)
    size = plane.shape[1]
    if not plane.any(axis=1).all():
        raise No  # a row with no key: softmax gives nan there, which a cut sum would not
    last = size - 1 - np.argmax(plane[:, ::-1], axis=1)
    nb = rows // block
    lastb = last.reshape(nb, block).max(axis=1)
    reach = int((lastb + 1 - (np.arange(nb) + 1) * block).max())
    if block + reach >= size:  # (even the first block keeps every key)
        raise No
    return reach


def _evaluate(n: Node, memo: dict[Node, np.ndarray]) -> np.ndarray:
    """An index-only node's value with numpy, broadcasts kept as zero strides."""
    hit = memo.get(n)
    if hit is not None:
        return hit
    if any(not isinstance(d, int) for d in n.shape):
        raise No
    if n.op is Op.VIEW:
        v: View = n.arg
        src = np.ascontiguousarray(_evaluate(n.src[0], memo))
        if v.mask is not None or not isinstance(v.offset, int) or not all(isinstance(s, int) for s in v.strides):
            raise No
        flat = src.reshape(-1)
        it = flat.itemsize
        out = np.lib.stride_tricks.as_strided(flat[v.offset:], v.shape, tuple(s * it for s in v.strides),
                                              writeable=False)
    else:
        from caten.ir.ops import Ctx

        xs = [_evaluate(s, memo) for s in n.src]
        if int(np.prod(n.shape)) > MAX_PLANE:
            raise No
        out = info(n.op).ref(Ctx(n.arg, n.shape, n.dtype, {}, {}), *xs)
        out = np.broadcast_to(out, n.shape) if n.op in (Op.CONST, Op.INDEX) else np.asarray(out)
    memo[n] = out
    return out


def _const(n: Node) -> float | None:
    while n.op is Op.VIEW:
        n = n.src[0]
    return float(n.arg) if n.op is Op.CONST and isinstance(n.arg, (int, float)) else None


def _classify(n: Node, cls: dict[Node, tuple], jpos: dict[Node, int], mask: Node, pos: dict) -> tuple:
    """n's value past J(nb) (the module docstring's rules): (kind,) or ("zmul", V)."""
    def of(s: Node) -> tuple:
        c = _const(s)
        if c is not None:
            return _kind_of(c)
        return cls.get(s, (ANY,))

    if n.op is Op.VIEW:
        return of(n.src[0])
    if n.op is Op.NEG:
        c = of(n.src[0])
        return c if c[0] in (ZERO, FIN) else (FIN,) if c[0] == POS else (ANY,)
    if n.op is Op.WHERE and (n is mask or n.src[0] is mask.src[0] and jpos.get(n) == jpos.get(mask)
                             and pos.get(n) == pos.get(mask)):
        return of(n.src[2])
    if n.op is Op.MUL:
        a, b = of(n.src[0]), of(n.src[1])
        for x, y, other in ((a, b, n.src[1]), (b, a, n.src[0])):
            if x[0] == NEGINF and y[0] == POS:
                return (NEGINF,)
            if x[0] == ZERO and y[0] in (POS, FIN, ZERO):
                return (ZERO,)
            if x[0] == ZERO and y[0] == ANY and other in jpos:
                return ("zmul", other)
        return (ANY,)
    if n.op is Op.ADD:
        for x, y in ((n.src[0], n.src[1]), (n.src[1], n.src[0])):
            if of(x)[0] == NEGINF and (of(y)[0] in (POS, FIN) or _neg_max_of(y, x, jpos)):
                return (NEGINF,)
        return (ANY,)
    if n.op is Op.EXP2 and of(n.src[0])[0] == NEGINF:
        return (ZERO,)
    if n.op is Op.FDIV and of(n.src[0])[0] == ZERO and (of(n.src[1])[0] == POS or _sum_of(n.src[1], n.src[0], jpos)):
        return (ZERO,)
    return (ANY,)


def _kind_of(c: float) -> tuple:
    if c == float("-inf"):
        return (NEGINF,)
    if c == 0:
        return (ZERO,)
    if np.isfinite(c):
        return (POS,) if c > 0 else (FIN,)
    return (ANY,)


def _reduced(y: Node, op: str, x: Node, jpos: dict[Node, int]) -> bool:
    """y is a broadcast of a REDUCE `op` over x's key axis."""
    while y.op is Op.VIEW:
        y = y.src[0]
    return y.op is Op.REDUCE and y.arg[0] == op and y.src[0] is x and y.arg[1] == (jpos[x],)


def _neg_max_of(y: Node, x: Node, jpos: dict[Node, int]) -> bool:
    """y is -(max over the keys of x), broadcast (the stable softmax's shift)."""
    while y.op is Op.VIEW:
        y = y.src[0]
    return y.op is Op.NEG and _reduced(y.src[0], "max", x, jpos)


def _sum_of(y: Node, x: Node, jpos: dict[Node, int]) -> bool:
    """y is the sum over the keys of x, broadcast, x being exponentials (>= 0)."""
    return x.op is Op.EXP2 and _reduced(y, "add", x, jpos)


def guard(r: Node, v: Node, r_split: Node, pos_r: int, pos_v: int, jv: int, block: int, reach: int) -> Node:
    """r_split (the split sum r of P * v) plus +0, or nan where v holds a non-finite value at a
    key the cut leaves out (for each column of v): the exact value of the uncut sum there."""
    assert v.op is Op.VIEW and v.arg.strides[pos_v] == 0, v  # (_guardable)
    one = B.shrink(v, [(0, 1) if k == pos_v else (0, d) for k, d in enumerate(v.shape)])
    diff = B.alu(Op.ADD, one, B.alu(Op.NEG, one))
    bad = B.alu(Op.CMPNE, diff, diff)
    keys = B.index(one.shape, jv)
    last = B.reduce(B.alu(Op.WHERE, bad, keys, B.const(-1, T.i64, one.shape)), "max", (jv,))
    APART.add(last)  # (a kernel of its own, before the row blocks: it must not shrink their shared loops)
    # last: r's shape with the row axis 1; split it as r is: (nb, B) -> (1, 1)
    last = B.reshape(last, last.shape[:pos_r] + (1, 1) + last.shape[pos_r + 1:])
    last = B.expand(last, r_split.shape)
    nb = B.index(r_split.shape, pos_r)
    j_end = B.alu(Op.ADD, B.alu(Op.MUL, nb, B.const(block, T.i64, ())), B.const(block + reach, T.i64, ()))
    ok = B.alu(Op.CMPLT, last, j_end)
    tail = B.alu(Op.WHERE, ok, B.const(0.0, r.dtype, r_split.shape), B.const(float("nan"), r.dtype, r_split.shape))
    return B.alu(Op.ADD, tail, r_split)  # (tail first: its kernel is scheduled before the row blocks)


def pin(x: Node, unsafe: Node) -> Node:
    """x, read through a select on the bounds check (caten.schedule.bounds): the kernel that
    computes x then reads the check's buffer, which its cut loops' ends load."""
    c = B.expand(B.reshape(B.alu(Op.CMPNE, unsafe, B.const(0, T.i64, unsafe.shape)), ()), x.shape)
    return B.alu(Op.WHERE, c, x, x)


def apply(kernels: list, cuts: dict[Node, Cut], threads: int) -> None:
    """Set each cut stage's `cut`, or none at all: every realized cut node must be a stage
    whose kernel loops over the block number and whose loops the lowering can bound (a store,
    a register or memory reduction, a packed GEMM with the keys as its one column or summed
    axis)."""
    chosen = []
    for k in kernels:
        for st in k.stages:
            c = cuts.get(st.node)
            if c is None:
                continue
            if st.kind == "control" or k.outer <= c.outer or c.axis < k.outer:
                return
            if st.mode == "tiled":
                g = st.plan.gemm
                if g is None or g.direct is not None or g.pairs \
                        or g.splits_k(threads, any(a >= k.outer and st.node.src[0].shape[a] != 1 for a in g.batch)):
                    return
                if not (g.js == (c.axis,) or g.red == (c.axis,) or g.i == c.axis):
                    return
            chosen.append((st, c))
    for st, c in chosen:
        st.cut = c
