"""The control-flow forms (LANGUAGE.md section 14): `while`, `fori`, `scan`, `next`, a runtime
`if`/`cond` on a rank-0 bool tensor, and `dotimes` over a large or symbolic count.

Each builds a LOOP or IF node through `caten.ir.control`: the bodies are elaborated once, over
parameter nodes, in a scope of their own (a `setf` in a body binds a name of the body, never
one outside it: the body's values exist only inside the loop), so code size and compile time do
not depend on the trip count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from caten.elaborate import principal as P
from caten.elaborate.evaluate import Ret, Scope
from caten.elaborate.values import Lit, Tensor, describe
from caten.errors import Error, Span
from caten.ir import build as B
from caten.ir import control as C
from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.read.program import CompositeDef
from caten.read.sexpr import Form, SList, Sym, head, show

FORMS = ("while", "fori", "scan", "next", "cond", "case")



@dataclass
class Next:
    """`(next E...)`: a body's next state (and, in scan, its per-trip results)."""
    values: list[Any]
    span: Span


class Elaborator(Protocol):
    def eval(self, f: Form, env: Scope) -> Any: ...
    def eval_body(self, forms: list[Form], env: Scope) -> Any: ...
    def eval_dim(self, f: Form, env: Scope) -> Any: ...
    def defs(self, name: str) -> list[CompositeDef] | None: ...
    def call_composite(self, name: str, defs: list[CompositeDef], args: list, kwargs: dict,
                       kspans: dict[str, Span], span: Span, rules: bool = True) -> Any: ...


def own_scope(env: Scope, vars: dict[str, Any]) -> Scope:
    """A scope that sees every visible name but keeps its own `setf`s (a body's)."""
    flat: dict[str, Any] = {}
    s: Scope | None = env
    chain = []
    while s is not None:
        chain.append(s)
        s = s.parent
    for sc in reversed(chain):
        flat.update(sc.vars)
    flat.update(vars)
    return Scope(None, flat)


def _run(build: Any, span: Span) -> Any:
    try:
        return build()
    except C.ControlError as e:
        raise Error(str(e), span) from None


def _tensor(v: Any, span: Span, dtype: DType | None = None) -> Node:
    if isinstance(v, Ret):
        raise Error("return cannot stand inside a loop or branch body", v.span)
    if not isinstance(v, (Tensor, Lit)):
        raise Error(f"expected a tensor, got {describe(v)}", span)
    return P.to_tensor(v, span, dtype).node


def _flat(v: Any, span: Span, like: list[Node] | None = None) -> tuple[list[Node], bool]:
    """A value or a list of values as nodes (literals take the dtype of `like`'s node), and
    whether it was a list."""
    if isinstance(v, (list, tuple)):
        dts = [n.dtype for n in like] if like and len(like) == len(v) else [None] * len(v)
        return [_tensor(x, span, dt) for x, dt in zip(v, dts)], True
    return [_tensor(v, span, like[0].dtype if like and len(like) == 1 else None)], False


def _shape(nodes: list[Node], listed: bool) -> Any:
    ts = [Tensor(n) for n in nodes]
    return ts if listed else ts[0]


def _bindings(f: Form, what: str, span: Span) -> list[tuple[str, Form]]:
    if not (isinstance(f, SList) and not f.bracket and all(
            isinstance(b, SList) and len(b.items) == 2 and isinstance(b.items[0], Sym) for b in f.items)):
        raise Error(f"expected {what}'s state bindings ((NAME INIT) ...)", getattr(f, "span", span))
    return [(b.items[0].name, b.items[1]) for b in f.items]


def _next_of(r: Any, what: str, span: Span) -> Next:
    if not isinstance(r, Next):
        raise Error(f"{what}'s body must end in (next ...), giving the next state; it gave {describe(r)}", span)
    return r


def _bound(ev: Elaborator, f: Form, env: Scope) -> D.Dim | Node:
    """A loop bound: a dim (literal, dim arithmetic) or a rank-0 integer tensor (a runtime scalar)."""
    v = ev.eval(f, env)
    if isinstance(v, Lit) and v.kind in ("int", "dim"):
        return v.value
    if isinstance(v, Tensor) and v.node.rank == 0 and v.dtype.is_int:
        return v.node
    raise Error(f"a loop bound must be an integer, a dim or a rank-0 integer tensor, got {describe(v)}",
                getattr(f, "span", None))


def _state_loop(ev: Elaborator, names: list[str], init: list[Node], env: Scope, forms: list[Form],
                cond: Form | None, span: Span, what: str, index: str | None = None,
                start: Any = 0, end: Any = None) -> list[Node]:
    def body(carry: list[Node], xs: list[Node], i: Node) -> tuple[list[Node], list[Node]]:
        vars = {n: Tensor(c) for n, c in zip(names, carry)}
        if index is not None:
            vars[index] = Lit(i.arg, "dim")
        r = _next_of(ev.eval_body(forms, own_scope(env, vars)), what, span)
        if len(r.values) != len(names):
            raise Error(f"(next ...) gives {len(r.values)} values for {len(names)} state bindings", r.span)
        return [_tensor(v, r.span, c.dtype) for v, c in zip(r.values, carry)], []

    def test(carry: list[Node], i: Node) -> Node:
        vars = {n: Tensor(c) for n, c in zip(names, carry)}
        return _tensor(ev.eval(cond, own_scope(env, vars)), cond.span)

    return _run(lambda: C.loop(init, body, test if cond is not None else None, start, end, what=what), span)


def call(ev: Elaborator, form: str, f: SList, env: Scope) -> Any:
    span = f.span
    items = f.items[1:]
    if form == "next":
        return Next([ev.eval(x, env) for x in items], span)
    if form == "cond":
        return _cond(ev, items, env, span)
    if form == "case":
        return _case(ev, items, env, span)
    if form == "while":
        if len(items) < 3:
            raise Error("expected (while ((NAME INIT) ...) COND BODY... (next ...))", span)
        binds = _bindings(items[0], "while", span)
        init = [_tensor(ev.eval(x, env), getattr(x, "span", span)) for _, x in binds]
        outs = _state_loop(ev, [n for n, _ in binds], init, env, items[2:], items[1], span, "while")
        return Tensor(outs[0]) if len(outs) == 1 else [Tensor(o) for o in outs]
    if form == "fori":
        spec = items[0] if items else None
        if not (isinstance(spec, SList) and len(spec.items) == 3 and isinstance(spec.items[0], Sym)) or len(items) < 3:
            raise Error("expected (fori (I START END) ((NAME INIT) ...) BODY... (next ...))", span)
        start, end = _bound(ev, spec.items[1], env), _bound(ev, spec.items[2], env)
        binds = _bindings(items[1], "fori", span)
        init = [_tensor(ev.eval(x, env), getattr(x, "span", span)) for _, x in binds]
        outs = _state_loop(ev, [n for n, _ in binds], init, env, items[2:], None, span, "fori",
                           spec.items[0].name, start, end)
        return Tensor(outs[0]) if len(outs) == 1 else [Tensor(o) for o in outs]
    return _scan(ev, f, env)


def _scan(ev: Elaborator, f: SList, env: Scope) -> Any:
    span = f.span
    pos = [x for x in f.items[1:]]
    kw: dict[str, Any] = {}
    rest: list[Form] = []
    i = 0
    while i < len(pos):
        x = pos[i]
        if type(x).__name__ == "Kw":
            if i + 1 >= len(pos):
                raise Error(f"keyword :{x.name} needs a value", x.span)
            kw[x.name] = ev.eval(pos[i + 1], env)
            i += 2
            continue
        rest.append(x)
        i += 1
    if len(rest) != 3:
        raise Error("expected (scan F INIT XS :axis 0 :reverse false)", span)
    for k in kw:
        if k not in ("axis", "reverse", "checkpoint"):
            raise Error(f"`scan` takes no keyword :{k}", span, "it takes :axis, :reverse and :checkpoint")
    fn, init_v, xs_v = rest[0], ev.eval(rest[1], env), ev.eval(rest[2], env)
    init, init_list = _flat(init_v, span)
    xs, xs_list = _flat(xs_v, span)
    axis = P.as_int(kw.get("axis", Lit(0, "int")), span, "an axis")

    def flag(k: str) -> bool:
        v = kw.get(k)
        return bool(v.value) if isinstance(v, Lit) else False

    moved = []
    for x in xs:
        a = axis + x.rank if axis < 0 else axis
        if not 0 <= a < x.rank:
            raise Error(f"scan's :axis {axis} is out of range for a rank-{x.rank} tensor", span)
        moved.append(B.permute(x, [a] + [d for d in range(x.rank) if d != a]) if a else x)

    def body(carry: list[Node], xp: list[Node], i: Node) -> tuple[list[Node], list[Node]]:
        c = _shape(carry, init_list)
        x = _shape(xp, xs_list)
        if isinstance(fn, SList) and head(fn) == "lambda":
            if len(fn.items) < 3 or not isinstance(fn.items[1], SList) or len(fn.items[1].items) != 2 \
                    or not all(isinstance(p, Sym) for p in fn.items[1].items):
                raise Error("expected (lambda (CARRY X) BODY... (next CARRY Y))", fn.span)
            p0, p1 = (p.name for p in fn.items[1].items)
            r = _next_of(ev.eval_body(fn.items[2:], own_scope(env, {p0: c, p1: x})), "scan's function", fn.span)
            if len(r.values) != 2:
                raise Error("scan's function ends in (next CARRY Y): two values", r.span)
            new_c, y = r.values
        elif isinstance(fn, Sym):
            defs = ev.defs(fn.name)
            if defs is None:
                raise Error(f"unknown composite `{fn.name}`", fn.span,
                            "scan takes a (lambda ...) or a composite's name")
            args = (list(c) if init_list else [c]) + (list(x) if xs_list else [x])
            out = ev.call_composite(fn.name, defs, args, {}, {}, fn.span)
            out = list(out) if isinstance(out, tuple) else [out]
            if len(out) <= len(carry) - 1:
                raise Error(f"`{fn.name}` returns {len(out)} values; scan needs the {len(carry)} carries, then ys",
                            fn.span)
            new_c = out[:len(carry)] if init_list else out[0]
            y = out[len(carry):]
            y = y if len(y) != 1 else y[0]
        else:
            raise Error("scan's F is a (lambda (CARRY X) ...) or a composite's name", getattr(fn, "span", span))
        nc, _ = _flat(new_c, span, carry)
        ys, ys_list = ([], True) if y is None else _flat(y, span)
        holder.append(ys_list)
        return nc, ys

    holder: list[bool] = []
    outs = _run(lambda: C.loop(init, body, None, 0, moved[0].shape[0] if moved and moved[0].rank else None, moved,
                               flag("reverse"), flag("checkpoint"), what="scan"), span)
    carry = outs[:len(init)]
    ys = outs[len(init):]
    back = []
    for y in ys:
        a = axis + y.rank if axis < 0 else axis
        if a and a < y.rank:
            perm = list(range(1, a + 1)) + [0] + list(range(a + 1, y.rank))
            y = B.permute(y, perm)
        back.append(y)
    c_val = _shape(carry, init_list)
    ys_list = holder[0] if holder else True
    y_val = [Tensor(y) for y in back] if ys_list else Tensor(back[0])
    return [c_val, y_val]


def runtime_if(ev: Elaborator, f: SList, c: Tensor, env: Scope) -> Any:
    """`(if COND THEN ELSE)` with a rank-0 bool tensor COND: only the taken branch runs."""
    if len(f.items) != 4:
        raise Error("an if on a tensor condition needs both branches: (if COND THEN ELSE)", f.span)
    return _branch(ev, c, lambda sc: ev.eval(f.items[2], sc), lambda sc: ev.eval(f.items[3], sc), env, f.span)


def _branch(ev: Elaborator, c: Tensor, then: Any, other: Any, env: Scope, span: Span) -> Any:
    listed: list[str] = []
    like: list[list[Node]] = []

    def side(fn: Any) -> Any:
        def build() -> list[Node]:
            v = fn(own_scope(env, {}))
            if isinstance(v, Next):  # (if C (next ...) (next ...)) in a loop's body: the next state either way
                v, kind = v.values, "next"
            else:
                kind = "list" if isinstance(v, (list, tuple)) else "one"
            ns, _ = _flat(v, span, like[0] if like else None)
            listed.append(kind)
            like.append(ns)
            return ns
        return build

    if c.dtype.name != "bool" or c.node.rank != 0:
        raise Error(f"if needs a rank-0 bool condition, got {describe(c)}", span, "reduce it, e.g. (any (> x 0))")
    outs = _run(lambda: C.branch(c.node, side(then), side(other)), span)
    if listed[0] != listed[1]:
        raise Error("one branch gives (next ...) and the other does not", span)
    if listed[0] == "next":
        return Next([Tensor(o) for o in outs], span)
    return [Tensor(o) for o in outs] if listed[0] == "list" else Tensor(outs[0])


def _cond(ev: Elaborator, clauses: list[Form], env: Scope, span: Span) -> Any:
    """(cond (C1 E1...) ... (true EN...)): the first clause whose condition holds."""
    if not clauses:
        raise Error("cond needs clauses (C E...)", span)
    first = clauses[0]
    if not (isinstance(first, SList) and len(first.items) >= 2):
        raise Error("each cond clause is (CONDITION EXPR...)", getattr(first, "span", span))
    c = ev.eval(first.items[0], env)
    if not isinstance(c, Tensor):
        truth = c.value if isinstance(c, Lit) else c
        if truth is not None and truth is not False:
            return ev.eval_body(first.items[1:], env)
        if len(clauses) == 1:
            raise Error("no cond clause holds and there is no (true ...) clause", span)
        return _cond(ev, clauses[1:], env, span)
    if len(clauses) == 1:
        raise Error("a cond on tensor conditions needs a last (true ...) clause: a value when none holds", span)
    return _branch(ev, c, lambda sc: ev.eval_body(first.items[1:], sc),
                   lambda sc: _cond(ev, clauses[1:], sc, span), env, span)


def _case(ev: Elaborator, items: list[Form], env: Scope, span: Span) -> Any:
    """(case KEY (V1 E1...) (V2 E2...) ... (otherwise EN...)): the clause whose value (or list of
    values) equals KEY, as a chain of branches; KEY a rank-0 integer or bool tensor (or a literal)."""
    if len(items) < 2:
        raise Error("expected (case KEY (VALUE EXPR...) ... (otherwise EXPR...))", span)
    key = ev.eval(items[0], env)
    clauses: list[Form] = []
    for c in items[1:]:
        if not (isinstance(c, SList) and len(c.items) >= 2):
            raise Error("each case clause is (VALUE EXPR...) or ([V1 V2] EXPR...)", getattr(c, "span", span))
        clauses.append(c)
    if not (isinstance(clauses[-1].items[0], Sym) and clauses[-1].items[0].name in ("otherwise", "true")):
        raise Error("a case needs a last (otherwise ...) clause: its value when no clause matches", span)

    def test(c: SList, sc: Scope) -> Any:
        v = c.items[0]
        vals = v.items if isinstance(v, SList) and v.bracket else [v]
        out = None
        for x in vals:
            hit = P.apply_alu(Op.NOT, [P.apply_alu(Op.CMPNE, [key, ev.eval(x, sc)], c.span)], c.span)
            out = hit if out is None else P.apply_alu(Op.OR, [out, hit], c.span)
        return out

    def chain(k: int, sc: Scope) -> Any:
        c = clauses[k]
        if k == len(clauses) - 1:
            return ev.eval_body(c.items[1:], sc)
        t = test(c, sc)
        if not isinstance(t, Tensor):
            return ev.eval_body(c.items[1:], sc) if t.value else chain(k + 1, sc)
        return _branch(ev, t, lambda s2: ev.eval_body(c.items[1:], s2), lambda s2: chain(k + 1, s2), sc, c.span)

    return chain(0, env)


def setf_names(forms: list[Form]) -> list[str]:
    """The names a body assigns with setf, in order of first assignment (dotimes' loop state)."""
    out: list[str] = []

    def walk(f: Form) -> None:
        if isinstance(f, SList) and not f.bracket and f.items:
            if head(f) == "setf" and len(f.items) == 3 and isinstance(f.items[1], Sym):
                if f.items[1].name not in out:
                    out.append(f.items[1].name)
            for x in f.items[1:]:
                walk(x)

    for f in forms:
        walk(f)
    return out


def dotimes_loop(ev: Elaborator, f: SList, index: str, count: Any, env: Scope) -> None:
    """A dotimes whose count is symbolic or past UNROLL_MAX: a loop whose state is the tensors the
    body assigns with setf that exist before it (their final values are bound after it)."""
    span = f.span
    names = [n for n in setf_names(f.items[2:]) if env.find(n) is not None
             and isinstance(env.find(n).vars[n], (Tensor, Lit))]
    if isinstance(count, int) and any(isinstance(env.find(n).vars[n], Lit) for n in names):
        # a compile-time value it updates (a count, a dim) stays one: the dotimes unrolls (the caller's fallback)
        raise Error("a dotimes that updates a compile-time value unrolls", span)
    if not names:
        raise Error("a dotimes past the unrolling limit or over a symbolic count must update a tensor "
                    "defined before it (its loop state) with setf", span)
    init = [_tensor(env.find(n).vars[n], span) for n in names]

    def body(carry: list[Node], xs: list[Node], i: Node) -> tuple[list[Node], list[Node]]:
        sc = own_scope(env, {n: Tensor(c) for n, c in zip(names, carry)})
        sc.vars[index] = Lit(i.arg, "dim")
        r = ev.eval_body(f.items[2:], sc)
        if isinstance(r, Ret):
            raise Error("return cannot stand inside a dotimes that runs as a loop", r.span)
        return [_tensor(sc.vars[n], span, c.dtype) for n, c in zip(names, carry)], []

    outs = _run(lambda: C.loop(init, body, None, 0, count, what=f"dotimes ({show(f.items[1])})"), span)
    for n, o in zip(names, outs):
        env.find(n).vars[n] = Tensor(o)
