"""Causal cuts of the backward pass's key blocks (dK, dV: caten.schedule.keyblock).

A key block nb sums over the query rows, and rows i < nb * block see none of its keys under a
causal mask: its masked rows come first. caten.schedule.rowblock flips the query axis in those
cones (the leaves' views, the row statistics, the mask's condition; a sum over the rows does not
see their order), so the rows kept are the first `size - nb * block + reach` (`Cut.down`), and
this module proves it with caten.schedule.causal's abstract values: past J the mask's scores are
-inf, their exponentials zeros, and the gradient's `where(mask, g, 0)` zero, given the row
statistics the cones read (the row max, the softmax's sum, the row dot, computed by the row
blocks) are finite and the sum positive: a nan row would reach every key's sum, which a cut one
would not. A run-time check holds those and the zero products' factors (dO, Q) finite; where it
fails, the rows run whole. Cones that share values (dK's and dV's share P and dS) must cut them
alike, so one check stands for all (`check`), scheduled after the row blocks (causal.LATE).
"""

from __future__ import annotations

import numpy as np

from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.schedule import bounds
from caten.schedule.causal import (
    _LEAVES,
    FIN,
    LATE,
    POS,
    ZERO,
    No,
    Plan,
    _bounded,
    _classify,
    _keys,
    _leaf_view,
    _plane,
)


def plan_keys(o: Node, pos: dict[Node, int], rows: int, block: int, stats: dict[Node, bool]) -> Plan | None:
    """The causal cuts of a key-blocked cone (caten.schedule.keyblock: dK, dV) whose query axis was
    flipped, so that the rows a key block never needs are its last ones: `pos` the key axis (split
    into blocks of `block`), `stats` the row statistics it reads (True: a softmax's sum, > 0),
    which the run-time check holds finite (and positive) with the zero products' factors; None
    when nothing can be proven."""
    try:
        return _plan_keys(o, pos, rows, block, stats)
    except No:
        return None


def query_axes(o: Node, pos: dict[Node, int], block: int, stats: frozenset[Node]) -> tuple[dict[Node, int], Node]:
    """Where the query axis lies in each node of a key-blocked cone that carries it (`pos`: the
    key axis) and the mask (an index-only WHERE); No when the cone sums no masked rows."""
    order = toposort([o])
    readers: dict[Node, list[Node]] = {}
    for n in order:
        for s in n.src:
            readers.setdefault(s, []).append(n)
    cone = set(order)
    sums = [n for n in order if n.op is Op.REDUCE and n.arg[0] == "add" and len(n.arg[1]) == 1
            and pos.get(n) is not None and n.src[0] in pos and pos[n.src[0]] != n.arg[1][0]]
    for r in sums:
        a = r.arg[1][0]
        size = r.src[0].shape[a]
        if not isinstance(size, int) or size < 2 * block:
            continue
        mask_of: dict[Node, Node] = {}
        try:
            ipos = _keys(r.src[0], a, size, cone, lambda m: readers.get(m, []), mask_of, stats)
        except No:
            continue
        masks = [w for w in mask_of if pos.get(w) is not None]
        if masks:
            return ipos, masks[0]
    raise No


def _plan_keys(o: Node, pos: dict[Node, int], rows: int, block: int, stats: dict[Node, bool]) -> Plan:
    order = toposort([o])
    ipos, w = query_axes(o, pos, block, frozenset(stats))
    reach = _reach_down(w.src[0], pos[w], ipos[w], rows, block)
    cls: dict[Node, tuple] = {s: (POS,) if positive else (FIN,) for s, positive in stats.items()}
    for n in order:
        if n in ipos and n not in cls:
            cls[n] = _classify(n, cls, ipos, w, pos)
    cut: set[Node] = set()
    bounded: dict[Node, Node] = {}
    for n in order:
        if n in stats:
            continue
        if n.op is Op.REDUCE and n.src[0] in ipos and ipos[n.src[0]] in n.arg[1]:
            if len(n.arg[1]) != 1 or pos.get(n) is None:
                raise No
            c = cls[n.src[0]]
            if not (c[0] == ZERO or c[0] == "zmul" and (c[1] in bounded or _bounded(c[1], bounded))):
                raise No
            cut.add(n)
        elif n in ipos and pos.get(n) is not None and n.op not in _LEAVES and not _leaf_view(n):
            cut.add(n)
    checks = tuple((b, f.dtype, None) for f, b in bounded.items()) + \
        tuple((bounds.largest(s), s.dtype, s if positive else None) for s, positive in stats.items())
    return Plan(ipos, cut, {}, reach, None, checks)


def check(plans: list[Plan]) -> Node:
    """One run-time check for the key blocks' plans (`Plan.checks`): cones that share values (dK's
    and dV's share the probabilities) must cut them alike, so one flag stands for all."""
    seen = list(dict.fromkeys(c for p in plans for c in p.checks))
    unsafe = bounds.safe([b for b, _, _ in seen], [dt for _, dt, _ in seen], [s for _, _, s in seen if s is not None])
    LATE.add(unsafe)
    return unsafe


def _reach_down(cond: Node, i: int, j: int, rows: int, block: int) -> int:
    """The least `reach` with cond false at every (flipped) query row j >= size - nb * block +
    reach of key block nb (i the keys, blocked); a key no row keeps needs none."""
    plane = _plane(cond, i, j, rows)
    size = plane.shape[1]
    last = np.where(plane.any(axis=1), size - 1 - np.argmax(plane[:, ::-1], axis=1), -1)
    nb = rows // block
    lastb = last.reshape(nb, block).max(axis=1)
    reach = int((lastb + 1 - size + np.arange(nb) * block).max())
    if reach >= (nb - 1) * block:  # (no block leaves a row out)
        raise No
    return reach
