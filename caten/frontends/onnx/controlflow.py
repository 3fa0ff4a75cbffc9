"""ONNX control flow: If, Loop and Scan.

Each becomes caten's run-time form (loops.py): an If with a run-time condition an `(if ...)`
that runs only the taken branch, a Loop a `while` (or a `scan` when it has scan outputs), a
Scan a `scan`, each body written once. An If whose condition is a constant (or a value the caller
specialized) imports its taken branch only. What the run-time forms cannot express (a sequence
carried through a loop, a carried value changing shape, scan outputs of a run-time length) is
unrolled here when the trip count and condition fold at import, one copy of the body per
iteration, as before the forms existed; otherwise it is refused with the run-time path's reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.onnx import loops
from caten.frontends.onnx.loopform import restore, snapshot
from caten.frontends.onnx.node import N, handler
from caten.frontends.onnx.subgraph import IMPURE, SERIAL, alias, inline, known, subgraphs
from caten.frontends.onnx.types import Unsupported

__all__: list[str] = []

MAX_UNROLL = 1024  # iterations unrolled at most: a longer loop would be a huge program
HINT = ("what caten's run-time loops cannot express is unrolled, which needs the trip count and condition "
        "known at import (issue #40)")


def _static(n: N, name: str) -> list:
    """The shape of `name`, every dim a number or a dim symbol (an unrolled axis must be a number)."""
    s = n.g.shape(name)
    if s is None or any(d is None for d in s):
        raise Unsupported(f"{n.where}: needs the shape of `{name}` (got {s})", hint=HINT)
    return s


def _steps(n: N, d: Any) -> int:
    if not isinstance(d, int):
        raise Unsupported(f"{n.where}: needs a static length to unroll (got {d})", hint=HINT)
    return d


def _stack(g: Any, names: list[str], axis: int, where: str) -> str:
    """Stack same-shaped values along a new axis (caten text)."""
    if not names:
        raise Unsupported(f"{where}: a scan output of zero iterations has no known shape", hint=HINT)
    parts = " ".join(f"(unsqueeze {g.tensor(v)} {axis})" for v in names)
    return f"(concat {parts} :axis {axis})"


def _take(g: Any, x: str, shape: list, axis: int, i: int) -> str:
    """Element i of `x` along `axis`, that axis dropped (caten text)."""
    specs = " ".join(f"[0 {g.dim_text(shape[k])} 1]" for k in range(axis)) + f" [{i} {i + 1} 1]"
    return f"(squeeze (slice {g.tensor(x)} {specs}) {axis})"


def _fresh_value(g: Any, expr: str, dt: str | None, shape: list | None) -> str:
    """Emit `expr` as a new ONNX-level value (typed), returning its name."""
    name = f"cf#{next(SERIAL)}"
    g.emit(expr, name)
    g.types[name] = (dt, shape)
    return name


# ---- If ---------------------------------------------------------------------------------------
def _impure(graph: Any) -> bool:
    return any(node.op_type in IMPURE or any(_impure(s) for a in node.attribute for s in subgraphs(a))
               for node in graph.node)


@handler("If")
def _if(n: N) -> list[None]:
    g, node = n.g, n.node
    then_b, else_b = n.a("then_branch"), n.a("else_branch")
    c = known(g, node.input[0], node)
    if c is not None:
        taken = then_b if bool(np.asarray(c).reshape(-1)[0]) else else_b
        for o, inner in zip(node.output, inline(g, taken, [], n.where)):
            if o:
                alias(g, o, inner)
        return [None] * len(node.output)
    if _impure(then_b) or _impure(else_b):
        raise Unsupported(f"{n.where}: a run-time condition over branches with random ops", hint=HINT)
    loops.run_if(n)
    return [None] * len(node.output)


def _runtime_first(n: N, runtime: Any, unroll: Any) -> list[None]:
    """The run-time form; where it is refused, the import-time unrolling (which folds loops whose
    counts are constants), and where both are refused the run-time form's reason. A body with
    random ops is only unrolled (each iteration draws its own numbers)."""
    if _impure(n.a("body")):
        return unroll()
    snap = snapshot(n.g)
    try:
        runtime()
        return [None] * len(n.node.output)
    except Unsupported as e:
        restore(n.g, snap)
        try:
            return unroll()
        except Unsupported:
            why = e.message if e.message.startswith(n.where) else f"{n.where} as a run-time loop: {e.message}"
            raise Unsupported(why, hint=e.hint or HINT) from None


# ---- Loop -------------------------------------------------------------------------------------
def _scalar(v: np.ndarray) -> Any:
    return np.asarray(v).reshape(-1)[0]


@handler("Loop")
def _loop(n: N) -> list[None]:
    return _runtime_first(n, lambda: loops.run_loop(n), lambda: _unroll_loop(n))


def _unroll_loop(n: N) -> list[None]:
    g, node = n.g, n.node
    body = n.a("body")
    trip = None
    if n.has(0):
        m = known(g, node.input[0], node)
        if m is None:
            raise Unsupported(f"{n.where}: its trip count is known only at run time", hint=HINT)
        trip = int(_scalar(m))
    cond: Any = True
    if n.has(1):
        c = known(g, node.input[1], node)
        if c is None:
            raise Unsupported(f"{n.where}: its initial condition is known only at run time", hint=HINT)
        cond = bool(_scalar(c))
    if trip is None and not n.has(1):
        raise Unsupported(f"{n.where}: a loop without trip count or condition never ends")
    carried = list(node.input[2:])
    k = len(carried)
    n_scan = len(body.output) - 1 - k
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    i = 0
    while cond and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise Unsupported(f"{n.where}: more than {MAX_UNROLL} iterations to unroll", hint=HINT)
        binds = [("const", np.array(i, np.int64)), ("const", np.array(cond))] + [("value", v) for v in carried]
        outs = inline(g, body, binds, n.where)
        c = known(g, outs[0], node)
        if c is None:
            raise Unsupported(f"{n.where}: its condition is computed at run time", hint=HINT)
        cond = bool(_scalar(c))
        carried = outs[1:1 + k]
        for j, v in enumerate(outs[1 + k:]):
            scans[j].append(v)
        i += 1
    for o, v in zip(node.output[:k], carried):
        if o:
            alias(g, o, v)
    for j, o in enumerate(node.output[k:]):
        if not o:
            continue
        if not scans[j]:
            raise Unsupported(f"{n.where}: a scan output of zero iterations has no known shape", hint=HINT)
        s = g.shape(scans[j][0])
        if any(g.shape(v) != s for v in scans[j]):
            raise Unsupported(f"{n.where}: scan output `{o}` changes shape between iterations")
        g.emit(_stack(g, scans[j], 0, n.where), o)
        g.types[o] = (g.dtype(scans[j][0]), None if s is None else [len(scans[j])] + s)
    return [None] * len(node.output)


# ---- Scan -------------------------------------------------------------------------------------
def _scan_run(n: N, states: list[str], xs: list[str], axes: list[int], rev: list[int],
              out_axes: list[int], out_rev: list[int]) -> tuple[list[str], list[str]]:
    """Unroll one scan (no batch axis): final states and the stacked scan outputs (ONNX names)."""
    g, body = n.g, n.a("body")
    shapes = [_static(n, x) for x in xs]
    lens = {s[a] for s, a in zip(shapes, axes)}
    if len(lens) != 1:
        raise n.fail(f"its scan inputs have different sequence lengths {sorted(lens)}")
    steps = _steps(n, lens.pop()) if lens else 0
    if steps > MAX_UNROLL:
        raise Unsupported(f"{n.where}: more than {MAX_UNROLL} steps to unroll", hint=HINT)
    per: list[list[str]] = []
    for t in range(steps):
        elems = []
        for x, s, a, r in zip(xs, shapes, axes, rev):
            idx = steps - 1 - t if r else t
            ds = g.dtype(x)
            elems.append(_fresh_value(g, _take(g, x, s, a, idx), ds, s[:a] + s[a + 1:]))
        outs = inline(g, body, [("value", v) for v in states + elems], n.where)
        states = outs[:len(states)]
        per.append(outs[len(states):])
    stacked = []
    n_out = len(body.output) - len(states)
    for j in range(n_out):
        vals = [p[j] for p in per]
        if out_rev[j]:
            vals = vals[::-1]
        if not vals:
            raise Unsupported(f"{n.where}: a scan of zero steps", hint=HINT)
        s = g.shape(vals[0])
        if s is None or any(g.shape(v) != s for v in vals):
            raise n.fail("its scan outputs change shape between steps")
        a = out_axes[j] % (len(s) + 1)
        stacked.append(_fresh_value(g, _stack(g, vals, a, n.where), g.dtype(vals[0]),
                                    s[:a] + [len(vals)] + s[a:]))
    return states, stacked


@handler("Scan")
def _scan(n: N) -> list[None]:
    m = n.a("num_scan_inputs")
    if n.opset_lt(9):
        _full_lengths(n, m)
        rev8 = n.a("directions", [0] * m)
        return _runtime_first(n, lambda: loops.run_scan8(n, m, rev8), lambda: _scan8(n, m))
    _, _, axes, rev, out_axes, out_rev = _scan_attrs(n, m)
    return _runtime_first(n, lambda: loops.run_scan(n, axes, rev, out_axes, out_rev, m), lambda: _unroll_scan(n, m))


def _scan_attrs(n: N, m: int) -> tuple[list[str], list[str], list[int], list[int], list[int], list[int]]:
    """A Scan's states and scanned inputs, and its axes and directions (inputs', then outputs')."""
    ins = list(n.node.input)
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    ranks = [len(_static(n, x)) for x in xs]
    axes = [a % r for a, r in zip(n.a("scan_input_axes", [0] * m), ranks)]
    n_out = len(n.node.output) - len(states)
    return (states, xs, axes, n.a("scan_input_directions", [0] * m), n.a("scan_output_axes", [0] * n_out),
            n.a("scan_output_directions", [0] * n_out))


def _full_lengths(n: N, m: int) -> None:
    """Opset 8's sequence_lens must be the full length (shorter sequences are not supported)."""
    if n.has(0):
        xs = list(n.node.input[1:])[len(n.node.input) - 1 - m:]
        lens = np.asarray(n.c(0, "sequence_lens")).reshape(-1)
        shape = n.g.shape(xs[0]) if xs else None
        if shape is None or len(shape) < 2 or not np.all(lens == shape[1]):
            raise n.fail("sequence_lens shorter than the sequence axis are not supported")


def _unroll_scan(n: N, m: int) -> list[None]:
    g, node = n.g, n.node
    states, xs, axes, rev, out_axes, out_rev = _scan_attrs(n, m)
    fin, stacked = _scan_run(n, states, xs, axes, rev, out_axes, out_rev)
    for o, v in zip(node.output, fin + stacked):
        if o:
            alias(g, o, v)
    return [None] * len(node.output)


def _scan8(n: N, m: int) -> list[None]:
    """Opset 8's Scan unrolled: a leading batch axis, scanned per batch element."""
    g, node = n.g, n.node
    ins = list(node.input[1:])
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    shapes = [_static(n, x) for x in xs]
    batch = _steps(n, shapes[0][0] if shapes else _static(n, states[0])[0])
    rev = n.a("directions", [0] * m)
    n_out = len(node.output) - len(states)
    per_b: list[list[str]] = []
    for b in range(batch):
        st = [_fresh_value(g, _take(g, s, _static(n, s), 0, b), g.dtype(s), _static(n, s)[1:]) for s in states]
        xb = [_fresh_value(g, _take(g, x, sh, 0, b), g.dtype(x), sh[1:]) for x, sh in zip(xs, shapes)]
        fin, stacked = _scan_run(n, st, xb, [0] * m, rev, [0] * n_out, [0] * n_out)
        per_b.append(fin + stacked)
    for j, o in enumerate(node.output):
        if not o:
            continue
        vals = [p[j] for p in per_b]
        s = g.shape(vals[0])
        g.emit(_stack(g, vals, 0, n.where), o)
        g.types[o] = (g.dtype(vals[0]), None if s is None else [batch] + s)
    return [None] * len(node.output)
