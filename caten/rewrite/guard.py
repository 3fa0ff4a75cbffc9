"""Guards (`:when`): a tiny compile-time language over the matched values, compiled to closures.

`(dtype ?x)`, `(shape ?x)`, `(rank ?x)`, `(const? ?x)`, `(float? ?x)`, `(int? ?x)`, `(bool? ?x)`,
`(dim ?x K)`, `(value ?x)` (a constant's value), `(lossless? FROM TO)` (every FROM value is exact in
TO), `(exact-recip? ?x)` (a float constant whose reciprocal is exact in its dtype),
`(add-identity? ?x)` (a constant c with a + c == a for every a: 0, or -0.0 for floats), `(len L)`,
`(nth L I)`, `(list ...)`, `+ - *` over integers, comparisons `= != < <= > >=`,
and `and`, `or`, `not`. Dtype names, numbers, `true`/`false` and `[...]` lists are literals.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.elaborate.values import Lit, Tensor
from caten.errors import Error
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.read.sexpr import Form, Num, SList, Str, Sym, head, show
from caten.rewrite.consts import value_const

# significant bits of each float dtype (with the implicit one)
_MANT = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53, "f8e4m3": 4, "f8e5m2": 3, "f8e4m3fnuz": 4, "f8e5m2fnuz": 3}


def lossless(a: DType, b: DType) -> bool:
    """Is every value of dtype `a` exactly representable in dtype `b` (so a cast through b is exact)?"""
    if a == b or a.is_bool:
        return True
    if a.is_int:
        if b.is_bool:
            return False
        if b.is_int:
            if a.kind == b.kind:
                return b.bits >= a.bits
            return a.kind == "uint" and b.kind == "int" and b.bits > a.bits
        need = a.bits - (1 if a.kind == "int" else 0)
        return _MANT[b.name] >= need
    if a.is_float and b.is_float:
        if a in T.FLOAT8:  # every float8 value is an f16/bf16 value, but e5m2's inf would not survive the
            # saturating cast back (the cast-cast rule drops the round trip): not lossless there
            return not T.MINIFLOAT[a].inf and b.name in ("f16", "bf16", "f32", "f64")
        if a.name in ("f16", "bf16"):
            return b.name in ("f32", "f64")
        return a.name == "f32" and b.name == "f64"
    return False


def _plain(v: Any) -> Any:
    """Normalize a value for comparison: literals to numbers, lists elementwise."""
    if isinstance(v, Lit):
        return v.value
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _dtype_of(v: Any) -> Any:
    if isinstance(v, (Tensor, Node)):
        return v.dtype
    if isinstance(v, Lit):
        return v.default_dtype
    return v


def _truthy(v: Any) -> bool:
    if v is True or v is False:
        return v
    v = _plain(v)
    return v is not None and v is not False and v != []


def _t(v: Any) -> Any:
    """Tensor bindings (call-level rules) read as their nodes."""
    return v.node if isinstance(v, Tensor) else v


def _f_shape(x: Any) -> Any:
    x = _t(x)
    return list(x.shape) if isinstance(x, Node) else [] if isinstance(x, Lit) else None


def _f_rank(x: Any) -> Any:
    x = _t(x)
    return len(x.shape) if isinstance(x, Node) else 0 if isinstance(x, Lit) else None


def _f_kind(kind: str) -> Callable[[Any], bool]:
    def f(x: Any) -> bool:
        dt = _dtype_of(x)
        return isinstance(dt, DType) and {"float": dt.is_float, "int": dt.is_int, "bool": dt.is_bool}[kind]
    return f


def _f_dim(x: Any, k: Any) -> Any:
    x, k = _t(x), _plain(k)
    if not isinstance(x, Node) or not isinstance(k, int):
        return None
    return x.shape[k] if -len(x.shape) <= k < len(x.shape) else None


def _f_len(x: Any) -> Any:
    return len(x) if isinstance(x, list) else None


def _f_nth(x: Any, i: Any) -> Any:
    i = _plain(i)
    return x[i] if isinstance(x, list) and isinstance(i, int) and -len(x) <= i < len(x) else None


def _f_lossless(a: Any, b: Any) -> bool:
    a, b = _dtype_of(a), _dtype_of(b)
    return isinstance(a, DType) and isinstance(b, DType) and lossless(a, b)


def _f_add_identity(x: Any) -> bool:
    """Is x a constant c with a + c == a for every a, signed zeros included: an integer or bool
    zero, or the float -0.0 (not +0.0: -0.0 + 0.0 is +0.0, as IEEE and numpy round it)?"""
    v, dt = value_const(_t(x)), _dtype_of(_t(x))
    if not isinstance(dt, DType) or not isinstance(v, (bool, int, float)) or v != 0:
        return False
    return not dt.is_float or math.copysign(1.0, float(v)) < 0


def _f_exact_recip(x: Any) -> bool:
    """Is x a float constant +-2**k whose reciprocal +-2**-k is finite and exact in x's dtype?
    Then a / x and a * (1/x) round the same real number once, so they are bit-identical."""
    v, dt = value_const(_t(x)), _dtype_of(_t(x))
    if not isinstance(dt, DType) or not dt.is_float or isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    with np.errstate(all="ignore"):
        b = float(np.array(v).astype(dt.np).astype(np.float64))  # the constant as its dtype holds it
        if not math.isfinite(b) or b == 0 or abs(math.frexp(b)[0]) != 0.5:
            return False
        r = float(np.array(1.0 / b, np.float64).astype(dt.np).astype(np.float64))
    return math.isfinite(r) and r * b == 1.0


def _f_arith(h: str) -> Callable[..., Any]:
    def f(*xs: Any) -> Any:
        vals = [_plain(x) for x in xs]
        if not vals or not all(isinstance(v, int) for v in vals):
            return None
        if h == "-" and len(vals) == 1:
            return -vals[0]
        out = vals[0]
        for v in vals[1:]:
            out = out + v if h == "+" else out - v if h == "-" else out * v
        return out
    return f


def _cmp(h: str) -> Callable[[Any, Any], bool]:
    def f(a: Any, b: Any) -> bool:
        a, b = _plain(a), _plain(b)
        if h == "=":
            return a == b
        if h == "!=":
            return a != b
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return False
        return a < b if h == "<" else a <= b if h == "<=" else a > b if h == ">" else a >= b
    return f


# the one home of guard names: name -> (implementation, arguments: a count, "+" one or more, "*" any)
FUNCS: dict[str, tuple[Callable[..., Any], int | str]] = {
    "dtype": (_dtype_of, 1), "shape": (_f_shape, 1), "rank": (_f_rank, 1),
    "const?": (lambda x: value_const(x) is not None, 1), "value": (value_const, 1),
    "float?": (_f_kind("float"), 1), "int?": (_f_kind("int"), 1), "bool?": (_f_kind("bool"), 1),
    "dim": (_f_dim, 2), "len": (_f_len, 1), "nth": (_f_nth, 2), "lossless?": (_f_lossless, 2),
    "exact-recip?": (_f_exact_recip, 1), "add-identity?": (_f_add_identity, 1),
    "+": (_f_arith("+"), "+"), "-": (_f_arith("-"), "+"), "*": (_f_arith("*"), "+"),
    "list": (lambda *xs: list(xs), "*"),
    **{c: (_cmp(c), 2) for c in ("=", "!=", "<", "<=", ">", ">=")},
}
LOGIC: dict[str, int | str] = {"and": "+", "or": "+", "not": 1}  # short-circuiting: compiled below
ARITY: dict[str, int | str] = {**{k: n for k, (_, n) in FUNCS.items()}, **LOGIC}


def arity_ok(name: str, nargs: int) -> bool:
    n = ARITY[name]
    return nargs == n if isinstance(n, int) else nargs >= 1 if n == "+" else True


def compile_guard(f: Form) -> Callable[[dict], Any]:
    """A guard form as a Python function of the bindings (names were checked in rule.py)."""
    if isinstance(f, Sym):
        name = f.name
        if name.startswith("?"):
            return lambda b: b[name]
        c: Any = True if name in ("true", "t") else False if name in ("false", "nil") else T.lookup(name)
        return lambda b: c
    if isinstance(f, (Num, Str)):
        v = f.value
        return lambda b: v
    if not isinstance(f, SList):
        raise Error(f"cannot evaluate `{show(f)}` in a guard", getattr(f, "span", None))
    gs = [compile_guard(x) for x in (f.items if f.bracket else f.items[1:])]
    if f.bracket:
        return lambda b: [g(b) for g in gs]
    h = head(f)
    if h == "and":
        if len(gs) == 2:
            g0, g1 = gs
            return lambda b: _truthy(g0(b)) and _truthy(g1(b))
        return lambda b: all(_truthy(g(b)) for g in gs)
    if h == "or":
        return lambda b: any(_truthy(g(b)) for g in gs)
    if h == "not":
        if len(gs) != 1:
            raise Error("`not` takes one argument in a guard", f.span)
        g0 = gs[0]
        return lambda b: not _truthy(g0(b))
    spec = FUNCS.get(h or "")
    if spec is None:
        raise Error(f"unknown guard function `{h}`", f.span)
    fn = spec[0]
    if h == "const?" and len(gs) == 1 and isinstance(f.items[1], Sym) and f.items[1].name.startswith("?"):
        name = f.items[1].name  # the common case, kept fast
        return lambda b: value_const(b[name]) is not None
    if len(gs) == 1:
        g0 = gs[0]
        return lambda b: fn(g0(b))
    if len(gs) == 2:
        g0, g1 = gs
        return lambda b: fn(g0(b), g1(b))
    return lambda b: fn(*(g(b) for g in gs))


def holds(guard: Callable[[dict], Any] | None, binds: dict[str, Any]) -> bool:
    return guard is None or _truthy(guard(binds))
