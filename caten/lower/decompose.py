"""The decompose pass: each hard op of the loop IR rewritten, once, into primitive ops.

The polynomials and range reductions of EXP2/LOG2/SIN, floor division and modulo of integers,
floats and dims, the NaN-propagating MAX and threefry (`rand`) live here, not in each renderer; a
renderer declares the ops it has natively (`native`) and the pass leaves those alone, so a
renderer is a table of spellings of the primitives (caten.loopir lists them).

`native` holds ops (`Op.EXP2`, `"rand"`) or (op, class) pairs with class "float" or "int",
e.g. `(Op.IDIV, "int")` for a target whose integer division already floors. MAX with arg "acc"
(a reduction update, which renderers spell as their max intrinsic) is never decomposed. Every
`dim` leaf but a dynamic dim's is (caten.lower.dimx): it keeps its Dim (host-side sizes, the
device grid mapping read it) and gets its value in primitives as its one source.

A second walk writes caten's conversions (caten.lower.numerics_narrow): every op that can leave
the f16/bf16/float8 grid is computed in f32 and rounded by the pass, unless the target rounds to that
dtype natively (`("round", "f16")`: LLVM's `fptrunc` to half), and every float->int CAST
saturates in primitives; an i4/u4 result is wrapped to 4 bits unless the target says
`("wrap", "i4")` (LLVM's i4 type). So a renderer spells f16/bf16/float8 only as storage (load and store) and
float->int only as `ftoi` of a value in range. EXP2/LOG2/SIN of f16/bf16/float8 are computed in f32 (LOG2
of f32 and narrower in f64) and rounded once at the end.

Loop IR is a hash-consed DAG: each distinct expression is rewritten once (memo), with an
explicit stack (a deep chain of ops must not hit Python's recursion limit).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.ir.walk import post_order
from caten.loopir import X
from caten.lower import numerics_float as flt
from caten.lower import numerics_int as ints
from caten.lower import numerics_narrow as nar
from caten.lower import numerics_sin as sine
from caten.lower import xops as O
from caten.lower.dimx import dim_leaf

DECOMPOSED = (Op.EXP2, Op.LOG2, Op.SIN, Op.IDIV, Op.MOD, Op.MAX, "rand")


def _wide(fn: Callable[[X], X], via=T.f32) -> Callable[[X], X]:
    """fn on f32/f64; f16/bf16 (and, for via=f64, f32) widened first and rounded back."""
    def run(x: X) -> X:
        dt = x.dtype
        if dt.bits >= via.bits:
            return fn(x)
        y = fn(O.cast(x, via))
        return O.cast(O.cast(y, T.f32), dt) if dt.bits < 32 else O.cast(y, dt)
    return run


def _wide2(fn: Callable[[X, X], X]) -> Callable[[X, X], X]:
    def run(a: X, b: X) -> X:
        if a.dtype.bits >= 32:
            return fn(a, b)
        return O.cast(fn(O.cast(a, T.f32), O.cast(b, T.f32)), a.dtype)
    return run


_FLOAT1 = {Op.EXP2: _wide(flt.exp2), Op.LOG2: _wide(flt.log2_f64, T.f64), Op.SIN: _wide(sine.sin)}
_FLOAT2 = {Op.IDIV: _wide2(lambda a, b: flt.divmod_(a, b, False)),
           Op.MOD: _wide2(lambda a, b: flt.divmod_(a, b, True)), Op.MAX: flt.fmax}
_INT2 = {Op.IDIV: lambda a, b: ints.divmod_(a, b, False), Op.MOD: lambda a, b: ints.divmod_(a, b, True)}


# ops whose f16/bf16 result can fall between the dtype's values (NEG, MAX and selects cannot)
ROUNDED = (Op.ADD, Op.MUL, Op.FDIV, Op.RECIP, Op.SQRT)


def _native_round(dt: T.DType, native: Collection) -> bool:
    return ("round", dt.name) in native


def _narrow(x: X, src: tuple[X, ...], native: Collection, defines: Mapping) -> X | None:
    """x with caten's conversions written in primitives (the second walk), or None to keep it."""
    op, dt = x.op, x.dtype
    if dt in T.INT4 and ("wrap", dt.name) not in native and op not in nar.KEEPS_INT4:
        s = src[0] if src else x
        if op is Op.CAST and s.dtype.is_float:
            return nar.wrap4(nar.float_to_int(s, dt))
        return nar.wrap4(X.make(op, dt, src, x.arg))
    if op is Op.CAST:
        s = src[0]
        if dt.is_int and s.dtype.is_float:
            return nar.float_to_int(s, dt)
        if dt in nar.NARROW and s.dtype != dt and not _native_round(dt, native):
            return nar.round_to(O.cast(s, T.f32), dt)  # (f64 rounds through f32, as the reference does)
        return None
    if dt in nar.NARROW and op in ROUNDED and not _native_round(dt, native):
        return nar.round_to(X.make(op, T.f32, src, x.arg), dt)
    return None


def _const(x: X, zero: bool) -> bool:
    return x.op == "const" and (x.arg == 0 if zero else math.isnan(x.arg))


def _abs_of(src: tuple[X, ...]) -> X | None:
    """A, when WHERE(src) is the `abs` composite's selects over a float A (ops/arith.lisp:
    where(0 < A, A, where(A < 0, -A, where(A != A, nan, 0)))): one sign-bit clear gives the same
    values, for the six operations (an erf of a GELU spent 6 of its ~50)."""
    c, a, rest = src
    if c.op is not Op.CMPLT or c.src[1] is not a or not _const(c.src[0], True) or rest.op is not Op.WHERE:
        return None
    c2, n, r2 = rest.src
    if c2.op is not Op.CMPLT or c2.src[0] is not a or not _const(c2.src[1], True) \
            or n.op is not Op.NEG or n.src[0] is not a or r2.op is not Op.WHERE:
        return None
    c3, v_nan, v_zero = r2.src
    if c3.op is not Op.CMPNE or c3.src != (a, a) or not _const(v_nan, False) or not _const(v_zero, True):
        return None
    return a


def _expand(x: X, src: tuple[X, ...], native: Collection, defines: Mapping) -> X | None:
    """x's op written in primitives over the rewritten operands (a dim leaf as its value,
    caten.lower.dimx), or None to keep it."""
    op = x.op
    if op is Op.WHERE and x.dtype.is_float and x.dtype.bits >= 32:  # (f16/bf16 have no bitcast in loop IR)
        a = _abs_of(src)
        return None if a is None else O.fabs(a)
    if op == "dim" and not x.src:
        return dim_leaf(x.arg, defines)
    if op not in DECOMPOSED or op in native:
        return None
    if op == "rand":
        return ints.threefry(src[0], x.arg, src[1] if len(src) > 1 else None)
    if x.dtype.is_float and (op, "float") not in native:
        if op in _FLOAT1:
            return _FLOAT1[op](src[0])
        if op is Op.MAX and x.arg == "acc":
            return None
        return _FLOAT2[op](src[0], src[1])
    if x.dtype.is_int and op in _INT2 and (op, "int") not in native:
        return _INT2[op](src[0], src[1])
    return None


class Decomposer:
    """Rewrites expressions, remembering every result (one per distinct expression)."""

    def __init__(self, native: Collection = (), defines: Mapping | None = None,
                 expand: Callable[[X, tuple[X, ...], Collection, Mapping], X | None] = _expand):
        self.native = frozenset(native)
        self.defines = defines or {}
        self.expand = expand
        self.memo: dict[X, X] = {}

    def x(self, root: X) -> X:
        memo = self.memo
        for top in post_order([root], known=memo.__contains__):
            src = tuple(memo[s] for s in top.src)
            new = self.expand(top, src, self.native, self.defines)
            if new is None:
                new = top if src == top.src else X.make(top.op, top.dtype, src, top.arg)
            memo[top] = new
        return memo[root]

    def stmt(self, s: object) -> object:
        changes = {}
        for f in dataclasses.fields(s):  # type: ignore[arg-type]
            v = getattr(s, f.name)
            if isinstance(v, X):
                nv = self.x(v)
                if nv is not v:
                    changes[f.name] = nv
            elif isinstance(v, tuple) and v and all(isinstance(e, X) for e in v):  # (DirectMM's lists)
                nt = tuple(self.x(e) for e in v)
                if nt != v:
                    changes[f.name] = nt
            elif f.name == "body" and isinstance(v, list):
                changes[f.name] = self.stmts(v)
        return dataclasses.replace(s, **changes) if changes else s  # type: ignore[type-var]

    def stmts(self, body: Sequence) -> list:
        return [self.stmt(s) for s in body]


def decompose(kernels: Sequence[L.Kernel], native: Collection = (),
              defines: Mapping | None = None) -> list[L.Kernel]:
    """New kernels whose expressions use only primitives and the ops in `native`; the input is
    left unchanged. Shared sub-expressions stay shared across all kernels. `defines`: the
    program's dims given a value (`Program.dim_defines`), expanded inside dim expressions."""
    out = list(kernels)
    for d in (Decomposer(native, defines), Decomposer(native, defines, _narrow)):
        out = [dataclasses.replace(k, body=d.stmts(k.body)) for k in out]
    return out
