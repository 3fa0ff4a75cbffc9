"""SCATTER's kernel: the data copied into the output, then one read-modify-write per position of
the index, in row-major order. The loop along the scatter axis is `serial` (two positions of one
line may land on one element, so its iterations must run in turn; renderers never spread it over
threads or lanes); the other axes run to the smaller of the index's and the data's extent, so
every write of one line lands in that line. An index outside [-n, n) writes the element's own
value back at the line's first element, which exists: the axis loop runs 0 times when n is 0."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.index import Aff, Coords

_IN_PLACE: contextvars.ContextVar[frozenset[tuple[str, int]]] = contextvars.ContextVar("caten_in_place",
                                                                                       default=frozenset())


@contextlib.contextmanager
def in_place(pairs: frozenset[tuple[str, int]]) -> Iterator[None]:
    """Lowering inside writes each (output buffer, input index) pair's SCATTER straight into the
    output, which the caller makes the input's own memory (`Program.in_place`): the copy of the
    data is left out, and only the scattered positions are written."""
    tok = _IN_PLACE.set(pairs)
    try:
        yield
    finally:
        _IN_PLACE.reset(tok)


def combine(op: str, dt: T.DType, old: X, new: X) -> X:
    """op(old, new) in the loop IR's ops (min as max in reversed order: NEG for floats, NOT else)."""
    if op == "set":
        return new
    if op in ("add", "mul"):
        return L.alu(Op.ADD if op == "add" else Op.MUL, dt, old, new)
    if dt.is_bool:
        return L.alu(Op.OR if op == "max" else Op.AND, dt, old, new)
    if op == "max":
        return L.alu(Op.MAX, dt, old, new)
    flip = Op.NEG if dt.is_float else Op.NOT
    return L.alu(flip, dt, L.alu(Op.MAX, dt, L.alu(flip, dt, old), L.alu(flip, dt, new)))


def scatter_stage(kl: Any, n: Node, si: int) -> list:
    """The loop IR of SCATTER node n (a kernel of its own: no outer loops) into its buffer."""
    x, i, s = n.src
    ax, op = n.arg
    dt = n.dtype
    buf = kl.bufname(n)
    kl.bufs[buf] = dt
    xv = [kl.newvar(f"s{si}x{a}", d) for a, d in enumerate(x.shape)]
    cx = Coords(x.shape, axes=[Aff.of(v) for v in xv])
    if x.op is Op.BUFFER and (buf, x.arg[1]) in _IN_PLACE.get():
        init = []  # the output is the input's memory: its data is already there
    else:
        init = kl.nest(xv, list(x.shape), [L.Store(buf, cx.flat().expr(), kl.val(x, cx))])
    size = x.shape[ax]
    ext = [D.dmin(i.shape[d], D.mul(i.shape[d], size)) if d == ax else D.dmin(i.shape[d], x.shape[d])
           for d in range(i.rank)]
    pv = [kl.newvar(f"s{si}p{a}", e) for a, e in enumerate(ext)]
    cp = Coords(i.shape, axes=[Aff.of(v) for v in pv])
    iv = kl.val(i, cp)
    iv = iv if i.dtype == T.i64 else L.alu(Op.CAST, T.i64, iv)
    n_ = L.dim(size)
    iv = L.alu(Op.WHERE, T.i64, L.icmplt(iv, L.const(0)), L.iadd(iv, n_), iv)
    ok = L.land(L.alu(Op.NOT, T.bool_, L.icmplt(iv, L.const(0))), L.icmplt(iv, n_))
    axes = [Aff.of(v) for v in pv]
    axes[ax] = Aff.of(L.alu(Op.WHERE, T.i64, ok, iv, L.const(0)))
    idx = Coords(x.shape, axes=axes).flat().expr()
    old = L.load(buf, idx, dt)
    store = L.Store(buf, idx, L.alu(Op.WHERE, dt, ok, combine(op, dt, old, kl.val(s, cp)), old))
    body: list = [store]
    for a in reversed(range(i.rank)):
        body = [L.Loop(pv[a].arg, L.dim(ext[a]), body, "serial" if a == ax else "")]
    kl.done.add(n)
    return init + body
