"""ONNX If, Loop and Scan as caten's run-time forms: `(if ...)`, `while` and `scan`.

Each subgraph is lowered once, as the body of the form, over parameters for the values it
receives (loop-carried state, a slice, the iteration number), so the text does not grow with the
trip count and the trip count or condition may be known only at run time. What the forms cannot
express raises `Unsupported`: a sequence or optional carried through a loop (they exist only at
conversion time), a carried value whose shape changes between iterations, and a Loop's scan output
whose length would depend on a run-time trip count or condition; the caller (controlflow.py) then
keeps the import-time unrolling, which folds such loops when their counts are constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.onnx import loopform as L
from caten.frontends.onnx.node import N
from caten.frontends.onnx.subgraph import inline, known
from caten.frontends.onnx.types import Unsupported


def _typed(g: Any, var: str, like: str) -> str:
    """A body parameter typed as the enclosing value `like`."""
    return L.param(g, var, g.dtype(like), g.shape(like))


def _tensors(g: Any, names: list[str], where: str) -> list[str]:
    """The caten variables of a body's outputs (a sequence or optional cannot leave a run-time body)."""
    for v in names:
        if v in g.seqs or v in g.opts:
            raise Unsupported(f"{where}: its body gives a sequence or optional, which exist only at import",
                              hint=L.HINT)
    return [g.tensor(v) for v in names]


def _scalar(g: Any, name: str) -> str:
    return f"(reshape {g.tensor(name)} [])"


# ---- If ---------------------------------------------------------------------------------------
def run_if(n: N) -> None:
    """`(if c THEN ELSE)`: only the taken branch runs; both give the same dtypes and shapes."""
    g, node = n.g, n.node
    sides: list[list[tuple]] = []

    def side(graph: Any) -> Any:
        def build() -> list[str]:
            outs = inline(g, graph, [], n.where)
            sides.append([(g.dtype(o), g.shape(o)) for o in outs])
            return _tensors(g, outs, n.where)
        return build

    outs = L.branch(g, _scalar(g, node.input[0]), side(n.a("then_branch")), side(n.a("else_branch")))
    for k, o in enumerate(node.output):
        (dt, st), (de, se) = sides[0][k], sides[1][k]
        L.check_same(n.where, f"output `{o}` (then vs else branch)", (dt, st), (de, se))
        if o:
            g.names[o] = outs[k]
            outer = g.types.get(o, (None, None))
            g.types[o] = (dt or de, outer[1] if outer[1] is not None and st is None else (st or se))


# ---- Loop -------------------------------------------------------------------------------------
def _passes_cond(body: Any) -> bool:
    """Whether the body's condition output is its condition input (or a constant true): the loop
    then runs exactly its trip count."""
    out, cin = body.output[0].name, body.input[1].name
    while out != cin:
        node = next((nd for nd in body.node if out in nd.output), None)
        if node is None:
            init = next((i for i in body.initializer if i.name == out), None)
            if init is None:
                return False
            from onnx import numpy_helper
            return bool(np.all(numpy_helper.to_array(init)))
        if node.op_type == "Identity":
            out = node.input[0]
            continue
        if node.op_type == "Constant":
            from onnx import helper, numpy_helper
            a = node.attribute[0]
            return a.name == "value" and bool(np.all(numpy_helper.to_array(helper.get_attribute_value(a))))
        return False
    return True


def run_loop(n: N) -> None:
    """A Loop with a trip count M and/or condition known at run time: `while` over (i, cond,
    carried...). With scan outputs, a `scan` over `(arange M)`: M must be known here and the
    condition must pass through unchanged, or the outputs' length would depend on run-time data."""
    g, node = n.g, n.node
    body = n.a("body")
    carried = list(node.input[2:])
    k = len(carried)
    if any(v in g.seqs or v in g.opts for v in carried):
        raise Unsupported(f"{n.where}: it carries a sequence or optional, which exist only at import", hint=L.HINT)
    n_scan = len(body.output) - 1 - k
    if n_scan:
        return _loop_scan(n, body, carried, n_scan)
    if not n.has(0) and not n.has(1):
        raise n.fail("a loop without trip count or condition never ends")
    one = lambda v: g.emit(f"(full [] {v} :dtype i64)")  # noqa: E731
    trip = _scalar(g, node.input[0]) if n.has(0) else None
    init = [one(0), g.emit(_scalar(g, node.input[1])) if n.has(1) else g.emit("(full [] true :dtype bool)")]
    init += [g.tensor(v) for v in carried]
    m = g.emit(trip) if trip is not None else None

    def cond(s: list[str]) -> str:
        if m is None:
            return s[1]
        return f"(< {s[0]} {m})" if not n.has(1) else f"(and (< {s[0]} {m}) {s[1]})"

    def step(s: list[str]) -> list[str]:
        binds = [("value", L.param(g, s[0], "i64", [])), ("value", L.param(g, s[1], "bool", []))]
        binds += [("value", _typed(g, sv, v)) for sv, v in zip(s[2:], carried)]
        outs = inline(g, body, binds, n.where)
        for v, o in zip(carried, outs[1:]):
            L.check_same(n.where, f"loop-carried `{v}`", (g.dtype(v), g.shape(v)), (g.dtype(o), g.shape(o)))
        vs = _tensors(g, outs, n.where)
        return [g.emit(f"(+ {s[0]} 1)"), g.emit(f"(reshape {vs[0]} [])")] + vs[1:]

    fin = L.while_loop(g, init, cond, step)
    for o, v, src in zip(node.output, fin[2:], carried):
        if o:
            g.names[o] = v
            if g.types.get(o, (None, None))[1] is None:
                g.types[o] = (g.dtype(src), g.shape(src))


def _shape_dims(g: Any, name: str, depth: int = 0) -> list | None:
    """The dims an integer value is made of when it is read off shapes (Shape, Gather or Slice
    of it, through Squeeze/Unsqueeze/Reshape/Cast/Identity): a trip count known from a dim symbol."""
    c = g.consts.get(name)
    if c is not None:
        return [int(v) for v in np.asarray(c).reshape(-1)]
    node = g.producer.get(name)
    if node is None or depth > 16:
        return None
    op, ins = node.op_type, list(node.input)
    if op == "Shape":
        s = g.shape(ins[0])
        attrs = {a.name: a.i for a in node.attribute}
        return None if s is None else s[attrs.get("start", 0):attrs.get("end", len(s))]
    if op in ("Squeeze", "Unsqueeze", "Reshape", "Cast", "Identity"):
        return _shape_dims(g, ins[0], depth + 1)
    if op == "Gather" and ins[1] in g.consts:
        dims = _shape_dims(g, ins[0], depth + 1)
        return None if dims is None else [dims[int(k)] for k in np.asarray(g.consts[ins[1]]).reshape(-1)]
    return None


def _trip_dim(n: N) -> Any:
    """The Loop's trip count as a dim (a number or a dim symbol), or None."""
    if not n.has(0):
        return None
    m = known(n.g, n.node.input[0], n.node)
    if m is not None:
        return max(int(np.asarray(m).reshape(-1)[0]), 0)  # a negative count runs no iteration
    dims = _shape_dims(n.g, n.node.input[0])
    return dims[0] if dims is not None and len(dims) == 1 and dims[0] is not None else None


def _loop_scan(n: N, body: Any, carried: list[str], n_scan: int) -> None:
    g, node = n.g, n.node
    m = _trip_dim(n)
    c0 = known(g, node.input[1], node) if n.has(1) else np.array(True)
    if m is None or c0 is None or not bool(np.asarray(c0).reshape(-1)[0]) or not _passes_cond(body):
        raise Unsupported(f"{n.where}: its scan outputs' length would depend on a trip count or condition "
                          "known only at run time (a data-dependent output length)",
                          hint="caten's loops stack outputs over a length known when the program is built (issue #40)")
    idx = g.emit(f"(arange {g.dim_text(m)})")

    def step(cs: list[str], xs: list[str]) -> tuple[list[str], list[str]]:
        binds = [("value", L.param(g, xs[0], "i64", [])), ("const", np.array(True))]
        binds += [("value", _typed(g, cv, v)) for cv, v in zip(cs, carried)]
        outs = inline(g, body, binds, n.where)
        for v, o in zip(carried, outs[1:1 + len(carried)]):
            L.check_same(n.where, f"loop-carried `{v}`", (g.dtype(v), g.shape(v)), (g.dtype(o), g.shape(o)))
        scans.extend((g.dtype(o), g.shape(o)) for o in outs[1 + len(carried):])
        vs = _tensors(g, outs[1:], n.where)
        return vs[:len(carried)], vs[len(carried):]

    scans: list[tuple] = []
    fin, ys = L.scan(g, [g.tensor(v) for v in carried], [idx], step)
    for o, v, src in zip(node.output, fin, carried):
        if o:
            g.names[o] = v
            g.types[o] = (g.dtype(src), g.shape(src))
    for o, v, (dt, s) in zip(node.output[len(carried):], ys, scans):
        if o:
            g.names[o] = v
            g.types[o] = (dt, None if s is None else [m] + s)


# ---- Scan -------------------------------------------------------------------------------------
def _tail(s: list | None) -> list | None:
    return None if s is None else s[1:]


def _scan_core(n: N, states: list[str], xs: list[str], rev: list[int]) -> tuple[list[str], list[tuple]]:
    """One scan over axis 0 of each of `xs` (ONNX names, the scanned axis first); reversed inputs
    are flipped first. Returns the final states then the outputs stacked on axis 0 (caten
    variables), and the outputs' per-step types."""
    g, body = n.g, n.a("body")
    lens = {s[0] for s in map(g.shape, xs) if s and isinstance(s[0], int)}
    if len(lens) > 1:
        raise n.fail(f"its scan inputs have different sequence lengths {sorted(lens)}")
    moved = [g.emit(f"(flip {g.tensor(x)} :axis 0)") if r else g.tensor(x) for x, r in zip(xs, rev)]
    types: list[tuple] = []

    def step(cs: list[str], sl: list[str]) -> tuple[list[str], list[str]]:
        binds = [("value", _typed(g, cv, v)) for cv, v in zip(cs, states)]
        binds += [("value", L.param(g, v, g.dtype(x), _tail(g.shape(x)))) for v, x in zip(sl, xs)]
        outs = inline(g, body, binds, n.where)
        for v, o in zip(states, outs):
            L.check_same(n.where, f"state `{v}`", (g.dtype(v), g.shape(v)), (g.dtype(o), g.shape(o)))
        types.extend((g.dtype(o), g.shape(o)) for o in outs[len(states):])
        vs = _tensors(g, outs, n.where)
        return vs[:len(states)], vs[len(states):]

    fin, ys = L.scan(g, [g.tensor(v) for v in states], moved, step)
    return fin + ys, types


def run_scan(n: N, axes: list[int], rev: list[int], out_axes: list[int], out_rev: list[int], m: int) -> None:
    """Scan (opset 9+) as one `scan`: inputs moved to scan along axis 0, outputs moved back."""
    g, node = n.g, n.node
    ins = list(node.input)
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    moved = []
    for x, a in zip(xs, axes):
        s = g.shape(x)
        perm = [a] + [d for d in range(len(s)) if d != a]
        v = g.tensor(x) if a == 0 else g.emit(f"(permute {g.tensor(x)} [{' '.join(map(str, perm))}])")
        moved.append(L.param(g, v, g.dtype(x), [s[p] for p in perm]))
    T = next((g.shape(x)[0] for x in moved), None)
    vals, types = _scan_core(n, states, moved, rev)
    for j, o in enumerate(node.output):
        if not o:
            continue
        if j < len(states):
            g.names[o] = vals[j]
            g.types[o] = (g.dtype(states[j]), g.shape(states[j]))
            continue
        q = j - len(states)
        dt, s = types[q]
        v = vals[j]
        if out_rev[q]:
            v = g.emit(f"(flip {v} :axis 0)")
        rank = None if s is None else len(s) + 1
        a = out_axes[q] % rank if rank else 0
        if a:
            perm = list(range(1, a + 1)) + [0] + list(range(a + 1, rank))
            v = g.emit(f"(permute {v} [{' '.join(map(str, perm))}])")
        g.names[o] = v
        g.types[o] = (dt, None if s is None else s[:a] + [T] + s[a:])


def run_scan8(n: N, m: int, rev: list[int]) -> None:
    """Opset 8's Scan: a leading batch axis, each batch element scanned on its own (an outer
    `scan` over the batch around the inner one over the sequence)."""
    g, node = n.g, n.node
    ins = list(node.input[1:])
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    types: list[tuple] = []

    def per_batch(_: list[str], sl: list[str]) -> tuple[list[str], list[str]]:
        names = [L.param(g, v, g.dtype(x), _tail(g.shape(x))) for v, x in zip(sl, states + xs)]
        vals, ty = _scan_core(n, names[:len(states)], names[len(states):], rev)
        steps = (g.shape(names[len(states)]) or [None])[0] if xs else None
        types.extend([(g.dtype(v), g.shape(v)) for v in names[:len(states)]]
                     + [(dt, None if s is None else [steps] + s) for dt, s in ty])
        return [], vals

    _, ys = L.scan(g, [], [g.tensor(v) for v in states + xs], per_batch)
    batch = (g.shape((states + xs)[0]) or [None])[0]
    for o, v, (dt, s) in zip(node.output, ys, types):
        if o:
            g.names[o] = v
            g.types[o] = (dt, None if s is None else [batch] + s)
