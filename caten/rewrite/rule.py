"""Rules: `(defoptimizer NAME PATTERN => REPLACEMENT [:when GUARD] [:runtime R])` checked and
compiled into a small pattern tree, plus the matcher over both levels a rule can target.

- A pattern whose head is a library or user composite (`(neg (neg ?x))`, `(matmul ?a ?b)`)
  matches a *call* before it is expanded: its arguments are elaborated values, and a nested
  call pattern matches a tensor through the `Origin` of the call that produced it.
- A pattern whose head is a principal op (`(ADD ?x 0)`) matches a node of the graph; one whose
  head is an op variable with a class (`(?op{binary} ?a ?b)`, caten.rewrite.opclass) matches a
  node of any op of the class and binds the variable to the op.

Compiled pattern nodes are tuples, for speed:
    ("var", NAME) ("lit", VALUE) ("nil",) ("dt", DTYPE) ("str", S) ("list", [P...])
    ("call", NAME, [P...], {KW: P}) ("op", Op | OpClass, [P...], {KW: P})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from caten.errors import Error, Span, closest
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import TABLE, Op
from caten.read.program import RuleDef
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym, head, show
from caten.rewrite import guard as G
from caten.rewrite.consts import lit_eq, node_const
from caten.rewrite.match import ALU as _ALU
from caten.rewrite.match import Matcher
from caten.rewrite.opclass import CLASSES, OpClass, class_head

# principal ops a pattern may name, and how their extra items read
_MATCHABLE = _ALU | {Op.CAST, Op.REDUCE, Op.COPY, Op.EXTERN, Op.CONST}


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

    @property
    def ops(self) -> list[Op]:
        """The ops whose nodes this graph rule is tried on."""
        h = self.head
        return sorted(h.members, key=lambda o: o.value) if isinstance(h, OpClass) else [h]

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
        self.op_vars: set[str] = set()  # ?vars bound to an op by a class pattern's head

    def err(self, msg: str, f: Form | None = None, hint: str | None = None) -> Error:
        return Error(f"rule `{self.rd.name}`: {msg}", _span(f, self.rd.span) if f is not None else self.rd.span, hint)

    def root(self, f: Form) -> tuple:
        if not (isinstance(f, SList) and not f.bracket and (head(f) is not None or
                                                             (f.items and class_head(f.items[0])))):
            raise self.err(f"the pattern must be a call like (neg ?x) or (ADD ?x 0), got `{show(f)}`", f)
        return self.pat(f, in_op=False)

    def pat(self, f: Form, in_op: bool) -> tuple:
        if isinstance(f, Sym):
            if _is_var(f):
                if f.name in self.op_vars:
                    raise self.err(f"`{f.name}` names an op (a pattern head) and cannot stand for an operand", f)
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
        ch = class_head(f.items[0]) if f.items else None
        if ch is not None:
            return self.class_pat(f, *ch)
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

    def class_pat(self, f: SList, var: str, cname: str) -> tuple:
        """`(?op{CLASS} P...)`: a node of any op of CLASS taking len(P) operands; ?op binds the op."""
        if cname not in CLASSES:
            guess = closest(cname, set(CLASSES))
            raise self.err(f"unknown op class `{cname}`", f.items[0], f"did you mean `{guess}`?" if guess
                           else "op classes: " + " ".join(sorted(CLASSES)))
        if var in self.vars and var not in self.op_vars:
            raise self.err(f"`{var}` stands for an operand and cannot also name an op", f.items[0])
        self.op_vars.add(var)
        if var not in self.vars:
            self.vars.append(var)
        args, kw = self._items(f, "ADD")
        if kw:
            raise self.err(f"an op-class pattern takes operands only, got :{next(iter(kw))}", f)
        members = frozenset(o for o in CLASSES[cname] if TABLE[o].arity == len(args))
        if not members:
            n = " or ".join(sorted({str(TABLE[o].arity) for o in CLASSES[cname]}))
            raise self.err(f"no op of class `{cname}` takes {len(args)} operand(s)", f, f"its ops take {n}")
        for a in args:
            if a[0] not in ("var", "lit", "op"):
                raise self.err(f"an operand of an op-class pattern must be ?var, a number or a principal-op "
                               f"pattern, got `{_show_pat(a)}`", f)
        return ("op", OpClass(var, cname, members), args, {})

    def check_op_vars(self, f: Form, where: str, at_head: bool = False) -> None:
        """An op variable may stand only as a call head, and a call head that is a ?var must be one."""
        if isinstance(f, Sym) and _is_var(f):
            if f.name in self.op_vars and not at_head:
                raise self.err(f"`{f.name}` names an op: in the {where} it can only head a call, "
                               f"as in ({f.name} ?a ?b)", f)
            if at_head and f.name not in self.op_vars:
                raise self.err(f"`{f.name}` heads a call in the {where} but the pattern binds it to an operand, "
                               "not an op", f, "bind an op with a class pattern such as (?op{binary} ?a ?b)")
        elif isinstance(f, SList):
            for i, x in enumerate(f.items):
                self.check_op_vars(x, where, at_head=i == 0 and not f.bracket)

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
            if h not in G.ARITY:
                fns = sorted(G.ARITY)
                guess = closest(h, fns)
                raise self.err(f"unknown guard function `{h}`", f.items[0],
                               f"did you mean `{guess}`?" if guess else "guards use: " + " ".join(fns))
            if not G.arity_ok(h, len(f.items) - 1):
                n = G.ARITY[h]
                want = "one or more arguments" if n == "+" else f"{n} argument{'s' if n != 1 else ''}"
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
        self.check_op_vars(f, "replacement")


def compile_rule(rd: RuleDef, ruleset: str, known: set[str]) -> Rule:
    """Check a parsed rule (unbound variables, unknown heads, bad guards) and compile its pattern."""
    c = _Compiler(rd, known)
    pat = c.root(rd.pattern)
    c.check_replacement(rd.replacement)
    if rd.guard is not None:
        c.check_bound(rd.guard, "guard")
        c.check_op_vars(rd.guard, "guard")
        c.check_guard(rd.guard)
    runtime = None
    for k, v in rd.options.items():
        if k == "runtime":
            if not isinstance(v, (Sym, Str)):
                raise c.err(":runtime takes a runtime name, e.g. :runtime llvm", v)
            runtime = v.name if isinstance(v, Sym) else v.value
        else:
            raise c.err(f"unknown option :{k}", v, "rules take :when GUARD and :runtime NAME")
    gfn = G.compile_guard(rd.guard) if rd.guard is not None else None
    nfn = compile_node_pattern(pat) if pat[0] == "op" else None
    return Rule(rd.name, pat, rd.replacement, rd.guard, runtime, rd.span, ruleset, rd, c.vars, gfn, nfn)


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
    name = p[1].value if isinstance(p[1], Op) else str(p[1])
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
        if op.__class__ is OpClass:
            return class_pattern(q)
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

    def class_pattern(q: tuple) -> Any:
        cls = q[1]
        var, members = cls.var, cls.members
        if var in seen:
            def head(n: Node, b: dict) -> bool:
                return b[var] is n.op and n.op in members
        else:
            seen.add(var)

            def head(n: Node, b: dict) -> bool:
                if n.op in members:
                    b[var] = n.op
                    return True
                return False
        fs = [operand(a) for a in q[2]]
        if len(fs) == 1:
            f0 = fs[0]
            return lambda n, b: head(n, b) and f0(n.src[0], b)
        if len(fs) == 2:
            f0, f1 = fs
            return lambda n, b: head(n, b) and f0(n.src[0], b) and f1(n.src[1], b)
        return lambda n, b: head(n, b) and all(f(s, b) for f, s in zip(fs, n.src))

    return op_pattern(p)


def _pattern_vars(p: tuple) -> list[str]:
    t = p[0]
    if t == "var":
        return [p[1]]
    if t == "list":
        return [v for q in p[1] for v in _pattern_vars(q)]
    if t in ("call", "op"):
        head = [p[1].var] if isinstance(p[1], OpClass) else []
        return head + [v for q in list(p[2]) + list(p[3].values()) for v in _pattern_vars(q)]
    return []
