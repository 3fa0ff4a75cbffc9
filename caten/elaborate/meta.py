"""Compile-time functions over shapes, lists and dtypes, for the library's bookkeeping.

They compute no tensor values (those are principal ops); they let composites written in
caten's language ask a tensor's rank, read a dim, build an axis list, or fail with a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caten.elaborate import principal as P
from caten.elaborate.values import Lit, Tensor, describe
from caten.errors import Error, Span
from caten.ir import dims as D
from caten.ir.dtypes import DType


def _n(args: list, n: int, name: str, span: Span) -> None:
    if len(args) != n:
        raise Error(f"`{name}` takes {n} argument{'s' if n != 1 else ''}, got {len(args)}", span)


def _tensor_like(v: Any, span: Span) -> Tensor:
    return P.to_tensor(v, span)


def _rank(e, args, kw, span):
    _n(args, 1, "rank", span)
    return Lit(_tensor_like(args[0], span).node.rank, "int")


def _shape(e, args, kw, span):
    _n(args, 1, "shape", span)
    return [Lit(d, "dim") for d in _tensor_like(args[0], span).shape]


def _dim(e, args, kw, span):
    _n(args, 2, "dim", span)
    t = _tensor_like(args[0], span)
    return Lit(t.shape[P.one_axis(args[1], t.node.rank, span)], "dim")


def _count(e, args, kw, span):
    """How many elements a reduction over AXIS (nil: all) combines."""
    t = _tensor_like(args[0], span)
    axes = P.as_axes(args[1] if len(args) > 1 else None, t.node.rank, span)
    return Lit(D.prod(t.shape[a] for a in axes), "dim")


def _dtype(e, args, kw, span):
    _n(args, 1, "dtype", span)
    v = args[0]
    return v.dtype if isinstance(v, Tensor) else v.default_dtype if isinstance(v, Lit) else v


def _kind_pred(kind: str) -> Callable:
    def pred(e, args, kw, span):
        _n(args, 1, kind + "?", span)
        v = args[0]
        if isinstance(v, Tensor):
            dt = v.dtype
        elif isinstance(v, DType):
            dt = v
        elif isinstance(v, Lit):
            return Lit(v.kind == kind or (kind == "int" and v.kind == "dim"), "bool")
        else:
            return Lit(False, "bool")
        ok = {"float": dt.is_float, "int": dt.is_int, "bool": dt.is_bool}[kind]
        return Lit(ok, "bool")
    return pred


def _is_nil(e, args, kw, span):
    _n(args, 1, "nil?", span)
    return Lit(args[0] is None, "bool")


def _is_list(e, args, kw, span):
    _n(args, 1, "list?", span)
    return Lit(isinstance(args[0], list), "bool")


def _len(e, args, kw, span):
    _n(args, 1, "len", span)
    if not isinstance(args[0], (list, tuple)):
        raise Error(f"len needs a list, got {describe(args[0])}", span)
    return Lit(len(args[0]), "int")


def _nth(e, args, kw, span):
    _n(args, 2, "nth", span)
    seq, i = args[0], P.as_int(args[1], span, "an index")
    if not isinstance(seq, (list, tuple)):
        raise Error(f"nth needs a list, got {describe(seq)}", span)
    if not -len(seq) <= i < len(seq):
        raise Error(f"index {i} is out of range for {len(seq)} items", span)
    return seq[i]


def _list(e, args, kw, span):
    return list(args)


def _append(e, args, kw, span):
    out: list = []
    for a in args:
        if not isinstance(a, list):
            raise Error(f"append joins lists, got {describe(a)}", span)
        out += a
    return out


def _cons(e, args, kw, span):
    _n(args, 2, "cons", span)
    if not isinstance(args[1], list):
        raise Error(f"cons needs a list second, got {describe(args[1])}", span)
    return [args[0]] + args[1]


def _range(e, args, kw, span):
    lo, hi = (0, P.as_int(args[0], span)) if len(args) == 1 else (P.as_int(args[0], span), P.as_int(args[1], span))
    return [Lit(i, "int") for i in range(lo, hi)]


def _axis(e, args, kw, span):
    """(axis X K): K normalized to 0..rank-1 (negative counts from the end)."""
    _n(args, 2, "axis", span)
    return Lit(P.one_axis(args[1], _tensor_like(args[0], span).node.rank, span), "int")


def _repeat(e, args, kw, span):
    """(repeat V N): a list of N copies of V."""
    _n(args, 2, "repeat", span)
    return [args[0]] * P.as_int(args[1], span)


def _pair(e, args, kw, span):
    """(pair V): [V V] for a number, V itself for a 2-list (kernel sizes, strides, padding)."""
    _n(args, 1, "pair", span)
    v = args[0]
    if isinstance(v, list):
        if len(v) != 2:
            raise Error(f"expected a number or a pair [a b], got {len(v)} items", span)
        return v
    return [v, v]


def _same_dim(e, args, kw, span):
    _n(args, 2, "same-dim?", span)
    return Lit(P.as_dim(args[0], span) == P.as_dim(args[1], span), "bool")


def _known(e, args, kw, span):
    """(known? D): whether the dimension D is a number at compile time (a check on sizes that a
    symbolic dimension leaves to the run)."""
    _n(args, 1, "known?", span)
    return Lit(not isinstance(P.as_dim(args[0], span), D.DimExpr), "bool")


def _bits(e, args, kw, span):
    _n(args, 1, "bits", span)
    dt = _dtype(e, args, kw, span)
    return Lit(dt.bits, "int")


def _error(e, args, kw, span):
    raise Error(" ".join(a if isinstance(a, str) else str(getattr(a, "value", a)) for a in args), span)


def _assert(e, args, kw, span):
    if not args or not isinstance(args[0], Lit):
        raise Error("assert needs a condition known at compile time", span)
    if not args[0].value:
        _error(e, args[1:] or ["assertion failed"], kw, span)
    return None


META: dict[str, Callable[..., Any]] = {
    "rank": _rank, "shape": _shape, "dim": _dim, "count": _count, "dtype": _dtype,
    "float?": _kind_pred("float"), "int?": _kind_pred("int"), "bool?": _kind_pred("bool"),
    "nil?": _is_nil, "list?": _is_list, "len": _len, "nth": _nth, "list": _list, "append": _append, "cons": _cons,
    "range": _range, "axis": _axis, "pair": _pair, "repeat": _repeat, "same-dim?": _same_dim, "known?": _known,
    "bits": _bits, "error": _error, "assert": _assert,
}

