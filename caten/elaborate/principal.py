"""The language forms of the principal ops: `(ADD a b)`, `(REDUCE x :op add :axis 1)`,
`(VIEW x :slice [[0 -1 2]])`, ...

This is where weak literals meet tensors (they take the tensor's dtype) and where
operations on literals alone are folded at compile time — with the op table's own numpy
reference, so folding can never disagree with the interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from caten.elaborate.values import Lit, Tensor, describe
from caten.errors import Error, Span
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.build import ShapeError
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import COLLECTIVES, REDUCE_OPS, TABLE, Ctx, DTypeError, Op
from caten.ir.view import View

_DIM_FOLD: dict[Op, Callable[..., Dim]] = {
    Op.ADD: D.add, Op.MUL: D.mul, Op.IDIV: D.floordiv, Op.MOD: D.mod, Op.MAX: D.dmax,
    Op.NEG: lambda a: D.mul(a, -1),
}


def to_tensor(v: Any, span: Span, dtype: DType | None = None) -> Tensor:
    """A tensor for v: literals become constants of `dtype` (or their default dtype)."""
    if isinstance(v, Tensor):
        return v
    if not isinstance(v, Lit):
        raise Error(f"expected a tensor or a number, got {describe(v)}", span)
    dt = dtype or v.default_dtype
    if v.kind == "float" and not dt.is_float:
        raise Error(f"the float literal {v.value} meets an integer or bool tensor ({dt})", span,
                    "write an integer, or cast the tensor to a float dtype")
    if v.kind == "dim" and dt != T.i64:
        raise Error(f"a dimension used as a value is an i64 scalar, but it meets a {dt} tensor", span,
                    f"convert it with (cast {v.value} {dt})")
    if v.kind == "bool" and not dt.is_bool:
        raise Error(f"the literal {'true' if v.value else 'false'} meets a {dt} tensor", span,
                    "convert with (cast x DTYPE)")
    if v.kind in ("int", "dim") and dt.is_bool and v.value not in (0, 1):
        raise Error(f"the integer literal {v.value} meets a bool tensor", span, "use true or false")
    if v.concrete and dt.is_int and v.kind in ("int", "dim"):
        info = T.iinfo(dt)
        if not info.min <= int(v.value) <= info.max:
            raise Error(f"the literal {v.value} does not fit {dt} ({info.min}..{info.max})", span)
    return Tensor(B.const(v.value, dt))


def _fold(op: Op, lits: Sequence[Lit], arg: Any, span: Span) -> Lit | Tensor:
    """Compute an op over literals alone at compile time."""
    kinds = {lit.kind for lit in lits}
    if not all(lit.concrete for lit in lits):
        if op in _DIM_FOLD and kinds <= {"int", "dim"}:
            d = _DIM_FOLD[op](*(lit.value for lit in lits))
            if D.small(d):  # else computed at run time: repeated squaring would grow without bound
                return Lit(d, "dim")
        return apply_alu(op, [to_tensor(lit, span) for lit in lits], span, arg)
    if "bool" in kinds and len(kinds) > 1 and op is not Op.WHERE:
        raise Error("bool literals do not mix with numbers", span, "use (cast x DTYPE)")
    if op is Op.WHERE:
        dts = [T.bool_] + [_lit_dtype({lit.kind for lit in lits[1:]})] * 2
    else:
        dts = [_lit_dtype(kinds)] * len(lits)
    try:
        out_dt = TABLE[op].dtype_rule(dts, arg)
    except DTypeError as e:
        raise Error(str(e), span) from None
    for lit, dt in zip(lits, dts):
        if dt.is_int and not -(2 ** 63) <= int(lit.value) < 2 ** 63:
            raise Error(f"the integer {lit.value} does not fit i64", span)
    xs = [np.array(lit.value).astype(dt.np) for lit, dt in zip(lits, dts)]
    with np.errstate(all="ignore"):
        r = np.asarray(TABLE[op].ref(Ctx(arg, (), out_dt, {}, ()), *xs)).item()
    if out_dt.is_bool:
        return Lit(bool(r), "bool")
    if out_dt.is_float:
        return Lit(float(r), "float")
    return Lit(int(r), "dim" if "dim" in kinds else "int")


def _lit_dtype(kinds: set[str]) -> DType:
    if "float" in kinds:
        return T.f64
    if kinds == {"bool"}:
        return T.bool_
    return T.i64


def _unify(vals: Sequence[Any], span: Span) -> list[Tensor]:
    """Tensors for one dtype group: literals take the first tensor's dtype."""
    dt = next((v.dtype for v in vals if isinstance(v, Tensor)), None)
    if dt is None:
        dt = _lit_dtype({v.kind for v in vals if isinstance(v, Lit)})
        dt = T.f32 if dt == T.f64 else dt
    return [to_tensor(v, span, dt) for v in vals]


def apply_alu(op: Op, vals: Sequence[Any], span: Span, arg: Any = None) -> Lit | Tensor:
    """An elementwise principal op over tensors and/or literals (folded when all are literals)."""
    info = TABLE[op]
    if len(vals) != info.arity:
        raise Error(f"{op.value} takes {info.arity} operand{'s' if info.arity != 1 else ''}, got {len(vals)}", span)
    for v in vals:
        if not isinstance(v, (Tensor, Lit)):
            raise Error(f"{op.value} needs tensors or numbers, got {describe(v)}", span)
    if all(isinstance(v, Lit) for v in vals):
        return _fold(op, vals, arg, span)
    if op is Op.WHERE:
        ts = [to_tensor(vals[0], span, T.bool_)] + _unify(vals[1:], span)
    else:
        ts = _unify(vals, span)
    try:
        return Tensor(B.alu(op, *(t.node for t in ts), arg=arg))
    except (DTypeError, ShapeError) as e:
        raise Error(str(e), span) from None


def cast(v: Any, dtype: Any, span: Span) -> Tensor:
    if not isinstance(dtype, DType):
        raise Error(f"cast needs a dtype such as f32, got {describe(dtype)}", span)
    if isinstance(v, Lit):
        if v.concrete:
            src = _lit_dtype({v.kind})
            val = np.asarray(TABLE[Op.CAST].ref(Ctx(dtype, (), dtype, {}, ()), np.array(v.value, src.np))).item()
            return Tensor(B.const(val, dtype))
        return Tensor(B.const(v.value, dtype))
    return Tensor(B.cast(to_tensor(v, span).node, dtype))


# shapes and axes given as values -----------------------------------------------------


def as_dim(v: Any, span: Span, what: str = "a dimension") -> Dim:
    if isinstance(v, Lit) and v.kind in ("int", "dim"):
        return v.value
    raise Error(f"expected {what}, got {describe(v)}", span)


def as_int(v: Any, span: Span, what: str = "an integer") -> int:
    d = as_dim(v, span, what)
    if not isinstance(d, int):
        raise Error(f"expected {what} known at compile time, got the dimension {d}", span)
    return d


def as_shape(v: Any, span: Span) -> tuple[Dim, ...]:
    if isinstance(v, Lit):
        return (as_dim(v, span),)
    if not isinstance(v, list):
        raise Error(f"expected a shape like [2 3], got {describe(v)}", span)
    return tuple(as_dim(x, span, "a dimension in the shape") for x in v)


def as_axes(v: Any, rank: int, span: Span) -> tuple[int, ...]:
    if v is None:
        return tuple(range(rank))
    raw = [as_int(x, span, "an axis") for x in v] if isinstance(v, list) else as_int(v, span, "an axis")
    try:
        return B.normalize_axes(raw, rank)
    except ShapeError as e:
        raise Error(str(e), span) from None


def one_axis(v: Any, rank: int, span: Span) -> int:
    """A single axis of a tensor of `rank` (negative counts from the end)."""
    if rank == 0:
        raise Error("a scalar has no axes", span)
    axes = as_axes(v, rank, span)
    if len(axes) != 1:
        raise Error(f"expected one axis, got {len(axes)}", span)
    return axes[0]


def as_pairs(v: Any, span: Span, what: str) -> list[tuple[Dim, Dim]]:
    if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
        raise Error(f"expected {what} as [[lo hi] ...], got {describe(v)}", span)
    return [(as_dim(a, span), as_dim(b, span)) for a, b in v]


def _shrink_bounds(b: tuple[Dim, Dim], n: Dim, span: Span) -> tuple[Dim, Dim]:
    """[start end) inside an axis of size n: refused when known to leave it, clamped to it over
    symbolic sizes (the shape then says so, and a call where it matters fails its constraint)."""
    s, e = b
    if isinstance(s, int) and isinstance(e, int) and isinstance(n, int):
        if not 0 <= s <= e <= n:
            raise Error(f"shrink bounds [{s} {e}] outside an axis of size {n}", span, "0 <= start <= end <= size")
        return s, e
    if isinstance(s, int) and s < 0 or isinstance(e, int) and e < 0:
        raise Error(f"shrink bounds [{s} {e}] are negative", span, "0 <= start <= end <= size")
    e = D.dmin(e, n)
    return (s if s == 0 else D.dmin(s, e)), e


def _slice_bounds(spec: Any, n: Dim, span: Span) -> tuple[Dim, Dim, int]:
    """Python's slice rules (negative from the end, clamped stops) over a possibly symbolic n."""
    if isinstance(spec, Lit):
        spec = [spec, Lit(D.add(as_dim(spec, span), 1) if as_dim(spec, span) != -1 else n, "dim")]
    if not isinstance(spec, list) or not 1 <= len(spec) <= 3:
        raise Error(f"a slice is [start stop step], got {describe(spec)}", span)
    start, stop, step = (list(spec) + [None, None, None])[:3]
    k = 1 if step is None else as_int(step, span, "a slice step")
    if k < 1:
        raise Error(f"slice steps must be >= 1, got {k}", span, "reverse with (flip x :axis k)")

    def norm(x: Any, default: Dim) -> Dim:
        if x is None:
            return default
        d = as_dim(x, span, "a slice bound")
        if isinstance(d, int) and d < 0:
            d = D.dmax(D.add(n, d), 0)
        if d == 0:
            return 0  # n is an extent (>= 0) even where its form hides it: min(0, n) = 0
        return D.dmin(d, n)

    s, e = norm(start, 0), norm(stop, n)
    e = e if s == 0 else D.dmax(e, s)
    return s, e, k


def view(x: Tensor, key: str, val: Any, span: Span) -> Tensor:
    """One movement op as a view of x."""
    n = x.node
    try:
        if key == "reshape":
            shape = list(as_shape(val, span))
            if shape.count(-1) > 1:
                raise Error("only one -1 may stand in a reshape", span)
            if -1 in shape:
                rest = D.prod(d for d in shape if d != -1)
                total = D.prod(n.shape)
                if D.divides(total, rest) is False:
                    raise Error(f"cannot reshape {B.fmt_shape(n.shape)} into {B.fmt_shape(shape)}", span)
                shape[shape.index(-1)] = D.floordiv(total, rest)
            return Tensor(B.reshape(n, shape))
        if key == "permute":
            if not isinstance(val, list):
                raise Error(f"permute needs a list of axes, got {describe(val)}", span)
            axes = [as_int(a, span, "an axis") for a in val]
            for a in axes:
                if not -n.rank <= a < n.rank:
                    raise Error(f"axis {a} is out of range for a tensor of rank {n.rank}", span)
            return Tensor(B.permute(n, [a % n.rank for a in axes]))
        if key == "swap":
            if not isinstance(val, list) or len(val) != 2:
                raise Error("expected :swap [A B]", span)
            a, b = one_axis(val[0], n.rank, span), one_axis(val[1], n.rank, span)
            perm = list(range(n.rank))
            perm[a], perm[b] = perm[b], perm[a]
            return Tensor(B.permute(n, perm))
        if key == "expand":
            return Tensor(B.expand(n, as_shape(val, span)))
        if key == "shrink":
            bounds = as_pairs(val, span, "bounds")
            return Tensor(B.shrink(n, [_shrink_bounds(b, d, span) for b, d in zip(bounds, n.shape)]
                                   + bounds[n.rank:]))
        if key == "pad":
            widths = as_pairs(val, span, "pad widths")
            if len(widths) > n.rank:
                raise Error(f"{len(widths)} pad widths for a tensor of rank {n.rank}", span)
            return Tensor(B.pad(n, widths + [(0, 0)] * (n.rank - len(widths))))
        if key == "flip":
            return Tensor(B.flip(n, as_axes(val, n.rank, span)))
        if key == "slice":
            specs = val if isinstance(val, list) else [val]
            if len(specs) > n.rank:
                raise Error(f"{len(specs)} slices for a tensor of rank {n.rank}", span)
            bounds = [_slice_bounds(s, d, span) for s, d in zip(specs, n.shape)]
            bounds += [(0, d, 1) for d in n.shape[len(specs):]]
            t = B.shrink(n, [(s, e) for s, e, _ in bounds])
            return Tensor(B.step(t, [k for _, _, k in bounds]))
        if key == "unsqueeze":
            a = as_int(val, span, "an axis")
            a = a % (n.rank + 1)
            return Tensor(B.reshape(n, n.shape[:a] + (1,) + n.shape[a:]))
        if key == "squeeze":
            axes = as_axes(val, n.rank, span)
            for a in axes:
                if n.shape[a] != 1:
                    raise Error(f"cannot squeeze axis {a} of size {n.shape[a]}", span)
            return Tensor(B.reshape(n, [d for i, d in enumerate(n.shape) if i not in axes]))
        if key == "strided":
            if not isinstance(val, list) or len(val) != 3:
                raise Error("expected :strided [SHAPE STRIDES OFFSET]", span)
            shape, strides = as_shape(val[0], span), as_shape(val[1], span)
            return Tensor(Node.make(Op.VIEW, n.dtype, shape, (n,), View(shape, strides, as_dim(val[2], span))))
    except ShapeError as e:
        raise Error(str(e), span) from None
    raise Error(f"unknown VIEW form :{key}", span,
                "one of :reshape :permute :swap :expand :shrink :pad :flip :slice :squeeze :unsqueeze :strided")


def reduce(x: Any, op: str, axis: Any, keepdims: bool, span: Span) -> Tensor:
    t = to_tensor(x, span)
    if op not in REDUCE_OPS:
        raise Error(f"REDUCE :op is add, mul or max, not {op}", span)
    axes = as_axes(axis, t.node.rank, span)
    try:
        r = B.reduce(t.node, op, axes)
    except DTypeError as e:
        raise Error(str(e), span) from None
    if not keepdims and axes:
        r = B.reshape(r, [d for i, d in enumerate(r.shape) if i not in axes])
    return Tensor(r)


def call(op: Op, args: list, kw: dict, span: Span) -> Any:
    """A principal op called from source: `(ADD a b)`, `(REDUCE x :op add :axis 1)`, ..."""
    def kwarg(k: str, default: Any = None) -> Any:
        return kw.get(k, default)

    info = TABLE[op]
    if info.group == "control":
        raise Error(f"{op.value} has sub-programs: it is written with a form", span,
                    "(while ...), (fori ...), (scan ...) build a LOOP; (if ...) and (cond ...) an IF")
    for k in kw:
        if k not in info.keywords:
            raise Error(f"{op.value} takes no :{k}", span, "it takes " + " ".join(
                ":" + w for w in sorted(info.keywords)) if info.keywords else "it takes no keywords")
    if info.group in ("unary", "binary", "ternary") and op not in (Op.CAST, Op.BITCAST):
        return apply_alu(op, args, span)
    if op is Op.CAST:
        if len(args) != 2:
            raise Error("expected (CAST x DTYPE)", span)
        return cast(args[0], args[1], span)
    if op is Op.BITCAST:
        if len(args) != 2 or not isinstance(args[1], DType):
            raise Error("expected (BITCAST x DTYPE)", span)
        try:
            return Tensor(B.bitcast(to_tensor(args[0], span).node, args[1]))
        except DTypeError as e:
            raise Error(str(e), span, "reinterpreting needs the same width: i32/u32/f32, i64/u64/f64, "
                        "i16/u16, i8/u8 (and bool to a byte)") from None
    if op is Op.REDUCE:
        _arity(op.value, args, 1, span)
        kd = kwarg("keepdims", Lit(False, "bool"))
        return reduce(args[0], kwarg("op", "add"), kwarg("axis"), bool(getattr(kd, "value", kd)), span)
    if op is Op.VIEW:
        _arity(op.value, args, 1, span)
        x = to_tensor(args[0], span)
        for k, v in kw.items():
            x = view(x, k, v, span)
        return x
    if op is Op.COPY:
        _arity(op.value, args, 1, span)
        return Tensor(B.copy(to_tensor(args[0], span).node))
    if op is Op.CONST:
        _arity(op.value, args, 1, span)
        dt = kwarg("dtype")
        v = args[0]
        t = cast(v, dt, span) if dt is not None else to_tensor(v, span)
        if "shape" in kw:
            try:
                return Tensor(B.expand(t.node, as_shape(kw["shape"], span)))
            except ShapeError as e:
                raise Error(str(e), span) from None
        return t
    if op is Op.INDEX:
        _arity(op.value, args, 1, span)
        shape = as_shape(args[0], span)
        axis = one_axis(kwarg("axis", Lit(0, "int")), len(shape), span)
        dt = kwarg("dtype", T.i64)
        if dt not in info.dtypes:
            raise Error(f"INDEX gives i32 or i64, not {describe(dt)}", span)
        return Tensor(B.index(shape, axis, dt))
    if op is Op.GATHER:
        _arity(op.value, args, 2, span)
        x, i = to_tensor(args[0], span), to_tensor(args[1], span)
        axis = one_axis(kwarg("axis", Lit(0, "int")), len(x.shape), span)
        if not i.dtype.is_int:
            raise Error(f"GATHER's index must be an integer tensor, not {describe(i.dtype)}", span)
        try:
            return Tensor(B.gather(x.node, i.node, axis))
        except ShapeError as e:
            raise Error(str(e), span, "the index has the data's rank and its sizes off :axis") from None
    if op is Op.SCATTER:
        _arity(op.value, args, 3, span)
        x, i, s = (to_tensor(a, span) for a in args)
        axis = one_axis(kwarg("axis", Lit(0, "int")), len(x.shape), span)
        sop = kwarg("op", "add")
        try:
            return Tensor(B.scatter(x.node, i.node, s.node, axis, sop))
        except (ShapeError, DTypeError) as e:
            raise Error(str(e), span, "(SCATTER x i s :axis k :op add|mul|max|min|set): i an integer tensor of "
                        "x's rank, s of i's shape and x's dtype") from None
    if op is Op.SORT:
        _arity(op.value, args, 1, span)
        x = to_tensor(args[0], span)
        axis = one_axis(kwarg("axis", Lit(-1, "int")), len(x.shape), span) if x.shape else 0
        desc = kwarg("descending", Lit(False, "bool"))
        return Tensor(B.sort(x.node, axis, bool(getattr(desc, "value", desc))))
    if op is Op.RAND:
        _arity(op.value, args, 1, span)
        return Tensor(_rand(as_shape(args[0], span), kwarg("seed", Lit(0, "int")), span))
    if op is Op.EXTERN:
        if not args or not isinstance(args[0], str):
            raise Error('expected (EXTERN "name" ARGS... :dtype D :shape S)', span)
        from caten.ir.ops import EXTERNS

        if args[0] not in EXTERNS:
            raise Error(f"unknown extern kernel '{args[0]}'", span, f"known: {', '.join(EXTERNS)}")
        srcs = [to_tensor(a, span).node for a in args[1:]]
        if args[0] in COLLECTIVES:
            return _collective(args[0], srcs, kw, span)
        if set(kw) - {"dtype", "shape"}:
            raise Error(f"EXTERN \"{args[0]}\" takes :dtype and :shape only", span)
        if "shape" not in kw:
            raise Error(f'EXTERN "{args[0]}" needs :shape', span)
        return Tensor(B.extern(args[0], kwarg("dtype", srcs[0].dtype), as_shape(kw["shape"], span), srcs))
    raise Error(f"{op.value} cannot be called from source", span)


def _collective(name: str, srcs: list[Node], kw: dict, span: Span) -> Tensor:
    """`(EXTERN "all-gather" X :axis 0)` and the other collectives: one operand; the shape and
    parameters from the kernel's rule (caten.ir.collective.check), the world size bound now."""
    from caten.ir.collective import check

    if len(srcs) != 1:
        raise Error(f"{name} takes one tensor, got {len(srcs)}", span)
    if "dtype" in kw or "shape" in kw:
        raise Error(f"{name} keeps its operand's dtype and computes its shape: no :dtype or :shape", span)
    params: dict[str, Any] = {}
    for k, v in kw.items():
        if v is None or isinstance(v, list) and not v:  # nil: the default
            continue
        key = "op" if k == "reduce" else k
        if key == "op":
            params[key] = v if isinstance(v, str) else getattr(v, "value", v)
        else:
            params[key] = as_int(v, span, f"an integer :{k}")
    x = srcs[0]
    try:
        shape, ps = check(name, x.dtype, x.shape, params)
    except ValueError as e:
        raise Error(str(e), span, "(all-reduce X :op sum|mean|max|min), (all-gather X :axis k), (reduce-scatter X "
                    ":axis k :op sum|mean|max|min), (broadcast X :root r): LANGUAGE.md section 15") from None
    return Tensor(B.extern(name, x.dtype, shape, (x,), ps))


def _rand(shape: tuple[Dim, ...], seed: Any, span: Span) -> Node:
    """RAND's seed: an integer known now, or a rank-0 integer tensor known at run time (u32 and i64
    as they are, other integers widened to i64)."""
    if not isinstance(seed, Tensor):
        return B.rand_bits(shape, as_int(seed, span, "an integer seed or an integer scalar tensor"))
    if seed.shape != () or not seed.dtype.is_int:
        raise Error(f"a RAND seed is an integer or an integer scalar tensor, got {describe(seed)}", span,
                    "reduce or index it to a scalar, and cast it to i64 or u32")
    dyn = seed.node if seed.dtype in (T.u32, T.i64) else B.cast(seed.node, T.i64)
    return B.rand_bits(shape, 0, dyn)


def _arity(name: str, args: list, n: int, span: Span) -> None:
    if len(args) != n:
        raise Error(f"`{name}` takes {n} argument{'s' if n != 1 else ''}, got {len(args)}", span)
