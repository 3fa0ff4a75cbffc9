"""The graph builders a VJP rule of the op table writes with.

The rules live in `caten/ir/ops.py` beside each op's other facts; they cannot import the
checked constructors of `caten/ir/build.py` (which import the table), so the transform hands
them this small vocabulary: elementwise arithmetic that broadcasts Python numbers to the
operand's dtype, reductions kept at the reduced shape, and the transposes of views.
"""

from __future__ import annotations

from caten.autodiff import views
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op

Operand = Node | int | float


def _node(x: Operand, like: Node) -> Node:
    return x if isinstance(x, Node) else B.const(x, like.dtype)


def _pair(a: Operand, b: Operand) -> tuple[Node, Node]:
    like = a if isinstance(a, Node) else b
    assert isinstance(like, Node), "one operand of a VJP builder must be a node"
    return _node(a, like), _node(b, like)


def add(a: Operand, b: Operand) -> Node:
    return B.alu(Op.ADD, *_pair(a, b))


def mul(a: Operand, b: Operand) -> Node:
    return B.alu(Op.MUL, *_pair(a, b))


def div(a: Operand, b: Operand) -> Node:
    return B.alu(Op.FDIV, *_pair(a, b))


def neg(a: Node) -> Node:
    return B.alu(Op.NEG, a)


def cos(a: Node) -> Node:
    """cos x as sin(x + pi/2), the shift done in f64 below f64 (as the library's cos)."""
    if a.dtype == T.f64:
        return B.alu(Op.SIN, add(a, 1.5707963267948966))
    return B.cast(B.alu(Op.SIN, add(B.cast(a, T.f64), 1.5707963267948966)), a.dtype)


def floordiv(a: Node, b: Node) -> Node:
    return B.alu(Op.IDIV, a, b)


def lt(a: Operand, b: Operand) -> Node:
    return B.alu(Op.CMPLT, *_pair(a, b))


def eq(a: Operand, b: Operand) -> Node:
    return B.alu(Op.NOT, B.alu(Op.CMPNE, *_pair(a, b)))


def where(c: Node, a: Operand, b: Operand) -> Node:
    x, y = _pair(a, b)
    return B.alu(Op.WHERE, c, x, y)


def select(c: Node, a: Node) -> Node:
    """a where c holds, else zero."""
    return where(c, a, 0)


def as_float(c: Node, like: Node) -> Node:
    """A bool mask as 0/1 in `like`'s dtype."""
    return B.cast(c, like.dtype)


def cast(x: Node, dtype: T.DType) -> Node:
    return B.cast(x, dtype)


def expand(x: Node, shape: tuple) -> Node:
    return B.expand(x, shape)


def sum_axes(x: Node, axes: tuple[int, ...]) -> Node:
    """Sum over `axes`, keeping them as size 1 (a REDUCE's own output shape)."""
    return B.reduce(x, "add", axes)


def prod_axes(x: Node, axes: tuple[int, ...]) -> Node:
    return B.reduce(x, "mul", axes)


def view_transpose(n: Node, ct: Node) -> Node:
    return views.transpose(n.arg, n.src[0].shape, ct)


def matmul_t(n: Node, ct: Node) -> tuple[Node, Node]:
    """The cotangents of a matmul EXTERN's operands ([..., M, K] @ [..., K, N], numpy's batch
    broadcasting; a broadcast operand's cotangent is summed back to its shape)."""
    a, b = n.src
    if a.rank < 2 or b.rank < 2:
        raise NotImplementedError("the gradient of a matmul EXTERN with a 1-D operand")
    da = B.extern("matmul", ct.dtype, ct.shape[:-2] + a.shape[-2:], (ct, _t(b)))
    db = B.extern("matmul", ct.dtype, ct.shape[:-2] + b.shape[-2:], (_t(a), ct))
    return views.unbroadcast(da, a.shape), views.unbroadcast(db, b.shape)


def gather_t(n: Node, ct: Node) -> Node:
    """The cotangent of GATHER's data: each index's cotangent added at the position it read (a
    one-hot over the axis, so repeated indices accumulate; an index outside [-n, n) adds nothing)."""
    x, ix = n.src
    ax, size = n.arg, x.shape[n.arg]
    i = B.cast(ix, T.i64)
    i = B.alu(Op.WHERE, B.alu(Op.CMPLT, i, B.const(0, T.i64)), B.alu(Op.ADD, i, B.const(size, T.i64)), i)
    wide = tuple(ix.shape[:ax + 1]) + (size,) + tuple(ix.shape[ax + 1:])  # [.. m n ..]
    iw = B.expand(B.reshape(i, tuple(ix.shape[:ax + 1]) + (1,) + tuple(ix.shape[ax + 1:])), wide)
    hit = B.alu(Op.NOT, B.alu(Op.CMPNE, B.index(wide, ax + 1), iw))
    cw = B.expand(B.reshape(ct, tuple(ct.shape[:ax + 1]) + (1,) + tuple(ct.shape[ax + 1:])), wide)
    summed = B.reduce(B.alu(Op.WHERE, hit, cw, B.const(0, ct.dtype)), "add", (ax,))
    got = B.reshape(summed, tuple(ix.shape[:ax]) + (size,) + tuple(ix.shape[ax + 1:]))
    if got.shape == x.shape:
        return got
    # on x's other axes: the part the index covers, zeros past it
    common = [(0, size if d == ax else D.dmin(a, b)) for d, (a, b) in enumerate(zip(x.shape, ix.shape))]
    got = B.shrink(got, common)
    return B.pad(got, [(0, D.add(a, D.mul(e, -1))) for a, (_, e) in zip(x.shape, common)])


def _t(x: Node) -> Node:
    perm = list(range(x.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return B.permute(x, perm)
