"""The matcher of compiled rule patterns (caten.rewrite.rule) against the values a call was given
and against graph nodes; repeated ?vars must bind the same value."""

from __future__ import annotations

import math
from typing import Any

from caten.elaborate.values import Lit, Tensor
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import TABLE, Op
from caten.rewrite.consts import lit_eq, node_const, value_const
from caten.rewrite.opclass import OpClass

# elementwise ops whose node holds only its operands: a pattern lists exactly their operands
ALU = frozenset(o for o, i in TABLE.items()
                if i.group in ("unary", "binary", "ternary") and o not in (Op.CAST, Op.BITCAST))


def same(a: Any, b: Any) -> bool:
    """Are two matched values the same (a repeated ?var)? Tensors by node: hash-consing makes it structural."""
    a = a.node if isinstance(a, Tensor) else a
    b = b.node if isinstance(b, Tensor) else b
    if isinstance(a, Node) or isinstance(b, Node):
        return a is b
    if isinstance(a, Lit) and isinstance(b, Lit):
        return (a.kind == "bool") == (b.kind == "bool") and (a.value == b.value or (
            isinstance(a.value, float) and isinstance(b.value, float) and math.isnan(a.value) and math.isnan(b.value)))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    return a == b


def _bind(b: dict, name: str, v: Any) -> bool:
    old = b.get(name, b)
    if old is b:
        b[name] = v
        return True
    return same(old, v)


class Matcher:
    """Matches compiled patterns; `defaults(name, nargs)` gives a composite's keyword defaults."""

    def __init__(self, defaults):
        self.defaults = defaults

    def call(self, p: tuple, name: str, args: list | tuple, kwargs: dict, b: dict) -> bool:
        """A ("call", ...) pattern against a call's evaluated arguments."""
        _, pname, pargs, pkw = p
        if pname != name or len(pargs) != len(args):
            return False
        for q, v in zip(pargs, args):
            if not self.value(q, v, b):
                return False
        if pkw or kwargs:
            defaults = None
            for k, q in pkw.items():
                if k in kwargs:
                    v = kwargs[k]
                else:
                    defaults = defaults if defaults is not None else self.defaults(name, len(args))
                    if k not in defaults:
                        return False
                    v = defaults[k]
                if not self.value(q, v, b):
                    return False
            for k, v in kwargs.items():
                if k not in pkw:
                    # a keyword the pattern does not mention must have its default value
                    defaults = defaults if defaults is not None else self.defaults(name, len(args))
                    if k not in defaults or not same(defaults[k], v):
                        return False
        return True

    def value(self, p: tuple, v: Any, b: dict) -> bool:
        t = p[0]
        if t == "var":
            return _bind(b, p[1], v)
        if t == "lit":
            return lit_eq(p[1], value_const(v))
        if t == "call":
            o = v.origin if isinstance(v, Tensor) else None
            return o is not None and o.name == p[1] and self.call(p, o.name, o.args, dict(o.kwargs), b)
        if t == "op":
            return isinstance(v, Tensor) and self.node(p, v.node, b)
        if t == "dt":
            return isinstance(v, DType) and v == p[1]
        if t == "str":
            return isinstance(v, str) and v == p[1]
        if t == "nil":
            return v is None
        if t == "list":
            return isinstance(v, list) and len(v) == len(p[1]) and all(self.value(q, x, b) for q, x in zip(p[1], v))
        return False

    def node(self, p: tuple, n: Node, b: dict) -> bool:
        """An ("op", ...) pattern against a graph node; ?vars bind nodes (and ops, for a class head)."""
        op = p[1]
        if op.__class__ is OpClass:
            if n.op not in op.members or not _bind(b, op.var, n.op):
                return False
            op = n.op
        elif n.op is not op:
            return False
        args = p[2]
        if op in ALU:
            for q, s in zip(args, n.src):
                t = q[0]
                if t == "var":
                    if not _bind(b, q[1], s):
                        return False
                elif t == "lit":
                    if not lit_eq(q[1], node_const(s)):
                        return False
                elif not self.node(q, s, b):
                    return False
            return True
        if op is Op.CAST:
            return self.operand(args[0], n.src[0], b) and self.value(args[1], n.dtype, b)
        if op is Op.COPY:
            return self.operand(args[0], n.src[0], b)
        if op is Op.REDUCE:
            if not self.operand(args[0], n.src[0], b):
                return False
            kw = p[3]
            if "op" in kw and not self.value(kw["op"], n.arg[0], b):
                return False
            return "axis" not in kw or self.value(kw["axis"], [Lit(a, "int") for a in n.arg[1]], b)
        if op is Op.EXTERN:
            return len(args) == len(n.src) + 1 and self.value(args[0], n.arg[1], b) and all(
                self.operand(q, s, b) for q, s in zip(args[1:], n.src))
        if op is Op.CONST:
            c = node_const(n)
            return c is not None and self.value(args[0], Lit(c, _kind(c)), b)
        return False

    def operand(self, q: tuple, s: Node, b: dict) -> bool:
        t = q[0]
        if t == "var":
            return _bind(b, q[1], s)
        if t == "lit":
            return lit_eq(q[1], node_const(s))
        if t == "op":
            return self.node(q, s, b)
        return False


def _kind(v: Any) -> str:
    return "bool" if isinstance(v, bool) else "float" if isinstance(v, float) else "int"
