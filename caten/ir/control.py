"""Control flow in the graph: a loop or a branch is a node whose bodies are sub-graphs, as JAX's
`while`/`scan`/`cond` primitives and ONNX's Loop/If hold sub-programs.

A body is a graph over BUFFER parameters of its own (`Body`); a loop (`Loop`) runs its body
while a condition body holds and/or while a trip counter stays below its end, carrying state
from trip to trip, reading one slice of each `xs` operand per trip and stacking one `y` per trip;
a branch (`Branch`) runs one of two bodies. Nodes are single-valued, so a loop with k results
is k LOOP (or IF) nodes of the same spec and operands, `arg = (spec, k)`: every stage groups
them back into one statement. Values a body reads from outside it (captures) become operands of
the node, so a body is closed and compiles as a program of its own (caten.pipeline).

Builders (`loop`, `branch`) take Python callables that build the body from parameter nodes:
the elaborator's forms and `caten.Tensor`'s functions both use them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node, structural_hash, toposort
from caten.ir.ops import Op
from caten.ir.program import Program, TensorSpec

_depth: contextvars.ContextVar[int] = contextvars.ContextVar("caten_loop_depth", default=0)
PARAM = "__p"  # body parameter names: __p{depth}_{j}


class ControlError(ValueError):
    """A loop or branch that cannot be built (the elaborator and Tensor turn it into diagnostics)."""


@dataclass(frozen=True, eq=False)
class Body:
    """A closed sub-graph: `params` are its BUFFER nodes (index j at position j), `outputs` its results."""
    params: tuple[Node, ...]
    outputs: tuple[Node, ...]
    _key: list = field(default_factory=list, repr=False)

    def key(self) -> str:
        if not self._key:
            sig = ";".join(f"{p.dtype}[{' '.join(map(str, p.shape))}]" for p in self.params)
            self._key.append(sig + "|" + structural_hash(list(self.outputs)))
        return self._key[0]

    def program(self, name: str, outer: Program, index: str | None, keep: Sequence[int] | None = None,
                invariant: Sequence[int] = ()) -> Program:
        """This body as a program of its own: the enclosing program's dims, the trip counter's and
        (with `invariant` inputs: the ones every trip reads unchanged) the first-trip flag's."""
        keep = range(len(self.outputs)) if keep is None else keep
        ins = [TensorSpec(p.arg[2], p.dtype, p.shape) for p in self.params]
        outs = [TensorSpec(f"r{k}", self.outputs[k].dtype, self.outputs[k].shape) for k in keep]
        dims = list(outer.dims) + ([index] if index and index not in outer.dims else [])
        if invariant and index:
            dims.append(first_symbol(index))
        return Program(name, ins, outs, [self.outputs[k] for k in keep], dims, [], dict(outer.defines),
                       dict(outer.derived), tuple(invariant))


@dataclass(frozen=True, eq=False)
class Loop:
    """src: carry inits, captures, xs, then the runtime start and end scalars it has. Trip k runs
    with the counter `index` = start + k while `index < end` (when there is an end) and `cond`
    (when there is one, evaluated on the carries before each trip) holds. The body maps
    (carries, captures, x slices) to (next carries, ys); slice and stack positions are
    `index - start` (`reverse`: `trips - 1 - (index - start)`)."""
    carries: int
    captures: int
    xs: int
    index: str
    start: Dim | None  # None: the runtime operand
    end: Dim | None  # None: the runtime operand when `end_operand`, else unbounded
    end_operand: bool
    trips: Dim | None  # the stacked axis of xs and ys (end - start), when there are any
    cond: Body | None
    body: Body
    reverse: bool = False
    checkpoint: bool = False

    @property
    def runtime_trips(self) -> bool:
        """Whether the trip count is known only at run time (a condition, or a runtime bound):
        such a loop has no reverse mode."""
        return self.cond is not None or self.start is None or self.end_operand

    @property
    def n_ys(self) -> int:
        return len(self.body.outputs) - self.carries

    @property
    def n_outputs(self) -> int:
        return len(self.body.outputs)

    def out_spec(self, k: int) -> tuple[DType, tuple[Dim, ...]]:
        o = self.body.outputs[k]
        if k < self.carries:
            return o.dtype, o.shape
        assert self.trips is not None
        return o.dtype, (self.trips,) + o.shape

    def __repr__(self) -> str:
        return (f"Loop({self.carries},{self.captures},{self.xs},{self.index},{self.start},{self.end},"
                f"{self.end_operand},{self.trips},{self.reverse},{self.checkpoint},"
                f"{self.cond.key() if self.cond else None},{self.body.key()})")


@dataclass(frozen=True, eq=False)
class Branch:
    """src: the rank-0 bool predicate, then captures; `then`/`other` map the captures to the results."""
    then: Body
    other: Body

    @property
    def n_outputs(self) -> int:
        return len(self.then.outputs)

    def out_spec(self, k: int) -> tuple[DType, tuple[Dim, ...]]:
        o = self.then.outputs[k]
        return o.dtype, o.shape

    def __repr__(self) -> str:
        return f"Branch({self.then.key()},{self.other.key()})"


def first_symbol(index: str) -> str:
    """The dim a loop body reads as 1 on its first trip, 0 after (`__f<depth>` of `__i<depth>`)."""
    return "__f" + index[3:]


def spec_of(n: Node) -> Loop | Branch:
    return n.arg[0]


def results(n: Node) -> list[Node]:
    """All result nodes of the loop or branch `n` is one result of."""
    spec = spec_of(n)
    return [Node.make(n.op, *spec.out_spec(k), n.src, (spec, k)) for k in range(spec.n_outputs)]


def depth() -> int:
    """How many bodies are being built around the caller (names of counters and parameters)."""
    return _depth.get()


def params(specs: Sequence[tuple[DType, Sequence[Dim]]], first: int = 0) -> list[Node]:
    d = _depth.get()
    return [Node.make(Op.BUFFER, dt, tuple(sh), (), (dt, first + j, f"{PARAM}{d}_{first + j}"))
            for j, (dt, sh) in enumerate(specs)]


def index_symbol() -> str:
    return f"__i{_depth.get()}"


def _build(fn: Callable[..., Any], *args: Any) -> Any:
    tok = _depth.set(_depth.get() + 1)
    try:
        return fn(*args)
    finally:
        _depth.reset(tok)


def _arg_syms(n: Node) -> set[str]:
    """The dim symbols n's arg names (a constant's value, a view's fields, a loop's bounds)."""
    if n.op is Op.CONST:
        ds: list = [n.arg]
    elif n.op is Op.VIEW:
        v = n.arg
        ds = list(v.shape) + list(v.strides) + [v.offset] + [x for m in (v.mask or ()) for x in m]
    elif n.op is Op.LOOP:
        sp = n.arg[0]
        ds = [sp.start, sp.end, sp.trips]
    else:
        return set()
    return {s for x in ds if isinstance(x, D.DimExpr) for s in D.free_syms(x)}


def _mentions(n: Node, syms: set[str]) -> bool:
    return bool(syms & _arg_syms(n))


_INLINE = (Op.CONST, Op.INDEX, Op.VIEW)


def _mentions_counter(n: Node) -> bool:
    """Whether n's arg names a loop counter (`__i<depth>`)."""
    return any(x.startswith("__i") for x in _arg_syms(n))


def substitute_dims(nodes: Sequence[Node], env: dict[str, Dim]) -> list[Node]:
    """`nodes` with the dim symbols of `env` replaced in constants and views (a body's counter
    written as another loop's: the gradient loop runs the trips backward)."""
    from caten.ir.graph import _canon
    memo: dict[Node, Node] = {}
    for n in toposort(list(nodes)):
        src = tuple(memo[s] for s in n.src)
        arg = _canon(n.arg, env) if n.op in (Op.CONST, Op.VIEW) else n.arg
        memo[n] = n if src == n.src and arg == n.arg else Node.make(n.op, n.dtype, n.shape, src, arg)
    return [memo[n] for n in nodes]


def close(outputs: Sequence[Node], own: Sequence[Node], syms: set[str],
          hoist: bool = True) -> tuple[list[Node], list[Node], list[Node]]:
    """Make a body closed: every maximal part of `outputs` that reads none of the parameters `own`
    (nor the counters `syms`) and holds a buffer or computes something becomes a new parameter
    (a capture, computed once outside the loop). Without `hoist` (a branch: only the taken side may
    run) only the values that exist outside anyway are captured -- inputs, loop and branch results
    -- and the rest of each side is computed inside it. Returns (new outputs, capture params,
    captured outer nodes); the capture params follow `own` in index order."""
    own_set = set(own)
    order = toposort(list(outputs))
    dep: dict[Node, bool] = {}
    pure: dict[Node, bool] = {}  # computes only constants and coordinates: cheap to keep inside
    for n in order:
        dep[n] = n in own_set or _mentions(n, syms) or any(dep[s] for s in n.src)
        # (a value of an enclosing loop's counter is lifted: a body names no counter but its own)
        pure[n] = (n.op in _INLINE and all(pure[s] for s in n.src) or (not n.src and n.op in (Op.CONST, Op.INDEX))) \
            and not _mentions_counter(n)
    captured: list[Node] = []
    cap_param: dict[Node, Node] = {}
    memo: dict[Node, Node] = {}
    d = _depth.get() + 1

    def lift(x: Node) -> Node:
        p = cap_param.get(x)
        if p is None:
            j = len(own) + len(captured)
            p = Node.make(Op.BUFFER, x.dtype, x.shape, (), (x.dtype, j, f"{PARAM}{d}_{j}"))
            cap_param[x] = p
            captured.append(x)
        return p

    for n in order:
        if n in own_set:
            memo[n] = n
        elif not dep[n]:
            if pure[n]:
                memo[n] = n
            elif not hoist and n.op not in (Op.BUFFER, Op.LOOP, Op.IF) and not _mentions_counter(n):
                src = tuple(memo[s] for s in n.src)
                memo[n] = n if src == n.src else Node.make(n.op, n.dtype, n.shape, src, n.arg)
            elif n.op is Op.VIEW and not _mentions_counter(n):
                # a view stays inside over its lifted source: a broadcast weight stays a broadcast (the
                # body's GEMM reads it in place), never a materialized copy of every repeat
                memo[n] = Node.make(Op.VIEW, n.dtype, n.shape, (memo[n.src[0]],), n.arg)
            else:
                memo[n] = lift(n)
        else:
            src = tuple(memo[s] for s in n.src)
            memo[n] = n if src == n.src else Node.make(n.op, n.dtype, n.shape, src, n.arg)
    new = [memo[o] for o in outputs]
    # (an output that reads no parameter is lifted too: the body copies it)
    return new, [cap_param[x] for x in captured], captured


def _check_state(init: Sequence[Node], nxt: Sequence[Node], what: str) -> None:
    if len(nxt) != len(init):
        raise ControlError(f"{what} gives {len(nxt)} next values for {len(init)} state values")
    for j, (a, b) in enumerate(zip(init, nxt)):
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            raise ControlError(f"{what}: state value {j} starts as {a.dtype}[{', '.join(map(str, a.shape))}] "
                               f"but its next value is {b.dtype}[{', '.join(map(str, b.shape))}]; each keeps "
                               "its dtype and shape across trips")


def loop(init: Sequence[Node], body_fn: Callable[..., tuple[Sequence[Node], Sequence[Node]]],
         cond_fn: Callable[..., Node] | None = None, start: Dim | Node = 0, end: Dim | Node | None = None,
         xs: Sequence[Node] = (), reverse: bool = False, checkpoint: bool = False,
         what: str = "the loop") -> list[Node]:
    """The results of a loop: final carries, then the stacked ys. `body_fn(carries, x_slices, i)`
    returns (next carries, ys) from parameter nodes and `i` (the i64 counter); `cond_fn(carries,
    i)` a rank-0 bool. `start`/`end` are dims or rank-0 integer nodes (runtime scalars)."""
    from caten.ir import build as B
    from caten.ir import dtypes as T
    idx = f"__i{_depth.get() + 1}"
    trips: Dim | None = None
    if xs:
        trips = xs[0].shape[0] if xs[0].rank else None
        if any(x.rank == 0 for x in xs) or any(x.shape[0] != trips for x in xs):
            raise ControlError(f"{what}: every scanned tensor needs the same leading length, got "
                               + ", ".join(f"[{', '.join(map(str, x.shape))}]" for x in xs))
    runtime = [b for b in (start, end) if isinstance(b, Node)]
    for b in runtime:
        if b.rank != 0 or not b.dtype.is_int:
            raise ControlError(f"{what}: a bound known at run time must be a rank-0 integer tensor, "
                               f"got {b.dtype}[{', '.join(map(str, b.shape))}]")
    if trips is None and not isinstance(start, Node) and end is not None and not isinstance(end, Node):
        trips = D.add(end, D.mul(start, -1))

    def build() -> tuple[list[Node], list[Node], Node | None, list[Node]]:
        d = _depth.get()
        carry_p = [Node.make(Op.BUFFER, n.dtype, n.shape, (), (n.dtype, j, f"{PARAM}{d}_{j}"))
                   for j, n in enumerate(init)]
        x_p = [Node.make(Op.BUFFER, x.dtype, x.shape[1:], (), (x.dtype, len(init) + j, f"{PARAM}{d}_x{j}"))
               for j, x in enumerate(xs)]
        i = B.const(D.sym(idx), T.i64)
        nxt, ys = body_fn(carry_p, x_p, i)
        c = cond_fn(carry_p, i) if cond_fn is not None else None
        return carry_p + x_p, list(nxt) + list(ys), c, list(nxt)

    own, outs, c, nxt = _build(build)
    _check_state(init, nxt, what)
    if c is not None and (c.rank != 0 or c.dtype != T.bool_):
        raise ControlError(f"{what}: the condition must be a rank-0 bool, got "
                           f"{c.dtype}[{', '.join(map(str, c.shape))}]")
    ys = outs[len(init):]
    if ys and trips is None:
        raise ControlError(f"{what}: stacked outputs need a trip count the shapes know (a dim), not one "
                           "known only at run time", )
    every = outs + ([c] if c is not None else [])
    closed, cap_p, captured = close(every, own, {idx})
    # parameters in order: carries, captures, x slices (the x params move after the captures)
    nc, ncap = len(init), len(captured)
    order = own[:nc] + cap_p + own[nc:]
    renum = {p: Node.make(Op.BUFFER, p.dtype, p.shape, (), (p.dtype, j, p.arg[2])) for j, p in enumerate(order)}
    closed = _substitute(closed, renum)
    body = Body(tuple(renum[p] for p in order), tuple(closed[:len(outs)]))
    cond = Body(tuple(renum[p] for p in order[:nc + ncap]), (closed[-1],)) if c is not None else None
    spec = Loop(nc, ncap, len(xs), idx, None if isinstance(start, Node) else start,
                None if isinstance(end, Node) else end, isinstance(end, Node), trips, cond, body, reverse,
                checkpoint)
    src = tuple(init) + tuple(captured) + tuple(xs) + tuple(b if b.dtype == T.i64 else B.cast(b, T.i64)
                                                            for b in runtime)
    return [Node.make(Op.LOOP, *spec.out_spec(k), src, (spec, k)) for k in range(spec.n_outputs)]


def branch(pred: Node, then_fn: Callable[[], Sequence[Node]], else_fn: Callable[[], Sequence[Node]],
           what: str = "if") -> list[Node]:
    """The results of `then_fn()` when the rank-0 bool `pred` holds, else of `else_fn()`; only the
    taken side runs."""
    from caten.ir import dtypes as T
    if pred.rank != 0 or pred.dtype != T.bool_:
        raise ControlError(f"{what}: the condition must be a rank-0 bool, got "
                           f"{pred.dtype}[{', '.join(map(str, pred.shape))}]")
    a = list(_build(then_fn))
    b = list(_build(else_fn))
    if len(a) != len(b) or any(x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape) for x, y in zip(a, b)):
        def sig(vs: list[Node]) -> str:
            return ", ".join(f"{v.dtype}[{', '.join(map(str, v.shape))}]" for v in vs)
        raise ControlError(f"{what}: both branches must give the same dtypes and shapes; then gives ({sig(a)}), "
                           f"else gives ({sig(b)})")
    closed, cap_p, captured = close(a + b, [], set(), hoist=False)
    body_t = Body(tuple(cap_p), tuple(closed[:len(a)]))
    body_e = Body(tuple(cap_p), tuple(closed[len(a):]))
    spec = Branch(body_t, body_e)
    src = (pred,) + tuple(captured)
    return [Node.make(Op.IF, *spec.out_spec(k), src, (spec, k)) for k in range(spec.n_outputs)]


def _substitute(nodes: Sequence[Node], mapping: dict[Node, Node]) -> list[Node]:
    memo: dict[Node, Node] = {}
    for n in toposort(list(nodes)):
        if n in mapping:
            memo[n] = mapping[n]
        else:
            src = tuple(memo[s] for s in n.src)
            memo[n] = n if src == n.src else Node.make(n.op, n.dtype, n.shape, src, n.arg)
    return [memo[n] for n in nodes]


# the reference semantics ------------------------------------------------------------------------
def run_loop(spec: Loop, ops: Sequence[np.ndarray], env: dict[str, int],
             evaluate: Callable[..., list[np.ndarray]]) -> list[np.ndarray]:
    nc, ncap, nx = spec.carries, spec.captures, spec.xs
    carries = [np.array(a, copy=True) for a in ops[:nc]]
    caps = list(ops[nc:nc + ncap])
    xs = list(ops[nc + ncap:nc + ncap + nx])
    rt = [int(np.asarray(b)) for b in ops[nc + ncap + nx:]]
    start = D.evaluate(spec.start, env) if spec.start is not None else rt.pop(0)
    end = D.evaluate(spec.end, env) if spec.end is not None else (rt.pop(0) if spec.end_operand else None)
    trips = D.evaluate(spec.trips, env) if spec.trips is not None else 0
    ys = [np.zeros((trips,) + tuple(D.evaluate(d, env) for d in o.shape), o.dtype.np)
          for o in spec.body.outputs[nc:]]
    i = start
    while end is None or i < end:
        inner = {**env, spec.index: i}
        if spec.cond is not None and not bool(evaluate(spec.cond.outputs, carries + caps, inner)[0]):
            break
        pos = i - start if not spec.reverse else trips - 1 - (i - start)
        if xs or ys:
            if not 0 <= pos < trips:
                break  # (a runtime bound past the scanned length: the stacked ones stop the loop)
        outs = evaluate(spec.body.outputs, carries + caps + [x[pos] for x in xs], inner)
        carries = [np.array(o, copy=True) for o in outs[:nc]]
        for y, o in zip(ys, outs[nc:]):
            y[pos] = o
        i += 1
    return carries + ys


def run_branch(spec: Branch, ops: Sequence[np.ndarray], env: dict[str, int],
               evaluate: Callable[..., list[np.ndarray]]) -> list[np.ndarray]:
    body = spec.then if bool(np.asarray(ops[0])) else spec.other
    return [np.array(o, copy=True) for o in evaluate(body.outputs, list(ops[1:]), env)]
