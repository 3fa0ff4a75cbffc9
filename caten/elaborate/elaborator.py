"""Elaboration: composites -> principal-op graphs.

Evaluates a composite's body over `values` (tensors are graph nodes, numbers are weak
literals), expanding calls of library and user composites, binding type variables and
dimension symbols from arguments, checking every call's shapes and dtypes, and pinning
each error to the user's source (an error inside a library composite is reported at the
user's call of it).

The parts: `evaluate` (the form evaluator: scopes, special forms, dims), `signature` (binding a
signature to arguments, checking outputs), `principal.call` (principal ops called from source);
this module holds the names, the composite calls with their memo, and the top level.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from caten import autodiff
from caten.elaborate import complex as CX
from caten.elaborate import control as CF
from caten.elaborate import grad as G
from caten.elaborate import meta
from caten.elaborate import principal as P
from caten.elaborate import signature as S
from caten.elaborate.evaluate import CONSTANTS, MAX_DOTIMES, SPECIAL, Evaluator, Frame, Ret, Scope
from caten.elaborate.library import composites as library_composites
from caten.elaborate.values import C64, CDType, Complex, Lit, Origin, Tensor, describe, lookup_dtype
from caten.errors import Error, Span, closest
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import verify
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.program import Constraint, Program, TensorSpec
from caten.read.program import CompositeDef
from caten.read.sexpr import Form, Kw, Num, SList, Sym, head, show

__all__ = ["Elaborator", "Frame", "Ret", "Scope", "SPECIAL", "CallHook"]

CallHook = Callable[[str, list, dict, Any, Span], Any]
MAX_NESTING = 2000  # composite bodies being expanded at once: past it, a recursion that never ends


class Elaborator(Evaluator):
    """Elaborates composites into principal-op graphs (see the module docstring)."""

    def __init__(self, user: dict[str, list[CompositeDef]], call_hook: CallHook | None = None):
        self.user = user
        self.lib = library_composites()
        self.call_hook = call_hook  # rewrite rules over library-level calls plug in here
        self.frames: list[Frame] = []
        self.output_constraints: list[Constraint] = []  # declared output dims checked at the call
        self.calls: dict[tuple, tuple[Any, CompositeDef]] = {}  # call_composite's memo
        self.rules_off = 0  # > 0 while a call is made without rewrite rules (call_composite)
        self.custom: dict[Node, autodiff.Custom] = {}  # outputs of calls of composites with a :vjp

    def reset(self) -> None:
        """Forget what the last evaluation left (the call memo, the :vjp outputs, the declared
        output dims), so that one Elaborator can evaluate many unrelated forms."""
        self.output_constraints, self.calls, self.custom = [], {}, {}

    # names ------------------------------------------------------------------------------
    def _in_library(self) -> bool:
        return bool(self.frames) and self.frames[-1].library

    def _callables(self) -> list[str]:
        names = list(SPECIAL) + list(G.FORMS) + list(CF.FORMS) + list(meta.META) + [o.value for o in Op] \
            + list(self.lib) + list(CX.FORMS)
        return names if self._in_library() else names + list(self.user)

    def lookup(self, sym: Sym, env: Scope) -> Any:
        s = env.find(sym.name)
        if s is not None:
            return s.vars[sym.name]
        if sym.name in CONSTANTS:
            return CONSTANTS[sym.name]
        dt = lookup_dtype(sym.name)
        if dt is not None:
            return dt
        guess = closest(sym.name, env.names() + list(CONSTANTS))
        if guess is None and (sym.name in self.lib or sym.name in self.user):
            raise Error(f"`{sym.name}` is a composite, not a value", sym.span, f"call it: ({sym.name} ...)")
        raise Error(f"unknown name `{sym.name}`", sym.span, f"did you mean `{guess}`?" if guess else None)

    def runtime_if(self, f: SList, c: Tensor, env: Scope) -> Any:
        return CF.runtime_if(self, f, c, env)

    def dotimes_loop(self, f: SList, index: str, count: Dim, env: Scope) -> Any:
        """A loop for a symbolic count; a large concrete one unrolls if the body needs its index
        known at compile time (a shape or an axis from it)."""
        if isinstance(count, int) and count <= MAX_DOTIMES:
            try:
                return CF.dotimes_loop(self, f, index, count, env)
            except Error:
                return self.unroll(f, index, count, env)
        return CF.dotimes_loop(self, f, index, count, env)

    # calls ------------------------------------------------------------------------------
    def _args(self, f: SList, env: Scope, raw: frozenset[str] = frozenset(),
              start: int = 1) -> tuple[list[Any], dict[str, Any], dict[str, Span]]:
        """Positional values, keyword values and keyword spans of a call form; the keywords in
        `raw` keep their unevaluated form (`:wrt` names parameters)."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        kspans: dict[str, Span] = {}
        items = f.items[start:]
        i = 0
        while i < len(items):
            x = items[i]
            if isinstance(x, Kw):
                if i + 1 >= len(items):
                    raise Error(f"keyword :{x.name} has no value", x.span)
                if x.name in kwargs:
                    raise Error(f"keyword :{x.name} is given twice", x.span)
                v = items[i + 1]
                kwargs[x.name] = v if x.name in raw else \
                    v.name if x.name == "op" and isinstance(v, Sym) else self.eval(v, env)
                kspans[x.name] = x.span
                i += 2
            else:
                v = self.eval(x, env)
                if isinstance(v, Ret):
                    raise Error("return must stand at the top of a body", x.span)
                args.append(v)
                i += 1
        return args, kwargs, kspans

    def defs(self, name: str) -> list[CompositeDef] | None:
        """The overloads `name` calls from here: the library's inside it, else the user's first."""
        return self.lib.get(name) if self._in_library() else (self.user.get(name) or self.lib.get(name))

    def call(self, f: SList, env: Scope) -> Any:
        name = head(f)
        span = f.span
        if name in G.FORMS:
            return G.call(self, name, f, env)
        if name in CF.FORMS:
            return CF.call(self, name, f, env)
        args, kwargs, kspans = self._args(f, env)
        user = not self._in_library() and name in self.user
        if not user and (name in CX.FORMS or CX.involves(args, kwargs)):
            return CX.call(self, name, args, kwargs, span)
        if name in meta.META:
            return meta.META[name](self, args, kwargs, span)
        if name in Op.__members__:
            return P.call(Op[name], args, kwargs, span)
        defs = self.defs(name)
        if defs is None:
            guess = closest(name, self._callables())
            raise Error(f"unknown function `{name}`", f.items[0].span, f"did you mean `{guess}`?" if guess else None)
        result = self.call_composite(name, defs, args, kwargs, kspans, span)
        return result if user else CX.wrap(name, result)

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
        cdef = self.pick(name, defs, args, span)
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

    def pick(self, name: str, defs: list[CompositeDef], args: list, span: Span) -> CompositeDef:
        """The overload a call with these arguments takes."""
        cdef = next((d for d in defs if d.arity == len(args) and d.rest is None), None)
        if cdef is None:
            cdef = next((d for d in defs if (d.rest is not None or d.fold) and len(args) >= d.arity), None)
        if cdef is None:
            want = " or ".join(sorted({str(d.arity) + ("+" if d.rest or d.fold else "") for d in defs}))
            raise Error(f"`{name}` takes {want} argument{'s' if want != '1' else ''}, got {len(args)}", span,
                        "signature: " + "; ".join(S.sig_text(d) for d in defs))
        return cdef

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
        scope: list[Scope] = []
        try:
            result = self._expand(cdef, args, kwargs, kspans, span, scope)
        except Error as e:
            if outermost and (e.span is None or e.span.file.startswith("<ops>")):
                raise Error(f"in `{name}`: {e.message}", span, e.hint) from None
            raise
        except RecursionError:
            raise Error(f"`{name}` expands too deeply (recursive composite?)", span) from None
        if cdef.vjp is not None and isinstance(result, Tensor) and scope:
            rule = G.custom_rule(self, cdef, scope[0], result, span)
            if rule is not None:
                self.custom[result.node] = rule
        if isinstance(result, Tensor):
            return Tensor(result.node, Origin(name, tuple(args), tuple(sorted(kwargs.items(), key=lambda kv: kv[0]))))
        return result

    def _expand(self, cdef: CompositeDef, args: list, kwargs: dict, kspans: dict[str, Span], span: Span,
                scope: list[Scope] | None = None) -> Any:
        """The composite's outputs; `scope` receives the environment its body ran in."""
        env = Scope(None)
        tvars: dict[str, DType] = {}
        dims: dict[str, Dim] = {}
        fixed = args[:cdef.arity]
        # type variables from tensors first, then literals take the bound dtype
        for p, a in zip(cdef.params, fixed):
            if p.tensor and (isinstance(a, Tensor) or isinstance(a, Complex) and not a.weak):
                S.bind_dtype(cdef, p, a.dtype, tvars, span)
        for p, a in zip(cdef.params, fixed):
            if not p.tensor:
                env.vars[p.name] = a
                continue
            if isinstance(a, (Lit, Complex)) and not isinstance(a, Tensor) and (isinstance(a, Lit) or a.weak):
                dt = lookup_dtype(p.dtype) or tvars.get(p.dtype)
                if dt is not None or not cdef.library:
                    if dt is None:
                        dt = a.default_dtype if isinstance(a, Lit) else C64
                        tvars[p.dtype] = dt
                    a = CX.to_declared(a, dt, cdef, p.name, span)
            elif not isinstance(a, (Tensor, Complex)):
                raise Error(f"argument `{p.name}` of `{cdef.name}` must be a tensor, got {describe(a)}", span)
            if isinstance(a, (Tensor, Complex)) and not p.any_shape:
                S.bind_shape(cdef, p, a, dims, span)
            env.vars[p.name] = a
        if cdef.rest is not None:
            env.vars[cdef.rest] = list(args[cdef.arity:])
        for p in cdef.params:
            if p.tensor and p.dims and not p.any_shape:
                for d in p.dims:
                    if not isinstance(d, (Sym, Num)):
                        want = self.eval_dim(d, Scope(None, {k: Lit(v, "dim") for k, v in dims.items()}))
                        got = S.dim_of(env.vars[p.name], p, d)
                        if got is not None and want != got:
                            raise Error(f"argument `{p.name}` of `{cdef.name}`: dimension {show(d)} should be "
                                        f"{want}, got {got}", span)
        S.apply_wheres(self, cdef, dims, span)
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
        if len(self.frames) >= MAX_NESTING:
            raise Error(f"`{cdef.name}` nests composite calls more than {MAX_NESTING} deep", span,
                        "a composite that calls itself needs a compile-time case that ends the recursion")
        self.frames.append(Frame(cdef, cdef.library))
        try:
            for k, default, _ in cdef.keys:
                env.vars[k] = kwargs[k] if k in kwargs else (self.eval(default, env) if default is not None else None)
            result = self.eval_body(cdef.body, env)
        finally:
            self.frames.pop()
        if scope is not None:
            scope.append(env)
        outs = result.values if isinstance(result, Ret) else [result]
        rspan = result.span if isinstance(result, Ret) else span
        if len(outs) != len(cdef.outputs):
            raise Error(f"`{cdef.name}` declares {len(cdef.outputs)} output{'s' if len(cdef.outputs) != 1 else ''} "
                        f"but returns {len(outs)}", rspan if not cdef.library else span)
        checked = [S.check_output(self, cdef, p, v, tvars, dims, rspan, self.output_constraints)
                   for p, v in zip(cdef.outputs, outs)]
        return checked[0] if len(checked) == 1 else tuple(checked)

    # top level --------------------------------------------------------------------------
    def evaluate(self, form: Form | list[Form], bindings: Mapping[str, Any], cdef: CompositeDef | None = None) -> Any:
        """The value of `form` (or of a body: a list of forms, which may `return`) with `bindings` in
        scope (graph nodes become tensors), names resolving as in user code: user composites, then
        the library. `cdef`: the composite the form stands in, if any. Rule replacements, the rule
        checker and the conformance probe evaluate forms through this; to them a complex result is
        its (re, im) pair of tensors (`rfft` keeps giving caten.Tensor its pair)."""
        env = Scope(None, {k: Tensor(v) if isinstance(v, Node) else v for k, v in bindings.items()})
        self.frames.append(Frame(cdef, False))
        try:
            v = self.eval_body(form, env) if isinstance(form, list) else self.eval(form, env)
        finally:
            self.frames.pop()
        return (v.re, v.im) if isinstance(v, Complex) else v

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
                for s in S.syms(d):
                    if s not in order:
                        order.append(s)
        plain = {d.name for p in cdef.params for d in (p.dims or []) if isinstance(d, Sym)}
        for s in order:
            if s in defines:
                dims[s] = int(defines[s])
                if dims[s] >= 2 ** 63:  # (a negative one is the signature's "cannot be negative")
                    raise Error(f"-D {s}={defines[s]}: a dim must lie in [0, 2**63)", cdef.span,
                                "a dim counts elements in an int64")
            elif s in plain:
                dims[s] = D.sym(s)
        constraints: list[Constraint] = []
        self.reset()
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
        for p in cdef.params:
            dt = lookup_dtype(p.dtype) or tvars.get(p.dtype)
            if dt is None:
                raise Error(f"type variable {p.dtype} of `{p.name}` is unbound", p.span,
                            f"pass -D {p.dtype}=f32 (or call the composite with arrays)")
            spec_shape = tuple(S.sig_dim(self, d, dims, p) for d in p.dims or [])
            graph_shape = tuple(D.substitute(x, subst) for x in spec_shape)
            parts = []
            for name, pdt in CX.io_parts(cdef, p, dt):  # a complex parameter: two real buffers
                inputs.append(TensorSpec(name, pdt, spec_shape))
                parts.append(Tensor(B.buffer(pdt, graph_shape, len(inputs) - 1, name)))
            env.vars[p.name] = parts[0] if len(parts) == 1 else Complex(*parts)
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
            t = S.check_output(self, cdef, p, v, tvars, gdims, rspan, self.output_constraints)
            if p.dtype not in tvars and lookup_dtype(p.dtype) is None:
                tvars[p.dtype] = t.dtype
            shape = tuple(S.sig_dim(self, d, dims, p) for d in p.dims or [])
            for (name, pdt), part in zip(CX.io_parts(cdef, p, t.dtype), (t.re, t.im) if isinstance(t, Complex)
                                         else (t,)):
                nodes.append(part.node)
                ospecs.append(TensorSpec(name, pdt, shape))
        constraints += _check_sizes(nodes, cdef)
        dyn = [s for s in order if s not in defines and s in plain]
        constraints += [c for c in self.output_constraints if c not in constraints]
        return Program(cdef.name, inputs, ospecs, nodes, dyn, constraints,
                       {k: int(v) for k, v in defines.items() if k in order}, derived,
                       aliases=CX.in_place(cdef, inputs, ospecs))


def _check_sizes(outputs: list, cdef: Any) -> list[Constraint]:
    """Refuse a tensor whose element count does not fit the int64 its indices are computed in
    (a dim that large, or a product of dims: an index would wrap and address the wrong element).
    Where symbols are among the dims, the known part S bounds the rest: a call-time constraint
    keeps the symbols' product P at most (2**63 - 1) // S (P // (that + 1) == 0, all in int64)."""
    out: list[Constraint] = []
    seen: set = set()
    for n in toposort(outputs):
        count = 1
        syms = []
        for d in n.shape:
            if isinstance(d, int):
                count *= d
            else:
                syms.append(d)
        if count >= 2 ** 63 or count == 0:
            if count:
                raise Error(f"`{cdef.name}`: a tensor of shape [{' '.join(map(str, n.shape))}] has {count} "
                            "elements, more than an int64 index can count", cdef.span,
                            "element counts must stay below 2**63; use smaller dims")
            continue
        if syms and count >= 2 ** 16:  # (symbols alone come from arrays that exist: their product fits)
            most = (2 ** 63 - 1) // count
            key = (D._key(D.prod(syms)), most)
            if key not in seen:
                seen.add(key)
                shape = " ".join(D.to_str(d) for d in n.shape)
                out.append(Constraint(D.floordiv(D.prod(syms), most + 1), 0,
                                      f"a tensor of shape [{shape}] has fewer than 2**63 elements"))
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
    if isinstance(v, Complex):
        return ("C", _memo_key(v.re), _memo_key(v.im))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_memo_key(x) for x in v))
    if v is None or isinstance(v, (str, DType, CDType, D.DimExpr)):
        return (type(v).__name__, v)
    if type(v) in (int, float, bool):
        return (type(v).__name__, repr(v))
    raise TypeError(f"no memo key for {type(v).__name__}")

