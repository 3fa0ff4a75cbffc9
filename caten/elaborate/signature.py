"""Binding a composite's signature at a call or at the top level: type variables and dimension
symbols from the arguments, `where` clauses, and the check of each output against its declared
dtype and shape (a dim that matches only for some sizes becomes a call-time constraint)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from caten.elaborate import principal as P
from caten.elaborate.evaluate import Evaluator, Scope
from caten.elaborate.values import C64, CDType, Complex, Lit, Tensor, describe, lookup_dtype
from caten.errors import Error, Span
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.program import Constraint, TensorSpec
from caten.read.program import CompositeDef, Param
from caten.read.sexpr import Annot, Form, Num, SList, Sym, show


def bind_dtype(cdef: CompositeDef, p: Param, dt: DType | CDType, tvars: dict[str, Any], span: Span) -> None:
    want = lookup_dtype(p.dtype)
    if want is None and p.dtype in tvars:
        want = tvars[p.dtype]
        if want != dt:
            raise Error(f"operands have different dtypes ({want}, {dt}) in `{cdef.name}`", span,
                        "convert one with (cast x DTYPE)")
    if want is None:
        tvars[p.dtype] = dt
    elif want != dt:
        raise Error(f"argument `{p.name}` of `{cdef.name}` must be {want}, got {dt}", span,
                    f"convert it with (cast x {want})")


def dim_of(a: Tensor, p: Param, d: Form) -> Dim | None:
    idx = p.dims.index(d)
    return a.shape[idx] if idx < len(a.shape) else None


def bind_shape(cdef: CompositeDef, p: Param, a: Tensor | Complex, dims: dict[str, Dim], span: Span) -> None:
    want = p.dims or []
    if len(want) != len(a.shape):
        raise Error(f"argument `{p.name}` of `{cdef.name}` must have rank {len(want)} "
                    f"({show(Annot(p.name, p.dtype or '', p.dims, p.span))}), got shape "
                    f"{B.fmt_shape(a.shape)}", span)
    for d, got in zip(want, a.shape):
        if isinstance(d, Num):
            if d.value != got:
                raise Error(f"argument `{p.name}` of `{cdef.name}`: expected {d.value}, got shape "
                            f"{B.fmt_shape(a.shape)}", span)
        elif isinstance(d, Sym):
            if d.name in dims and dims[d.name] != got:
                raise Error(f"argument `{p.name}` of `{cdef.name}`: dimension {d.name} is {dims[d.name]} "
                            f"elsewhere but {got} here", span)
            dims.setdefault(d.name, got)


def apply_wheres(ev: Evaluator, cdef: CompositeDef, dims: dict[str, Dim], span: Span) -> None:
    for w in cdef.wheres:
        val = ev.eval_dim(w.expr, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
        if w.name in dims:
            if isinstance(dims[w.name], int) and isinstance(val, int) and dims[w.name] != val:
                raise Error(f"where {w.name} = {show(w.expr)} fails: {w.name} is {dims[w.name]}, "
                            f"{show(w.expr)} is {val}", span)
        else:
            dims[w.name] = val


def check_output(ev: Evaluator, cdef: CompositeDef, p: Param, v: Any, tvars: dict[str, DType],
                 dims: dict[str, Dim], span: Span, constraints: list[Constraint]) -> Any:
    """The output as a tensor of its declared dtype and shape; a declared dim that equals the
    computed one only for some sizes becomes a call-time constraint, added to `constraints`
    (`output_constraints`)."""
    dt = lookup_dtype(p.dtype) or tvars.get(p.dtype)
    if isinstance(v, Complex) or isinstance(dt, CDType):
        return check_complex(ev, cdef, p, v, dt, dims, span, constraints)
    if isinstance(v, Lit) and cdef.library:
        return v  # a literal stays weak through library composites, so literal-only code folds
    if isinstance(v, (Lit, Tensor)):
        t = P.to_tensor(v, span, dt)
    else:
        raise Error(f"output `{p.name}` of `{cdef.name}` must be a tensor, got {describe(v)}", span)
    if dt is not None and t.dtype != dt:
        raise Error(f"output `{p.name}` of `{cdef.name}` is declared {dt} but the body gives {t.dtype}", span,
                    f"convert with (cast x {dt})")
    if p.dims is not None and not p.any_shape:
        want = declared_shape(ev, cdef, p, dims, span)
        if isinstance(v, Lit):
            t = Tensor(B.expand(t.node, want))
        if tuple(t.shape) != want:
            output_constraints(cdef, p, tuple(t.shape), want, span, constraints)
    elif p.dims is None and t.node.rank != 0:
        raise Error(f"output `{p.name}` of `{cdef.name}` has shape {B.fmt_shape(t.shape)} but is declared "
                    "a scalar", span)
    return t


def check_complex(ev: Evaluator, cdef: CompositeDef, p: Param, v: Any, dt: Any, dims: dict[str, Dim], span: Span,
                  constraints: list[Constraint]) -> Complex:
    """A complex output: a complex value of the declared dtype (c64/c128 or a type variable), each
    part checked against the declared shape as a real output of the part's dtype."""
    if not isinstance(v, Complex):
        raise Error(f"output `{p.name}` of `{cdef.name}` is declared {dt} but the body gives {describe(v)}", span,
                    "build a complex value with (complex re im)")
    if dt is not None and not isinstance(dt, CDType):
        raise Error(f"output `{p.name}` of `{cdef.name}` is declared {dt} but the body gives a complex value "
                    f"({v.dtype})", span, "take (real z), (imag z) or (abs z)")
    want = dt or (C64 if v.weak else v.dtype)
    if not v.weak and v.dtype != want:
        raise Error(f"output `{p.name}` of `{cdef.name}` is declared {want} but the body gives {v.dtype}", span,
                    f"convert with (cast z {want})")
    part = replace(p, dtype=want.part.name)
    re, im = (check_output(ev, cdef, part, P.to_tensor(x, span, want.part), {}, dims, span, constraints)
              for x in (v.re, v.im))
    return Complex(re, im)


def output_constraints(cdef: CompositeDef, p: Param, got: tuple[Dim, ...], want: tuple[Dim, ...], span: Span,
                       constraints: list[Constraint]) -> None:
    """A declared output dim that equals the computed one only for some sizes (`6` for a conv's
    `(H - 2)`, `(- M 2)` for a slice's `max(M - 2, 0)`) is checked at the call (LANGUAGE.md 5.1);
    one that differs for every size, or a symbol declared where another one results, is an error now."""
    def fail() -> Error:
        return Error(f"output `{p.name}` of `{cdef.name}` has shape {B.fmt_shape(got)} but is declared "
                     f"{B.fmt_shape(want)}", span)
    if len(got) != len(want):
        raise fail()
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            if isinstance(D.add(g, D.mul(w, -1)), int) or (bare(g) and bare(w)):
                raise fail()  # wrong for every size, or two symbols meeting (an error unless a where)
            constraints.append(Constraint(w, g, f"{w} = {g} (axis {i} of output `{p.name}`)"))


def declared_shape(ev: Evaluator, cdef: CompositeDef, p: Param, dims: dict[str, Dim], span: Span) -> tuple[Dim, ...]:
    out = []
    for d in p.dims or []:
        for s in syms(d):
            if s not in dims:
                raise Error(f"dimension {s} of output `{p.name}` is not determined by any input or where clause",
                            d.span if hasattr(d, "span") else p.span,
                            f"add `where {s} = ...` to the signature or bind it with -D {s}=VALUE")
        out.append(ev.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()})))
    return tuple(out)


def sig_dim(ev: Evaluator, d: Form, dims: dict[str, Dim], p: Param) -> Dim:
    for s in syms(d):
        if s not in dims:
            raise Error(f"dimension {s} of `{p.name}` is not determined by any input or where clause",
                        getattr(d, "span", p.span), f"bind it with -D {s}=VALUE or add `where {s} = ...`")
    v = ev.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
    if isinstance(v, int) and v < 0:  # the graph has no negative sizes (caten.ir.verify checks)
        raise Error(f"dimension {show(d)} of `{p.name}` is {v}: a size cannot be negative",
                    getattr(d, "span", p.span))
    return v


def bare(d: Dim) -> bool:
    """Whether d is a single dimension symbol."""
    return isinstance(d, D.DimExpr) and len(D.free_syms(d)) == 1 and d == D.sym(D.free_syms(d)[0])


def syms(f: Form) -> list[str]:
    if isinstance(f, Sym):
        return [f.name]
    if isinstance(f, SList):
        return [s for x in f.items[1:] for s in syms(x)]
    return []


def sig_text(d: CompositeDef) -> str:
    ins = " ".join(show(Annot(p.name, p.dtype, p.dims, p.span)) if p.tensor else p.name for p in d.params)
    if d.rest:
        ins += f" &rest {d.rest}"
    keys = "".join(f" :{k}" for k, _, _ in d.keys)
    return f"({d.name} {ins}{keys})"


def in_place(cdef: CompositeDef, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> tuple[tuple[int, int], ...]:
    """(output, input) index pairs of the outputs named as an input: each is written into that
    input's array (a KV cache appended to, a parameter updated), so it must be that input's exact
    dtype and shape."""
    pos = {p.name: j for j, p in enumerate(cdef.params)}
    pairs = []
    for i, p in enumerate(cdef.outputs):
        j = pos.get(p.name)
        if j is None:
            continue
        if outputs[i].dtype != inputs[j].dtype or outputs[i].shape != inputs[j].shape:
            raise Error(f"output `{p.name}` of `{cdef.name}` is written in place of the input of that name, so it "
                        f"must be {inputs[j]}, not {outputs[i]}", p.span,
                        "give the output another name to return a new tensor")
        pairs.append((i, j))
    return tuple(pairs)
