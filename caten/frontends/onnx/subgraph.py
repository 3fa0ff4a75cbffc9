"""Lowering an ONNX subgraph (a branch or loop body) into the current composite, once per use.

Each use renames every value the subgraph defines apart (`inline`), binds its inputs to values of
the enclosing scope or to constants, and lowers its nodes as the top level does (folded, expanded
to an ONNX function body, or through a handler). Index arithmetic on an unrolled iteration number
and the few nodes that decide a trip count or a condition are evaluated here, with onnx's
reference, from constants and specialized inputs: these values must be known at import.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from caten.frontends.onnx.types import Unsupported

SERIAL = itertools.count()
IMPURE = ("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial")


def _defined(graph: Any, out: set[str]) -> set[str]:
    """Every value name a subgraph (and its nested subgraphs) defines."""
    out.update(v.name for v in graph.input)
    out.update(i.name for i in graph.initializer)
    for node in graph.node:
        out.update(o for o in node.output if o)
        for a in node.attribute:
            for sub in subgraphs(a):
                _defined(sub, out)
    return out


def subgraphs(a: Any) -> list[Any]:
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
            for sub in subgraphs(a):
                _rename(sub, ren)


def inline(g: Any, graph: Any, binds: list[tuple[str, Any]], where: str) -> list[str]:
    """Lower a copy of subgraph `graph` into the current composite, its values renamed apart.

    binds[i] feeds formal input i: ("value", an ONNX name of the enclosing scope) or
    ("const", an ndarray known here). Returns the (renamed) names of the subgraph's outputs."""
    import onnx
    from onnx import numpy_helper

    if len(binds) != len(graph.input):
        raise Unsupported(f"{where}: its subgraph takes {len(graph.input)} inputs, {len(binds)} given")
    sub = onnx.GraphProto()
    sub.CopyFrom(graph)
    prefix = f"{graph.name or 'sub'}#{next(SERIAL)}/"
    _rename(sub, {s: prefix + s for s in _defined(sub, set())})
    for init in sub.initializer:
        g.set_const(init.name, numpy_helper.to_array(init))
    for vi, (kind, v) in zip(sub.input, binds):
        if kind == "const":
            g.set_const(vi.name, np.asarray(v))
        else:
            alias(g, vi.name, v)
    for node in sub.node:
        for o in node.output:
            if o:
                g.producer[o] = node
        if not (_fold_shape_split(g, node) or _fold_int_node(g, node) or _expand_node(g, node, where)):
            _lower(g, node)
    return [vo.name for vo in sub.output]


def _supported() -> set[str]:
    from caten.frontends.onnx.node import HANDLERS

    return set(HANDLERS) | {"Constant", "Shape", "Size"}


def _lower(g: Any, node: Any) -> None:
    """One body node as translate.lower_node lowers one of the top level (the converter sits above
    the op families, which may not import it): folded, or emitted by its registered handler."""
    from caten.frontends.onnx import fold
    from caten.frontends.onnx.nbits import MICROSOFT
    from caten.frontends.onnx.node import HANDLERS, N

    if node.domain not in ("", "ai.onnx", "ai.onnx.preview.training") and \
            not (node.domain == "com.microsoft" and node.op_type in MICROSOFT):
        raise Unsupported(f"node `{node.name or node.output[0]}`: op domain `{node.domain}` is not supported")
    g.infer_node(node)
    if fold.try_fold(g, node):
        return
    fn, n = HANDLERS.get(node.op_type), N(g, node)
    if fn is None:
        raise Unsupported(f"{n.where}: ONNX op `{node.op_type}` is not supported by caten's importer",
                          hint="docs/import.md lists the supported ops")
    outs = fn(n)
    for name, expr in zip(node.output, [outs] if isinstance(outs, str) else outs):
        if name and expr is not None:
            g.emit(expr, name)
    g.infer_node(node)


def _expand_node(g: Any, node: Any, where: str) -> bool:
    """A body node without a lowering but with an ONNX function body becomes that body, as at the
    top level (expand.py), lowered like one more subgraph."""
    import onnx
    from onnx import helper

    from caten.frontends.onnx.expand import expand

    sup = _supported()
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
        alias(g, o, v)
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
    if (not present or node.op_type in IMPURE or not all(i in g.consts and g.consts[i].size <= 4096 for i in present)
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


def alias(g: Any, name: str, src: str) -> None:
    """Make ONNX value `name` the same value as `src` (a constant stays a constant; sequences and
    optionals too, through the graph's `bind`)."""
    if not any(src in m for m in (g.seqs, g.opts, g.consts, g.names)):
        g.tensor(src)  # a weight not used yet, or the diagnostic of a value never computed
    known = g.types.get(name)
    g.bind(name, src)
    cur = g.shape(name)
    unknown = lambda s: len(s) + 1 if s is None else sum(d is None for d in s)  # noqa: E731
    if known is not None and known[1] is not None and unknown(known[1]) < unknown(cur):
        g.types[name] = (g.dtype(name) or known[0], known[1])  # the outer inference knew more (dim symbols)


def known(g: Any, name: str, node: Any) -> np.ndarray | None:
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
