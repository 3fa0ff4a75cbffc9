"""The principal-op table: the one place where an op's semantics live.

Each entry holds the op's group, arity, dtype rule, numpy reference and doc line, and the facts
other stages would otherwise keep in `if` chains of their own: the source keywords its form
accepts, what its node's `arg` holds, a cost estimate (the scheduler's recompute-or-store
choice), commutativity and associativity (op classes of the rule language), and for the ops
that combine a reduction, the identity per dtype; and the op's vector-Jacobian product (`vjp`,
written with the builders of `caten/autodiff/builder.py`, which the transform passes in as `g`:
this module cannot import the graph constructors, which import it). The elaborator checks dtypes with
`dtype_rule`, the reference runtime computes with `ref`, `caten ops` prints `doc`, and the
conformance suite derives its cases from `dtypes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.collective import KERNELS as COLLECTIVES
from caten.ir.dtypes import DType, DTypeError
from caten.ir.indexing import (
    SCATTER_OPS,
    _bitcast_dtype,
    _bitcast_ref,
    _gather_dtype,
    _gather_ref,
    _scatter_dtype,
    _scatter_ref,
    _sort_dtype,
    _sort_ref,
)
from caten.ir.view import View


class Op(Enum):
    NEG = "NEG"; RECIP = "RECIP"; SQRT = "SQRT"; EXP2 = "EXP2"; LOG2 = "LOG2"; SIN = "SIN"  # noqa: E702
    NOT = "NOT"; CAST = "CAST"; BITCAST = "BITCAST"  # noqa: E702
    ADD = "ADD"; MUL = "MUL"; FDIV = "FDIV"; IDIV = "IDIV"; MOD = "MOD"; MAX = "MAX"  # noqa: E702
    AND = "AND"; OR = "OR"; XOR = "XOR"; CMPLT = "CMPLT"; CMPNE = "CMPNE"  # noqa: E702
    WHERE = "WHERE"; REDUCE = "REDUCE"  # noqa: E702
    BUFFER = "BUFFER"; CONST = "CONST"; VIEW = "VIEW"; COPY = "COPY"  # noqa: E702
    INDEX = "INDEX"; GATHER = "GATHER"; SCATTER = "SCATTER"; SORT = "SORT"; RAND = "RAND"; EXTERN = "EXTERN"  # noqa: E702
    LOOP = "LOOP"; IF = "IF"  # noqa: E702

    def __repr__(self) -> str:
        return self.value

    __hash__ = object.__hash__  # members are singletons: identity hashing keeps Node.make cheap


NUMERIC = tuple(d for d in T.ALL if not d.is_bool)
FLOATS = tuple(d for d in T.ALL if d.is_float)
INTLIKE = tuple(d for d in T.ALL if not d.is_float)  # bool and integers
ALL = T.ALL


def _lowp(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Compute f16/bf16/float8 math in f32 and round once, as accelerators do."""
    def ref(*xs: np.ndarray) -> np.ndarray:
        dt = xs[0].dtype
        if dt.itemsize <= 2 and dt.kind not in "iub":
            return fn(*(x.astype(np.float32) for x in xs)).astype(dt)
        return fn(*xs).astype(dt, copy=False)
    return ref


def _same(accepted: Sequence[DType], what: str) -> Callable[[Sequence[DType], Any], DType]:
    def rule(ins: Sequence[DType], arg: Any) -> DType:
        for d in ins:
            if d not in accepted:
                raise DTypeError(f"{what}, got {d}")
        if any(d != ins[0] for d in ins):
            raise DTypeError(f"operands have different dtypes ({', '.join(map(str, ins))}); "
                             "convert one with (cast x DTYPE)")
        return ins[0]
    return rule


def _compare(ins: Sequence[DType], arg: Any) -> DType:
    _same(ALL, "")(ins, arg)
    return T.bool_


def _where(ins: Sequence[DType], arg: Any) -> DType:
    if ins[0] != T.bool_:
        raise DTypeError(f"where's condition must be bool, got {ins[0]}")
    return _same(ALL, "")(ins[1:], arg)


def _reduce(ins: Sequence[DType], arg: Any) -> DType:
    op = arg[0]
    if op in ("add", "mul") and ins[0].is_bool:
        raise DTypeError(f"reduce-{op} needs a numeric operand, got bool; cast first")
    return ins[0]


def _arg_dtype(ins: Sequence[DType], arg: Any) -> DType:
    return arg[0] if isinstance(arg, tuple) else arg


def _first(ins: Sequence[DType], arg: Any) -> DType:
    return ins[0]


def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.floor_divide(a, b)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.mod(a, b)


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _cast(x: np.ndarray, dt: DType) -> np.ndarray:
    if T.is_np_float(x.dtype) and dt.is_int:  # (bf16 and float8 widen exactly)
        # truncation toward zero; out-of-range and nan give an unspecified (here: wrapped) result
        x = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=0.0, neginf=0.0)
        return x.astype(np.int64 if dt.kind == "int" else np.uint64).astype(dt.np)
    if dt in T.FLOAT8 and x.dtype != dt.np:
        return T.saturate(x, dt)  # ONNX Cast's saturate=1
    return x.astype(dt.np)


def _reduce_ref(x: np.ndarray, arg: tuple) -> np.ndarray:
    op, axes = arg
    axes = tuple(axes)
    if not axes:
        return x.copy()
    if op == "max":
        dt = x.dtype
        if dt.itemsize == 1 and dt.kind not in "iub":  # float8: in f32, where -inf exists (e4m3fn has none)
            x = x.astype(np.float32)
        return (np.max(x, axis=axes, keepdims=True, initial=_lowest(x.dtype)) if x.size else
                np.full([1 if i in axes else n for i, n in enumerate(x.shape)], _lowest(x.dtype), x.dtype)).astype(dt)
    acc = x.dtype
    if x.dtype.itemsize <= 2 and x.dtype.kind not in "iub":
        acc = np.float32  # f16/bf16/float8 accumulate in f32, as accelerators do
    elif op == "add" and x.dtype.kind == "f":
        acc = np.float64  # sums: the oracle accumulates wide, then rounds once
    # products accumulate in their own dtype, as numpy's prod does (an overflow midway is an overflow)
    fn = np.sum if op == "add" else np.prod
    return fn(x, axis=axes, keepdims=True, dtype=acc).astype(x.dtype)


def _lowest(dt: np.dtype) -> Any:
    if dt == np.bool_:
        return False
    if dt.kind in "iu" or T.is_np_int4(dt):
        return T.iinfo(dt).min
    return -np.inf


# threefry2x32-20 (Salmon et al., SC'11): the counter-based generator behind RAND
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def threefry2x32(key: tuple[int, int], c0: np.ndarray, c1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds over uint32 counter arrays (Random123's reference)."""
    m = np.uint32
    k0, k1 = m(key[0]), m(key[1])
    ks = (k0, k1, m(0x1BD11BDA) ^ k0 ^ k1)
    x0, x1 = (c0.astype(m) + ks[0]), (c1.astype(m) + ks[1])
    for r in range(20):
        x0 = x0 + x1
        rot = _ROT[r % 8]
        x1 = ((x1 << m(rot)) | (x1 >> m(32 - rot))) ^ x0
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = x0 + ks[i % 3]
            x1 = x1 + ks[(i + 1) % 3] + m(i)
    return x0, x1


def rand_key(seed: int, dyn: Any = None) -> tuple[int, int]:
    """RAND's threefry key: the static seed, XORed with the runtime seed operand's 64 bits (an i64 as
    two's complement, a u32 zero-extended) when there is one, split into two 32-bit halves. So
    `:seed 5` and a tensor holding 5 give the same bits."""
    k = (seed ^ int(dyn)) if dyn is not None else seed
    return k & 0xFFFFFFFF, (k >> 32) & 0xFFFFFFFF


def _rand_ref(shape: tuple[int, ...], seed: int, dyn: Any = None) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    ctr = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x0, _ = threefry2x32(rand_key(seed, None if dyn is None else np.asarray(dyn).item()),
                             (ctr & 0xFFFFFFFF).astype(np.uint32), (ctr >> 32).astype(np.uint32))
    return x0.reshape(shape)


@dataclass(frozen=True)
class Ctx:
    """What a reference implementation may read besides its operands."""
    arg: Any
    shape: tuple[int, ...]
    dtype: DType
    env: Mapping[str, int]  # dimension symbols -> values
    inputs: Mapping[str, np.ndarray]  # BUFFER name -> argument array
    memo: dict | None = None  # one evaluation's results of multi-result nodes (LOOP, IF), by spec and operands
    control: Callable[..., list] | None = None  # runs a loop or branch: (spec, operands, env) -> results


@dataclass(frozen=True)
class OpInfo:
    op: Op
    group: str
    arity: int  # -1: variable
    dtypes: tuple[DType, ...]  # operand dtypes the op applies to
    dtype_rule: Callable[[Sequence[DType], Any], DType]
    ref: Callable[..., np.ndarray]  # ref(ctx, *operands): the numpy semantics
    doc: str
    keywords: frozenset[str] = frozenset()  # the `:key`s its source form accepts
    arg: str = "none"  # what Node.arg holds: a key of ARG_KINDS
    cost: int = 1  # rough scalar instructions per element once decomposed: 0 computes nothing
    commutative: bool = False  # op(a, b) == op(b, a) bit for bit, signed zeros included
    associative: bool = False  # op(op(a, b), c) == op(a, op(b, c)) in exact arithmetic
    reduces: str | None = None  # the REDUCE :op name this op combines with
    identity: Callable[[DType], Any] | None = None  # combiners: the value x with op(x, a) == a
    # vjp(g, node, ct) -> one cotangent (or None: no gradient) per operand; None: the op passes no
    # gradient (flat almost everywhere, or a leaf)
    vjp: Callable[..., tuple] | None = None


def _alu(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda ctx, *xs: fn(*xs)


def _const_ref(ctx: Ctx) -> np.ndarray:
    v = ctx.arg
    if not isinstance(v, (int, float, bool)):
        v = D.evaluate(v, ctx.env)
    return np.array(v).astype(ctx.dtype.np)


def _index_ref(ctx: Ctx) -> np.ndarray:
    axis = ctx.arg[1]
    n = ctx.shape[axis]
    r = np.arange(n, dtype=ctx.dtype.np).reshape([n if i == axis else 1 for i in range(len(ctx.shape))])
    return np.broadcast_to(r, ctx.shape)


def extern_params(arg: tuple) -> dict[str, Any]:
    """An EXTERN node's kernel parameters (a collective's :op, :axis, :root, world size)."""
    return dict(arg[2]) if len(arg) > 2 else {}


def _extern_ref(ctx: Ctx, *xs: np.ndarray) -> np.ndarray:
    return np.asarray(EXTERNS[ctx.arg[1]](*xs, **extern_params(ctx.arg))).astype(ctx.dtype.np)


def _vjp_extern(g: Any, n: Any, ct: Any) -> tuple:
    return g.matmul_t(n, ct) if n.arg[1] == "matmul" else (g.collective_t(n, ct),)


def _control_dtype(ins: Sequence[DType], arg: Any) -> DType:
    return arg[0].out_spec(arg[1])[0]


def _control_ref(ctx: Ctx, *xs: np.ndarray) -> np.ndarray:
    """A loop's or branch's result k: the whole statement runs once per evaluation (ctx.memo),
    by the interpreter's runner (caten.ir.control builds on this table: it cannot be imported here)."""
    spec, k = ctx.arg
    memo = ctx.memo if ctx.memo is not None else {}
    key = (id(spec), tuple(id(x) for x in xs))
    if key not in memo:
        if ctx.control is None:
            raise ValueError("a LOOP or IF is evaluated by caten.ir.interpret.evaluate")
        memo[key] = (ctx.control(spec, xs, dict(ctx.env)), xs)  # (xs kept: their ids stay theirs)
    return memo[key][0][k]


def _vjp_joint(g: Any, n: Any, ct: Any) -> tuple:
    """LOOP and IF results are differentiated together, one statement at a time, by
    caten.autodiff.control (a rule per result would see only its own cotangent)."""
    raise NotImplementedError("a loop's or branch's results are differentiated by caten.autodiff.control")


def _e(op: Op, group: str, arity: int, dts: Sequence[DType], rule, ref, doc: str, **facts: Any) -> OpInfo:
    if "keywords" in facts:
        facts["keywords"] = frozenset(facts["keywords"])
    return OpInfo(op, group, arity, tuple(dts), rule, ref, doc, **facts)


def _zero(dt: DType) -> Any:
    return False if dt.is_bool else 0.0 if dt.is_float else 0


def _one(dt: DType) -> Any:
    return True if dt.is_bool else 1.0 if dt.is_float else 1


def _lowest_of(dt: DType) -> Any:
    """The identity of max: the dtype's lowest value (-inf for floats, False for bool; a float8
    format without an infinity: its lowest finite value, -inf being nan there)."""
    f = T.MINIFLOAT.get(dt)
    if f is not None and not f.inf:
        import ml_dtypes  # (here: caten.ir.dtypes imports it on first use)

        return -float(ml_dtypes.finfo(dt.np).max)
    v = _lowest(np.dtype(dt.np))
    return v if isinstance(v, bool) else float(v) if dt.is_float else int(v)


# what a node's `arg` may hold, by ARG_KINDS key (the verifier checks it)
def _is_dtype(a: Any) -> bool:
    return isinstance(a, DType)


def _is_scalar(a: Any) -> bool:
    return isinstance(a, (bool, int, float)) or isinstance(a, D.DimExpr)


ARG_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "none": ("nothing", lambda a: a is None),
    "dtype": ("the target dtype", _is_dtype),
    "scalar": ("a number or a dimension expression", _is_scalar),
    "buffer": ("(dtype, index, name)", lambda a: isinstance(a, tuple) and len(a) == 3 and _is_dtype(a[0])
               and isinstance(a[1], int) and isinstance(a[2], str)),
    "reduce": ("(op, axes): op one of add mul max, axes a sorted tuple of ints",
               lambda a: isinstance(a, tuple) and len(a) == 2 and a[0] in REDUCE_OPS
               and isinstance(a[1], tuple) and all(isinstance(x, int) for x in a[1]) and list(a[1]) == sorted(a[1])),
    "view": ("a View", lambda a: isinstance(a, View)),
    "index": ("(dtype, axis)", lambda a: isinstance(a, tuple) and len(a) == 2 and _is_dtype(a[0])
              and isinstance(a[1], int)),
    "axis": ("an axis (an int)", lambda a: isinstance(a, int) and not isinstance(a, bool)),
    "sort": ("(axis, descending)", lambda a: isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], int)
             and not isinstance(a[0], bool) and isinstance(a[1], bool)),
    "scatter": ("(axis, op): op one of add mul max min set", lambda a: isinstance(a, tuple) and len(a) == 2
                and isinstance(a[0], int) and not isinstance(a[0], bool) and a[1] in SCATTER_OPS),
    "rand": ("(u32, seed)", lambda a: isinstance(a, tuple) and len(a) == 2 and a[0] == T.u32
             and isinstance(a[1], int)),
    "control": ("(Loop or Branch, result index)", lambda a: isinstance(a, tuple) and len(a) == 2
                and hasattr(a[0], "out_spec") and isinstance(a[1], int) and 0 <= a[1] < a[0].n_outputs),
    "extern": ("(dtype, kernel name) or (dtype, kernel name, sorted ((key, value) ...) parameters)",
               lambda a: isinstance(a, tuple) and len(a) in (2, 3) and _is_dtype(a[0]) and a[1] in EXTERNS
               and (len(a) == 2 or isinstance(a[2], tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in a[2])
                    and list(a[2]) == sorted(a[2]))),
}


# vector-Jacobian products ---------------------------------------------------------------
# Each takes the builders `g`, the node n (its operands n.src, its value n itself: a rule may reuse
# the forward value, which the scheduler then keeps rather than recomputes) and the cotangent ct
# of n; it returns one cotangent per operand. Integer and bool values carry no cotangent: the
# transform never asks a rule for one.
_LN2 = 0.6931471805599453


def _vjp_cast(g, n, ct):
    x = n.src[0]
    return (g.cast(ct, x.dtype) if x.dtype.is_float and n.dtype.is_float else None,)


def _vjp_max(g, n, ct):
    a, b = n.src
    # ties split the cotangent evenly (torch.maximum's choice; any subgradient is valid)
    wa = g.add(g.as_float(g.lt(b, a), ct), g.mul(g.as_float(g.eq(a, b), ct), 0.5))
    return g.mul(ct, wa), g.mul(ct, g.add(g.neg(wa), 1.0))


def _vjp_mod(g, n, ct):
    a, b = n.src
    if not n.dtype.is_float:
        return None, None
    return ct, g.neg(g.mul(ct, g.floordiv(a, b)))


def _vjp_reduce(g, n, ct):
    x = n.src[0]
    op, axes = n.arg
    if op == "add":
        return (g.expand(ct, x.shape),)
    y = g.expand(n, x.shape)
    if op == "max":  # ties share the cotangent evenly (torch.amax's choice)
        hit = g.as_float(g.eq(x, y), x)
        return (g.mul(g.expand(g.div(ct, g.sum_axes(hit, axes)), x.shape), hit),)
    # product: the product of the others without dividing by zero (exact with one zero among them)
    zero = g.eq(x, 0.0)
    zeros = g.expand(g.sum_axes(g.as_float(zero, x), axes), x.shape)
    others = g.expand(g.mul(ct, g.prod_axes(g.where(zero, 1.0, x), axes)), x.shape)
    return (g.where(zero, g.where(g.eq(zeros, 1.0), others, 0.0),
                    g.where(g.eq(zeros, 0.0), g.div(others, g.where(zero, 1.0, x)), 0.0)),)


_F = "needs a float operand (cast first)"
_DIV, _POLY = 4, 20  # costs: a divide/sqrt-class instruction, a polynomial transcendental
_COMM = {"commutative": True, "associative": True}  # and-style ops: commutative and associative
_VIEW_KEYS = ("reshape", "permute", "swap", "expand", "shrink", "pad", "flip", "slice", "squeeze", "unsqueeze",
              "strided")
TABLE: dict[Op, OpInfo] = {i.op: i for i in (
    _e(Op.NEG, "unary", 1, NUMERIC, _same(NUMERIC, "NEG needs a numeric operand"), _alu(np.negative),
       "negate: -x (integers wrap)", vjp=lambda g, n, ct: (g.neg(ct),)),
    _e(Op.RECIP, "unary", 1, FLOATS, _same(FLOATS, "RECIP " + _F), _alu(_lowp(np.reciprocal)), "reciprocal 1/x",
       cost=_DIV, vjp=lambda g, n, ct: (g.neg(g.mul(ct, g.mul(n, n))),)),
    _e(Op.SQRT, "unary", 1, FLOATS, _same(FLOATS, "SQRT " + _F), _alu(_lowp(np.sqrt)), "square root of x",
       cost=_DIV, vjp=lambda g, n, ct: (g.div(ct, g.mul(n, 2.0)),)),
    _e(Op.EXP2, "unary", 1, FLOATS, _same(FLOATS, "EXP2 " + _F), _alu(_lowp(np.exp2)), "two raised to the power x",
       cost=_POLY, vjp=lambda g, n, ct: (g.mul(ct, g.mul(n, _LN2)),)),
    _e(Op.LOG2, "unary", 1, FLOATS, _same(FLOATS, "LOG2 " + _F), _alu(_lowp(np.log2)), "logarithm of x in base 2",
       cost=_POLY, vjp=lambda g, n, ct: (g.div(ct, g.mul(n.src[0], _LN2)),)),
    _e(Op.SIN, "unary", 1, FLOATS, _same(FLOATS, "SIN " + _F), _alu(_lowp(np.sin)), "sine of x in radians",
       cost=_POLY, vjp=lambda g, n, ct: (g.mul(ct, g.cos(n.src[0])),)),
    _e(Op.NOT, "unary", 1, INTLIKE, _same(INTLIKE, "NOT needs a bool or integer operand"), _alu(_not),
       "logical not of bool, bitwise not of integers"),
    _e(Op.CAST, "unary", 1, ALL, _arg_dtype, lambda ctx, x: _cast(x, ctx.dtype),
       "convert to another dtype: float->int truncates toward zero, ->bool is nonzero", arg="dtype",
       vjp=_vjp_cast),
    _e(Op.BITCAST, "unary", 1, ALL, _bitcast_dtype, lambda ctx, x: _bitcast_ref(x, ctx.dtype),
       "reinterpret the bits as another dtype of the same width (a bool as its byte 0/1)", arg="dtype"),
    _e(Op.ADD, "binary", 2, NUMERIC, _same(NUMERIC, "ADD needs numeric operands"), _alu(_lowp(np.add)),
       "add: a + b (integers wrap)", **_COMM, reduces="add", identity=_zero, vjp=lambda g, n, ct: (ct, ct)),
    _e(Op.MUL, "binary", 2, NUMERIC, _same(NUMERIC, "MUL needs numeric operands"), _alu(_lowp(np.multiply)),
       "multiply: a * b (integers wrap)", **_COMM, reduces="mul", identity=_one,
       vjp=lambda g, n, ct: (g.mul(ct, n.src[1]), g.mul(ct, n.src[0]))),
    _e(Op.FDIV, "binary", 2, FLOATS, _same(FLOATS, "FDIV " + _F), _alu(_lowp(np.true_divide)),
       "true division a / b, correctly rounded (IEEE 754, as numpy's /)", cost=_DIV,
       vjp=lambda g, n, ct: (g.div(ct, n.src[1]), g.neg(g.div(g.mul(ct, n), n.src[1])))),
    _e(Op.IDIV, "binary", 2, NUMERIC, _same(NUMERIC, "IDIV needs numeric operands"), _alu(_lowp(_idiv)),
       "floor division, as numpy's // (integer x // 0 is 0)", cost=_DIV),
    _e(Op.MOD, "binary", 2, NUMERIC, _same(NUMERIC, "MOD needs numeric operands"), _alu(_lowp(_mod)),
       "remainder with the divisor's sign, as numpy's % (integer x % 0 is 0)", cost=_DIV, vjp=_vjp_mod),
    # MAX is not commutative bit for bit: max(-0.0, 0.0) and max(0.0, -0.0) differ in sign
    _e(Op.MAX, "binary", 2, ALL, _same(ALL, ""), _alu(_lowp(np.maximum)),
       "elementwise maximum (nan propagates; or for bool)", associative=True, reduces="max", identity=_lowest_of,
       vjp=_vjp_max),
    _e(Op.AND, "binary", 2, INTLIKE, _same(INTLIKE, "AND needs bool or integer operands"), _alu(np.bitwise_and),
       "logical and of bool, bitwise and of integers", **_COMM),
    _e(Op.OR, "binary", 2, INTLIKE, _same(INTLIKE, "OR needs bool or integer operands"), _alu(np.bitwise_or),
       "logical or of bool, bitwise or of integers", **_COMM, identity=_zero),
    _e(Op.XOR, "binary", 2, INTLIKE, _same(INTLIKE, "XOR needs bool or integer operands"), _alu(np.bitwise_xor),
       "logical xor of bool, bitwise xor of integers", **_COMM),
    _e(Op.CMPLT, "binary", 2, ALL, _compare, _alu(np.less), "less than: a < b, giving bool"),
    _e(Op.CMPNE, "binary", 2, ALL, _compare, _alu(np.not_equal), "not equal: a != b, giving bool (nan != nan)",
       commutative=True),
    _e(Op.WHERE, "ternary", 3, ALL, _where, _alu(np.where), "select c ? a : b elementwise",
       vjp=lambda g, n, ct: (None, g.select(n.src[0], ct), g.where(n.src[0], 0.0, ct))),
    _e(Op.REDUCE, "reduce", 1, ALL, _reduce, lambda ctx, x: _reduce_ref(x, ctx.arg),
       "reduce with add, mul or max over axes, keeping them as size 1", keywords=("op", "axis", "keepdims"),
       arg="reduce", cost=_DIV, vjp=_vjp_reduce),
    _e(Op.BUFFER, "memory", 0, ALL, _arg_dtype, lambda ctx: ctx.inputs[ctx.arg[1]],
       "a program input: an array bound at call time", arg="buffer", cost=0),
    _e(Op.CONST, "memory", 0, ALL, _arg_dtype, _const_ref, "a scalar literal or a dimension symbol's value",
       keywords=("dtype", "shape"), arg="scalar", cost=0),
    _e(Op.VIEW, "memory", 1, ALL, _first, lambda ctx, x: ctx.arg.apply(x, ctx.env),
       "reshape/permute/expand/shrink/pad/flip/step as shape, strides, offset and mask; never a copy",
       keywords=_VIEW_KEYS, arg="view", cost=0, vjp=lambda g, n, ct: (g.view_transpose(n, ct),)),
    _e(Op.COPY, "memory", 1, ALL, _first, _alu(lambda x: np.array(x, copy=True)),
       "materialize into a fresh contiguous buffer", vjp=lambda g, n, ct: (ct,)),
    _e(Op.INDEX, "index", 0, (T.i32, T.i64), _arg_dtype, _index_ref,
       "the coordinate along an axis (arange, one-hot, argmax)", keywords=("axis", "dtype"), arg="index", cost=0),
    _e(Op.GATHER, "index", 2, ALL, _gather_dtype, _gather_ref,
       "x at data-dependent coordinates: y[p] = x[p with :axis replaced by i[p]] (y has i's shape; a negative "
       "index counts from the end; an index outside [-n, n), or a position past x's other axes, reads 0)",
       keywords=("axis",), arg="axis", vjp=lambda g, n, ct: (g.gather_t(n, ct), None)),
    _e(Op.SCATTER, "index", 3, ALL, _scatter_dtype, _scatter_ref,
       "x with s combined in at data-dependent coordinates: for every position p of i, in row-major order, "
       "y[p with :axis replaced by i[p]] = op(it, s[p]) (:op add, mul, max, min or set: the last wins; a "
       "negative index counts from the end; an index outside [-n, n), or a position past x's other axes, is "
       "skipped)", keywords=("axis", "op"), arg="scatter", vjp=lambda g, n, ct: g.scatter_t(n, ct)),
    _e(Op.SORT, "index", 1, ALL, _sort_dtype, _sort_ref,
       "the stable sorting order along :axis (i64 indices: ties keep their order; nan last, or first with "
       ":descending), a merge sort of its own kernel", keywords=("axis", "descending"), arg="sort"),
    # dtypes: the output's u32 and a runtime seed operand's u32 or i64 (the arg keeps the output u32)
    _e(Op.RAND, "other", -1, (T.u32, T.i64), _arg_dtype, lambda ctx, *dyn: _rand_ref(ctx.shape, ctx.arg[1], *dyn),
       "uniform u32 bits from threefry2x32-20 keyed by the seed (XOR an optional rank-0 u32/i64 operand, "
       "a seed known at run time), counter = flat index", keywords=("seed",), arg="rand", cost=2 * _POLY),
    _e(Op.EXTERN, "other", -1, ALL, _arg_dtype, _extern_ref,
       "a call to a host kernel between compiled ones: BLAS gemm (\"matmul\", placed by a rule) or a collective "
       "over torch.distributed's group (\"all-reduce\" :reduce, \"all-gather\" :axis :world, \"reduce-scatter\" "
       ":axis :reduce :world, \"broadcast\" :root, \"reduce\" :root; the identity without a group)",
       keywords=("dtype", "shape", "reduce", "axis", "root", "world"), arg="extern", vjp=_vjp_extern),
    _e(Op.LOOP, "control", -1, ALL, _control_dtype, _control_ref,
       "result k of a loop: carries, captures, scanned tensors and runtime bounds in; a body sub-graph run per "
       "trip while a counter stays below its end and/or a condition sub-graph holds (while, fori, scan); the "
       "final carries, then the per-trip results stacked", arg="control", vjp=_vjp_joint),
    _e(Op.IF, "control", -1, ALL, _control_dtype, _control_ref,
       "result k of a branch: a rank-0 bool and captures in; only the taken body sub-graph runs",
       arg="control", vjp=_vjp_joint),
)}


TABLE.update({o: replace(i, ref=T.int4_ref(i.ref, o is Op.REDUCE)) for o, i in TABLE.items()
              if o not in (Op.BUFFER, Op.EXTERN, Op.LOOP, Op.IF)})  # i4/u4: computed in i32, wrapped
ELEMENTWISE = frozenset(o for o, i in TABLE.items() if i.group in ("unary", "binary", "ternary"))
# REDUCE :op name -> the op that combines it; the combiners are the ops with an identity
# (OR too: a bool max is lowered as OR)
REDUCERS: dict[str, Op] = {i.reduces: o for o, i in TABLE.items() if i.reduces}
REDUCE_OPS = tuple(REDUCERS)
COMBINERS = frozenset(o for o, i in TABLE.items() if i.identity is not None)
# the scheduler's cost classes: nothing computed; worth storing rather than recomputing under a
# broadcast; polynomial math worth storing once when a reduction and another stage both read it
FREE = frozenset(o for o, i in TABLE.items() if i.cost == 0)
HEAVY = frozenset(o for o, i in TABLE.items() if i.cost >= _DIV)
TRANSCENDENTAL = frozenset(o for o, i in TABLE.items() if i.group == "unary" and i.cost >= _POLY)

# numpy references of the kernels that EXTERN may name
# (called with the node's parameters as keywords: a collective's of caten.ir.collective)
EXTERNS: dict[str, Callable[..., np.ndarray]] = {
    "matmul": np.matmul,
    **COLLECTIVES,
}


def info(op: Op) -> OpInfo:
    return TABLE[op]
