"""A declarative check of a principal-op graph, run at stage boundaries.

Every node is checked against its op's table entry (caten.ir.ops): operand count (`arity`),
what its `arg` holds (`arg`, ARG_KINDS), its dtype (the entry's `dtype_rule` over the operand
dtypes, or the dtype its arg names) and its shape (a rule per op group below). A stage that builds
a malformed node (a rewrite rule, the elaborator, a frontend) is caught where it happened rather
than as a wrong kernel three stages later.

`check(nodes, stage)` runs under `Options.debug` (`caten --debug`, `caten.load(..., debug=True)`)
or when the CATEN_VERIFY environment variable is set (the test suite sets it for every test,
tests/conftest.py); `verify` always runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterable, Iterator

from caten.errors import Error
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.graph import Node, toposort
from caten.ir.ops import ARG_KINDS, TABLE, DTypeError, Op

MAX_SHOWN = 8  # problems listed in one diagnostic


class VerifyError(Error):
    """A malformed graph: a compiler bug (or a plugin's), never a user's mistake."""


_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("caten_verify", default=False)


def enabled() -> bool:
    """Checking is on: `Options.debug` (`caten --debug`) for the compile running, or CATEN_VERIFY."""
    return _ON.get() or os.environ.get("CATEN_VERIFY", "").strip().lower() not in ("", "0", "false", "no", "off")


@contextlib.contextmanager
def checking(on: bool) -> Iterator[None]:
    """Within it, `check` verifies when `on` (the driver and the pipeline enter it with
    `Options.debug`, so the option travels with the compile, not through the environment)."""
    tok = _ON.set(_ON.get() or on)
    try:
        yield
    finally:
        _ON.reset(tok)


def check(nodes: Iterable[Node], stage: str) -> None:
    """`verify` when CATEN_VERIFY is on; nothing otherwise."""
    if enabled():
        verify(nodes, stage)


def verify(nodes: Iterable[Node], stage: str) -> None:
    """Raise VerifyError listing what is wrong with the graph of `nodes`, produced by `stage`."""
    found = problems(nodes)
    if found:
        shown = found[:MAX_SHOWN] + ([f"... and {len(found) - MAX_SHOWN} more"] if len(found) > MAX_SHOWN else [])
        raise VerifyError(f"the graph after {stage} is malformed ({len(found)} problem{'s' * (len(found) != 1)}):\n  "
                          + "\n  ".join(shown), None,
                          "this is a compiler bug: please report it with the program (CATEN_VERIFY=1 found it)")


def problems(nodes: Iterable[Node]) -> list[str]:
    """Every problem of every node, as `node #I OP DTYPE [SHAPE]: what`, in operand-first order."""
    out: list[str] = []
    for i, n in enumerate(toposort(list(nodes))):
        for p in node_problems(n):
            out.append(f"node #{i} {n!r}: {p}")
    return out


def node_problems(n: Node) -> list[str]:
    if not isinstance(n.op, Op):
        return [f"op {n.op!r} is not a principal op"]
    info = TABLE[n.op]
    if not isinstance(n.dtype, DType):
        return [f"dtype {n.dtype!r} is not a dtype"]
    if any(not isinstance(s, Node) for s in n.src):
        return ["an operand is not a graph node"]
    if info.arity >= 0 and len(n.src) != info.arity:
        return [f"{n.op.value} takes {info.arity} operand{'s' * (info.arity != 1)}, this node has {len(n.src)}"]
    what, ok = ARG_KINDS[info.arg]
    if not ok(n.arg):
        return [f"its arg should be {what}, got {n.arg!r}"]
    bad_dims = [d for d in n.shape if not (isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                           or isinstance(d, D.DimExpr))]
    out = [f"dimension {d!r} is not a size" for d in bad_dims]
    out += _dtype_problems(n)
    shape_rule = _SHAPES.get(n.op) or _SHAPES.get(info.group)
    why = shape_rule(n) if shape_rule else None
    if why:
        out.append(why)
    return out


def _dtype_problems(n: Node) -> list[str]:
    info = TABLE[n.op]
    ins = [s.dtype for s in n.src]
    if info.group in ("unary", "binary", "ternary", "reduce", "control") or n.op in (Op.GATHER, Op.SCATTER,
                                                                                     Op.SORT):
        try:
            want = info.dtype_rule(ins, n.arg)
        except DTypeError as e:
            return [f"operand dtypes ({', '.join(map(str, ins))}): {e}"]
    elif n.op in (Op.VIEW, Op.COPY):
        want = ins[0]
    elif n.op is Op.CONST:
        return _const_problems(n)
    else:
        want = n.arg[0]  # BUFFER, INDEX, RAND, EXTERN name their dtype first
        if want not in info.dtypes:
            return [f"{n.op.value} gives {', '.join(map(str, info.dtypes))}, not {want}"]
    return [] if want == n.dtype else [f"dtype should be {want} (from its operands and arg), is {n.dtype}"]


def _const_problems(n: Node) -> list[str]:
    v, dt = n.arg, n.dtype
    if isinstance(v, D.DimExpr):
        ok = not dt.is_bool  # a dimension's value, converted to the dtype as the reference does
    elif dt.is_bool:
        ok = isinstance(v, bool)
    elif dt.is_int:
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and not int(T.iinfo(dt).min) <= v <= int(T.iinfo(dt).max):
            return [f"the constant {v} does not fit {dt}"]
    else:
        ok = isinstance(v, float)
    return [] if ok else [f"a {dt} constant holds {v!r} ({type(v).__name__})"]


def _same_as_operands(n: Node) -> str | None:
    bad = [s for s in n.src if tuple(s.shape) != tuple(n.shape)]
    if bad:
        return (f"an elementwise operand has shape {list(bad[0].shape)}, the node {list(n.shape)} "
                "(broadcasting is explicit: expand the operand with a VIEW)")
    return None


def _reduce(n: Node) -> str | None:
    src, axes = n.src[0], n.arg[1]
    if len(src.shape) != len(n.shape):
        return f"a reduction keeps its rank: operand rank {len(src.shape)}, node rank {len(n.shape)}"
    if any(not 0 <= a < len(n.shape) for a in axes):
        return f"reduced axes {list(axes)} out of range for rank {len(n.shape)}"
    want = [1 if i in axes else d for i, d in enumerate(src.shape)]
    return None if list(n.shape) == want else f"shape should be {want} (reduced axes kept as 1), is {list(n.shape)}"


def _view(n: Node) -> str | None:
    v = n.arg
    if tuple(v.shape) != tuple(n.shape):
        return f"the view's shape {list(v.shape)} is not the node's {list(n.shape)}"
    if len(v.strides) != len(v.shape) or (v.mask is not None and len(v.mask) != len(v.shape)):
        return "the view's strides or mask do not match its rank"
    return None


def _scalar(n: Node) -> str | None:
    return None if not n.shape else f"a CONST is a scalar (broadcast it with a VIEW), this one has {list(n.shape)}"


def _index(n: Node) -> str | None:
    return None if 0 <= n.arg[1] < max(len(n.shape), 1) else f"axis {n.arg[1]} out of range for {list(n.shape)}"


def _gather(n: Node) -> str | None:
    x, i = n.src
    ax = n.arg
    if not (x.rank == i.rank == len(n.shape) and 0 <= ax < max(x.rank, 1)):
        return f"GATHER: data rank {x.rank}, index rank {i.rank}, node rank {len(n.shape)}, axis {ax}"
    if tuple(n.shape) != tuple(i.shape):
        return f"a GATHER has its index's shape {list(i.shape)}, this one {list(n.shape)}"
    return None


def _scatter(n: Node) -> str | None:
    x, i, s = n.src
    ax = n.arg[0]
    if not (x.rank == i.rank == s.rank == len(n.shape) and 0 <= ax < max(x.rank, 1)):
        return f"SCATTER: data rank {x.rank}, index rank {i.rank}, source rank {s.rank}, axis {ax}"
    if tuple(i.shape) != tuple(s.shape) or tuple(n.shape) != tuple(x.shape):
        return f"a SCATTER has its data's shape and an index and source of one shape: {n.shape} {i.shape} {s.shape}"
    return None


def _sort(n: Node) -> str | None:
    x = n.src[0]
    if tuple(n.shape) != tuple(x.shape) or not 0 <= n.arg[0] < max(x.rank, 1):
        return f"a SORT has its operand's shape and an axis of it: {n.shape} {x.shape} axis {n.arg[0]}"
    return None


def _rand(n: Node) -> str | None:
    """RAND takes nothing, or one runtime seed: a rank-0 u32 or i64 node."""
    if len(n.src) > 1:
        return f"RAND takes 0 or 1 operands (a runtime seed), this node has {len(n.src)}"
    if n.src and (n.src[0].shape != () or n.src[0].dtype not in (T.u32, T.i64)):
        s = n.src[0]
        return f"a RAND seed operand is a u32 or i64 scalar, this one is {s.dtype}{list(s.shape)}"
    return None


def _copy(n: Node) -> str | None:
    return None if tuple(n.src[0].shape) == tuple(n.shape) else "a COPY keeps its operand's shape"


# shape rules: by op where one op is special, else by the op's table group
def _control(n: Node) -> str | None:
    """A loop's or branch's operands match its bodies' parameters, and the node its result k."""
    spec, k = n.arg
    want_shape = spec.out_spec(k)[1]
    if tuple(n.shape) != tuple(want_shape):
        return f"result {k} of this {n.op.value} has shape {list(want_shape)}, the node {list(n.shape)}"
    if n.op is Op.IF:
        ps, ops = spec.then.params, n.src[1:]
        if n.src[0].rank != 0 or not n.src[0].dtype.is_bool:
            return "an IF's first operand is its rank-0 bool condition"
    else:
        m = spec.carries + spec.captures
        ps, ops = spec.body.params[:m], n.src[:m]
        xs = n.src[m:m + spec.xs]
        for p, x in zip(spec.body.params[m:], xs):
            if p.dtype != x.dtype or tuple(p.shape) != tuple(x.shape[1:]):
                return f"a scanned operand {x.dtype}{list(x.shape)} does not slice to its parameter {list(p.shape)}"
        bounds = (spec.start is None) + spec.end_operand
        if len(n.src) != m + spec.xs + bounds:
            return f"this LOOP takes {m + spec.xs + bounds} operands, the node has {len(n.src)}"
    if len(ps) != len(ops) or any(p.dtype != x.dtype or tuple(p.shape) != tuple(x.shape) for p, x in zip(ps, ops)):
        return "its operands do not match its body's parameters"
    return None


_SHAPES: dict[object, Callable[[Node], str | None]] = {
    "control": _control,
    "unary": _same_as_operands, "binary": _same_as_operands, "ternary": _same_as_operands, "reduce": _reduce,
    Op.VIEW: _view, Op.CONST: _scalar, Op.INDEX: _index, Op.COPY: _copy, Op.RAND: _rand,
    Op.GATHER: _gather, Op.SCATTER: _scatter, Op.SORT: _sort,
}
