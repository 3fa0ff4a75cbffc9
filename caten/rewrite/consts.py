"""Constant values of matched operands, shared by the matcher (rule.py) and the guards
(guard.py): a node that is one concrete scalar everywhere, however it is broadcast."""

from __future__ import annotations

import math
from typing import Any

from caten.elaborate.values import Lit, Tensor
from caten.ir.graph import Node
from caten.ir.ops import Op

_VIEW, _CONST = Op.VIEW, Op.CONST


def node_const(n: Node) -> Any:
    """The value of a node that is one concrete scalar everywhere (a CONST, maybe broadcast), else None."""
    op = n.op
    if op is _VIEW:
        s = n.src[0]
        if s.op is not _CONST or s.shape or n.arg.mask is not None:
            return None
        n, op = s, _CONST
    if op is _CONST and isinstance(n.arg, (int, float, bool)):
        return n.arg
    return None


def value_const(v: Any) -> Any:
    if isinstance(v, Lit):
        return v.value if v.concrete else None
    if isinstance(v, Tensor):
        return node_const(v.node)
    if isinstance(v, Node):
        return node_const(v)
    return None


def lit_eq(p: Any, c: Any) -> bool:
    if c is None or isinstance(p, bool) != isinstance(c, bool):
        return False
    if isinstance(p, float) and math.isnan(p):
        return isinstance(c, float) and math.isnan(c)
    return p == c
