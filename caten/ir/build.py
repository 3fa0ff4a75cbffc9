"""Checked constructors for graph nodes: dtype rules from the op table, numpy broadcasting
over symbolic dims, and the movement ops as views. Errors are plain exceptions; the
elaborator gives them a source location.
"""

from __future__ import annotations

from collections.abc import Sequence

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import SCATTER_OPS, TABLE, Op
from caten.ir.view import View


class ShapeError(Exception):
    """Shapes that do not fit an op; the elaborator adds the source location."""


def fmt_shape(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


# sources ------------------------------------------------------------------------------
def buffer(dtype: DType, shape: Sequence[Dim], index: int, name: str) -> Node:
    return Node.make(Op.BUFFER, dtype, shape, (), (dtype, index, name))


def const(value: int | float | bool | D.DimExpr, dtype: DType, shape: Sequence[Dim] = ()) -> Node:
    if isinstance(value, (int, float, bool)) and not isinstance(value, bool):
        if dtype.is_bool:
            value = bool(value)
        elif dtype.is_int:
            value = int(value)
        else:
            value = float(value)
    c = Node.make(Op.CONST, dtype, (), (), value)
    return expand(c, shape) if shape else c


def index(shape: Sequence[Dim], axis: int, dtype: DType = T.i64) -> Node:
    return Node.make(Op.INDEX, dtype, shape, (), (dtype, axis))


def gather(x: Node, i: Node, axis: int) -> Node:
    """x read at i along `axis` (i has the result's shape; a position past x's other axes reads 0)."""
    if x.rank != i.rank or not 0 <= axis < x.rank:
        raise ShapeError(f"GATHER: data of rank {x.rank}, index of rank {i.rank}, axis {axis}")
    return Node.make(Op.GATHER, TABLE[Op.GATHER].dtype_rule((x.dtype, i.dtype), axis), tuple(i.shape), (x, i), axis)


def rand_bits(shape: Sequence[Dim], seed: int, dyn: Node | None = None) -> Node:
    """u32 random bits; `dyn`, a rank-0 u32 or i64 node, is a seed known only at run time (XORed
    into the key), so one compiled program draws a fresh stream per call or per loop step."""
    if dyn is not None and (dyn.shape != () or dyn.dtype not in (T.u32, T.i64)):
        raise ShapeError(f"a RAND seed operand is a u32 or i64 scalar, got {dyn.dtype}{list(dyn.shape)}")
    return Node.make(Op.RAND, T.u32, shape, () if dyn is None else (dyn,), (T.u32, seed))


def extern(name: str, dtype: DType, shape: Sequence[Dim], srcs: Sequence[Node], params: tuple = ()) -> Node:
    """A host kernel's call; `params`: its sorted (key, value) parameters (a collective's)."""
    return Node.make(Op.EXTERN, dtype, shape, srcs, (dtype, name, params) if params else (dtype, name))


# elementwise --------------------------------------------------------------------------
def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for ax in range(rank):
        dim: Dim = 1
        for s in shapes:
            d = s[ax - rank + len(s)] if ax - rank + len(s) >= 0 else 1
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
            else:
                raise ShapeError(f"shapes {', '.join(fmt_shape(s) for s in shapes)} do not broadcast "
                                 f"(axis {ax}: {dim} vs {d})")
        out.append(dim)
    return tuple(out)


def alu(op: Op, *srcs: Node, arg: object = None) -> Node:
    """An elementwise op; operands are broadcast to one shape first."""
    info = TABLE[op]
    if len(srcs) != info.arity:
        raise ShapeError(f"{op.value} takes {info.arity} operands, got {len(srcs)}")
    dtype = info.dtype_rule([s.dtype for s in srcs], arg)
    shape = broadcast_shapes(*(s.shape for s in srcs))
    srcs = tuple(expand(s, shape) for s in srcs)
    return Node.make(op, dtype, shape, srcs, arg)


def scatter(x: Node, i: Node, s: Node, axis: int, op: str) -> Node:
    """x with s combined in at i along `axis` (`op` one of ops.SCATTER_OPS; i and s of one shape)."""
    if not (x.rank == i.rank == s.rank and 0 <= axis < max(x.rank, 1)) or tuple(i.shape) != tuple(s.shape):
        raise ShapeError(f"SCATTER: data of rank {x.rank}, index {list(i.shape)} and source {list(s.shape)} "
                         f"(the index and source of one shape, of the data's rank), axis {axis}")
    if op not in SCATTER_OPS:
        raise ShapeError(f"SCATTER :op must be one of {', '.join(SCATTER_OPS)}, not {op}")
    arg = (axis, op)
    return Node.make(Op.SCATTER, TABLE[Op.SCATTER].dtype_rule((x.dtype, i.dtype, s.dtype), arg), tuple(x.shape),
                     (x, i, s), arg)


def sort(x: Node, axis: int, descending: bool = False) -> Node:
    """The stable order of x along `axis` (i64, x's shape)."""
    if not 0 <= axis < max(x.rank, 1):
        raise ShapeError(f"SORT: axis {axis} of a rank-{x.rank} tensor")
    return Node.make(Op.SORT, T.i64, tuple(x.shape), (x,), (axis, bool(descending)))


def cast(x: Node, dtype: DType) -> Node:
    return x if x.dtype == dtype else Node.make(Op.CAST, dtype, x.shape, (x,), dtype)


def bitcast(x: Node, dtype: DType) -> Node:
    return x if x.dtype == dtype else Node.make(Op.BITCAST, TABLE[Op.BITCAST].dtype_rule((x.dtype,), dtype),
                                                x.shape, (x,), dtype)


def copy(x: Node) -> Node:
    return Node.make(Op.COPY, x.dtype, x.shape, (x,))


# reductions ---------------------------------------------------------------------------
def normalize_axes(axes: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = [axes]
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1) or (rank == 0 and a not in (0, -1)):
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {rank}")
        a = a % rank if rank else 0
        if a in out:
            raise ShapeError(f"axis {a} is repeated")
        out.append(a)
    return tuple(sorted(out)) if rank else ()


def reduce(x: Node, op: str, axes: Sequence[int]) -> Node:
    """Reduce over normalized `axes`, keeping them as size 1."""
    if not axes:
        return x
    dtype = TABLE[Op.REDUCE].dtype_rule([x.dtype], (op, tuple(axes)))
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return Node.make(Op.REDUCE, dtype, shape, (x,), (op, tuple(axes)))


# movement -----------------------------------------------------------------------------
def _view(x: Node, v: View) -> Node:
    if v.shape == x.shape and v.contiguous:
        return x
    return Node.make(Op.VIEW, x.dtype, v.shape, (x,), v)


def _base(x: Node) -> tuple[Node, View]:
    """The node a new view should index, and the view to extend."""
    if x.op is Op.VIEW:
        return x.src[0], x.arg
    return x, View.of(x.shape)


def reshape(x: Node, shape: Sequence[Dim]) -> Node:
    shape = tuple(shape)
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ShapeError(f"cannot reshape {fmt_shape(x.shape)} into {fmt_shape(shape)}: negative size")
    if D.prod(shape) != D.prod(x.shape):
        raise ShapeError(f"cannot reshape {fmt_shape(x.shape)} into {fmt_shape(shape)}: sizes differ")
    if shape == x.shape:
        return x
    base, v = _base(x)
    merged = v.reshape(shape)
    if merged is None:
        return _view(x, View.of(shape))
    return _view(base, merged)


def permute(x: Node, perm: Sequence[int]) -> Node:
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"{list(perm)} is not a permutation of the {x.rank} axes")
    base, v = _base(x)
    return _view(base, v.permute(perm))


def expand(x: Node, shape: Sequence[Dim]) -> Node:
    """numpy.broadcast_to: may add leading axes; only size-1 axes grow."""
    shape = tuple(shape)
    if shape == x.shape:
        return x
    if len(shape) < x.rank:
        raise ShapeError(f"cannot expand {fmt_shape(x.shape)} to the lower rank {fmt_shape(shape)}")
    if len(shape) > x.rank:
        x = reshape(x, (1,) * (len(shape) - x.rank) + x.shape)
    for d, n in zip(x.shape, shape):
        if (d != n and d != 1) or (isinstance(n, int) and n < 0):
            raise ShapeError(f"cannot expand {fmt_shape(x.shape)} to {fmt_shape(shape)}")
    base, v = _base(x)
    return _view(base, v.expand(shape))


def shrink(x: Node, bounds: Sequence[tuple[Dim, Dim]]) -> Node:
    x = _piece(x, bounds)
    base, v = _base(x)
    return _view(base, v.shrink(bounds))


def _piece(x: Node, bounds: Sequence[tuple[Dim, Dim]]) -> Node:
    """The branch of a concatenation (`concat`: WHERE(padded true, padded piece, the rest)) that a
    slice lies wholly in or wholly outside of, followed down the chain: a slice of a concatenation
    that is one of its pieces reads that piece, not every piece through its mask (DDP's flat
    gradient bucket, cut back into parameters). Exact: the condition is constant over the slice."""
    while x.op is Op.WHERE:
        c = x.src[0]
        if not (c.op is Op.VIEW and c.src[0].op is Op.CONST and c.src[0].arg is True and c.arg.mask is not None
                and all(s == 0 for s in c.arg.strides)):
            return x
        inside, disjoint = True, False
        for (lo, hi), (mlo, mhi) in zip(bounds, c.arg.mask):
            if not all(isinstance(d, int) for d in (lo, hi, mlo, mhi)) or hi <= lo:
                return x
            inside &= mlo <= lo and hi <= mhi
            disjoint |= hi <= mlo or mhi <= lo
        if inside:
            x = x.src[1]
        elif disjoint:
            x = x.src[2]
        else:
            return x
    return x


def pad(x: Node, widths: Sequence[tuple[Dim, Dim]]) -> Node:
    """Zero padding (the library's `pad` adds the fill value with WHERE)."""
    for lo, hi in widths:
        if (isinstance(lo, int) and lo < 0) or (isinstance(hi, int) and hi < 0):
            raise ShapeError("negative padding is not allowed (use slice)")
    base, v = _base(x)
    return _view(base, v.pad(widths))


def flip(x: Node, axes: Sequence[int]) -> Node:
    base, v = _base(x)
    return _view(base, v.flip(axes))


def step(x: Node, steps: Sequence[int]) -> Node:
    if all(s == 1 for s in steps):
        return x
    base, v = _base(x)
    return _view(base, v.step(steps))
