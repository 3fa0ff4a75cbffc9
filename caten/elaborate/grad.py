"""The language's gradient forms: `grad`, `value-and-grad` and `vjp` (docs/language.md section 12).

`(grad F ARG... :wrt NAME)` elaborates the call of F with each tensor argument replaced by a
fresh placeholder, differentiates F's first output with `caten.autodiff.vjp` (a graph transform:
the backward pass is principal ops like any other), then puts the real arguments back in place
of the placeholders. The placeholders keep the transform exact under hash-consing: the argument
passed for NAME may be the very node another argument is, or one F computes inside (`(grad f
X X :wrt A)` must not count B's path), and only a fresh leaf tells them apart.

Composites that define `:vjp` register their calls' outputs here (`custom_rule`), so the
transform routes a cotangent through their own gradient instead of their expansion.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

from caten import autodiff
from caten.elaborate import principal as P
from caten.elaborate.evaluate import Frame, Ret, Scope
from caten.elaborate.values import Lit, Tensor, describe
from caten.errors import Error, Span, closest
from caten.ir import build as B
from caten.ir.graph import Node
from caten.read.program import CompositeDef
from caten.read.sexpr import Form, SList, Sym


class Elaborator(Protocol):
    """What the forms use of the elaborator (which imports this module)."""
    lib: dict[str, list[CompositeDef]]
    user: dict[str, list[CompositeDef]]
    custom: dict[Node, autodiff.Custom]
    frames: list[Frame]

    def defs(self, name: str) -> list[CompositeDef] | None: ...
    def _args(self, f: SList, env: Scope, raw: frozenset[str] = frozenset(),
              start: int = 1) -> tuple[list[Any], dict[str, Any], dict[str, Span]]: ...
    def pick(self, name: str, defs: list[CompositeDef], args: list, span: Span) -> CompositeDef: ...
    def eval(self, f: Form, env: Scope) -> Any: ...
    def eval_body(self, body: list[Form], env: Scope) -> Any: ...
    def call_composite(self, name: str, defs: list[CompositeDef], args: list, kwargs: dict,
                       kspans: dict[str, Span], span: Span, rules: bool = True) -> Any: ...

FORMS = ("grad", "value-and-grad", "vjp")
_ids = itertools.count()


def _wrt_names(f: Any, span: Span) -> tuple[list[tuple[str, Span]], bool]:
    """The names `:wrt` gives, and whether they came as a list: `:wrt [W]` is a list of one
    gradient (`nth` picks it), `:wrt W` the gradient itself."""
    if isinstance(f, Sym):
        return [(f.name, f.span)], False
    if isinstance(f, SList) and f.bracket and f.items and all(isinstance(x, Sym) for x in f.items):
        return [(x.name, x.span) for x in f.items], True
    raise Error("expected :wrt NAME or :wrt [NAME ...] (names of the composite's parameters)",
                getattr(f, "span", span))


def call(ev: Elaborator, form: str, f: SList, env: Scope) -> Any:
    """The value of a `grad`, `value-and-grad` or `vjp` form."""
    span = f.span
    items = f.items[1:]
    if not items or not isinstance(items[0], Sym):
        raise Error(f"expected ({form} F ARG... :wrt NAME), F naming a composite", span)
    fname = items[0].name
    defs = ev.defs(fname)
    if defs is None:
        guess = closest(fname, list(ev.lib) + list(ev.user))
        raise Error(f"unknown composite `{fname}`", items[0].span, f"did you mean `{guess}`?" if guess else None)
    args, kwargs, kspans = ev._args(f, env, frozenset({"wrt", "cotangent"}), start=2)
    wrt, listed = _wrt_names(kwargs.pop("wrt"), kspans.pop("wrt")) if "wrt" in kwargs else (None, False)
    cot = None
    if "cotangent" in kwargs:
        if form != "vjp":
            raise Error(f"`{form}` takes no :cotangent (vjp does)", kspans["cotangent"])
        cot = ev.eval(kwargs.pop("cotangent"), env)
        kspans.pop("cotangent")
    if wrt is None:
        raise Error(f"`{form}` needs :wrt NAME (the parameter of `{fname}` to differentiate)", span,
                    f"e.g. ({form} {fname} ... :wrt {ev.pick(fname, defs, args, span).params[0].name})"
                    if defs else None)
    if form == "vjp" and cot is None:
        raise Error("`vjp` needs :cotangent C, shaped like the composite's first output", span)
    cdef = ev.pick(fname, defs, args, span)
    names = [p.name for p in cdef.params]
    holders: dict[str, Node] = {}
    uid = next(_ids)
    call_args = list(args)
    for name, nspan in wrt:
        if name not in names:
            guess = closest(name, names)
            raise Error(f"`{fname}` has no parameter `{name}`", nspan,
                        f"did you mean `{guess}`?" if guess else f"its parameters: {', '.join(names)}")
        k = names.index(name)
        p, a = cdef.params[k], args[k]
        if not p.tensor:
            raise Error(f"parameter `{name}` of `{fname}` is not a tensor", nspan)
        t = P.to_tensor(a, nspan) if isinstance(a, (Lit, Tensor)) else None
        if t is None:
            raise Error(f"cannot differentiate with respect to `{name}`: its argument is {describe(a)}", nspan)
        if not t.dtype.is_float:
            raise Error(f"cannot differentiate with respect to `{name}`: its argument is {t.dtype}", nspan,
                        "gradients exist for floating-point arguments only; cast it to a float dtype")
    for k, (p, a) in enumerate(zip(cdef.params, args)):
        if p.tensor and isinstance(a, (Tensor, Lit)) and (isinstance(a, Tensor) or p.name in dict(wrt)):
            t = P.to_tensor(a, span)
            holders[p.name] = B.buffer(t.dtype, t.shape, -1 - k, f"%grad{uid}.{p.name}")
            call_args[k] = Tensor(holders[p.name])
            args[k] = t
    result = ev.call_composite(fname, defs, call_args, kwargs, kspans, span)
    first = result[0] if isinstance(result, tuple) else result
    if not isinstance(first, Tensor):
        raise Error(f"`{fname}` returns {describe(first)}, not a tensor, first", span)
    out = first.node
    if form == "vjp":
        c = P.to_tensor(cot, span, out.dtype)
        if c.shape != out.shape or c.dtype != out.dtype:
            raise Error(f"the cotangent is {c.dtype}{B.fmt_shape(c.shape)} but `{fname}`'s first output is "
                        f"{out.dtype}{B.fmt_shape(out.shape)}", span, "pass a cotangent shaped like the output")
        ct = c.node
    else:
        if out.rank != 0 or not out.dtype.is_float:
            raise Error(f"`{form}` needs a floating-point scalar first output, but `{fname}` gives "
                        f"{out.dtype}{B.fmt_shape(out.shape)}", span,
                        "reduce it to a scalar (sum, mean) or use vjp with a :cotangent")
        ct = B.const(1.0, out.dtype)
    try:
        grads = autodiff.vjp([out], [ct], [holders[n] for n, _ in wrt], ev.custom)
    except autodiff.GradError as e:
        raise Error(f"cannot differentiate `{fname}`: {e}", span) from None
    back = {holders[p.name]: args[k].node for k, p in enumerate(cdef.params) if p.name in holders}
    nodes = autodiff.substitute([out, *grads], back)
    gs = [Tensor(n) for n in nodes[1:]]
    if form == "value-and-grad":
        return [Tensor(nodes[0]), *gs]
    return gs if listed else gs[0]


def custom_rule(ev: Elaborator, cdef: CompositeDef, env: Scope, out: Tensor, span: Span) -> autodiff.Custom | None:
    """The custom VJP of one call of a composite with `:vjp` (None when no tensor flows in)."""
    assert cdef.vjp is not None
    names, body = cdef.vjp
    params = [p for p in cdef.params if p.tensor]
    inputs = tuple(env.vars[p.name].node if isinstance(env.vars.get(p.name), Tensor) else None for p in params)
    if all(x is None for x in inputs):
        return None

    def rule(ct: Node) -> list[Node | None]:
        scope = Scope(env, {cdef.outputs[0].name: out, names[0]: Tensor(ct)})
        ev.frames.append(Frame(cdef, cdef.library))
        try:
            v = ev.eval_body(body, scope)
        finally:
            ev.frames.pop()
        vals = v.values if isinstance(v, Ret) else [v]
        if len(vals) != len(params):
            raise Error(f"the :vjp of `{cdef.name}` gives {len(vals)} cotangent{'s' if len(vals) != 1 else ''} for "
                        f"{len(params)} tensor parameter{'s' if len(params) != 1 else ''}", span)
        shares: list[Node | None] = []
        for p, x, val in zip(params, inputs, vals):
            if val is None or x is None:
                shares.append(None)
                continue
            t = P.to_tensor(val, span, x.dtype)
            shares.append(_fit(t.node, x, cdef, p.name, span))
        return shares

    keep = [x for x in inputs if x is not None]
    return autodiff.Custom(tuple(keep), lambda ct: [s for s, x in zip(rule(ct), inputs) if x is not None])


def _fit(t: Node, x: Node, cdef: CompositeDef, name: str, span: Span) -> Node:
    """A :vjp's cotangent for parameter x: as is, summed down from a broadcast shape (so a rule may
    give gamma's share shaped like the output), or broadcast up from a smaller one."""
    if t.shape == x.shape:
        return t
    try:
        both = B.broadcast_shapes(t.shape, x.shape)
        return autodiff.unbroadcast(t, x.shape) if both == t.shape else B.expand(t, x.shape)
    except B.ShapeError:
        raise Error(f"the :vjp of `{cdef.name}` gives a cotangent of shape {B.fmt_shape(t.shape)} for `{name}` "
                    f"of shape {B.fmt_shape(x.shape)}", span) from None
