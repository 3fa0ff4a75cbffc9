"""Reverse mode through loops and branches (LOOP and IF nodes, caten.ir.control).

A branch's gradient is a branch on the same condition whose sides are the gradients of the two
bodies (only the taken one runs). A loop with a trip count the shapes know (scan, fori over
dims) is differentiated as JAX does: the forward loop is run again stacking each trip's incoming
carries, then a reverse scan over (stacked carries, scanned inputs, the stacked outputs'
cotangents) carries the carries' cotangents and accumulates the captures', each trip the body's
own VJP at that trip's values (the body's intermediates are recomputed there, never stored).
`:checkpoint` loops store nothing per trip: each backward trip recomputes its carry from the
start (O(T^2) body runs for O(1) memory). A `while` (a data-dependent trip count) has no
reverse mode: a diagnostic, as JAX gives.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from caten.ir import build as B
from caten.ir import control as C
from caten.ir import dims as D
from caten.ir.graph import Node
from caten.ir.ops import Op

Vjp = Callable[..., list[Node]]
_ids = itertools.count()


class ControlGradError(Exception):
    """A loop whose gradient does not exist here (the caller's GradError)."""


def _holders(nodes: Sequence[Node], tag: str) -> list[Node]:
    uid = next(_ids)
    return [Node.make(Op.BUFFER, n.dtype, n.shape, (), (n.dtype, -1 - j, f"%ctl{uid}.{tag}{j}"))
            for j, n in enumerate(nodes)]


def _body_vjp(body: C.Body, cts: Sequence[Node | None], vjp: Vjp, custom: Mapping) -> tuple[list[Node], list[Node],
                                                                                          list[Node]]:
    """The body renamed onto fresh holders P (its parameters') and R (the live cotangents'), and
    d(sum <outputs, R>)/dP. Returns (P, R, grads)."""
    P = _holders(body.params, "p")
    outs = C._substitute(list(body.outputs), dict(zip(body.params, P)))
    live = [k for k, c in enumerate(cts) if c is not None]
    R = _holders([outs[k] for k in live], "r")
    if not live:
        return P, R, [B.const(0, p.dtype, p.shape) for p in P]
    return P, R, vjp([outs[k] for k in live], R, P, custom)


def vjp_branch(n: Node, cts: dict[int, Node], vjp: Vjp, custom: Mapping) -> list[Node | None]:
    spec: C.Branch = n.arg[0]
    ops = n.src[1:]
    want = [i for i, x in enumerate(ops) if x.dtype.is_float]
    if not want:
        return [None] * len(n.src)
    full = [cts.get(k) for k in range(spec.n_outputs)]

    def side(body: C.Body) -> Callable[[], list[Node]]:
        def build() -> list[Node]:
            P, R, grads = _body_vjp(body, full, vjp, custom)
            env = dict(zip(P, ops)) | dict(zip(R, [c for c in full if c is not None]))
            return C._substitute([grads[i] for i in want], env)
        return build

    got = C.branch(n.src[0], side(spec.then), side(spec.other), what="the gradient of an if")
    out: list[Node | None] = [None] * len(n.src)
    for i, g in zip(want, got):
        out[1 + i] = g
    return out


def vjp_loop(n: Node, cts: dict[int, Node], vjp: Vjp, custom: Mapping) -> list[Node | None]:
    spec: C.Loop = n.arg[0]
    if spec.runtime_trips or spec.trips is None:
        raise ControlGradError("reverse mode through a loop whose trip count is known only at run time (a while, "
                               "or runtime bounds) is not defined (as in JAX); use fori over dims or scan")
    nc, ncap, nx = spec.carries, spec.captures, spec.xs
    ops = list(n.src)
    init, caps, xs = ops[:nc], ops[nc:nc + ncap], ops[nc + ncap:nc + ncap + nx]
    body = spec.body
    fc = [k for k in range(nc) if init[k].dtype.is_float]  # carries with cotangents
    fcap = [k for k in range(ncap) if caps[k].dtype.is_float]
    fx = [k for k in range(nx) if xs[k].dtype.is_float]
    if not (fc or fcap or fx):
        return [None] * len(ops)
    # the carry each trip starts from, stacked: the forward loop once more, its carries as extra ys
    stacked = _stacked_carries(n, spec) if not spec.checkpoint else None
    out_cts = [cts.get(k) for k in range(spec.n_outputs)]
    ct_final = [out_cts[k] if out_cts[k] is not None else B.const(0, init[k].dtype, init[k].shape) for k in fc]
    ct_ys = [(k, out_cts[nc + k]) for k in range(spec.n_ys) if out_cts[nc + k] is not None]
    body_cts: list[Node | None] = [B.const(0, body.outputs[k].dtype, body.outputs[k].shape) if k in fc else None
                                   for k in range(nc)] + [None] * spec.n_ys
    for k, _ in ct_ys:
        body_cts[nc + k] = body.outputs[nc + k]  # (a placeholder: live)
    for k in fc:
        body_cts[k] = body.outputs[k]
    P, R, grads = _body_vjp(body, body_cts, vjp, custom)
    # the forward values the backward body reads (an activation's output, a gate): stored by the
    # forward loop per trip, not recomputed (`:checkpoint`: recomputed, nothing stored)
    res = [] if spec.checkpoint else _residuals(grads, P[:nc] + P[nc + ncap:], R, spec.index)
    if res:
        stacked = _stacked_carries(n, spec, C._substitute(res, dict(zip(P, body.params))))
    live = [k for k, c in enumerate(body_cts) if c is not None]  # R's order
    r_of = dict(zip(live, R))
    idx = spec.index
    T = spec.trips

    def bwd(carry: list[Node], xp: list[Node], j: Node) -> tuple[list[Node], list[Node]]:
        ct_c = carry[:len(fc)]
        acc = carry[len(fc):]
        at = 0
        if stacked is not None:
            c_t, at = xp[:nc], nc + len(res)
        else:
            c_t = _recompute(spec, init, caps, xs, j)
        x_t = xp[at:at + nx]
        cy = xp[at + nx:]
        env: dict[Node, Node] = dict(zip(P[:nc], c_t)) | dict(zip(P[nc:nc + ncap], caps)) \
            | dict(zip(P[nc + ncap:], x_t)) | dict(zip(res, xp[nc:nc + len(res)]))
        for k, c in zip(fc, ct_c):
            env[r_of[k]] = c
        for (k, _), c in zip(ct_ys, cy):
            env[r_of[nc + k]] = c
        g = C._substitute(grads, env)
        # the forward counter at this trip: start + (T - 1 - j) (the backward loop counts up)
        g = C.substitute_dims(g, {idx: D.add(spec.start, D.add(D.add(T, -1), D.mul(D.sym(idx), -1)))})
        nxt = [g[k] for k in fc] + [B.alu(Op.ADD, a, g[nc + k]) for a, k in zip(acc, fcap)]
        return nxt, [g[nc + ncap + k] for k in fx]

    scanned = (list(stacked) if stacked is not None else []) + xs + [c for _, c in ct_ys]
    start0 = [B.const(0, caps[k].dtype, caps[k].shape) for k in fcap]
    res = C.loop(ct_final + start0, bwd, None, 0, T, scanned, reverse=not spec.reverse,
                 what="the gradient of a loop") \
        if scanned else _no_scan(ct_final + start0, bwd, T)
    out: list[Node | None] = [None] * len(ops)
    for j, k in enumerate(fc):
        out[k] = res[j]
    for j, k in enumerate(fcap):
        out[nc + k] = res[len(fc) + j]
    for j, k in enumerate(fx):
        out[nc + ncap + k] = res[len(fc) + len(fcap) + j]
    return out


def _no_scan(init: list[Node], bwd: Callable, T: D.Dim) -> list[Node]:
    """A checkpointed loop with nothing scanned: count the trips backward by the counter alone."""
    return C.loop(init, lambda c, xs, j: bwd(c, [], j), None, 0, T, what="the gradient of a loop")


def _stacked_carries(n: Node, spec: C.Loop, residuals: Sequence[Node] = ()) -> list[Node]:
    """The forward loop with each trip's incoming carries (and the `residuals`, values of its body)
    as extra stacked results."""
    nc = spec.carries
    extra = tuple(spec.body.params[:nc]) + tuple(residuals)
    body = C.Body(spec.body.params, spec.body.outputs + extra)
    aug = C.Loop(nc, spec.captures, spec.xs, spec.index, spec.start, spec.end, spec.end_operand, spec.trips,
                 None, body, spec.reverse, False)
    k0 = aug.n_outputs - len(extra)
    return [Node.make(Op.LOOP, *aug.out_spec(k), n.src, (aug, k)) for k in range(k0, aug.n_outputs)]


def _residuals(grads: Sequence[Node], per_trip: Sequence[Node], R: Sequence[Node], index: str) -> list[Node]:
    """The values of a body's forward pass its gradient reads: nodes that depend on a per-trip
    parameter (a carry, a slice, the counter) but on no cotangent, read by one that does (through
    views: the view's source is stored). What depends on captures alone is the same every trip
    (not stored); parameters themselves are stored already (the carries) or scanned."""
    from caten.ir.graph import toposort

    order = toposort(list(grads))
    trip, cot = set(per_trip), set(R)
    dp: dict[Node, bool] = {}
    dr: dict[Node, bool] = {}
    for x in order:
        counter = x.op is Op.CONST and isinstance(x.arg, D.DimExpr) and index in D.free_syms(x.arg)
        dp[x] = x in trip or counter or any(dp[s] for s in x.src)
        dr[x] = x in cot or any(dr[s] for s in x.src)
    out: list[Node] = []
    for x in order:
        if not dr[x]:
            continue
        for s in x.src:
            while s.op is Op.VIEW and not dr[s]:
                s = s.src[0]
            if dp[s] and not dr[s] and s.op not in (Op.BUFFER, Op.CONST, Op.INDEX, Op.VIEW) and s not in out:
                out.append(s)
    return out


def _recompute(spec: C.Loop, init: list[Node], caps: list[Node], xs: list[Node], j: Node) -> list[Node]:
    """The carries entering forward trip T-1-j, recomputed from the start (:checkpoint)."""
    T = spec.trips
    stop = D.add(D.add(T, -1), D.mul(j.arg, -1))  # trips to run: T - 1 - j
    nc = spec.carries

    def fwd(c: list[Node], xp: list[Node], i: Node) -> tuple[list[Node], list[Node]]:
        x_t = [_take(x, i, spec) for x in xs]
        env = dict(zip(spec.body.params, list(c) + list(caps) + x_t))
        outs = C._substitute(list(spec.body.outputs[:nc]), env)
        return C.substitute_dims(outs, {spec.index: D.add(spec.start, i.arg)}), []

    return C.loop(init, fwd, None, 0, stop, what="a checkpointed loop's recomputation")


def _take(x: Node, i: Node, spec: C.Loop) -> Node:
    """Slice i (counted from the start; from the end for a reversed loop) of scanned tensor x."""
    pos = i.arg if not spec.reverse else D.add(D.add(spec.trips, -1), D.mul(i.arg, -1))
    return B.reshape(B.shrink(x, [(pos, D.add(pos, 1))] + [(0, d) for d in x.shape[1:]]), x.shape[1:])
