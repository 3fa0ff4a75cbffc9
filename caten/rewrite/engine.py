"""The rewrite engine: rules indexed by head, applied bottom-up to a fixed point within a budget.

Two levels, one engine:

- call level: `call_hook` runs before the elaborator expands a library or user composite call.
  A match elaborates the replacement (with ?vars bound to the matched values) instead of the
  call; calls inside the replacement go through the hook too, so the result is already a
  fixed point. Before a replacement is accepted, the original call is expanded once with rules
  off, to check that the replacement keeps its dtype and shape.
- graph level: `rewrite` walks the hash-consed DAG once in topological order; each node is
  rebuilt over its rewritten operands and tried against the rules whose head is its op. A
  replacement is itself normalized (recursively) before it stands for the node, so one pass
  reaches the fixed point and equal subgraphs stay shared (hash-consing keeps CSE).

Non-termination is caught two ways: a rewrite that comes back to a node or call that is still
being rewritten (a cycle, e.g. a swap rule) stops at once, and a chain deeper than MAX_DEPTH or a
total beyond the budget stops with a diagnostic naming the rules involved.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from caten.elaborate import principal as P
from caten.elaborate.values import Lit, Tensor, describe
from caten.errors import Error, Span
from caten.ir import build as B
from caten.ir import verify
from caten.ir.graph import Node, toposort
from caten.ir.ops import ELEMENTWISE, TABLE, Ctx, Op
from caten.ir.walk import post_order
from caten.read.sexpr import Num, Sym, head
from caten.rewrite import guard as G
from caten.rewrite.consts import node_const
from caten.rewrite.explain import Explain
from caten.rewrite.match import Matcher
from caten.rewrite.opclass import instantiate
from caten.rewrite.replace import compile_replacement, node_of
from caten.rewrite.rule import Rule

MAX_DEPTH = 64  # nested rewrites (a replacement rewritten inside a replacement ...)
_UNSET = object()


def _key(v: Any) -> Any:
    """A hashable identity of a call argument, for cycle detection."""
    if isinstance(v, Tensor):
        return ("T", id(v.node), v.origin.name if v.origin else None)
    if isinstance(v, Lit):
        return ("L", v.kind, repr(v.value))
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _key(x)) for k, x in v.items()))
    if isinstance(v, Node):
        return ("N", id(v))
    return ("V", repr(v))


def _loc(span: Span | None) -> str:
    return f"{span.file}:{span.line}:{span.col}" if span else "?"


class Engine:
    def __init__(self, rules: list[Rule], runtime: str | None = None, explain: Explain | None = None,
                 budget: int = 200_000):
        self.rules = [r for r in rules if r.runtime is None or runtime is None or r.runtime == runtime]
        self.call_index: dict[str, list[Rule]] = {}
        self.op_index: dict[Op, list[Rule]] = {}
        for r in self.rules:
            if r.level == "call":
                self.call_index.setdefault(r.head, []).append(r)
            else:
                for op in r.ops:  # a class pattern is tried on each op of its class
                    self.op_index.setdefault(op, []).append(r)
        # keyed by id(op): hashing an Enum member runs Python code, id() does not
        self._op_rules: dict[int, list[Rule]] = {id(op): rs for op, rs in self.op_index.items()}
        for r in self.rules:
            if not r.rep_compiled:
                r.rep_fn, r.rep_compiled = compile_replacement(r.replacement, r), True
        self.explain = explain
        if explain is not None:
            for r in self.rules:
                explain.declare(r)
        self.elab: Any = None  # the Elaborator replacements are elaborated with
        self.matcher = Matcher(self._defaults)
        self.budget = budget
        self.fired = 0
        self.counts: Counter[str] = Counter()
        self._call_stack: list[tuple[Any, Rule]] = []
        self._call_active: dict[Any, int] = {}
        self._node_stack: list[tuple[Node, Rule]] = []
        self._node_active: dict[int, int] = {}
        self._memo: dict[int, Node] = {}  # id(node) -> its rewrite
        self._keep: list[Node] = []
        self._defaults_cache: dict[tuple[str, int], dict[str, Any]] = {}
        self._clock: list[list] = []
        self.where = ""

    @property
    def empty(self) -> bool:
        return not self.rules

    # timing (explain only): exclusive time per rule set -------------------------------------
    def _enter(self, rule: Rule) -> None:
        self._clock.append([rule.ruleset, time.perf_counter(), 0.0])

    def _leave(self) -> None:
        rs, t0, child = self._clock.pop()
        el = time.perf_counter() - t0
        self.explain.add_time(rs, el - child)
        if self._clock:
            self._clock[-1][2] += el

    # diagnostics ------------------------------------------------------------------------------
    def _cycle(self, chain: list[Rule]) -> Error:
        names = " -> ".join(r.name for r in chain)
        uniq = list(dict.fromkeys(chain))
        return Error(f"rewrite rules do not converge: {names} comes back to the expression it started from "
                     f"(rules involved: {', '.join(r.name for r in uniq)})", chain[0].span,
                     "; ".join(f"`{r.name}` is defined at {r.where()}" for r in uniq) +
                     " -- a rule must not undo another or itself")

    def _diverge(self, chain: list[Rule], why: str) -> Error:
        counts = Counter(r.name for r in chain) if chain else self.counts
        top = [n for n, _ in counts.most_common(6)]
        first = next((r for r in reversed(chain) if r.name == top[0]), None) if chain else \
            next((r for r in self.rules if r.name == top[0]), None)
        return Error(f"rewrite rules do not converge: {why} (rules involved: {', '.join(top)})",
                     first.span if first else None, "each application keeps making new work for the rules; "
                     "make the replacement smaller than the pattern or add a :when guard")

    def _count(self, rule: Rule) -> None:
        self.fired += 1
        self.counts[rule.name] += 1
        if self.fired > self.budget:
            raise self._diverge([], f"more than {self.budget} rewrites")

    # keyword defaults of a composite, for patterns that mention or omit a keyword -----------
    def _defaults(self, name: str, nargs: int) -> dict[str, Any]:
        k = (name, nargs)
        hit = self._defaults_cache.get(k)
        if hit is not None:
            return hit
        out: dict[str, Any] = {}
        e = self.elab
        defs = (e.user.get(name) or e.lib.get(name) or []) if e is not None else []
        cdef = next((d for d in defs if d.arity == nargs and d.rest is None), None) or \
            next((d for d in defs if (d.rest is not None or d.fold) and nargs >= d.arity), None)
        for kname, default, _ in (cdef.keys if cdef else []):
            if default is None:
                out[kname] = None
            elif isinstance(default, Num):
                out[kname] = Lit(default.value, "float" if isinstance(default.value, float) else "int")
            elif isinstance(default, Sym) and default.name in ("true", "false", "nil", "t"):
                out[kname] = None if default.name == "nil" else Lit(default.name in ("true", "t"), "bool")
            elif kname == "op" and isinstance(default, Sym):
                out[kname] = default.name
        self._defaults_cache[k] = out
        return out

    # replacements -----------------------------------------------------------------------------
    def _replace(self, rule: Rule, binds: dict[str, Any]) -> Any:
        fast = rule.rep_fn
        if fast is not None:
            return fast(self, binds)
        ops = {k: v for k, v in binds.items() if isinstance(v, Op)}  # op variables of class patterns
        f = instantiate(rule.replacement, ops) if ops else rule.replacement  # evaluated as user code
        if head(f) == "fold":
            return self._fold(rule, self.elab.evaluate(f.items[1], binds))
        return self.elab.evaluate(f, binds)

    def _fold(self, rule: Rule, v: Any) -> Any:
        """(fold EXPR): EXPR's value computed now with the op table's references; EXPR must hold only
        constants (a view without a mask of a constant is that constant)."""
        if isinstance(v, Lit):
            return v
        if not isinstance(v, Tensor):
            raise Error(f"rule `{rule.name}`: (fold EXPR) needs a tensor expression, got {describe(v)}", rule.span)
        memo: dict[Node, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for n in toposort([v.node]):
                if n.op is Op.CONST and isinstance(n.arg, (int, float, bool)):
                    r = np.array(n.arg).astype(n.dtype.np)
                elif n.op is Op.VIEW and n.arg.mask is None:
                    r = memo[n.src[0]]  # a view of a uniform value is that value
                elif n.op in ELEMENTWISE:
                    r = np.asarray(TABLE[n.op].ref(Ctx(n.arg, (), n.dtype, {}, {}), *(memo[s] for s in n.src)))
                    r = r.astype(n.dtype.np)
                else:
                    raise Error(f"rule `{rule.name}`: (fold EXPR) needs constant operands, but EXPR holds a "
                                f"{n.op.value} node", rule.span, "guard the rule with :when (const? ?x)")
                memo[n] = r
        val = memo[v.node].item()
        return Tensor(B.const(val, v.dtype, v.shape))

    def _conform(self, rule: Rule, rep: Any, node: Node, what: str) -> Any:
        """The replacement (a Tensor or a Node) checked to keep the matched expression's dtype and
        shape, or a diagnostic; a literal becomes a constant of that dtype, broadcast."""
        if isinstance(rep, Lit):
            t = P.to_tensor(rep, rule.span, node.dtype)
            return B.expand(t.node, node.shape)
        if not isinstance(rep, (Tensor, Node)):
            raise Error(f"rule `{rule.name}`: the replacement gives {describe(rep)}, not a tensor", rule.span)
        if rep is node:
            return rep
        if rep.dtype is not node.dtype and rep.dtype != node.dtype:
            raise Error(f"rule `{rule.name}` would change the dtype of {what} from {node.dtype} to {rep.dtype}",
                        rule.span, "a replacement must keep the dtype and shape of what it replaces")
        if rep.shape != node.shape and tuple(rep.shape) != tuple(node.shape):
            raise Error(f"rule `{rule.name}` would change the shape of {what} from {B.fmt_shape(node.shape)} "
                        f"to {B.fmt_shape(rep.shape)}", rule.span,
                        "a replacement must keep the dtype and shape of what it replaces")
        return rep

    # call level -------------------------------------------------------------------------------
    def call_hook(self, name: str, args: list, kwargs: dict, cdef: Any, span: Span) -> Any:
        rules = self.call_index.get(name)
        if rules is None:
            return None
        orig: Any = _UNSET
        for rule in rules:
            if self.explain is not None:
                self._enter(rule)
            try:
                b: dict[str, Any] = {}
                if not self.matcher.call(rule.pattern, name, args, kwargs, b) or not G.holds(rule.guard_fn, b):
                    continue
                key = (name, _key(args), _key(kwargs))
                at = self._call_active.get(key)
                if at is not None:
                    raise self._cycle([r for _, r in self._call_stack[at:]])
                if len(self._call_stack) >= MAX_DEPTH:
                    raise self._diverge([r for _, r in self._call_stack],
                                        f"more than {MAX_DEPTH} nested rewrites of `({name} ...)` at {_loc(span)}")
                if orig is _UNSET:
                    orig = self._original(name, cdef, args, kwargs, span)
                if not isinstance(orig, Tensor):
                    return None  # compile-time values (folded literals, tuples) are left alone
                self._count(rule)
                self._call_active[key] = len(self._call_stack)
                self._call_stack.append((key, rule))
                try:
                    rep = self._replace(rule, b)
                finally:
                    self._call_stack.pop()
                    del self._call_active[key]
                rep = self._conform(rule, rep, orig.node, f"`({name} ...)` at {_loc(span)}")
                if isinstance(rep, Node):
                    rep = Tensor(rep)
                if self.explain is not None:
                    self.explain.record(rule, _loc(span))
                return rep
            finally:
                if self.explain is not None:
                    self._leave()
        return None

    def _original(self, name: str, cdef: Any, args: list, kwargs: dict, span: Span) -> Any:
        """What the call gives without rules: its dtype and shape are what a replacement must keep."""
        return self.elab.call_composite(name, [cdef], list(args), dict(kwargs), {}, span, rules=False)

    # graph level ------------------------------------------------------------------------------
    def rewrite(self, nodes: list[Node], where: str = "") -> list[Node]:
        """The outputs rewritten to a fixed point of the principal-op rules."""
        if not self.op_index:
            return list(nodes)
        self.where = where
        self._memo = {}
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 20000))
        collecting = gc.isenabled()
        gc.disable()  # the pass allocates many small objects and frees none of them in cycles
        try:
            for n in toposort(nodes):
                self._step(n)
            out = [self._memo[id(n)] for n in nodes]
            verify.check(out, f"the rewrite rules (`{where}`)")
            return out
        except RecursionError:
            raise self._diverge([r for _, r in self._node_stack], "the rewrites nest too deeply") from None
        finally:
            if collecting:
                gc.enable()
            sys.setrecursionlimit(old)
            self._memo = {}
            self._keep = []

    def _rebuild(self, n: Node, src: tuple[Node, ...]) -> Node:
        if n.op is Op.VIEW and n.arg.mask is None:
            c = node_const(src[0])
            if c is not None:  # a view of a uniform constant is that constant, broadcast
                return B.const(c, n.dtype, n.shape)
        return Node.make(n.op, n.dtype, n.shape, src, n.arg)

    def _step(self, n: Node) -> Node:
        """Rewrite one node whose operands are already rewritten. The memo is keyed by id():
        every key's node is kept alive (the input graph, memo values, or `_keep`)."""
        memo = self._memo
        cur = n
        src = n.src
        if src:
            new = tuple([memo[id(s)] for s in src])
            if new != src:  # identity-first comparison: cheap when nothing changed
                cur = self._rebuild(n, new)
                hit = memo.get(id(cur))
                if hit is not None:
                    memo[id(n)] = hit
                    self._keep.append(cur)
                    return hit
        if self._node_stack and id(cur) in self._node_active:
            at = self._node_active[id(cur)]
            raise self._cycle([r for _, r in self._node_stack[at:]])
        rules = self._op_rules.get(id(cur.op))
        res = self._apply(cur, rules) if rules else cur
        memo[id(n)] = res
        if cur is not n:
            memo[id(cur)] = res
            self._keep.append(cur)
        if res is not cur:
            memo[id(res)] = res
        return res

    def _apply(self, cur: Node, rules: list[Rule]) -> Node:
        if self.explain is not None:
            return self._apply_explained(cur, rules)
        for rule in rules:
            b: dict[str, Any] = {}
            if not rule.node_fn(cur, b):
                continue
            g = rule.guard_fn
            if g is not None and not G.holds(g, b):
                continue
            res = self._fire(cur, rule, b)
            if res is not None:
                return res
        return cur

    def _apply_explained(self, cur: Node, rules: list[Rule]) -> Node:
        for rule in rules:
            self._enter(rule)
            try:
                b: dict[str, Any] = {}
                if not rule.node_fn(cur, b):
                    continue
                if rule.guard_fn is not None and not G.holds(rule.guard_fn, b):
                    continue
                res = self._fire(cur, rule, b)
                if res is not None:
                    return res
            finally:
                self._leave()
        return cur

    def _fire(self, cur: Node, rule: Rule, b: dict[str, Any]) -> Node | None:
        """Apply a matched rule: the replacement, normalized; None if it gives the node back."""
        if len(self._node_stack) >= MAX_DEPTH:
            raise self._diverge([r for _, r in self._node_stack],
                                f"more than {MAX_DEPTH} nested rewrites in `{self.where}`")
        self._node_active[id(cur)] = len(self._node_stack)
        self._node_stack.append((cur, rule))
        try:
            rep = node_of(self._conform(rule, self._replace(rule, b), cur, f"a {cur.op.value} node"))
            if rep is cur:
                return None
            self._count(rule)
            if self.explain is not None:
                self.explain.record(rule, f"graph of `{self.where}`")
            return self._normalize(rep)
        finally:
            self._node_stack.pop()
            del self._node_active[id(cur)]

    def _normalize(self, root: Node) -> Node:
        memo = self._memo
        hit = memo.get(id(root))
        if hit is not None:
            return hit
        for n in post_order([root], known=lambda n: id(n) in memo):
            self._step(n)
        self._keep.append(root)
        return memo[id(root)]
