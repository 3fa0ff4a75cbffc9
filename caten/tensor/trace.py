"""`caten.trace` and `caten.jit`: a Python function over Tensors as one caten composite.

Tracing runs the function once on placeholder inputs with a `Trace` active: operations build
the graph as usual, `backward` stays lazy, and an optimizer's `assign` and every `.grad` set
are recorded instead of run. The traced program's inputs are the tensor arguments (anywhere in
lists, tuples, dicts and keywords), then what the function captured (parameters, optimizer
state, gradients, the seed stream, `live` scalars such as a learning rate), each read from its
owner at every call; its outputs are the function's results, then every recorded update.
Reading a value (`.numpy()`, `.item()`, `bool(t)`) inside a trace is an error: it would be
baked into every replay.

`jit` compiles that program once per argument shapes and dtypes and replays it while the state
it was traced in holds (which `.grad`s were None, `guard`ed flags such as a module's training
mode or an optimizer's momentum); otherwise it traces again.

Runtime-owned buffers: a replay copies no parameter in or out of Python. The program's output
arrays become the new storage of the parameters, gradients and optimizer state (`set_value`
keeps the array as is; `.numpy()` is a read-only view of it), and the next call reads them
directly as inputs. The program writes into arrays it is given (`out=`): those of the call
before last, when nothing references them any more (a parameter has moved on), so a training
step alternates two sets of arrays (ping-pong) and allocates nothing in the steady state. An
array anyone still holds (a Tensor, a numpy view) is never reused under them.

Not guarded: rebinding a captured attribute to a new Tensor object (`model.w = Tensor(...)`)
after tracing: the program keeps reading the old object; give values with `assign` or
`load_state_dict` (in place) instead. A jitted function's results are leaves: call `backward`
inside the function, not on its result.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.emit import Printer
from caten.tensor.lazy import INPUT, Node, dtype_name, np_dtype, placeholder
from caten.tensor.realize import STATS, program, realize
from caten.tensor.tensor import Tensor, apply


class Trace:
    """What a traced function did besides computing its results."""

    def __init__(self, runtime: str):
        self.runtime = runtime
        self.assigned: dict[int, tuple[Tensor, Node]] = {}  # handle -> its node before the trace
        self.grads: dict[int, tuple[Tensor, Tensor | None]] = {}  # handle -> its .grad before
        self.grad_was_none: dict[int, tuple[Tensor, bool]] = {}  # .grad read before the fn set it
        self.grad_set: set[int] = set()
        self.lives: list[tuple[Node, Callable[[], Any]]] = []
        self.guards: list[tuple[Callable[[], Any], Any]] = []
        self.seed_node: Node | None = None
        self.draws = 0

    def assign(self, h: Tensor, node: Node) -> None:
        self.assigned.setdefault(id(h), (h, h.node))
        h.node = node

    def read_grad(self, h: Tensor) -> None:
        """`h.grad` read: whether it was None decides what the function did (backward accumulates
        or not, an optimizer skips it), so the program is replayed only while that still holds."""
        self.grads.setdefault(id(h), (h, h._grad))
        if id(h) not in self.grad_set:
            self.grad_was_none.setdefault(id(h), (h, h._grad is None))

    def set_grad(self, h: Tensor, g: Tensor | None) -> None:
        self.grads.setdefault(id(h), (h, h._grad))
        self.grad_set.add(id(h))

    def seed(self) -> Node:
        """The next seed of the stream: the stream's position at the call plus a draw count."""
        if self.seed_node is None:
            self.seed_node = placeholder((), "i64")
        self.draws += 1
        return apply("+", [Tensor(self.seed_node, runtime=self.runtime), self.draws], {}).node


def live(read: Callable[[], Any], dtype: str, runtime: str) -> Tensor:
    """A scalar read afresh at every call of a jitted function (an optimizer's lr): outside a
    trace a leaf holding `read()` now; inside one an input of the program, so a new value
    neither recompiles nor is baked into a replayed program."""
    tr = state.trace()
    if tr is None:
        return Tensor(_scalar(read(), dtype), runtime=runtime)
    n = placeholder((), dtype)
    tr.lives.append((n, read))
    return Tensor(n, runtime=runtime)


def _scalar(v: Any, dtype: str) -> np.ndarray:
    """A live value as a 0-d array (a number, or a one-element Tensor/array as torch allows)."""
    if isinstance(v, Tensor):
        v = v.numpy()
    a = np.asarray(v, dtype=np_dtype(dtype))
    if a.size != 1:
        raise Error(f"a live scalar (such as an optimizer's lr) has {a.size} elements")
    return a.reshape(())


def guard(read: Callable[[], Any]) -> None:
    """Inside a trace: the program is replayed only while `read()` equals what it gives now
    (a module's training flag, an optimizer's momentum); otherwise `caten.jit` traces again."""
    tr = state.trace()
    if tr is not None:
        tr.guards.append((read, read()))


def _flatten(v: Any, out: list[Tensor]) -> Any:
    """The structure of a result with each Tensor replaced by its index in `out`."""
    if isinstance(v, Tensor):
        out.append(v)
        return ("T", len(out) - 1)
    if isinstance(v, (list, tuple)):
        return (type(v), [_flatten(x, out) for x in v])
    if isinstance(v, dict):
        return (dict, {k: _flatten(x, out) for k, x in v.items()})
    return ("V", v)


def _rebuild(s: Any, vals: list[Any]) -> Any:
    kind, x = s
    if kind == "T":
        return vals[x]
    if kind == "V":
        return x
    if kind is dict:
        return {k: _rebuild(v, vals) for k, v in x.items()}
    return kind(_rebuild(v, vals) for v in x)


def _arg_key(v: Any, found: list[Any]) -> Any:
    """A hashable description of an argument, collecting its tensors (and numpy arrays) into
    `found`: tensors anywhere in lists, tuples and dicts are inputs of the program (by shape,
    dtype, runtime and requires_grad), never values baked into it; other values by repr."""
    if isinstance(v, Tensor):
        found.append(v)
        return ("T", v.shape, v.dtype, v.runtime, v.requires_grad)
    if isinstance(v, np.ndarray):
        found.append(v)
        return ("A", v.shape, v.dtype.str)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_arg_key(x, found) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, _arg_key(x, found)) for k, x in v.items()))
    return ("V", repr(v))


def _args_of(args: Any, found: list[Any]) -> Any:
    """`args` with its tensors and arrays replaced, in `_arg_key`'s order, by `found`'s."""
    if isinstance(args, (Tensor, np.ndarray)):
        return found.pop(0)
    if isinstance(args, (list, tuple)):
        return type(args)(_args_of(x, found) for x in args)
    if isinstance(args, dict):
        return {k: _args_of(x, found) for k, x in args.items()}
    return args


Ref = tuple[str, Any]  # ("h", a captured Tensor) or ("arg", i): the i-th tensor argument of the call


class Traced:
    """One traced program: its text, where each input comes from and where each output goes.
    Tensors the function gets as arguments are referred to by position, so a replay updates the
    `.grad` (or assigned value) of the tensors of *that* call."""

    def __init__(self, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], runtime: str,
                 name: str = "f"):
        self.runtime = runtime
        found: list[Any] = []
        _arg_key((args, kwargs), found)
        phs: list[Node] = []
        handles: list[Tensor] = []
        for a in found:
            t = a if isinstance(a, Tensor) else Tensor(a, runtime=runtime)
            p = placeholder(t.shape, t.dtype)
            if isinstance(a, Tensor) and a.requires_grad and a.is_leaf:
                p.requires_grad, p.owner = True, weakref.ref(a)  # backward gives the caller's tensor a grad
            phs.append(p)
            handles.append(Tensor(p, runtime=runtime))
        self._pos = {id(h): i for i, h in enumerate(handles)}
        self._pos.update({id(a): i for i, a in enumerate(found) if isinstance(a, Tensor)})
        targs, tkw = _args_of((args, kwargs), list(handles))
        tr = Trace(runtime)
        state.TRACES.append(tr)
        try:
            result = fn(*targs, **tkw)
        finally:
            state.TRACES.pop()
            # the handles are live again outside the trace: their values come from the program
            after = {k: h.node for k, (h, _) in tr.assigned.items()}
            grads_after = {k: h._grad for k, (h, _) in tr.grads.items()}
            for h, before in tr.assigned.values():
                h.node = before
            for h, before in tr.grads.values():
                h._grad = before
        outs: list[Tensor] = []
        self.shape = _flatten(result, outs)
        self.nres = len(outs)
        nodes = [t.node for t in outs]
        self.updates: list[tuple[str, Ref]] = []
        for k, (h, _) in tr.assigned.items():
            nodes.append(after[k])
            self.updates.append(("node", self._ref(h)))
        self.grad_none: list[Ref] = []
        for k, (h, _) in tr.grads.items():
            g = grads_after[k]
            if g is None:
                self.grad_none.append(self._ref(h))
            else:
                nodes.append(g.node)
                self.updates.append(("grad", self._ref(h)))
        self.draws = tr.draws
        self.out_specs = [(n.shape, n.dtype) for n in nodes]
        self._gens: deque[list[np.ndarray]] = deque(maxlen=2)  # the outputs of the last two calls
        self.guards = tr.guards
        self.grad_was_none = [(self._ref(h), was) for h, was in tr.grad_was_none.values()]
        self.text, params = Printer().program(name, nodes, phs) if nodes else (None, [])
        self.slots = [self._slot(p, i, phs, tr) for i, p in enumerate(params)]

    def _ref(self, h: Tensor) -> Ref:
        i = self._pos.get(id(h))
        return ("h", h) if i is None else ("arg", i)

    @staticmethod
    def _handle(ref: Ref, tensors: list[Any]) -> Tensor:
        return ref[1] if ref[0] == "h" else tensors[ref[1]]

    def _slot(self, p: Node, i: int, phs: list[Node], tr: Trace) -> tuple[str, Any]:
        """Where input `p` comes from at each call."""
        if i < len(phs):
            return ("arg", i)
        if p is tr.seed_node:
            return ("seed", None)
        for n, read in tr.lives:
            if n is p:
                return ("live", (read, p.dtype))
        for h, before in tr.assigned.values():
            if before is p:
                return ("node", self._ref(h))
        for h, before in tr.grads.values():
            if before is not None and before.node is p:
                return ("grad", self._ref(h))
        h = p.owner() if p.owner is not None else None
        if h is not None and h.node is p:
            return ("node", self._ref(h))
        if p.op == INPUT and p.value is None:
            raise Error("a traced function read a tensor created inside another trace")
        return ("const", p)

    def valid(self, tensors: list[Any]) -> bool:
        """Whether the captured state is still what this program was traced with: each `.grad`
        the function read is None exactly when it was, and every guard reads the same value."""
        return all((self._handle(r, tensors)._grad is None) == was for r, was in self.grad_was_none) and \
            all(read() == v for read, v in self.guards)

    def inputs(self, tensors: list[Any]) -> list[np.ndarray]:
        """The program's input arrays for a call with these tensor arguments."""
        xs = []
        for kind, x in self.slots:
            if kind == "arg":
                a = tensors[x]
                xs.append(a.numpy() if isinstance(a, Tensor) else a)
            elif kind == "seed":
                xs.append(np.array(state.SEED[0], dtype=np.int64))
            elif kind == "const":
                xs.append(x.value)
            elif kind == "live":
                xs.append(_scalar(x[0](), x[1]))
            else:
                h = self._handle(x, tensors)
                t = h if kind == "node" else h._grad
                realize([t.node], self.runtime)
                xs.append(t.node.value)
        return xs

    def _out_arrays(self) -> list[np.ndarray]:
        """This call's output arrays: each output of the call before last that nothing holds any
        more (a parameter has moved on to last call's array), else a fresh one. A training step
        then alternates two sets of arrays (ping-pong) and allocates nothing; an array anyone
        still references (a Tensor, a numpy view of it) is never written under them."""
        old = self._gens[0] if len(self._gens) == 2 else None
        outs = []
        for i, (shape, dt) in enumerate(self.out_specs):
            # referenced only by `old` and getrefcount's argument: free to write again
            if old is not None and sys.getrefcount(old[i]) <= 2:
                outs.append(old[i])
            else:
                outs.append(np.empty(shape, np_dtype(dt)))
        return outs

    def run(self, tensors: list[Any]) -> Any:
        """One call on these tensor arguments: run the program, hand out its output arrays."""
        outs: list[np.ndarray] = []
        if self.text is not None:
            fn = program(self.text, self.runtime)
            outs = self._out_arrays()
            fn(*self.inputs(tensors), out=outs)
            self._gens.append(outs)
            STATS["runs"] += 1
        state.SEED[0] += self.draws
        res = [_leaf(v, self.runtime) for v in outs[:self.nres]]
        for (kind, ref), v in zip(self.updates, outs[self.nres:]):
            h = self._handle(ref, tensors)
            if kind == "node":
                h.set_value(v)
            else:
                h._grad = _leaf(v, self.runtime)
        for ref in self.grad_none:
            self._handle(ref, tensors)._grad = None
        return _rebuild(self.shape, res)


def _leaf(v: np.ndarray, runtime: str) -> Tensor:
    return Tensor(Node(INPUT, (), {}, v.shape, dtype_name(v.dtype), value=v), runtime=runtime)


class Jit:
    """`caten.jit(fn)`: traced once per argument shapes and dtypes (and captured state: which
    gradients exist, guarded flags), then replayed. `traces` counts the tracings."""

    def __init__(self, fn: Callable[..., Any], runtime: str | None = None):
        self.fn, self.runtime = fn, runtime
        self.programs: dict[tuple, list[Traced]] = {}
        self.traces = 0
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__name__ = getattr(fn, "__name__", "jitted")

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """As a method decorator: the instance is one more (non-tensor) argument."""
        return self if obj is None else functools.partial(self, obj)

    def _find(self, args: tuple, kwargs: dict) -> tuple[Traced | None, list[Any], list[Traced]]:
        found: list[Any] = []
        key = _arg_key((args, kwargs), found)
        tps = self.programs.setdefault(key, [])
        return next((t for t in tps if t.valid(found)), None), found, tps

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if state.trace() is not None:
            return self.fn(*args, **kwargs)  # inside another trace: part of it
        tp, found, tps = self._find(args, kwargs)
        if tp is None:
            rt = self.runtime or next((a.runtime for a in found if isinstance(a, Tensor)), state.RUNTIME[0])
            tp = Traced(self.fn, list(args), kwargs, rt)
            tps.append(tp)
            self.traces += 1
        return tp.run(found)

    def source(self, *args: Any, **kwargs: Any) -> str:
        """The caten text of the program these arguments run."""
        tp = self._find(args, kwargs)[0]
        if tp is None or tp.text is None:
            raise Error("jit: no program was traced for arguments of these shapes", hint="call the function first")
        return tp.text


def jit(fn: Callable[..., Any] | None = None, *, runtime: str | None = None) -> Any:
    """Trace `fn` once per argument shapes and dtypes and replay the compiled program."""
    if fn is None:
        return lambda f: Jit(f, runtime)
    return Jit(fn, runtime)


def trace(fn: Callable[..., Any], *examples: Any, name: str = "f", runtime: str | None = None) -> str:
    """The caten source of `fn` on arguments shaped like `examples`: one composite `name`
    (after any gradient helpers) whose parameters are the tensors among the arguments (x0, x1,
    ...), then the tensors `fn` captured (w0, w1, ...: parameters, optimizer state, the seed
    stream, in the order the function first used them); its outputs are fn's results, then each
    value it assigned and each gradient it left (y0, y1, ...)."""
    found: list[Any] = []
    _arg_key(list(examples), found)
    rt = runtime or next((a.runtime for a in found if isinstance(a, Tensor)), state.RUNTIME[0])
    tp = Traced(fn, list(examples), {}, rt, name=name)
    if tp.text is None:
        raise Error("trace: the function computes nothing (no tensor result, no update)",
                    hint="return the tensors it computes")
    return tp.text
