"""Reverse-mode differentiation of principal-op graphs.

`vjp` walks the graph from the outputs back to the nodes asked for, in reverse topological
order, summing the cotangents that reach each node over all its uses and asking the op table's
VJP rule (`caten/ir/ops.py`) for its operands' shares. The result is an ordinary principal-op
graph: it shares the forward nodes it reads (a rule may reuse a node's value), so the rewrite
rules, the scheduler and every renderer treat the backward pass like any other program.

A node may carry a custom rule (`Custom`): the transform then sends its cotangent straight to
the custom rule's inputs instead of into the nodes that computed it. The elaborator registers
one for each call of a composite that defines `:vjp` (a numerically better gradient than the
expansion's, e.g. log-softmax's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from caten.autodiff import builder, control
from caten.autodiff.views import unbroadcast
from caten.ir import build as B
from caten.ir.graph import Node, toposort
from caten.ir.ops import TABLE, Op

__all__ = ["Custom", "GradError", "vjp", "substitute", "unbroadcast"]


class GradError(Exception):
    """A gradient that cannot be built; the elaborator adds the source location."""


@dataclass(frozen=True)
class Custom:
    """A node's own VJP: `rule(ct)` gives one cotangent (or None) per node of `inputs`."""
    inputs: tuple[Node, ...]
    rule: Callable[[Node], Sequence[Node | None]]


def _srcs(n: Node, custom: Mapping[Node, Custom]) -> tuple[Node, ...]:
    c = custom.get(n)
    return c.inputs if c is not None else n.src


def _order(outputs: Sequence[Node], custom: Mapping[Node, Custom]) -> list[Node]:
    """Operands before users over the (custom-rerouted) edges."""
    return toposort(outputs, (lambda n: _srcs(n, custom)) if custom else None)


def vjp(outputs: Sequence[Node], cotangents: Sequence[Node], wrt: Sequence[Node],
        custom: Mapping[Node, Custom] | None = None) -> list[Node]:
    """d(sum_i <outputs[i], cotangents[i]>)/d(wrt[j]) for each j, as graph nodes shaped like wrt[j]
    (zeros where a node does not reach the outputs)."""
    custom = custom or {}
    order = _order(outputs, custom)
    targets = set(wrt)
    live: set[Node] = set()  # the nodes some wrt node flows into: only they need a cotangent
    for n in order:
        if n in targets or any(s in live for s in _srcs(n, custom)):
            if n.dtype.is_float:
                live.add(n)
    acc: dict[Node, Node] = {}
    for o, c in zip(outputs, cotangents):
        if o in live:
            acc[o] = c if o not in acc else B.alu(Op.ADD, acc[o], c)
    first: dict[tuple, Node] = {}  # a loop's (branch's) results: its gradient is built at the first in order
    for n in order:
        if n.op in (Op.LOOP, Op.IF) and n in live:
            first.setdefault((id(n.arg[0]), n.src), n)
    for n in reversed(order):
        if n.op in (Op.LOOP, Op.IF) and n not in custom:
            key = (id(n.arg[0]), n.src)
            if first.get(key) is not n:
                continue
            cts = {m.arg[1]: acc[m] for m in order if m.op is n.op and (id(m.arg[0]), m.src) == key and m in acc}
            if not cts:
                continue
            try:
                shares = (control.vjp_loop if n.op is Op.LOOP else control.vjp_branch)(n, cts, vjp, custom)
            except control.ControlGradError as e:
                raise GradError(str(e)) from None
            _accumulate(acc, n, n.src, shares, live)
            continue
        ct = acc.get(n)
        if ct is None or n in targets and not _srcs(n, custom):
            continue
        c = custom.get(n)
        if c is not None:
            shares = list(c.rule(ct))
            srcs = c.inputs
        else:
            rule = TABLE[n.op].vjp
            if rule is None or not n.src:
                continue
            try:
                shares = list(rule(builder, n, ct))
            except NotImplementedError as e:
                raise GradError(f"cannot differentiate {n.op.value}: {e}") from None
            srcs = n.src
        _accumulate(acc, n, srcs, shares, live)
    return [acc.get(w) if w in acc else B.const(0, w.dtype, w.shape) for w in wrt]


def _accumulate(acc: dict[Node, Node], n: Node, srcs: Sequence[Node], shares: Sequence[Node | None],
                live: set[Node]) -> None:
    """Add each operand's share of n's cotangent to what reached it."""
    for s, share in zip(srcs, shares):
        if share is None or s not in live:
            continue
        if share.shape != s.shape:
            raise GradError(f"a {n.op.value} gradient of shape {list(share.shape)} for an operand of "
                            f"shape {list(s.shape)}")
        share = B.cast(share, s.dtype)
        acc[s] = share if s not in acc else B.alu(Op.ADD, acc[s], share)


def substitute(outputs: Sequence[Node], mapping: Mapping[Node, Node]) -> list[Node]:
    """The outputs with each key of `mapping` replaced by its value (same dtype and shape)."""
    done: dict[Node, Node] = dict(mapping)
    for n in _order(outputs, {}):
        if n in done:
            continue
        srcs = tuple(done[s] for s in n.src)
        done[n] = n if all(a is b for a, b in zip(srcs, n.src)) else Node.make(n.op, n.dtype, n.shape, srcs, n.arg)
    return [done[o] for o in outputs]
