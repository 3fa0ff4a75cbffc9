"""ONNX control flow decided at conversion time: If, Loop and Scan.

caten's language has no run-time branch or loop yet (issue #40), so a subgraph is imported when
what it does is known here, which is exact: an If whose condition is a constant (or a value the
caller specialized) imports its taken branch only, and otherwise both branches, selected with
`where`; a Loop with a known trip count (or a condition that folds each iteration) and a Scan
over static sequence lengths are unrolled, one copy of the body per iteration. The rest is
refused with a diagnostic naming issue #40.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from caten.frontends.onnx.node import N, handler
from caten.frontends.onnx.types import Unsupported

__all__: list[str] = []

MAX_UNROLL = 1024  # iterations unrolled at most: a longer loop would be a huge program
HINT = "run-time loops and branches are issue #40; until then the trip count and condition must be known at import"
_serial = itertools.count()
_IMPURE = ("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial")


def _defined(graph: Any, out: set[str]) -> set[str]:
    """Every value name a subgraph (and its nested subgraphs) defines."""
    out.update(v.name for v in graph.input)
    out.update(i.name for i in graph.initializer)
    for node in graph.node:
        out.update(o for o in node.output if o)
        for a in node.attribute:
            for sub in _subgraphs(a):
                _defined(sub, out)
    return out


def _subgraphs(a: Any) -> list[Any]:
    import onnx

    if a.type == onnx.AttributeProto.GRAPH:
        return [a.g]
    if a.type == onnx.AttributeProto.GRAPHS:
        return list(a.graphs)
    return []


def _rename(graph: Any, ren: dict[str, str]) -> None:
    """Rename in place every reference to a name in `ren` (nested subgraphs included)."""
    r = lambda s: ren.get(s, s) if s else s  # noqa: E731
    for v in itertools.chain(graph.input, graph.output, graph.value_info):
        v.name = r(v.name)
    for i in graph.initializer:
        i.name = r(i.name)
    for node in graph.node:
        node.input[:] = [r(s) for s in node.input]
        node.output[:] = [r(s) for s in node.output]
        for a in node.attribute:
            for sub in _subgraphs(a):
                _rename(sub, ren)


def inline(g: Any, graph: Any, binds: list[tuple[str, Any]], where: str) -> list[str]:
    """Lower a copy of subgraph `graph` into the current composite, its values renamed apart.

    binds[i] feeds formal input i: ("value", an ONNX name of the enclosing scope) or
    ("const", an ndarray known here). Returns the (renamed) names of the subgraph's outputs."""
    import onnx
    from onnx import numpy_helper

    from caten.frontends.onnx.translate import lower_node

    if len(binds) != len(graph.input):
        raise Unsupported(f"{where}: its subgraph takes {len(graph.input)} inputs, {len(binds)} given")
    sub = onnx.GraphProto()
    sub.CopyFrom(graph)
    prefix = f"{graph.name or 'sub'}#{next(_serial)}/"
    _rename(sub, {s: prefix + s for s in _defined(sub, set())})
    for init in sub.initializer:
        g.set_const(init.name, numpy_helper.to_array(init))
    for vi, (kind, v) in zip(sub.input, binds):
        if kind == "const":
            g.set_const(vi.name, np.asarray(v))
        else:
            _alias(g, vi.name, v)
    for node in sub.node:
        for o in node.output:
            if o:
                g.producer[o] = node
        if not (_fold_shape_split(g, node) or _fold_int_node(g, node) or _expand_node(g, node, where)):
            lower_node(g, node)
    return [vo.name for vo in sub.output]


def _expand_node(g: Any, node: Any, where: str) -> bool:
    """A body node without a lowering but with an ONNX function body becomes that body, as at the
    top level (expand.py), lowered like one more subgraph."""
    import onnx
    from onnx import helper

    from caten.frontends.onnx.expand import expand
    from caten.frontends.onnx.handlers import supported_ops

    sup = supported_ops()
    if node.op_type in sup or node.domain not in ("", "ai.onnx"):
        return False
    ins = [i for i in dict.fromkeys(node.input) if i]
    if any(g.code(i) is None for i in ins):
        return False

    def type_of(name: str) -> Any:
        c, s = g.code(name), g.shape(name)
        dims = None if s is None else [d if isinstance(d, int) else None for d in s]
        return None if c is None else helper.make_tensor_type_proto(c, dims)

    one = onnx.NodeProto()
    one.CopyFrom(node)
    vis = [helper.make_value_info(i, type_of(i)) for i in ins]
    outs = [o for o in node.output if o]
    m = helper.make_model(helper.make_graph([one], "expand", vis, [helper.make_empty_tensor_value_info(o)
                                                                   for o in outs]),
                          opset_imports=list(g.model.opset_import))
    m.ir_version = g.model.ir_version
    if not expand(m, g.opset, sup, type_of):
        return False
    for o, v in zip(outs, inline(g, m.graph, [("value", i) for i in ins], where)):
        _alias(g, o, v)
    return True


def _fold_shape_split(g: Any, node: Any) -> bool:
    """Fold a Split of integer shape data (AffineGrid's body splits its `size` operand) into
    constants, so the dims it yields are known where they decide shapes."""
    if node.op_type != "Split" or not node.input or g.dtype(node.input[0]) not in ("i64", "i32"):
        return False
    src = node.input[0]
    if src not in g.consts and src not in g.available:
        return False
    shape = g.shape(src)
    if shape is None or len(shape) != 1:
        return False
    outs = [_evaluate(g, o) for o in node.output if o]
    return all(v is not None for v in outs)


def _fold_int_node(g: Any, node: Any) -> bool:
    """Fold a body node over constants whose results are integers (index arithmetic on the unrolled
    iteration number, which the importer's folding may not know) with onnx's reference."""
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from caten.frontends.onnx import fold

    present = [i for i in node.input if i]
    if (not present or node.op_type in _IMPURE or not all(i in g.consts and g.consts[i].size <= 4096 for i in present)
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
        return False
    if fold.try_fold(g, node):
        return True
    try:
        inits = [numpy_helper.from_array(g.consts[i], i) for i in dict.fromkeys(present)]
        outs = [o for o in node.output if o]
        m = helper.make_model(helper.make_graph([node], "fold", [], [helper.make_empty_tensor_value_info(o)
                                                                    for o in outs], inits),
                              opset_imports=list(g.model.opset_import))
        vals = [np.asarray(v) for v in ReferenceEvaluator(m).run(None, {})]
    except Exception:  # the reference cannot evaluate it: caten lowers it
        return False
    if any(v.dtype.kind not in "biu" or v.size > 4096 for v in vals):
        return False
    for o, v in zip(outs, vals):
        g.consts[o] = v
    return True


def _alias(g: Any, name: str, src: str) -> None:
    """Make ONNX value `name` the same value as `src` (a constant stays a constant; sequences and
    optionals too, through the graph's `bind`)."""
    if not any(src in m for m in (g.seqs, g.opts, g.consts, g.names)):
        g.tensor(src)  # a weight not used yet, or the diagnostic of a value never computed
    known = g.types.get(name)
    g.bind(name, src)
    if known is not None and known[1] is not None and g.shape(name) is None:
        g.types[name] = known


def _const_or_none(g: Any, name: str, node: Any) -> np.ndarray | None:
    """The value of `name` if it is known at conversion time, else None."""
    try:
        return g.const(name, "condition", node)
    except Unsupported:
        return _evaluate(g, name)


def _evaluate(g: Any, name: str, limit: int = 64) -> np.ndarray | None:
    """Evaluate `name` with onnx's reference from constants and specialized feeds (the few small
    nodes that compute a trip count or a condition), or None where it depends on other inputs."""
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    nodes: list[Any] = []
    leaves: dict[str, np.ndarray] = {}
    todo, seen = [name], set()
    while todo:
        v = todo.pop()
        if not v or v in seen:
            continue
        seen.add(v)
        if v in g.consts or v in g.available:
            leaves[v] = np.asarray(g.consts[v] if v in g.consts else g.available[v])
            continue
        node = g.producer.get(v)
        if node is None or len(nodes) >= limit or node.domain not in ("", "ai.onnx"):
            return None
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        if node not in nodes:
            nodes.append(node)
        todo.extend(node.input)
    if any(x.size > 4096 or x.dtype.kind not in "biuf" for x in leaves.values()):
        return None
    keep = _topo(nodes, set(leaves))
    if keep is None:
        return None
    try:
        m = helper.make_model(helper.make_graph(keep, "fold", [], [helper.make_empty_tensor_value_info(name)],
                                                [numpy_helper.from_array(x, k) for k, x in leaves.items()]),
                              opset_imports=list(g.model.opset_import))
        out = np.asarray(ReferenceEvaluator(m).run(None, {})[0])
    except Exception:  # the reference cannot evaluate it here: the value stays unknown
        return None
    for k in leaves:
        if k in g.available and k not in g.consts:
            g.static[k] = leaves[k]
    g.consts[name] = out
    return out


def _topo(nodes: list[Any], ready: set[str]) -> list[Any] | None:
    """The nodes in an order where each input is computed before it is used."""
    out, left, ready = [], list(nodes), set(ready)
    while left:
        nxt = [nd for nd in left if all(not i or i in ready for i in nd.input)]
        if not nxt:
            return None
        for nd in nxt:
            out.append(nd)
            ready.update(nd.output)
            left.remove(nd)
    return out


def _static(n: N, name: str) -> list[int]:
    s = n.g.shape(name)
    if s is None or not all(isinstance(d, int) for d in s):
        raise Unsupported(f"{n.where}: needs the static shape of `{name}` (got {s})", hint=HINT)
    return s


def _stack(g: Any, names: list[str], axis: int, where: str) -> str:
    """Stack same-shaped values along a new axis (caten text)."""
    if not names:
        raise Unsupported(f"{where}: a scan output of zero iterations has no known shape", hint=HINT)
    parts = " ".join(f"(unsqueeze {g.tensor(v)} {axis})" for v in names)
    return f"(concat {parts} :axis {axis})"


def _take(g: Any, x: str, shape: list[int], axis: int, i: int) -> str:
    """Element i of `x` along `axis`, that axis dropped (caten text)."""
    specs = " ".join(f"[0 {shape[k]} 1]" for k in range(axis)) + f" [{i} {i + 1} 1]"
    return f"(squeeze (slice {g.tensor(x)} {specs}) {axis})"


def _fresh_value(g: Any, expr: str, dt: str | None, shape: list | None) -> str:
    """Emit `expr` as a new ONNX-level value (typed), returning its name."""
    name = f"cf#{next(_serial)}"
    g.emit(expr, name)
    g.types[name] = (dt, shape)
    return name


# ---- If ---------------------------------------------------------------------------------------
def _impure(graph: Any) -> bool:
    return any(node.op_type in _IMPURE or any(_impure(s) for a in node.attribute for s in _subgraphs(a))
               for node in graph.node)


@handler("If")
def _if(n: N) -> list[None]:
    g, node = n.g, n.node
    then_b, else_b = n.a("then_branch"), n.a("else_branch")
    c = _const_or_none(g, node.input[0], node)
    if c is not None:
        taken = then_b if bool(np.asarray(c).reshape(-1)[0]) else else_b
        for o, inner in zip(node.output, inline(g, taken, [], n.where)):
            if o:
                _alias(g, o, inner)
        return [None] * len(node.output)
    if _impure(then_b) or _impure(else_b):
        raise Unsupported(f"{n.where}: a run-time condition over branches with random ops", hint=HINT)
    t_out, e_out = inline(g, then_b, [], n.where), inline(g, else_b, [], n.where)
    cond = f"(reshape {n.x(0)} [])"
    for o, t, e in zip(node.output, t_out, e_out):
        st, se = g.shape(t), g.shape(e)
        dt = g.dtype(t)
        if dt is None or dt != g.dtype(e) or st is None or st != se or not all(isinstance(d, int) for d in st):
            raise Unsupported(f"{n.where}: the condition is known only at run time and the branches' output "
                              f"`{o}` differ in dtype or shape ({dt}{st} vs {g.dtype(e)}{se})", hint=HINT)
        if o:
            g.emit(f"(where {cond} {g.tensor(t)} {g.tensor(e)})", o)
            g.types[o] = (dt, st)
    return [None] * len(node.output)


# ---- Loop -------------------------------------------------------------------------------------
def _scalar(v: np.ndarray) -> Any:
    return np.asarray(v).reshape(-1)[0]


@handler("Loop")
def _loop(n: N) -> list[None]:
    g, node = n.g, n.node
    body = n.a("body")
    trip = None
    if n.has(0):
        m = _const_or_none(g, node.input[0], node)
        if m is None:
            raise Unsupported(f"{n.where}: its trip count is known only at run time", hint=HINT)
        trip = int(_scalar(m))
    cond: Any = True
    if n.has(1):
        c = _const_or_none(g, node.input[1], node)
        if c is None:
            raise Unsupported(f"{n.where}: its initial condition is known only at run time", hint=HINT)
        cond = bool(_scalar(c))
    if trip is None and not n.has(1):
        raise Unsupported(f"{n.where}: a loop without trip count or condition never ends")
    carried = [s for s in node.input[2:]]
    k = len(carried)
    n_scan = len(body.output) - 1 - k
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    i = 0
    while cond and (trip is None or i < trip):
        if i >= MAX_UNROLL:
            raise Unsupported(f"{n.where}: more than {MAX_UNROLL} iterations to unroll", hint=HINT)
        binds = [("const", np.array(i, np.int64)), ("const", np.array(cond))] + [("value", v) for v in carried]
        outs = inline(g, body, binds, n.where)
        c = _const_or_none(g, outs[0], node)
        if c is None:
            raise Unsupported(f"{n.where}: its condition is computed at run time", hint=HINT)
        cond = bool(_scalar(c))
        carried = outs[1:1 + k]
        for j, v in enumerate(outs[1 + k:]):
            scans[j].append(v)
        i += 1
    for o, v in zip(node.output[:k], carried):
        if o:
            _alias(g, o, v)
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
    steps = lens.pop() if lens else 0
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
    g, node = n.g, n.node
    m = n.a("num_scan_inputs")
    if n.opset_lt(9):
        return _scan8(n, m)
    ins = list(node.input)
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    ranks = [len(_static(n, x)) for x in xs]
    axes = [a % r for a, r in zip(n.a("scan_input_axes", [0] * m), ranks)]
    rev = n.a("scan_input_directions", [0] * m)
    n_out = len(node.output) - len(states)
    out_axes = n.a("scan_output_axes", [0] * n_out)
    out_rev = n.a("scan_output_directions", [0] * n_out)
    fin, stacked = _scan_run(n, states, xs, axes, rev, out_axes, out_rev)
    for o, v in zip(node.output, fin + stacked):
        if o:
            _alias(g, o, v)
    return [None] * len(node.output)


def _scan8(n: N, m: int) -> list[None]:
    """Opset 8's Scan: a leading batch axis, scanned per batch element; sequence_lens must be full."""
    g, node = n.g, n.node
    ins = list(node.input[1:])
    states, xs = ins[:len(ins) - m], ins[len(ins) - m:]
    shapes = [_static(n, x) for x in xs]
    if n.has(0):
        lens = np.asarray(n.c(0, "sequence_lens")).reshape(-1)
        if shapes and not np.all(lens == shapes[0][1]):
            raise n.fail("sequence_lens shorter than the sequence axis are not supported")
    batch = shapes[0][0] if shapes else _static(n, states[0])[0]
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
