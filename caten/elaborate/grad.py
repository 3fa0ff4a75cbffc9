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
from caten.elaborate.complex import pairs
from caten.elaborate.evaluate import Frame, Ret, Scope
from caten.elaborate.values import Complex, Lit, Tensor, describe
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
        if isinstance(a, Complex) and not a.weak:
            continue  # the gradient of a real loss: d/dre + i d/dim, torch's convention
        t = P.to_tensor(a, nspan) if isinstance(a, (Lit, Tensor)) else None
        if t is None:
            raise Error(f"cannot differentiate with respect to `{name}`: its argument is {describe(a)}", nspan)
        if not t.dtype.is_float:
            raise Error(f"cannot differentiate with respect to `{name}`: its argument is {t.dtype}", nspan,
                        "gradients exist for floating-point arguments only; cast it to a float dtype")
    back: dict[Node, Node] = {}
    for k, (p, a) in enumerate(zip(cdef.params, args)):
        if p.tensor and isinstance(a, Complex) and not a.weak:  # a complex argument: a holder per part
            hs = [B.buffer(x.dtype, x.shape, -1 - k, f"%grad{uid}.{p.name}.{i}") for i, x in enumerate((a.re, a.im))]
            holders[p.name] = hs  # type: ignore[assignment]
            call_args[k] = Complex(Tensor(hs[0]), Tensor(hs[1]))
            back.update({hs[0]: a.re.node, hs[1]: a.im.node})  # type: ignore[union-attr]
        elif p.tensor and isinstance(a, (Tensor, Lit)) and (isinstance(a, Tensor) or p.name in dict(wrt)):
            t = P.to_tensor(a, span)
            holders[p.name] = B.buffer(t.dtype, t.shape, -1 - k, f"%grad{uid}.{p.name}")
            call_args[k] = Tensor(holders[p.name])
            back[holders[p.name]] = t.node
    result = ev.call_composite(fname, defs, call_args, kwargs, kspans, span)
    first = result[0] if isinstance(result, tuple) else result
    if isinstance(first, Complex) and form == "vjp" and not first.weak:
        return _complex_vjp(ev, fname, first, cot, holders, wrt, back, listed, span)
    if not isinstance(first, Tensor):
        raise Error(f"`{fname}` returns {describe(first)}, not a tensor, first", span,
                    "a gradient needs a real loss: take (abs z), (real z) or (imag z)" if isinstance(first, Complex)
                    else None)
    out = first.node
    if form == "vjp":
        if isinstance(cot, Complex):
            raise Error(f"the cotangent is {describe(cot)} but `{fname}`'s first output is real", span,
                        "pass a real cotangent shaped like the output")
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
    nodes = _grads(ev, fname, [out], [ct], holders, wrt, back, span)
    gs = nodes[1:]
    if form == "value-and-grad":
        return [nodes[0], *gs]
    return gs if listed else gs[0]


def _grads(ev: Elaborator, fname: str, outs: list[Node], cts: list[Node], holders: dict, wrt: list,
           back: dict[Node, Node], span: Span) -> list[Any]:
    """The outputs, then the gradient of each :wrt name (a complex one as d/dre + i d/dim), with the
    caller's arguments put back in place of the holders."""
    flat = [h for n, _ in wrt for h in (holders[n] if isinstance(holders[n], list) else [holders[n]])]
    try:
        grads = autodiff.vjp(outs, cts, flat, ev.custom)
    except autodiff.GradError as e:
        raise Error(f"cannot differentiate `{fname}`: {e}", span) from None
    nodes = [Tensor(n) for n in autodiff.substitute([*outs, *grads], back)]
    res: list[Any] = nodes[:len(outs)] if len(outs) == 1 else [Complex(*nodes[:2])]
    k = len(outs)
    for n, _ in wrt:
        pair = isinstance(holders[n], list)
        res.append(Complex(nodes[k], nodes[k + 1]) if pair else nodes[k])
        k += 2 if pair else 1
    return res


def _complex_vjp(ev: Elaborator, fname: str, out: Complex, cot: Any, holders: dict, wrt: list, back: dict,
                 listed: bool, span: Span) -> Any:
    """vjp of a complex first output: the cotangent c (complex, as torch's grad_output) pulls back
    through the parts as re(c) d re(out) + im(c) d im(out)."""
    _, [(cr, ci)] = pairs([cot], span, "vjp")
    cts = [P.to_tensor(x, span, out.re.dtype) for x in (cr, ci)]  # type: ignore[union-attr]
    if any(c.shape != out.shape for c in cts):
        raise Error(f"the cotangent is {describe(cot)} but `{fname}`'s first output is {describe(out)}", span,
                    "pass a cotangent shaped like the output")
    gs = _grads(ev, fname, [out.re.node, out.im.node], [c.node for c in cts], holders, wrt, back, span)[1:]  # type: ignore[union-attr]
    return gs if listed else gs[0]


def custom_rule(ev: Elaborator, cdef: CompositeDef, env: Scope, out: Tensor, span: Span) -> autodiff.Custom | None:
    """The custom VJP of one call of a composite with `:vjp` (None when no tensor flows in)."""
    assert cdef.vjp is not None
    names, body = cdef.vjp
    params = [p for p in cdef.params if p.tensor]
    if any(isinstance(env.vars.get(p.name), Complex) for p in params):
        return None  # (a :vjp is written over real tensors: a complex call differentiates its expansion)
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
