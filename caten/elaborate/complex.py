"""Complex values (c64, c128) in the language: the ops that take them, one table.

The principal ops are real, so a complex value is a pair of real tensors (`values.Complex`) and
every op here is real arithmetic on the parts, written with library composites and principal ops:
nothing below the elaborator learns about complex. `TABLE` is the single source of truth for
which ops take a complex operand; any other op given one is refused by name (a library composite
written for real dtypes must never compute on a real part by accident). Arithmetic follows numpy:
a real or literal operand is promoted to complex (imaginary part +0) before the complex formula,
and division is numpy's Smith's-method loop (`_div`), so results match numpy to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from caten.elaborate import meta
from caten.elaborate import principal as P
from caten.elaborate.values import CDType, Complex, Lit, Tensor, complex_of, describe
from caten.errors import Error, Span
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.program import TensorSpec
from caten.read.program import CompositeDef, Param


class Elaborator(Protocol):
    lib: Any

    def call_composite(self, name: str, defs: list[CompositeDef], args: list, kwargs: dict,
                       kspans: dict[str, Span], span: Span, rules: bool = True) -> Any: ...


_KINDS = (Complex, CDType)
Part = Tensor | Lit
ZERO, ONE, INF, NINF = Lit(0.0, "float"), Lit(1.0, "float"), Lit(float("inf"), "float"), Lit(float("-inf"), "float")
Fn = Callable[[Elaborator, list, dict, Span], Any]


def involves(args: list, kwargs: dict) -> bool:
    """Whether a call has a complex operand or a complex dtype among its arguments (a list that
    holds complex values is no operand: whatever takes one out calls an op on it, refused or not
    there)."""
    for v in args:
        if type(v) in _KINDS:
            return True
    return bool(kwargs) and any(type(v) in _KINDS for v in kwargs.values())


def call(ev: Elaborator, name: str, args: list, kwargs: dict, span: Span) -> Any:
    """A call of `name` that involves a complex value (or is one of the complex-only FORMS)."""
    fn = TABLE.get(name)
    if fn is None:
        if name in meta.META and not any(isinstance(a, (Complex, CDType)) for a in kwargs.values()):
            return _meta(ev, name, args, kwargs, span)
        raise Error(f"`{name}` is not defined for complex values", span,
                    f"complex values take {', '.join(sorted(TABLE))}; apply `{name}` to (real z), (imag z) or "
                    "(abs z)")
    return fn(ev, args, kwargs, span)


def wrap(name: str, result: Any) -> Any:
    """`rfft`'s (re, im) pair as one complex value (`nth` still reads its parts)."""
    if name == "rfft" and isinstance(result, tuple) and len(result) == 2:
        return Complex(*result)
    return result


# operands ---------------------------------------------------------------------------------


def _lib(ev: Elaborator, name: str, *args: Any, span: Span, **kw: Any) -> Any:
    return ev.call_composite(name, ev.lib[name], list(args), kw, {}, span)


def _alu(op: Op, *vals: Any, span: Span) -> Any:
    return P.apply_alu(op, vals, span)


def _ctype(vals: list, span: Span, name: str) -> CDType | None:
    """The complex dtype of an operation over `vals` (None: literals alone, a weak result)."""
    cd = next((v.dtype for v in vals if isinstance(v, Complex) and not v.weak), None)
    if cd is None:
        t = next((v for v in vals if isinstance(v, Tensor)), None)
        if t is not None:
            cd = complex_of(t.dtype)
            if cd is None:
                raise Error(f"`{name}`: a {t.dtype} tensor meets a complex value", span,
                            "complex values have f32 (c64) or f64 (c128) parts: (cast x f32) or (cast x f64)")
    return cd


def pairs(vals: list, span: Span, name: str) -> tuple[DType | None, list[tuple[Part, Part]]]:
    """Each operand as (re, im), a real one promoted with imaginary part 0 (numpy's promotion);
    a tensor of another dtype than the complex operands' parts is refused, as a mix of real dtypes."""
    cd = _ctype(vals, span, name)
    out: list[tuple[Part, Part]] = []
    for v in vals:
        if isinstance(v, Complex):
            if not v.weak and v.dtype != cd:
                raise Error(f"`{name}`: operands have different dtypes ({cd}, {v.dtype})", span,
                            f"convert one with (cast z {cd})")
            out.append((v.re, v.im))
        elif isinstance(v, Tensor):
            if cd is None or v.dtype != cd.part:
                raise Error(f"`{name}`: a {v.dtype} tensor meets a {cd} value", span,
                            f"convert it with (cast x {cd.part if cd else 'f32'}) first")
            out.append((v, _zeros(v, span)))
        elif isinstance(v, Lit) and v.kind in ("int", "float", "dim"):
            out.append((_float(v), ZERO))
        else:
            raise Error(f"`{name}` needs complex values, real tensors or numbers, got {describe(v)}", span)
    return (cd.part if cd else None), out


def _float(v: Lit) -> Lit:
    """A number as a part of a complex value: a float (an integer literal would not divide)."""
    return Lit(float(v.value), "float") if v.kind == "int" else v


def _zeros(t: Tensor, span: Span) -> Tensor:
    return P.call(Op.CONST, [Lit(0.0, "float")], {"dtype": t.dtype, "shape": [Lit(d, "dim") for d in t.shape]}, span)


def _make(re: Part, im: Part, dt: DType | None, span: Span) -> Complex:
    """A complex value from computed parts: both literals (weak), or two tensors of `dt`, one shape."""
    if isinstance(re, Lit) and isinstance(im, Lit):
        return Complex(re, im)
    dt = dt or (re.dtype if isinstance(re, Tensor) else im.dtype)  # type: ignore[union-attr]
    re, im = P.to_tensor(re, span, dt), P.to_tensor(im, span, dt)
    if re.shape != im.shape:
        try:
            shape = B.broadcast_shapes(re.shape, im.shape)
        except B.ShapeError as e:
            raise Error(str(e), span) from None
        re, im = (t if t.shape == shape else Tensor(B.expand(t.node, shape)) for t in (re, im))
    return Complex(re, im)


def _one(args: list, name: str, span: Span, strong: bool = False) -> Complex:
    """The one complex operand; `strong`: a weak literal as c64 tensors (for ops that compute)."""
    if len(args) != 1:
        raise Error(f"`{name}` takes 1 argument, got {len(args)}", span)
    z = args[0]
    if not isinstance(z, Complex):
        raise Error(f"`{name}` needs a complex value here, got {describe(z)}", span)
    if strong and z.weak:
        return Complex(P.to_tensor(z.re, span, T.f32), P.to_tensor(z.im, span, T.f32))
    return z


def _nokw(kw: dict, name: str, span: Span) -> None:
    if kw:
        raise Error(f"`{name}` of a complex value takes no keyword :{next(iter(kw))}", span)


# signatures -----------------------------------------------------------------------------------


def to_declared(a: Lit | Complex, dt: Any, cdef: CompositeDef, name: str, span: Span) -> Tensor | Complex:
    """A literal or weak complex argument as a value of its parameter's dtype."""
    if isinstance(dt, CDType):
        _, [(re, im)] = pairs([a], span, cdef.name)
        return Complex(P.to_tensor(re, span, dt.part), P.to_tensor(im, span, dt.part))
    if isinstance(a, Complex):
        raise Error(f"argument `{name}` of `{cdef.name}` must be {dt}, got {describe(a)}", span,
                    "take (real z), (imag z) or (abs z)")
    return P.to_tensor(a, span, dt)


def io_parts(cdef: CompositeDef, p: Param, dt: Any) -> list[tuple[str, DType]]:
    """The real buffers of a compiled composite's parameter or output: itself, or NAME_re and
    NAME_im for a complex one (the call boundary, caten/run/module.py, splits and joins them)."""
    if not isinstance(dt, CDType):
        return [(p.name, dt)]
    taken = {q.name for q in cdef.params + cdef.outputs}
    for n in (p.name + "_re", p.name + "_im"):
        if n in taken:
            raise Error(f"complex `{p.name}` of `{cdef.name}` compiles to buffers {p.name}_re and {p.name}_im, but "
                        f"`{n}` names another tensor", p.span, "rename one of them")
    return [(p.name + "_re", dt.part), (p.name + "_im", dt.part)]


def in_place(cdef: CompositeDef, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> tuple[tuple[int, int], ...]:
    """signature.in_place over the real buffers; a complex tensor is not written in place."""
    from caten.elaborate.signature import in_place as real_in_place

    names = {p.name for p in cdef.params}
    split = len(inputs) != len(cdef.params) or len(outputs) != len(cdef.outputs)
    if split and any(p.name in names for p in cdef.outputs):
        p = next(p for p in cdef.outputs if p.name in names)
        raise Error(f"output `{p.name}` of `{cdef.name}` is written in place of an input, which a composite with "
                    "complex parameters or outputs does not do", p.span,
                    "give the output another name to return a new tensor")
    return real_in_place(cdef, inputs, outputs)


# arithmetic ----------------------------------------------------------------------------------


def _fold(step: Callable[[Elaborator, tuple, tuple, Span], tuple], name: str) -> Fn:
    """An n-ary arithmetic op, left to right as the library's &fold."""
    def fn(ev, args, kw, span):
        _nokw(kw, name, span)
        if len(args) < 2:
            raise Error(f"`{name}` of complex values takes 2 or more arguments, got {len(args)}", span)
        dt, ps = pairs(args, span, name)
        acc = ps[0]
        for p in ps[1:]:
            acc = step(ev, acc, p, span)
        return _make(*acc, dt, span)
    return fn


def _add(ev: Elaborator, a: tuple, b: tuple, span: Span) -> tuple:
    return _alu(Op.ADD, a[0], b[0], span=span), _alu(Op.ADD, a[1], b[1], span=span)


def _sub(ev: Elaborator, a: tuple, b: tuple, span: Span) -> tuple:
    return _alu(Op.ADD, a[0], _alu(Op.NEG, b[0], span=span), span=span), \
        _alu(Op.ADD, a[1], _alu(Op.NEG, b[1], span=span), span=span)


def _mul(ev: Elaborator, a: tuple, b: tuple, span: Span) -> tuple:
    """numpy's (ar br - ai bi, ar bi + ai br)."""
    def m(x: Any, y: Any) -> Any:
        return _alu(Op.MUL, x, y, span=span)
    return _alu(Op.ADD, m(a[0], b[0]), _alu(Op.NEG, m(a[1], b[1]), span=span), span=span), \
        _alu(Op.ADD, m(a[0], b[1]), m(a[1], b[0]), span=span)


def _div(ev: Elaborator, a: tuple, b: tuple, span: Span) -> tuple:
    """numpy's complex division (Smith's method, loops.c.src): scale by the larger of |br|, |bi|;
    a zero divisor gives a / |br|, inf or nan as numpy does."""
    def lib(n: str, *xs: Any) -> Any:
        return _lib(ev, n, *xs, span=span)
    ts = [x for x in (*a, *b) if isinstance(x, Tensor)]
    if not ts:  # literals alone: folded now, in f64 (the result is a weak complex literal)
        with np.errstate(all="ignore"):
            q = np.complex128(complex(a[0].value, a[1].value)) / np.complex128(complex(b[0].value, b[1].value))
        return Lit(float(q.real), "float"), Lit(float(q.imag), "float")
    ar, ai, br, bi = (P.to_tensor(x, span, ts[0].dtype) for x in (*a, *b))
    abr, abi = lib("abs", br), lib("abs", bi)
    wide = lib(">=", abr, abi)
    zero = lib("and", lib("=", abr, ZERO), lib("=", abi, ZERO))
    rat = lib("/", bi, br)  # |br| >= |bi|
    scl = lib("/", ONE, lib("+", br, lib("*", bi, rat)))
    re1 = lib("*", lib("+", ar, lib("*", ai, rat)), scl)
    im1 = lib("*", lib("-", ai, lib("*", ar, rat)), scl)
    rat2 = lib("/", br, bi)  # |bi| > |br|
    scl2 = lib("/", ONE, lib("+", bi, lib("*", br, rat2)))
    re2 = lib("*", lib("+", lib("*", ar, rat2), ai), scl2)
    im2 = lib("*", lib("-", lib("*", ai, rat2), ar), scl2)
    re0, im0 = lib("/", ar, abr), lib("/", ai, abr)
    return (_alu(Op.WHERE, wide, _alu(Op.WHERE, zero, re0, re1, span=span), re2, span=span),
            _alu(Op.WHERE, wide, _alu(Op.WHERE, zero, im0, im1, span=span), im2, span=span))


def _minus(ev, args, kw, span):
    if len(args) == 1:
        return _neg(ev, args, kw, span)
    return _fold(_sub, "-")(ev, args, kw, span)


def _neg(ev, args, kw, span):
    _nokw(kw, "neg", span)
    z = _one(args, "neg", span)
    return Complex(_alu(Op.NEG, z.re, span=span), _alu(Op.NEG, z.im, span=span))


def _conj(ev, args, kw, span):
    _nokw(kw, "conj", span)
    if len(args) == 1 and isinstance(args[0], (Tensor, Lit)):
        return args[0]  # numpy: conj of a real array is itself
    z = _one(args, "conj", span)
    return Complex(z.re, _alu(Op.NEG, z.im, span=span))


def _real(ev, args, kw, span):
    _nokw(kw, "real", span)
    if len(args) == 1 and isinstance(args[0], (Tensor, Lit)):
        return args[0]
    return _one(args, "real", span).re


def _imag(ev, args, kw, span):
    _nokw(kw, "imag", span)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return _zeros(args[0], span)
    if len(args) == 1 and isinstance(args[0], Lit):
        return Lit(0, args[0].kind) if args[0].kind != "bool" else Lit(False, "bool")
    return _one(args, "imag", span).im


def _complex(ev, args, kw, span):
    """(complex RE IM): two real f32 (c64) or f64 (c128) operands of one dtype, broadcast together."""
    _nokw(kw, "complex", span)
    if len(args) != 2:
        raise Error(f"`complex` takes 2 arguments (RE IM), got {len(args)}", span)
    for a in args:
        if not isinstance(a, (Tensor, Lit)) or isinstance(a, Lit) and a.kind == "bool":
            raise Error(f"`complex` takes real tensors or numbers, got {describe(a)}", span)
    ts = [a for a in args if isinstance(a, Tensor)]
    if ts and (ts[0].dtype not in (T.f32, T.f64) or any(t.dtype != ts[0].dtype for t in ts)):
        dts = ", ".join(str(t.dtype) for t in ts)
        raise Error(f"`complex` needs f32 (c64) or f64 (c128) parts of one dtype, got {dts}", span,
                    "convert with (cast x f32) or (cast x f64)")
    return _make(*(_float(a) if isinstance(a, Lit) else a for a in args), ts[0].dtype if ts else None, span)


def _exp(ev, args, kw, span):
    """numpy's cexp: exp(re) (cos im, sin im); (exp(re), im) exactly when im is 0; for an infinite
    or nan im, (inf, nan) when re is +inf and (0, 0) when re is -inf."""
    _nokw(kw, "exp", span)
    z = _one(args, "exp", span, strong=True)

    def lib(n: str, *xs: Any) -> Any:
        return _lib(ev, n, *xs, span=span)
    e = lib("exp", z.re)
    zero = lib("=", z.im, ZERO)
    wild = lib("not", lib("<", lib("abs", z.im), INF))  # im is +-inf or nan
    up, down = lib("and", wild, lib("=", z.re, INF)), lib("and", wild, lib("=", z.re, NINF))
    re = _alu(Op.WHERE, zero, e, _alu(Op.WHERE, down, ZERO, lib("*", e, lib("cos", z.im)), span=span), span=span)
    im = _alu(Op.WHERE, zero, z.im, _alu(Op.WHERE, down, ZERO, lib("*", e, lib("sin", z.im)), span=span),
              span=span)
    re = _alu(Op.WHERE, up, INF, re, span=span)
    return _make(re, im, None, span)


def _abs(ev, args, kw, span):
    """|z| = hypot(re, im); its gradient at 0 is 0, as torch's (hypot's own is nan there, so a zero
    reads hypot(1, 0) through a where that passes it no gradient)."""
    _nokw(kw, "abs", span)
    z = _one(args, "abs", span, strong=True)
    zero = _lib(ev, "and", _lib(ev, "=", z.re, ZERO, span=span), _lib(ev, "=", z.im, ZERO, span=span), span=span)
    safe = _alu(Op.WHERE, zero, ONE, z.re, span=span)
    return _alu(Op.WHERE, zero, ZERO, _lib(ev, "hypot", safe, z.im, span=span), span=span)


def _angle(ev, args, kw, span):
    """atan2(im, re); at 0 its value from the signs alone (0, pi, -0, -pi as atan2's) and its
    gradient 0, as torch's (atan2's own is nan there)."""
    _nokw(kw, "angle", span)
    z = _one(args, "angle", span, strong=True)

    def lib(n: str, *xs: Any) -> Any:
        return _lib(ev, n, *xs, span=span)
    zero = lib("and", lib("=", z.re, ZERO), lib("=", z.im, ZERO))
    pi, neg = (P.to_tensor(Lit(v, "float"), span, z.re.dtype) for v in (np.pi, -1.0))  # type: ignore[union-attr]
    signed = lib("*", _alu(Op.WHERE, lib("signbit", z.re), pi, ZERO, span=span),
                 _alu(Op.WHERE, lib("signbit", z.im), neg, ONE, span=span))
    return _alu(Op.WHERE, zero, signed, lib("atan2", z.im, _alu(Op.WHERE, zero, ONE, z.re, span=span)), span=span)


def _compare(name: str) -> Fn:
    def fn(ev, args, kw, span):
        _nokw(kw, name, span)
        if len(args) != 2:
            raise Error(f"`{name}` takes 2 arguments, got {len(args)}", span)
        _, (a, b) = pairs(args, span, name)
        eq = _lib(ev, "and", _lib(ev, "=", a[0], b[0], span=span), _lib(ev, "=", a[1], b[1], span=span), span=span)
        return eq if name == "=" else _lib(ev, "not", eq, span=span)
    return fn


def _matmul(ev, args, kw, span):
    """Four real matmuls; a real operand takes two (its imaginary part is 0)."""
    _nokw(kw, "matmul", span)
    if len(args) != 2:
        raise Error(f"`matmul` takes 2 arguments, got {len(args)}", span)
    a, b = args
    if not all(isinstance(x, (Complex, Tensor)) for x in args) or any(isinstance(x, Complex) and x.weak for x in args):
        raise Error(f"`matmul` needs tensors, got {describe(a)} and {describe(b)}", span)
    pairs(args, span, "matmul")  # (the dtype check)

    def mm(x: Any, y: Any) -> Any:
        return _lib(ev, "matmul", x, y, span=span)
    if not isinstance(a, Complex):
        return Complex(mm(a, b.re), mm(a, b.im))
    if not isinstance(b, Complex):
        return Complex(mm(a.re, b), mm(a.im, b))
    re = _lib(ev, "-", mm(a.re, b.re), mm(a.im, b.im), span=span)
    im = _lib(ev, "+", mm(a.re, b.im), mm(a.im, b.re), span=span)
    return Complex(re, im)


def _per_part(name: str) -> Fn:
    """An op that acts on each part alike (a reduction that is linear, a movement op)."""
    def fn(ev, args, kw, span):
        if not args or not isinstance(args[0], Complex) or any(isinstance(a, Complex) for a in args[1:]):
            raise Error(f"`{name}` takes a complex value first and no other", span)
        z = args[0]
        if z.weak:
            raise Error(f"`{name}` needs a complex tensor, got {describe(z)}", span)
        if any(isinstance(v, (Complex, CDType)) for v in kw.values()):
            raise Error(f"`{name}`: a complex keyword value", span)
        part = {"VIEW": lambda x: P.call(Op.VIEW, [x, *args[1:]], kw, span),
                "COPY": lambda x: P.call(Op.COPY, [x, *args[1:]], kw, span)}.get(
            name, lambda x: _lib(ev, name, x, *args[1:], span=span, **kw))
        return Complex(part(z.re), part(z.im))
    return fn


def _mean(ev, args, kw, span):
    """sum / count with the complex division, as numpy's mean divides (an empty axis gives nan)."""
    s = _per_part("sum")(ev, args, kw, span)
    n = meta.META["count"](ev, [args[0].re, kw.get("axis")], {}, span)
    d = _div(ev, (s.re, s.im), (P.cast(n, s.re.dtype, span), ZERO), span)
    return Complex(*d)


def _pad(ev, args, kw, span):
    """pad with :value a number or a complex literal (0 by default)."""
    if len(args) != 2 or not isinstance(args[0], Complex):
        raise Error("expected (pad Z WIDTHS :value V) with Z complex", span)
    v = kw.get("value", Lit(0, "int"))
    _, [(vr, vi)] = pairs([v], span, "pad")
    z = args[0]
    return Complex(_lib(ev, "pad", z.re, args[1], value=vr, span=span),
                   _lib(ev, "pad", z.im, args[1], value=vi, span=span))


def _where(ev, args, kw, span):
    _nokw(kw, "where", span)
    if len(args) != 3 or isinstance(args[0], Complex):
        raise Error("expected (where COND A B) with a bool COND", span)
    dt, (a, b) = pairs(args[1:], span, "where")
    re = _lib(ev, "where", args[0], a[0], b[0], span=span)
    im = _lib(ev, "where", args[0], a[1], b[1], span=span)
    return _make(re, im, dt, span)


def _concat(ev, args, kw, span):
    dt, ps = pairs(args, span, "concat")
    return Complex(_lib(ev, "concat", *[p[0] for p in ps], span=span, **kw),
                   _lib(ev, "concat", *[p[1] for p in ps], span=span, **kw))


def _cast(ev, args, kw, span):
    """(cast Z c128), (cast X c64); a complex value to a real dtype is refused (numpy warns and
    drops the imaginary part)."""
    _nokw(kw, "cast", span)
    if len(args) != 2:
        raise Error("expected (cast x DTYPE)", span)
    x, dt = args
    if not isinstance(dt, CDType):
        raise Error(f"`cast` of a complex value to {describe(dt)} would drop its imaginary part", span,
                    "take (real z), (imag z) or (abs z)")
    if isinstance(x, Complex):
        return Complex(P.cast(x.re, dt.part, span), P.cast(x.im, dt.part, span))
    if isinstance(x, Lit) and x.kind != "bool":
        return Complex(P.cast(x, dt.part, span), P.cast(Lit(0.0, "float"), dt.part, span))
    if not isinstance(x, Tensor):
        raise Error(f"`cast` needs a tensor or a number, got {describe(x)}", span)
    re = P.cast(x, dt.part, span)
    return Complex(re, _zeros(re, span))


def _fft(inverse: bool) -> Fn:
    name = "ifft" if inverse else "fft"

    def fn(ev, args, kw, span):
        z = _one(args, name, span, strong=True)
        if "inverse" in kw:
            raise Error(f"(`{name}` Z) takes no :inverse: (fft Z) is forward, (ifft Z) inverse", span)
        return Complex(*_lib(ev, "fft", z.re, z.im, span=span, **kw, inverse=Lit(inverse, "bool")))
    return fn


def _irfft(ev, args, kw, span):
    z = _one(args, "irfft", span, strong=True)
    return _lib(ev, "irfft", z.re, z.im, span=span, **kw)


def _is_complex(ev, args, kw, span):
    if len(args) != 1:
        raise Error(f"`complex?` takes 1 argument, got {len(args)}", span)
    return Lit(isinstance(args[0], (Complex, CDType)), "bool")


def _meta(ev: Elaborator, name: str, args: list, kwargs: dict, span: Span) -> Any:
    """The compile-time functions: those about shapes read the real part; `dtype` gives c64/c128;
    `nth` of a complex value is its part 0 (re) or 1 (im), so code written for the (re, im) pairs
    `rfft` gave still runs; the list functions hold complex values like any other."""
    if name == "nth" and len(args) == 2 and isinstance(args[0], Complex):
        return meta.META[name](ev, [[args[0].re, args[0].im], args[1]], kwargs, span)
    if name == "dtype" and len(args) == 1 and isinstance(args[0], Complex):
        return args[0].dtype
    if name in ("float?", "int?", "bool?") and len(args) == 1 and isinstance(args[0], (Complex, CDType)):
        return Lit(False, "bool")
    if name in ("bits",) and len(args) == 1 and isinstance(args[0], (Complex, CDType)):
        return Lit(args[0].dtype.bits if isinstance(args[0], Complex) else args[0].bits, "int")
    shaped = ("rank", "shape", "dim", "count", "axis")
    args = [a.re if isinstance(a, Complex) and name in shaped else a for a in args]
    if name in shaped + ("list", "append", "cons", "repeat", "nil?", "list?", "len", "nth", "error", "assert") \
            and not any(isinstance(a, CDType) for a in args):
        return meta.META[name](ev, args, kwargs, span)
    raise Error(f"`{name}` is not defined for complex values", span)


TABLE: dict[str, Fn] = {
    "+": _fold(_add, "+"), "-": _minus, "*": _fold(_mul, "*"), "/": _fold(_div, "/"), "neg": _neg,
    "conj": _conj, "real": _real, "imag": _imag, "complex": _complex, "exp": _exp, "abs": _abs, "angle": _angle,
    "=": _compare("="), "!=": _compare("!="), "matmul": _matmul, "where": _where, "concat": _concat,
    "cast": _cast, "pad": _pad, "fft": _fft(False), "ifft": _fft(True), "irfft": _irfft, "complex?": _is_complex,
    "mean": _mean,
    **{n: _per_part(n) for n in ("sum", "reshape", "permute", "transpose", "expand", "squeeze",
                                 "unsqueeze", "slice", "flip", "contiguous", "VIEW", "COPY")},
}
# names that exist only here (the library has no composite of that name): called even on real values
FORMS = ("conj", "real", "imag", "complex", "ifft", "complex?")
