"""The evaluator of forms: scopes, the special forms (setf let progn return if dotimes) and
dimension arithmetic. Calls and names are the subclass's (`Elaborator`): this layer knows
nothing of composites, so it is the part the rewrite engine, the rule checker and the
conformance generator share when they evaluate a form under bindings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caten.elaborate import principal as P
from caten.elaborate.values import Complex, Lit, Tensor
from caten.errors import Error, Span
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.program import Constraint
from caten.read.program import CompositeDef
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym, head, show

MAX_DOTIMES = 100_000  # dotimes unrolls at compile time: a bound keeps a typo from hanging the compiler
UNROLL_MAX = 64  # past this count (or over a symbolic one) the elaborator runs a dotimes as a loop
SPECIAL = ("setf", "let", "return", "dotimes", "if", "progn")
def _where(span: Span | None) -> str:
    return f"{span.file}:{span.line}:{span.col}" if span is not None else "no source"


DIM_OPS = {"+": D.add, "*": D.mul, "-": None, "/": None, "idiv": D.floordiv, "mod": D.mod, "max": D.dmax,
           "min": D.dmin}
CONSTANTS = {"true": Lit(True, "bool"), "t": Lit(True, "bool"), "false": Lit(False, "bool"), "nil": None}


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


class Evaluator:
    """Evaluates forms; a subclass provides `lookup(sym, env)` (names) and `call(form, env)` (calls)."""

    def lookup(self, sym: Sym, env: Scope) -> Any:
        raise NotImplementedError

    def call(self, f: SList, env: Scope) -> Any:
        raise NotImplementedError

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
                if D.divides(args[0], args[1]) is None:  # known only at the call: checked there
                    c = Constraint(D.mod(args[0], args[1]), 0, f"{show(f)}: {args[0]} divisible by {args[1]} "
                                   f"({_where(f.span)}; use idiv for floor division)")
                    if c not in self.output_constraints:
                        self.output_constraints.append(c)
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
            return self.runtime_if(f, c, env)
        if isinstance(c, Complex):
            raise Error("if needs a bool condition, got a complex value", f.items[1].span,
                        "compare parts: (= (imag z) 0)")
        truth = c.value if isinstance(c, Lit) else c
        if isinstance(truth, D.DimExpr):
            raise Error("if needs a condition known at compile time, got a symbolic dimension", f.items[1].span)
        if truth is not None and truth is not False and not (isinstance(truth, list) and not truth):
            return self.eval(f.items[2], env)
        return self.eval(f.items[3], env) if len(f.items) == 4 else None

    def runtime_if(self, f: SList, c: Tensor, env: Scope) -> Any:
        """An `if` on a tensor: the elaborator's runtime branch; elsewhere (rules) an error."""
        raise Error("if needs a condition known at compile time", f.items[1].span, "for tensors use (where COND A B)")

    def dotimes_loop(self, f: SList, index: str, count: Dim, env: Scope) -> Any:
        """A dotimes past UNROLL_MAX or over a symbolic count: the elaborator's loop; elsewhere an error."""
        if not isinstance(count, int):
            raise Error(f"dotimes needs a count known at compile time, got {count}", f.items[1].span,
                        "bind the dim with -D or defines=")
        return self.unroll(f, index, count, env)

    def unroll(self, f: SList, index: str, count: int, env: Scope) -> Any:
        if not 0 <= count <= MAX_DOTIMES:
            raise Error(f"dotimes count {count} is outside 0..{MAX_DOTIMES}", f.items[1].span,
                        "dotimes unrolls at compile time; loop over a tensor axis instead (a reduction or a view)")
        for i in range(count):
            inner = Scope(env, {index: Lit(i, "dim")})
            r = self.eval_body(f.items[2:], inner)
            if isinstance(r, Ret):
                return r
        return None

    def _sf_dotimes(self, f: SList, env: Scope) -> Any:
        spec = f.items[1] if len(f.items) > 1 else None
        if not (isinstance(spec, SList) and len(spec.items) == 2 and isinstance(spec.items[0], Sym)):
            raise Error("expected (dotimes (I COUNT) BODY...)", f.span)
        count = self.eval_dim(spec.items[1], env)
        if not isinstance(count, int) or count > UNROLL_MAX:
            return self.dotimes_loop(f, spec.items[0].name, count, env)
        return self.unroll(f, spec.items[0].name, count, env)


def _sum(xs: list[Dim]) -> Dim:
    out: Dim = 0
    for x in xs:
        out = D.add(out, x)
    return out


class _DimsOnly(Evaluator):
    """Evaluates dim arithmetic over bound dims: the names of a scope, no calls."""

    def lookup(self, sym: Sym, env: Scope) -> Any:
        s = env.find(sym.name)
        if s is None:
            raise Error(f"unknown dim `{sym.name}`", sym.span)
        return s.vars[sym.name]

    def call(self, f: SList, env: Scope) -> Any:
        raise Error(f"`{head(f)}` is not dim arithmetic", f.span)


def where_dims(cdef: CompositeDef, dims: dict[str, int]) -> dict[str, int]:
    """`dims` and the `where` dims of `cdef` they determine (NP = (+ (* 32 P) 1)), in clause order,
    for tools that make a program's inputs from -D sizes (`caten profile`, `caten tune`); a clause
    that needs a dim nobody bound is left out."""
    out = dict(dims)
    ev = _DimsOnly()
    for w in cdef.wheres:
        if w.name in out:
            continue
        try:
            v = ev.eval_dim(w.expr, Scope(None, {k: Lit(x, "dim") for k, x in out.items()}))
        except Error:
            continue
        if isinstance(v, int):
            out[w.name] = v
    return out
