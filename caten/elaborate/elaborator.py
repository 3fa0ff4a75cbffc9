"""Elaboration: composites -> principal-op graphs.

Evaluates a composite's body over `values` (tensors are graph nodes, numbers are weak
literals), expanding calls of library and user composites, binding type variables and
dimension symbols from arguments, checking every call's shapes and dtypes, and pinning
each error to the user's source (an error inside a library composite is reported at the
user's call of it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from caten.elaborate import meta
from caten.elaborate import principal as P
from caten.elaborate.library import composites as library_composites
from caten.elaborate.values import Lit, Origin, Tensor, describe
from caten.errors import Error, Span, closest
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir import verify
from caten.ir.build import ShapeError
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import TABLE, Op
from caten.ir.program import Constraint, Program, TensorSpec
from caten.read.program import CompositeDef, Param
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym, head, show

MAX_DOTIMES = 100_000  # dotimes unrolls at compile time: a bound keeps a typo from hanging the compiler
SPECIAL = ("setf", "let", "return", "dotimes", "if", "progn")
DIM_OPS = {"+": D.add, "*": D.mul, "-": None, "/": None, "idiv": D.floordiv, "mod": D.mod, "max": D.dmax,
           "min": D.dmin}
_CONSTS = {"true": Lit(True, "bool"), "t": Lit(True, "bool"), "false": Lit(False, "bool"), "nil": None}


class Scope:
    __slots__ = ("vars", "parent")

    def __init__(self, parent: Scope | None = None, vars: dict[str, Any] | None = None):
        self.vars, self.parent = vars or {}, parent

    def find(self, name: str) -> Scope | None:
        s: Scope | None = self
        while s is not None:
            if name in s.vars:
                return s
            s = s.parent
        return None

    def names(self) -> list[str]:
        out, s = [], self
        while s is not None:
            out += list(s.vars)
            s = s.parent
        return out


@dataclass
class Ret:
    values: list[Any]
    span: Span


@dataclass
class Frame:
    """Where evaluation is: which composite, and whether its names resolve in the library."""
    cdef: CompositeDef
    library: bool


CallHook = Callable[[str, list, dict, Any, Span], Any]


class Elaborator:
    def __init__(self, user: dict[str, list[CompositeDef]], call_hook: CallHook | None = None):
        self.user = user
        self.lib = library_composites()
        self.call_hook = call_hook  # rewrite rules over library-level calls plug in here
        self.frames: list[Frame] = []
        self.output_constraints: list[Constraint] = []  # declared output dims checked at the call
        self.calls: dict[tuple, tuple[Any, CompositeDef]] = {}  # call_composite's memo
        self.rules_off = 0  # > 0 while a call is made without rewrite rules (call_composite)

    # names ------------------------------------------------------------------------------
    def _in_library(self) -> bool:
        return bool(self.frames) and self.frames[-1].library

    def _callables(self) -> list[str]:
        names = list(SPECIAL) + list(meta.META) + [o.value for o in Op] + list(self.lib)
        return names if self._in_library() else names + list(self.user)

    def lookup(self, sym: Sym, env: Scope) -> Any:
        s = env.find(sym.name)
        if s is not None:
            return s.vars[sym.name]
        if sym.name in _CONSTS:
            return _CONSTS[sym.name]
        dt = T.lookup(sym.name)
        if dt is not None:
            return dt
        guess = closest(sym.name, env.names() + list(_CONSTS))
        if guess is None and (sym.name in self.lib or sym.name in self.user):
            raise Error(f"`{sym.name}` is a composite, not a value", sym.span, f"call it: ({sym.name} ...)")
        raise Error(f"unknown name `{sym.name}`", sym.span, f"did you mean `{guess}`?" if guess else None)

    # evaluation -------------------------------------------------------------------------
    def eval(self, f: Form, env: Scope) -> Any:
        if isinstance(f, Num):
            if isinstance(f.value, int) and not -(2 ** 63) <= f.value < 2 ** 64:
                raise Error(f"the integer {f.value} is out of range for every integer dtype", f.span)
            return Lit(f.value, "float" if isinstance(f.value, float) else "int")
        if isinstance(f, Sym):
            return self.lookup(f, env)
        if isinstance(f, Str):
            return f.value
        if isinstance(f, Kw):
            raise Error(f"keyword :{f.name} outside a call's arguments", f.span)
        if isinstance(f, Annot):
            raise Error(f"a tensor annotation `{show(f)}` may only appear in a signature", f.span)
        if f.bracket:
            return [self.eval_dim_elem(x, env) for x in f.items]
        if not f.items:
            raise Error("empty form ()", f.span, "write nil for nothing")
        h = head(f)
        if h is None:
            raise Error(f"cannot call `{show(f.items[0])}`: a call starts with a name", f.span)
        if h in SPECIAL:
            return getattr(self, "_sf_" + h)(f, env)
        return self.call(f, env)

    def eval_dim_elem(self, f: Form, env: Scope) -> Any:
        """A list-literal element: dim arithmetic where it looks like it, else a value."""
        if head(f) in DIM_OPS and env.find(head(f)) is None:
            return Lit(self.eval_dim(f, env), "dim")
        return self.eval(f, env)

    def eval_dim(self, f: Form, env: Scope) -> Dim:
        """A dimension expression: integers, dims, + - * / idiv mod max min."""
        if isinstance(f, Num):
            if isinstance(f.value, float):
                raise Error(f"expected an integer dimension, got {f.value}", f.span)
            return f.value
        h = head(f)
        if h in DIM_OPS:
            args = [self.eval_dim(x, env) for x in f.items[1:]]
            if not args:
                raise Error(f"({h}) needs arguments", f.span)
            if h == "-":
                return D.mul(args[0], -1) if len(args) == 1 else D.add(args[0], D.mul(_sum(args[1:]), -1))
            if h == "/":
                if len(args) != 2:
                    raise Error("(/ a b) takes two dims", f.span)
                if args[1] == 0 or D.divides(args[0], args[1]) is False:
                    raise Error(f"{args[0]} is not divisible by {args[1]}", f.span, "use idiv for floor division")
                return D.floordiv(args[0], args[1])
            if len(args) == 1:
                return args[0]
            out = args[0]
            for a in args[1:]:
                out = DIM_OPS[h](out, a)
            return out
        v = self.eval(f, env)
        return P.as_dim(v, f.span)

    def eval_body(self, forms: list[Form], env: Scope) -> Any:
        val: Any = None
        for f in forms:
            val = self.eval(f, env)
            if isinstance(val, Ret):
                return val
        return val

    # special forms ----------------------------------------------------------------------
    def _sf_setf(self, f: SList, env: Scope) -> Any:
        if len(f.items) != 3 or not isinstance(f.items[1], Sym):
            raise Error("expected (setf NAME EXPR)", f.span)
        name = f.items[1].name
        val = self.eval(f.items[2], env)
        if isinstance(val, Ret):
            raise Error("return cannot stand inside setf", f.span)
        (env.find(name) or env).vars[name] = val
        return val

    def _sf_let(self, f: SList, env: Scope) -> Any:
        if len(f.items) < 2 or not isinstance(f.items[1], SList) or f.items[1].bracket:
            raise Error("expected (let ((NAME EXPR) ...) BODY...)", f.span)
        inner = Scope(env)
        for b in f.items[1].items:
            if not (isinstance(b, SList) and len(b.items) == 2 and isinstance(b.items[0], Sym)):
                raise Error("each let binding is (NAME EXPR)", getattr(b, "span", f.span))
            inner.vars[b.items[0].name] = self.eval(b.items[1], inner)
        return self.eval_body(f.items[2:], inner)

    def _sf_progn(self, f: SList, env: Scope) -> Any:
        return self.eval_body(f.items[1:], env)

    def _sf_return(self, f: SList, env: Scope) -> Ret:
        return Ret([self.eval(x, env) for x in f.items[1:]], f.span)

    def _sf_if(self, f: SList, env: Scope) -> Any:
        if len(f.items) not in (3, 4):
            raise Error("expected (if COND THEN [ELSE])", f.span)
        c = self.eval(f.items[1], env)
        if isinstance(c, Tensor):
            raise Error("if needs a condition known at compile time", f.items[1].span,
                        "for tensors use (where COND A B)")
        truth = c.value if isinstance(c, Lit) else c
        if isinstance(truth, D.DimExpr):
            raise Error("if needs a condition known at compile time, got a symbolic dimension", f.items[1].span)
        if truth is not None and truth is not False and not (isinstance(truth, list) and not truth):
            return self.eval(f.items[2], env)
        return self.eval(f.items[3], env) if len(f.items) == 4 else None

    def _sf_dotimes(self, f: SList, env: Scope) -> Any:
        spec = f.items[1] if len(f.items) > 1 else None
        if not (isinstance(spec, SList) and len(spec.items) == 2 and isinstance(spec.items[0], Sym)):
            raise Error("expected (dotimes (I COUNT) BODY...)", f.span)
        count = self.eval_dim(spec.items[1], env)
        if not isinstance(count, int):
            raise Error(f"dotimes needs a count known at compile time, got {count}", spec.items[1].span,
                        "bind the dim with -D or defines=")
        if not 0 <= count <= MAX_DOTIMES:
            raise Error(f"dotimes count {count} is outside 0..{MAX_DOTIMES}", spec.items[1].span,
                        "dotimes unrolls at compile time; loop over a tensor axis instead (a reduction or a view)")
        for i in range(count):
            inner = Scope(env, {spec.items[0].name: Lit(i, "dim")})
            r = self.eval_body(f.items[2:], inner)
            if isinstance(r, Ret):
                return r
        return None

    # calls ------------------------------------------------------------------------------
    def _args(self, f: SList, env: Scope) -> tuple[list[Any], dict[str, Any], dict[str, Span]]:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        kspans: dict[str, Span] = {}
        items = f.items[1:]
        i = 0
        while i < len(items):
            x = items[i]
            if isinstance(x, Kw):
                if i + 1 >= len(items):
                    raise Error(f"keyword :{x.name} has no value", x.span)
                if x.name in kwargs:
                    raise Error(f"keyword :{x.name} is given twice", x.span)
                v = items[i + 1]
                kwargs[x.name] = v.name if x.name == "op" and isinstance(v, Sym) else self.eval(v, env)
                kspans[x.name] = x.span
                i += 2
            else:
                v = self.eval(x, env)
                if isinstance(v, Ret):
                    raise Error("return must stand at the top of a body", x.span)
                args.append(v)
                i += 1
        return args, kwargs, kspans

    def call(self, f: SList, env: Scope) -> Any:
        name = head(f)
        span = f.span
        args, kwargs, kspans = self._args(f, env)
        if name in meta.META:
            return meta.META[name](self, args, kwargs, span)
        if name in Op.__members__:
            return self.call_principal(Op[name], args, kwargs, span)
        defs = self.lib.get(name) if self._in_library() else (self.user.get(name) or self.lib.get(name))
        if defs is None:
            guess = closest(name, self._callables())
            raise Error(f"unknown function `{name}`", f.items[0].span, f"did you mean `{guess}`?" if guess else None)
        return self.call_composite(name, defs, args, kwargs, kspans, span)

    def call_principal(self, op: Op, args: list, kw: dict, span: Span) -> Any:
        def kwarg(k: str, default: Any = None) -> Any:
            return kw.get(k, default)

        info = TABLE[op]
        for k in kw:
            if k not in info.keywords:
                raise Error(f"{op.value} takes no :{k}", span, "it takes " + " ".join(
                    ":" + w for w in sorted(info.keywords)) if info.keywords else "it takes no keywords")
        if info.group in ("unary", "binary", "ternary") and op is not Op.CAST:
            return P.apply_alu(op, args, span)
        if op is Op.CAST:
            if len(args) != 2:
                raise Error("expected (CAST x DTYPE)", span)
            return P.cast(args[0], args[1], span)
        if op is Op.REDUCE:
            self._arity(op.value, args, 1, span)
            kd = kwarg("keepdims", Lit(False, "bool"))
            return P.reduce(args[0], kwarg("op", "add"), kwarg("axis"), bool(getattr(kd, "value", kd)), span)
        if op is Op.VIEW:
            self._arity(op.value, args, 1, span)
            x = P.to_tensor(args[0], span)
            for k, v in kw.items():
                x = P.view(x, k, v, span)
            return x
        if op is Op.COPY:
            self._arity(op.value, args, 1, span)
            return Tensor(B.copy(P.to_tensor(args[0], span).node))
        if op is Op.CONST:
            self._arity(op.value, args, 1, span)
            dt = kwarg("dtype")
            v = args[0]
            t = P.cast(v, dt, span) if dt is not None else P.to_tensor(v, span)
            if "shape" in kw:
                try:
                    return Tensor(B.expand(t.node, P.as_shape(kw["shape"], span)))
                except ShapeError as e:
                    raise Error(str(e), span) from None
            return t
        if op is Op.INDEX:
            self._arity(op.value, args, 1, span)
            shape = P.as_shape(args[0], span)
            axis = P.one_axis(kwarg("axis", Lit(0, "int")), len(shape), span)
            dt = kwarg("dtype", T.i64)
            if dt not in info.dtypes:
                raise Error(f"INDEX gives i32 or i64, not {describe(dt)}", span)
            return Tensor(B.index(shape, axis, dt))
        if op is Op.RAND:
            self._arity(op.value, args, 1, span)
            return Tensor(B.rand_bits(P.as_shape(args[0], span), P.as_int(kwarg("seed", Lit(0, "int")), span)))
        if op is Op.EXTERN:
            if not args or not isinstance(args[0], str):
                raise Error('expected (EXTERN "name" ARGS... :dtype D :shape S)', span)
            from caten.ir.ops import EXTERNS

            if args[0] not in EXTERNS:
                raise Error(f"unknown extern kernel '{args[0]}'", span, f"known: {', '.join(EXTERNS)}")
            srcs = [P.to_tensor(a, span).node for a in args[1:]]
            return Tensor(B.extern(args[0], kwarg("dtype", srcs[0].dtype), P.as_shape(kw["shape"], span), srcs))
        raise Error(f"{op.value} cannot be called from source", span)

    @staticmethod
    def _arity(name: str, args: list, n: int, span: Span) -> None:
        if len(args) != n:
            raise Error(f"`{name}` takes {n} argument{'s' if n != 1 else ''}, got {len(args)}", span)

    def call_composite(self, name: str, defs: list[CompositeDef], args: list, kwargs: dict,
                       kspans: dict[str, Span], span: Span, rules: bool = True) -> Any:
        """The value of a call; `rules=False` gives it without rewrite rules at this call and inside
        it (what a rule's replacement must match in dtype and shape)."""
        if not rules:
            self.rules_off += 1
            try:
                return self.call_composite(name, defs, args, kwargs, kspans, span)
            finally:
                self.rules_off -= 1
        cdef = next((d for d in defs if d.arity == len(args) and d.rest is None), None)
        if cdef is None:
            cdef = next((d for d in defs if (d.rest is not None or d.fold) and len(args) >= d.arity), None)
        if cdef is None:
            want = " or ".join(sorted({str(d.arity) + ("+" if d.rest or d.fold else "") for d in defs}))
            raise Error(f"`{name}` takes {want} argument{'s' if want != '1' else ''}, got {len(args)}", span,
                        "signature: " + "; ".join(_sig_text(d) for d in defs))
        if cdef.fold and len(args) > cdef.arity:
            acc = self.call_composite(name, [cdef], args[:cdef.arity], kwargs, kspans, span)
            for a in args[cdef.arity:]:
                acc = self.call_composite(name, [cdef], [acc] + [a], kwargs, kspans, span)
            return acc
        try:  # a call is a pure function of its composite and arguments: made once per distinct call
            key = (name, id(cdef), _memo_key(args), _memo_key(sorted(kwargs.items(), key=lambda kv: kv[0])),
                   self.rules_off > 0)
        except TypeError:  # an argument of a kind _memo_key does not know: call afresh
            return self._call(name, cdef, args, kwargs, kspans, span)
        hit = self.calls.get(key)
        if hit is None:
            hit = self.calls[key] = (self._call(name, cdef, args, kwargs, kspans, span), cdef)
        return hit[0]

    def _call(self, name: str, cdef: CompositeDef, args: list, kwargs: dict, kspans: dict[str, Span],
              span: Span) -> Any:
        """The call's value: rewritten by a rule, or the composite's expansion. The result carries
        its origin (rules match calls); memoizing the whole call in call_composite keeps one origin
        per distinct call, so two calls of a composite on equal computed arguments (each argument
        itself a memoized call) hit: re-expanding at every call site made a tree of calls take time
        exponential in its depth, even when the graph it produced was linear."""
        if self.call_hook is not None and not self.rules_off:
            hooked = self.call_hook(name, args, kwargs, cdef, span)
            if hooked is not None:
                return hooked
        outermost = cdef.library and not self._in_library()
        try:
            result = self._expand(cdef, args, kwargs, kspans, span)
        except Error as e:
            if outermost and (e.span is None or e.span.file.startswith("<ops>")):
                raise Error(f"in `{name}`: {e.message}", span, e.hint) from None
            raise
        except RecursionError:
            raise Error(f"`{name}` expands too deeply (recursive composite?)", span) from None
        if isinstance(result, Tensor):
            return Tensor(result.node, Origin(name, tuple(args), tuple(sorted(kwargs.items(), key=lambda kv: kv[0]))))
        return result

    def _expand(self, cdef: CompositeDef, args: list, kwargs: dict, kspans: dict[str, Span], span: Span) -> Any:
        env = Scope(None)
        tvars: dict[str, DType] = {}
        dims: dict[str, Dim] = {}
        fixed = args[:cdef.arity]
        # type variables from tensors first, then literals take the bound dtype
        for p, a in zip(cdef.params, fixed):
            if p.tensor and isinstance(a, Tensor):
                self._bind_dtype(cdef, p, a.dtype, tvars, span)
        for p, a in zip(cdef.params, fixed):
            if not p.tensor:
                env.vars[p.name] = a
                continue
            if isinstance(a, Lit):
                dt = T.lookup(p.dtype) or tvars.get(p.dtype)
                if dt is not None or not cdef.library:
                    if dt is None:
                        dt = a.default_dtype
                        tvars[p.dtype] = dt
                    a = P.to_tensor(a, span, dt)
            elif not isinstance(a, Tensor):
                raise Error(f"argument `{p.name}` of `{cdef.name}` must be a tensor, got {describe(a)}", span)
            if isinstance(a, Tensor) and not p.any_shape:
                self._bind_shape(cdef, p, a, dims, span)
            env.vars[p.name] = a
        if cdef.rest is not None:
            env.vars[cdef.rest] = list(args[cdef.arity:])
        for p in cdef.params:
            if p.tensor and p.dims and not p.any_shape:
                for d in p.dims:
                    if not isinstance(d, (Sym, Num)):
                        want = self.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
                        got = self._dim_of(env.vars[p.name], p, d)
                        if got is not None and want != got:
                            raise Error(f"argument `{p.name}` of `{cdef.name}`: dimension {show(d)} should be "
                                        f"{want}, got {got}", span)
        self._apply_wheres(cdef, dims, span)
        for k, v in dims.items():
            env.vars.setdefault(k, Lit(v, "dim"))
        for k, v in tvars.items():
            env.vars.setdefault(k, v)
        keys = {k for k, _, _ in cdef.keys}
        for k in kwargs:
            if k not in keys:
                guess = closest(k, keys)
                raise Error(f"`{cdef.name}` takes no keyword :{k}", kspans.get(k, span),
                            f"did you mean :{guess}?" if guess else
                            (f"it takes {', '.join(':' + x for x in sorted(keys))}" if keys else None))
        self.frames.append(Frame(cdef, cdef.library))
        try:
            for k, default, _ in cdef.keys:
                env.vars[k] = kwargs[k] if k in kwargs else (self.eval(default, env) if default is not None else None)
            result = self.eval_body(cdef.body, env)
        finally:
            self.frames.pop()
        outs = result.values if isinstance(result, Ret) else [result]
        rspan = result.span if isinstance(result, Ret) else span
        if len(outs) != len(cdef.outputs):
            raise Error(f"`{cdef.name}` declares {len(cdef.outputs)} output{'s' if len(cdef.outputs) != 1 else ''} "
                        f"but returns {len(outs)}", rspan if not cdef.library else span)
        checked = [self._check_output(cdef, p, v, tvars, dims, rspan) for p, v in zip(cdef.outputs, outs)]
        return checked[0] if len(checked) == 1 else tuple(checked)

    def _bind_dtype(self, cdef: CompositeDef, p: Param, dt: DType, tvars: dict[str, DType], span: Span) -> None:
        want = T.lookup(p.dtype)
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

    def _dim_of(self, a: Tensor, p: Param, d: Form) -> Dim | None:
        idx = p.dims.index(d)
        return a.shape[idx] if idx < len(a.shape) else None

    def _bind_shape(self, cdef: CompositeDef, p: Param, a: Tensor, dims: dict[str, Dim], span: Span) -> None:
        want = p.dims or []
        if len(want) != a.node.rank:
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

    def _apply_wheres(self, cdef: CompositeDef, dims: dict[str, Dim], span: Span) -> None:
        for w in cdef.wheres:
            val = self.eval_dim(w.expr, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
            if w.name in dims:
                if isinstance(dims[w.name], int) and isinstance(val, int) and dims[w.name] != val:
                    raise Error(f"where {w.name} = {show(w.expr)} fails: {w.name} is {dims[w.name]}, "
                                f"{show(w.expr)} is {val}", span)
            else:
                dims[w.name] = val

    def _check_output(self, cdef: CompositeDef, p: Param, v: Any, tvars: dict[str, DType],
                      dims: dict[str, Dim], span: Span) -> Any:
        """The output as a tensor of its declared dtype and shape; a declared dim that equals the
        computed one only for some sizes becomes a call-time constraint (`_output_constraints`)."""
        dt = T.lookup(p.dtype) or tvars.get(p.dtype)
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
            want = self._declared_shape(cdef, p, dims, span)
            if isinstance(v, Lit):
                t = Tensor(B.expand(t.node, want))
            if tuple(t.shape) != want:
                self._output_constraints(cdef, p, tuple(t.shape), want, span)
        elif p.dims is None and t.node.rank != 0:
            raise Error(f"output `{p.name}` of `{cdef.name}` has shape {B.fmt_shape(t.shape)} but is declared "
                        "a scalar", span)
        return t

    def _output_constraints(self, cdef: CompositeDef, p: Param, got: tuple[Dim, ...], want: tuple[Dim, ...],
                            span: Span) -> None:
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
                if isinstance(D.add(g, D.mul(w, -1)), int) or (_bare(g) and _bare(w)):
                    raise fail()  # wrong for every size, or two symbols meeting (an error unless a where)
                self.output_constraints.append(Constraint(w, g, f"{w} = {g} (axis {i} of output `{p.name}`)"))

    def _declared_shape(self, cdef: CompositeDef, p: Param, dims: dict[str, Dim], span: Span) -> tuple[Dim, ...]:
        out = []
        for d in p.dims or []:
            for s in _syms(d):
                if s not in dims:
                    raise Error(f"dimension {s} of output `{p.name}` is not determined by any input or where clause",
                                d.span if hasattr(d, "span") else p.span,
                                f"add `where {s} = ...` to the signature or bind it with -D {s}=VALUE")
            out.append(self.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()})))
        return tuple(out)

    # top level --------------------------------------------------------------------------
    def compile(self, cdef: CompositeDef, dtypes: dict[str, DType], defines: dict[str, int]) -> Program:
        """The graph of a top-level composite for one binding of its type variables."""
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 20000))
        try:
            prog = self._compile(cdef, dtypes, defines)
            verify.check(prog.nodes, f"elaborating `{cdef.name}`")
            return prog
        except RecursionError:
            raise Error(f"`{cdef.name}` is nested too deeply to compile", cdef.span) from None
        finally:
            sys.setrecursionlimit(old)

    def _compile(self, cdef: CompositeDef, dtypes: dict[str, DType], defines: dict[str, int]) -> Program:
        if cdef.rest is not None or cdef.keys or any(not p.tensor for p in cdef.params):
            raise Error(f"`{cdef.name}` takes compile-time parameters and cannot be compiled on its own", cdef.span)
        dims: dict[str, Dim] = {}
        order: list[str] = []
        for p in cdef.params + cdef.outputs:
            if p.any_shape:
                raise Error(f"`{p.name}`: a compiled composite needs a concrete rank ([...] is for the library)",
                            p.span)
            for d in p.dims or []:
                for s in _syms(d):
                    if s not in order:
                        order.append(s)
        plain = {d.name for p in cdef.params for d in (p.dims or []) if isinstance(d, Sym)}
        for s in order:
            if s in defines:
                dims[s] = int(defines[s])
            elif s in plain:
                dims[s] = D.sym(s)
        constraints: list[Constraint] = []
        self.output_constraints, self.calls = [], {}
        subst: dict[str, Dim] = {}
        derived: dict[str, Dim] = {}
        for w in cdef.wheres:
            text = f"{w.name} = {show(w.expr)}"
            if w.name not in dims and head(w.expr) == "/" and len(w.expr.items) == 3 and \
                    isinstance(w.expr.items[2], Num) and isinstance(w.expr.items[2].value, int) and \
                    w.expr.items[2].value > 0:
                # K = (/ X c): X must be a multiple of c; the graph sees X as c*K with K = X idiv c
                num = self.eval_dim(w.expr.items[1], Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
                c = w.expr.items[2].value
                numv = D.substitute(num, subst)
                if isinstance(numv, int):
                    if numv % c:
                        raise Error(f"where {text} fails: {numv} is not divisible by {c}", w.span)
                    dims[w.name] = numv // c
                    continue
                k = D.sym(w.name)
                dims[w.name] = k
                derived[w.name] = D.floordiv(numv, c)
                constraints.append(Constraint(D.mod(numv, c), 0, f"{show(w.expr.items[1])} divisible by {c}"))
                syms = D.free_syms(num)
                if isinstance(num, D.DimExpr) and len(syms) == 1 and num == D.sym(syms[0]) and syms[0] in plain:
                    subst[syms[0]] = D.mul(k, c)
                continue
            val = self.eval_dim(w.expr, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
            if w.name in dims:
                if isinstance(dims[w.name], int) and isinstance(val, int):
                    if dims[w.name] != val:
                        raise Error(f"where {text} fails: {dims[w.name]} != {val}", w.span)
                    continue
                constraints.append(Constraint(dims[w.name], val, text))
                subst[w.name] = val
            else:
                dims[w.name] = val
        gdims = {k: D.substitute(v, subst) for k, v in dims.items()}
        inputs, env = [], Scope(None)
        tvars = dict(dtypes)
        for i, p in enumerate(cdef.params):
            dt = T.lookup(p.dtype) or tvars.get(p.dtype)
            if dt is None:
                raise Error(f"type variable {p.dtype} of `{p.name}` is unbound", p.span,
                            f"pass -D {p.dtype}=f32 (or call the composite with arrays)")
            spec_shape = tuple(self._sig_dim(d, dims, p) for d in p.dims or [])
            graph_shape = tuple(D.substitute(x, subst) for x in spec_shape)
            inputs.append(TensorSpec(p.name, dt, spec_shape))
            env.vars[p.name] = Tensor(B.buffer(dt, graph_shape, i, p.name))
        for k, v in gdims.items():
            env.vars.setdefault(k, Lit(v, "dim"))
        for k, v in tvars.items():
            env.vars.setdefault(k, v)
        self.frames.append(Frame(cdef, False))
        try:
            result = self.eval_body(cdef.body, env)
        finally:
            self.frames.pop()
        outs = result.values if isinstance(result, Ret) else [result]
        rspan = result.span if isinstance(result, Ret) else cdef.body[-1].span if hasattr(cdef.body[-1], "span") \
            else cdef.span
        if len(outs) != len(cdef.outputs):
            raise Error(f"`{cdef.name}` declares {len(cdef.outputs)} output{'s' if len(cdef.outputs) != 1 else ''} "
                        f"but returns {len(outs)}", rspan)
        nodes, ospecs = [], []
        for p, v in zip(cdef.outputs, outs):
            t = self._check_output(cdef, p, v, tvars, gdims, rspan)
            if p.dtype not in tvars and T.lookup(p.dtype) is None:
                tvars[p.dtype] = t.dtype
            nodes.append(t.node)
            ospecs.append(TensorSpec(p.name, t.dtype, tuple(self._sig_dim(d, dims, p) for d in p.dims or [])))
        dyn = [s for s in order if s not in defines and s in plain]
        constraints += [c for c in self.output_constraints if c not in constraints]
        return Program(cdef.name, inputs, ospecs, nodes, dyn, constraints,
                       {k: int(v) for k, v in defines.items() if k in order}, derived)

    def _sig_dim(self, d: Form, dims: dict[str, Dim], p: Param) -> Dim:
        for s in _syms(d):
            if s not in dims:
                raise Error(f"dimension {s} of `{p.name}` is not determined by any input or where clause",
                            getattr(d, "span", p.span), f"bind it with -D {s}=VALUE or add `where {s} = ...`")
        v = self.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
        if isinstance(v, int) and v < 0:  # the graph has no negative sizes (caten.ir.verify checks)
            raise Error(f"dimension {show(d)} of `{p.name}` is {v}: a size cannot be negative",
                        getattr(d, "span", p.span))
        return v


def _sum(xs: list[Dim]) -> Dim:
    out: Dim = 0
    for x in xs:
        out = D.add(out, x)
    return out


class _Same:
    """Compares and hashes by identity (and keeps the object alive while a memo key holds it)."""
    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _memo_key(v: Any) -> Any:
    """A hashable key that tells apart every two values an expansion could tell apart
    (0.0 and -0.0, 1 and True, tensors of different origins: rules match call origins)."""
    if isinstance(v, Tensor):  # the origin by identity: comparing origins structurally is quadratic in depth
        return ("T", v.node, _Same(v.origin))
    if isinstance(v, Lit):
        return ("L", v.kind, type(v.value).__name__, repr(v.value))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_memo_key(x) for x in v))
    if v is None or isinstance(v, (str, DType, D.DimExpr)):
        return (type(v).__name__, v)
    if type(v) in (int, float, bool):
        return (type(v).__name__, repr(v))
    raise TypeError(f"no memo key for {type(v).__name__}")


def _bare(d: Dim) -> bool:
    """Whether d is a single dimension symbol."""
    return isinstance(d, D.DimExpr) and len(D.free_syms(d)) == 1 and d == D.sym(D.free_syms(d)[0])


def _syms(f: Form) -> list[str]:
    if isinstance(f, Sym):
        return [f.name]
    if isinstance(f, SList):
        return [s for x in f.items[1:] for s in _syms(x)]
    return []


def _sig_text(d: CompositeDef) -> str:
    ins = " ".join(show(Annot(p.name, p.dtype, p.dims, p.span)) if p.tensor else p.name for p in d.params)
    if d.rest:
        ins += f" &rest {d.rest}"
    keys = "".join(f" :{k}" for k, _, _ in d.keys)
    return f"({d.name} {ins}{keys})"
