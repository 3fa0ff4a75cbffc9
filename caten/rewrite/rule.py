"""Rules: `(defoptimizer NAME PATTERN => REPLACEMENT [:when GUARD] [:runtime R])` checked and
compiled into a small pattern tree, plus the matcher over both levels a rule can target.

- A pattern whose head is a library or user composite (`(neg (neg ?x))`, `(matmul ?a ?b)`)
  matches a *call* before it is expanded: its arguments are elaborated values, and a nested
  call pattern matches a tensor through the `Origin` of the call that produced it.
- A pattern whose head is a principal op (`(ADD ?x 0)`) matches a node of the graph.

Compiled pattern nodes are tuples, for speed:
    ("var", NAME) ("lit", VALUE) ("nil",) ("dt", DTYPE) ("str", S) ("list", [P...])
    ("call", NAME, [P...], {KW: P}) ("op", Op, [P...], {KW: P})
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from caten.elaborate.values import Lit, Tensor
from caten.errors import Error, Span, closest
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import TABLE, Op
from caten.read.program import RuleDef
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym, head, show

# principal ops a pattern may name, and how their extra items read
_ALU = {o for o, i in TABLE.items() if i.group in ("unary", "binary", "ternary") and o is not Op.CAST}
_MATCHABLE = _ALU | {Op.CAST, Op.REDUCE, Op.COPY, Op.EXTERN, Op.CONST}

# functions a guard may call (besides and/or/not and comparisons)
GUARD_FUNCS = {"dtype", "shape", "rank", "const?", "float?", "int?", "bool?", "dim", "len", "nth",
               "lossless?", "exact-recip?", "add-identity?", "value", "+", "-", "*", "list"}
GUARD_LOGIC = {"and", "or", "not"}
# how many arguments each guard function takes (None: one or more)
GUARD_ARITY = {"dtype": 1, "shape": 1, "rank": 1, "const?": 1, "float?": 1, "int?": 1, "bool?": 1, "value": 1,
               "exact-recip?": 1, "add-identity?": 1,
               "len": 1, "not": 1, "dim": 2, "nth": 2, "lossless?": 2, "=": 2, "!=": 2, "<": 2, "<=": 2, ">": 2,
               ">=": 2, "+": None, "-": None, "*": None, "list": None, "and": None, "or": None}
GUARD_CMP = {"=", "!=", "<", "<=", ">", ">="}


@dataclass(eq=False)
class Rule:
    name: str
    pattern: tuple  # compiled root: ("call", ...) or ("op", ...)
    replacement: Form
    guard: Form | None
    runtime: str | None
    span: Span
    ruleset: str  # "fold", "algebra", a user file's path, ...
    source: RuleDef = field(repr=False, default=None)  # type: ignore[assignment]
    vars: list[str] = field(default_factory=list)
    guard_fn: Any = field(repr=False, default=None)  # the guard compiled to a closure
    node_fn: Any = field(repr=False, default=None)  # graph patterns compiled to a closure
    rep_fn: Any = field(repr=False, default=None)  # simple replacements compiled (engine.compile_replacement)
    rep_compiled: bool = field(repr=False, default=False)

    @property
    def level(self) -> str:
        return self.pattern[0]  # "call" or "op"

    @property
    def head(self) -> Any:
        return self.pattern[1]

    def where(self) -> str:
        return f"{self.span.file}:{self.span.line}:{self.span.col}"


# compiling -----------------------------------------------------------------------------
def _is_var(f: Form) -> bool:
    return isinstance(f, Sym) and f.name.startswith("?") and len(f.name) > 1


def _span(f: Form, default: Span) -> Span:
    return getattr(f, "span", None) or default


class _Compiler:
    def __init__(self, rd: RuleDef, known: set[str]):
        self.rd, self.known = rd, known
        self.vars: list[str] = []

    def err(self, msg: str, f: Form | None = None, hint: str | None = None) -> Error:
        return Error(f"rule `{self.rd.name}`: {msg}", _span(f, self.rd.span) if f is not None else self.rd.span, hint)

    def root(self, f: Form) -> tuple:
        if not (isinstance(f, SList) and not f.bracket and head(f) is not None):
            raise self.err(f"the pattern must be a call like (neg ?x) or (ADD ?x 0), got `{show(f)}`", f)
        return self.pat(f, in_op=False)

    def pat(self, f: Form, in_op: bool) -> tuple:
        if isinstance(f, Sym):
            if _is_var(f):
                if f.name not in self.vars:
                    self.vars.append(f.name)
                return ("var", f.name)
            if f.name in ("true", "t"):
                return ("lit", True)
            if f.name == "false":
                return ("lit", False)
            if f.name == "nil":
                return ("nil",)
            dt = T.lookup(f.name)
            if dt is not None:
                return ("dt", dt)
            raise self.err(f"unexpected symbol `{f.name}` in the pattern", f,
                           f"write ?{f.name} for a pattern variable")
        if isinstance(f, Num):
            return ("lit", f.value)
        if isinstance(f, Str):
            return ("str", f.value)
        if isinstance(f, (Kw, Annot)):
            raise self.err(f"unexpected `{show(f)}` in the pattern", f)
        if f.bracket:
            return ("list", [self.pat(x, False) for x in f.items])
        h = head(f)
        if h is None:
            raise self.err(f"a pattern call starts with a name, got `{show(f)}`", f)
        args, kw = self._items(f, h)
        if h in Op.__members__:
            op = Op[h]
            if op not in _MATCHABLE:
                raise self.err(f"patterns cannot match {h} nodes", f.items[0],
                               "match elementwise ops, CAST, REDUCE, COPY, EXTERN or CONST")
            if op in _ALU and (len(args) != TABLE[op].arity or kw):
                raise self.err(f"{h} takes {TABLE[op].arity} operand(s) in a pattern, got {len(args)}", f)
            if op in (Op.COPY, Op.CONST) and (len(args) != 1 or kw):
                raise self.err(f"expected ({h} P) in a pattern", f)
            if op is Op.CAST and (len(args) != 2 or kw):
                raise self.err("expected (CAST P DTYPE) in a pattern", f)
            if op is Op.REDUCE and (len(args) != 1 or set(kw) - {"op", "axis"}):
                raise self.err("expected (REDUCE P [:op OP] [:axis AXES]) in a pattern", f)
            if op is Op.EXTERN and (not args or args[0][0] not in ("str", "var") or kw):
                raise self.err('expected (EXTERN "name" P...) in a pattern', f)
            operands = {Op.CAST: args[:1], Op.REDUCE: args[:1], Op.COPY: args[:1], Op.EXTERN: args[1:],
                        Op.CONST: []}.get(op, args)
            for a in operands:
                if a[0] not in ("var", "lit", "op"):
                    raise self.err(f"an operand of {h} must be ?var, a number or a principal-op pattern, "
                                   f"got `{_show_pat(a)}`", f,
                                   "library calls are expanded before the graph exists; match them at the root")
            return ("op", op, args, kw)
        if h in ("fold",) or h not in self.known:
            guess = closest(h, self.known | set(Op.__members__))
            raise self.err(f"`{h}` in the pattern is not a library composite, user composite or principal op",
                           f.items[0], f"did you mean `{guess}`?" if guess else None)
        if in_op:
            raise self.err(f"a library call `({h} ...)` cannot stand inside a principal-op pattern", f)
        return ("call", h, args, kw)

    def _items(self, f: SList, h: str) -> tuple[list[tuple], dict[str, tuple]]:
        args: list[tuple] = []
        kw: dict[str, tuple] = {}
        items = f.items[1:]
        i = 0
        in_op = h in Op.__members__
        while i < len(items):
            x = items[i]
            if isinstance(x, Kw):
                if i + 1 >= len(items):
                    raise self.err(f"keyword :{x.name} has no value", x)
                v = items[i + 1]
                if x.name == "op" and isinstance(v, Sym) and not _is_var(v):
                    kw[x.name] = ("str", v.name)
                else:
                    kw[x.name] = self.pat(v, in_op)
                i += 2
            else:
                args.append(self.pat(x, in_op))
                i += 1
        return args, kw

    def check_bound(self, f: Form | None, where: str) -> None:
        if f is None:
            return
        if isinstance(f, Sym) and f.name.startswith("?"):
            if f.name not in self.vars:
                bound = ", ".join(self.vars) or "none"
                raise self.err(f"`{f.name}` in the {where} is not bound by the pattern", f,
                               f"the pattern binds: {bound}")
        elif isinstance(f, SList):
            for x in f.items:
                self.check_bound(x, where)
        elif isinstance(f, Annot):
            for d in f.dims or []:
                self.check_bound(d, where)

    def check_guard(self, f: Form) -> None:
        if isinstance(f, SList) and not f.bracket:
            h = head(f)
            if h is None:
                raise self.err(f"cannot evaluate `{show(f)}` in the guard", f)
            if h not in GUARD_FUNCS | GUARD_LOGIC | GUARD_CMP:
                fns = sorted(GUARD_FUNCS | GUARD_LOGIC | GUARD_CMP)
                guess = closest(h, fns)
                raise self.err(f"unknown guard function `{h}`", f.items[0],
                               f"did you mean `{guess}`?" if guess else "guards use: " + " ".join(fns))
            n = GUARD_ARITY.get(h)
            if (n is None and len(f.items) < 2 and h != "list") or (n is not None and len(f.items) - 1 != n):
                want = "one or more arguments" if n is None else f"{n} argument{'s' if n != 1 else ''}"
                raise self.err(f"`{h}` takes {want} in a guard, got {len(f.items) - 1}", f)
            for x in f.items[1:]:
                self.check_guard(x)
        elif isinstance(f, SList):
            for x in f.items:
                self.check_guard(x)
        elif isinstance(f, Sym) and not f.name.startswith("?") and f.name not in ("true", "false", "t", "nil") \
                and T.lookup(f.name) is None:
            raise self.err(f"unknown name `{f.name}` in the guard", f, "guards read ?vars, numbers and dtype names")
        elif isinstance(f, (Kw, Annot)):
            raise self.err(f"unexpected `{show(f)}` in the guard", f)

    def check_replacement(self, f: Form) -> None:
        if head(f) == "fold":
            if len(f.items) != 2:
                raise self.err("expected (fold EXPR): EXPR over constants, computed at compile time", f)
        self.check_bound(f, "replacement")


def compile_rule(rd: RuleDef, ruleset: str, known: set[str]) -> Rule:
    """Check a parsed rule (unbound variables, unknown heads, bad guards) and compile its pattern."""
    c = _Compiler(rd, known)
    pat = c.root(rd.pattern)
    c.check_replacement(rd.replacement)
    if rd.guard is not None:
        c.check_bound(rd.guard, "guard")
        c.check_guard(rd.guard)
    runtime = None
    for k, v in rd.options.items():
        if k == "runtime":
            if not isinstance(v, (Sym, Str)):
                raise c.err(":runtime takes a runtime name, e.g. :runtime llvm", v)
            runtime = v.name if isinstance(v, Sym) else v.value
        else:
            raise c.err(f"unknown option :{k}", v, "rules take :when GUARD and :runtime NAME")
    from caten.rewrite.guard import compile_guard

    gfn = compile_guard(rd.guard) if rd.guard is not None else None
    nfn = compile_node_pattern(pat) if pat[0] == "op" else None
    return Rule(rd.name, pat, rd.replacement, rd.guard, runtime, rd.span, ruleset, rd, c.vars, gfn, nfn)


# matching ------------------------------------------------------------------------------
_VIEW, _CONST = Op.VIEW, Op.CONST


def node_const(n: Node) -> Any:
    """The value of a node that is one concrete scalar everywhere (a CONST, maybe broadcast), else None."""
    op = n.op
    if op is _VIEW:
        s = n.src[0]
        if s.op is not _CONST or s.shape or n.arg.mask is not None:
            return None
        n, op = s, _CONST
    if op is _CONST and isinstance(n.arg, (int, float, bool)):
        return n.arg
    return None


def value_const(v: Any) -> Any:
    if isinstance(v, Lit):
        return v.value if v.concrete else None
    if isinstance(v, Tensor):
        return node_const(v.node)
    if isinstance(v, Node):
        return node_const(v)
    return None


def lit_eq(p: Any, c: Any) -> bool:
    if c is None or isinstance(p, bool) != isinstance(c, bool):
        return False
    if isinstance(p, float) and math.isnan(p):
        return isinstance(c, float) and math.isnan(c)
    return p == c


def same(a: Any, b: Any) -> bool:
    """Are two matched values the same (a repeated ?var)? Tensors by node: hash-consing makes it structural."""
    a = a.node if isinstance(a, Tensor) else a
    b = b.node if isinstance(b, Tensor) else b
    if isinstance(a, Node) or isinstance(b, Node):
        return a is b
    if isinstance(a, Lit) and isinstance(b, Lit):
        return (a.kind == "bool") == (b.kind == "bool") and (a.value == b.value or (
            isinstance(a.value, float) and isinstance(b.value, float) and math.isnan(a.value) and math.isnan(b.value)))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    return a == b


def _bind(b: dict, name: str, v: Any) -> bool:
    old = b.get(name, b)
    if old is b:
        b[name] = v
        return True
    return same(old, v)


class Matcher:
    """Matches compiled patterns; `defaults(name, nargs)` gives a composite's keyword defaults."""

    def __init__(self, defaults):
        self.defaults = defaults

    def call(self, p: tuple, name: str, args: list | tuple, kwargs: dict, b: dict) -> bool:
        """A ("call", ...) pattern against a call's evaluated arguments."""
        _, pname, pargs, pkw = p
        if pname != name or len(pargs) != len(args):
            return False
        for q, v in zip(pargs, args):
            if not self.value(q, v, b):
                return False
        if pkw or kwargs:
            defaults = None
            for k, q in pkw.items():
                if k in kwargs:
                    v = kwargs[k]
                else:
                    defaults = defaults if defaults is not None else self.defaults(name, len(args))
                    if k not in defaults:
                        return False
                    v = defaults[k]
                if not self.value(q, v, b):
                    return False
            for k, v in kwargs.items():
                if k not in pkw:
                    # a keyword the pattern does not mention must have its default value
                    defaults = defaults if defaults is not None else self.defaults(name, len(args))
                    if k not in defaults or not same(defaults[k], v):
                        return False
        return True

    def value(self, p: tuple, v: Any, b: dict) -> bool:
        t = p[0]
        if t == "var":
            return _bind(b, p[1], v)
        if t == "lit":
            return lit_eq(p[1], value_const(v))
        if t == "call":
            o = v.origin if isinstance(v, Tensor) else None
            return o is not None and o.name == p[1] and self.call(p, o.name, o.args, dict(o.kwargs), b)
        if t == "op":
            return isinstance(v, Tensor) and self.node(p, v.node, b)
        if t == "dt":
            return isinstance(v, DType) and v == p[1]
        if t == "str":
            return isinstance(v, str) and v == p[1]
        if t == "nil":
            return v is None
        if t == "list":
            return isinstance(v, list) and len(v) == len(p[1]) and all(self.value(q, x, b) for q, x in zip(p[1], v))
        return False

    def node(self, p: tuple, n: Node, b: dict) -> bool:
        """An ("op", ...) pattern against a graph node; ?vars bind nodes."""
        op = p[1]
        if n.op is not op:
            return False
        args = p[2]
        if op in _ALU:
            for q, s in zip(args, n.src):
                t = q[0]
                if t == "var":
                    if not _bind(b, q[1], s):
                        return False
                elif t == "lit":
                    if not lit_eq(q[1], node_const(s)):
                        return False
                elif not self.node(q, s, b):
                    return False
            return True
        if op is Op.CAST:
            return self.operand(args[0], n.src[0], b) and self.value(args[1], n.dtype, b)
        if op is Op.COPY:
            return self.operand(args[0], n.src[0], b)
        if op is Op.REDUCE:
            if not self.operand(args[0], n.src[0], b):
                return False
            kw = p[3]
            if "op" in kw and not self.value(kw["op"], n.arg[0], b):
                return False
            return "axis" not in kw or self.value(kw["axis"], [Lit(a, "int") for a in n.arg[1]], b)
        if op is Op.EXTERN:
            return len(args) == len(n.src) + 1 and self.value(args[0], n.arg[1], b) and all(
                self.operand(q, s, b) for q, s in zip(args[1:], n.src))
        if op is Op.CONST:
            c = node_const(n)
            return c is not None and self.value(args[0], Lit(c, _kind(c)), b)
        return False

    def operand(self, q: tuple, s: Node, b: dict) -> bool:
        t = q[0]
        if t == "var":
            return _bind(b, q[1], s)
        if t == "lit":
            return lit_eq(q[1], node_const(s))
        if t == "op":
            return self.node(q, s, b)
        return False


def _kind(v: Any) -> str:
    return "bool" if isinstance(v, bool) else "float" if isinstance(v, float) else "int"


def _show_pat(p: tuple) -> str:
    t = p[0]
    if t == "var":
        return p[1]
    if t in ("lit", "str"):
        return repr(p[1])
    if t == "dt":
        return p[1].name
    if t == "nil":
        return "nil"
    if t == "list":
        return "[" + " ".join(_show_pat(q) for q in p[1]) + "]"
    name = p[1].value if isinstance(p[1], Op) else p[1]
    parts = [name] + [_show_pat(q) for q in p[2]] + [f":{k} {_show_pat(q)}" for k, q in p[3].items()]
    return "(" + " ".join(parts) + ")"


# graph patterns compiled to closures: the hot path of the graph pass ---------------------------
_GENERIC = Matcher(None)


def compile_node_pattern(p: tuple) -> Any:
    """A function (node, bindings) -> bool for an ("op", ...) pattern; repeated ?vars compare by identity."""
    seen: set[str] = set()

    def operand(q: tuple) -> Any:
        t = q[0]
        if t == "var":
            name = q[1]
            if name in seen:
                return lambda s, b: b[name] is s
            seen.add(name)

            def store(s: Node, b: dict) -> bool:
                b[name] = s
                return True
            return store
        if t == "lit":
            v = q[1]
            return lambda s, b: lit_eq(v, node_const(s))
        return op_pattern(q)

    def op_pattern(q: tuple) -> Any:
        op = q[1]
        if op not in _ALU:
            for name in _pattern_vars(q):
                seen.add(name)  # bound by the generic matcher, which checks repeats itself
            return lambda n, b: _GENERIC.node(q, n, b)
        fs = [operand(a) for a in q[2]]
        if len(fs) == 1:
            f0 = fs[0]
            return lambda n, b: n.op is op and f0(n.src[0], b)
        if len(fs) == 2:
            f0, f1 = fs
            return lambda n, b: n.op is op and f0(n.src[0], b) and f1(n.src[1], b)
        f0, f1, f2 = fs
        return lambda n, b: n.op is op and f0(n.src[0], b) and f1(n.src[1], b) and f2(n.src[2], b)

    return op_pattern(p)


def _pattern_vars(p: tuple) -> list[str]:
    t = p[0]
    if t == "var":
        return [p[1]]
    if t == "list":
        return [v for q in p[1] for v in _pattern_vars(q)]
    if t in ("call", "op"):
        return [v for q in list(p[2]) + list(p[3].values()) for v in _pattern_vars(q)]
    return []
