"""Replacements of principal ops over ?vars and literals, compiled to closures that build graph
nodes directly (the elaborator is the slow path, for everything else). A call head may be an op
variable a class pattern bound (`(?op ?a ?b)`): the node is built with the matched op."""

from __future__ import annotations

from typing import Any

from caten.elaborate import principal as P
from caten.elaborate.values import Lit, Tensor
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import ELEMENTWISE, TABLE, DTypeError, Op
from caten.read.sexpr import Kw, Num, SList, Sym, head


def compile_replacement(f: Any, rule: Any) -> Any:
    """A closure (engine, bindings) -> value for a replacement made of ?vars, numbers, true/false,
    elementwise principal ops, CAST to a ?var or dtype, and (fold ...) of those; None otherwise.
    Values are graph nodes where possible (no Tensor wrappers on the hot path)."""
    if isinstance(f, Sym):
        name = f.name
        if name.startswith("?"):
            return lambda e, b: b[name]
        if name in ("true", "false", "t"):
            lit = Lit(name != "false", "bool")
            return lambda e, b: lit
        dt = T.lookup(name)
        if dt is not None:
            return lambda e, b: dt
        return None
    if isinstance(f, Num):
        lit = Lit(f.value, "float" if isinstance(f.value, float) else "int")
        return lambda e, b: lit
    if not isinstance(f, SList) or f.bracket or any(isinstance(x, Kw) for x in f.items):
        return None
    h = head(f)
    if h == "fold" and len(f.items) == 2:
        inner = compile_replacement(f.items[1], rule)
        if inner is None:
            return None
        return lambda e, b: e._fold(rule, as_value(inner(e, b)))
    subs = [compile_replacement(x, rule) for x in f.items[1:]]
    if any(s is None for s in subs):
        return None
    sp = f.span or rule.span
    if h is not None and h.startswith("?"):  # an op variable: checked at load to head (?op{CLASS} ...)
        return lambda e, b: _alu(b[h], [s(e, b) for s in subs], sp)
    if h not in Op.__members__:
        return None
    op = Op[h]
    if op is Op.CAST and len(subs) == 2:
        x, t = subs
        return lambda e, b: node_of(P.cast(as_value(x(e, b)), t(e, b), sp))
    if op not in ELEMENTWISE or op in (Op.CAST, Op.BITCAST) or len(subs) != TABLE[op].arity:
        return None
    return lambda e, b: _alu(op, [s(e, b) for s in subs], sp)


def _alu(op: Op, vals: list, sp: Any) -> Any:
    """An elementwise node over replacement values: built directly where the operands agree in
    dtype and shape (hash-consed), else through the checked constructor, which words errors."""
    nodes = [v for v in vals if isinstance(v, Node)]
    if nodes and op is not Op.WHERE:
        n0 = nodes[0]
        shape, dt = n0.shape, n0.dtype
        if all(v.shape == shape and v.dtype is dt for v in nodes):
            if len(nodes) < len(vals):
                vals = [v if isinstance(v, Node) else _lit_node(v, dt, shape) for v in vals]
            if all(v is not None for v in vals):
                try:
                    return Node.make(op, TABLE[op].dtype_rule([dt] * len(vals), None), shape, vals)
                except DTypeError:
                    pass
    return node_of(P.apply_alu(op, [as_value(v) for v in vals], sp))


def _fits(x: int, dt: Any) -> bool:
    info = T.iinfo(dt)
    return int(info.min) <= x <= int(info.max)


def _lit_node(v: Any, dt: Any, shape: tuple) -> Node | None:
    """A weak literal meeting a tensor of dtype dt, as a broadcast constant; None where the checked
    path must decide (a float literal meeting integers, a dimension, an out-of-range integer ...)."""
    if not isinstance(v, Lit) or not v.concrete:
        return None
    if v.kind == "float" and not dt.is_float or v.kind == "bool" and not dt.is_bool or v.kind == "dim" \
            or v.kind == "int" and (dt.is_bool or (dt.is_int and not _fits(v.value, dt))):
        return None
    return B.const(v.value, dt, shape)


def as_value(v: Any) -> Any:
    return Tensor(v) if isinstance(v, Node) else v


def node_of(v: Any) -> Any:
    return v.node if isinstance(v, Tensor) else v
