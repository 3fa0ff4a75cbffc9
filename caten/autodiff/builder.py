"""The graph builders a VJP rule of the op table writes with.

The rules live in `caten/ir/ops.py` beside each op's other facts; they cannot import the
checked constructors of `caten/ir/build.py` (which import the table), so the transform hands
them this small vocabulary: elementwise arithmetic that broadcasts Python numbers to the
operand's dtype, reductions kept at the reduced shape, and the transposes of views.
"""

from __future__ import annotations

from caten.autodiff import views
from caten.ir import build as B
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


def collective_t(n: Node, ct: Node) -> Node:
    """The cotangent of a collective EXTERN's operand, itself a collective (LANGUAGE.md section 15):
    all-reduce sum (mean) -> all-reduce sum (mean); all-gather -> reduce-scatter sum; reduce-scatter
    sum (mean) -> all-gather (divided by the world size); broadcast -> the sum on the root (zeros
    elsewhere), and back. max and min pass the gradient to the ranks that hold the extreme, which
    depends on ties: refused rather than guessed."""
    name, p = n.arg[1], dict(n.arg[2]) if len(n.arg) > 2 else {}
    x = n.src[0]
    op = p.get("op", "sum")
    if op in ("max", "min"):
        raise NotImplementedError(f"the gradient of {name} :op {op} is not supported (only sum and mean)")
    if name == "all-reduce":
        return B.extern(name, ct.dtype, x.shape, (ct,), n.arg[2])
    if name == "all-gather":
        return B.extern("reduce-scatter", ct.dtype, x.shape, (ct,), tuple(sorted({**p, "op": "sum"}.items())))
    if name == "reduce-scatter":
        g = B.extern("all-gather", ct.dtype, x.shape, (ct,), tuple(sorted((k, v) for k, v in p.items() if k != "op")))
        return div(g, float(p["world"])) if op == "mean" else g
    if name in ("broadcast", "reduce"):
        return B.extern("reduce" if name == "broadcast" else "broadcast", ct.dtype, x.shape, (ct,), n.arg[2])
    raise NotImplementedError(f"no gradient rule for the EXTERN kernel {name}")


def gather_t(n: Node, ct: Node) -> Node:
    """The cotangent of GATHER's data: each index's cotangent added at the position it read
    (a SCATTER add: repeated indices accumulate, in O(index); an index GATHER read as 0 adds nothing)."""
    x, ix = n.src
    return B.scatter(B.const(0, ct.dtype, x.shape), ix, ct, n.arg, "add")


def _valid(x: Node, i: Node, axis: int) -> Node:
    """Whether each position of SCATTER/GATHER index i lands inside x (bool, i's shape)."""
    return eq(B.gather(B.const(1, T.i8, x.shape), i, axis), 1)


def scatter_t(n: Node, ct: Node) -> tuple[Node | None, None, Node | None]:
    """SCATTER's cotangents: add passes ct to x and reads it back for s; set gives x's where nothing
    landed and each target's to the source that won (the last); max and min share a target's
    cotangent evenly among x and the sources equal to the result (torch's scatter_reduce amax/amin);
    mul gives each factor the product of the others."""
    x, i, s = n.src
    ax, op = n.arg
    back = B.gather(ct, i, ax)  # 0 where the position was skipped
    if op == "add":
        return ct, None, back
    count = B.scatter(B.const(0, T.i64, x.shape), i, B.const(1, T.i64, i.shape), ax, "add")
    if op == "set":
        pos = B.index(i.shape, ax)
        won = B.scatter(B.const(-1, T.i64, x.shape), i, pos, ax, "set")
        return where(lt(0, count), 0.0, ct), None, where(eq(B.gather(won, i, ax), pos), back, 0.0)
    if op in ("max", "min"):
        own = as_float(eq(x, n), ct)
        hit = as_float(B.alu(Op.AND, eq(s, B.gather(n, i, ax)), _valid(x, i, ax)), ct)
        share = div(ct, add(own, B.scatter(B.const(0, ct.dtype, x.shape), i, hit, ax, "add")))
        return mul(own, share), None, mul(hit, B.gather(share, i, ax))
    # mul: a factor's cotangent is ct times the product of the target's other factors (x's own and the
    # sources landing there), exact with one zero among them and 0 with more (as REDUCE's product)
    zx, zs = eq(x, 0.0), eq(s, 0.0)
    zeros = add(as_float(zx, ct), B.scatter(B.const(0, ct.dtype, x.shape), i, as_float(zs, ct), ax, "add"))
    nonzero = B.scatter(where(zx, 1.0, x), i, where(zs, 1.0, s), ax, "mul")

    def others(f: Node, zf: Node, nz: Node, nzeros: Node) -> Node:
        return where(zf, where(eq(nzeros, 1.0), nz, 0.0), where(eq(nzeros, 0.0), div(nz, where(zf, 1.0, f)), 0.0))

    dx = mul(ct, others(x, zx, nonzero, zeros))
    return dx, None, mul(back, others(s, zs, B.gather(nonzero, i, ax), B.gather(zeros, i, ax)))


def _t(x: Node) -> Node:
    perm = list(range(x.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return B.permute(x, perm)
