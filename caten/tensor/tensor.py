"""`caten.Tensor` (LANGUAGE.md section 12): a handle on a node of the pending graph.

Operations build nodes and run nothing; `.numpy()`, `.item()` and `.realize()` compile the
pending graph through the pipeline and run it. A Tensor is a handle so that an optimizer can
give a parameter its new value in place (`assign`): graphs built before keep the node they read.
The library's composites, Python's operators, indexing (`index`) and `backward` (`autograd`)
are attached by `caten.tensor.methods`; this module holds construction and reading values.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.lazy import DETACH, INPUT, NTH, Node, dtype_name, infer, leaf, np_dtype
from caten.tensor.realize import realize

FLOATS = ("f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz")


def _dt(d: Any) -> str:
    if type(d).__module__ == "torch":  # torch.float32: torch's habit, by name
        from caten.tensor.torchnames import DTYPES

        d = DTYPES.get(str(d).removeprefix("torch."), d)
    name = dtype_name(d)
    if name is None:
        from caten.tensor.torchnames import ArgError  # torch: a TypeError (dtype must be a torch.dtype)

        raise ArgError(f"caten has no dtype {d!r}",
                       hint="use f16 bf16 f32 f64 f8e4m3 f8e5m2 f8e4m3fnuz f8e5m2fnuz i4 i8..i64 u4 u8..u64 bool")
    return name


class Tensor:
    """A lazy n-dimensional array (see the module docstring)."""

    __slots__ = ("node", "_grad", "runtime", "_base", "__weakref__")
    __array_priority__ = 100  # numpy defers `ndarray + Tensor` to Tensor.__radd__

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False, runtime: str | None = None):
        self._grad: Tensor | None = None
        self._base: Tensor | None = None  # for `t.data`: the tensor its in-place changes go to
        self.runtime = runtime or state.RUNTIME[0]
        if isinstance(data, Node):
            self.node = data
            return
        if isinstance(data, Tensor):
            data = data.numpy()
        arr = np.asarray(data)
        if dtype is not None:
            arr = arr.astype(np_dtype(_dt(dtype)))
        elif arr.dtype == np.float64 and not isinstance(data, (np.ndarray, np.generic)):
            arr = arr.astype(np.float32)  # Python floats are f32, as torch's default dtype (numpy's keep theirs)
        dt = dtype_name(arr.dtype)
        if dt is None:
            raise Error(f"caten has no dtype for numpy's {arr.dtype}")
        arr = np.array(arr, order="C", copy=True)
        arr.flags.writeable = False
        self.node = leaf(arr, dt, requires_grad)
        if requires_grad and dt not in FLOATS:
            raise Error(f"only floating-point tensors can require gradients, this one is {dt}")
        self.node.owner = weakref.ref(self)

    # properties ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.node.shape

    @property
    def dtype(self) -> str:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def requires_grad(self) -> bool:
        return self.node.requires_grad

    @requires_grad.setter
    def requires_grad(self, v: bool) -> None:
        if self.node.op != INPUT:
            if self.node.requires_grad and not v:
                raise Error("requires_grad can be set on leaf tensors only", hint="use .detach() first")
            if self.node.requires_grad or not v:  # torch: True on a tracked value, False on an untracked one
                return
        if v and self.dtype not in FLOATS:
            raise Error(f"only floating-point tensors can require gradients, this one is {self.dtype}")
        if self.node.op != INPUT:  # a value without history (a factory's, a detached one) is torch's leaf
            self.node = _leafify(self, True).node
        self.node.requires_grad = bool(v)
        self.node.owner = weakref.ref(self)

    @property
    def is_leaf(self) -> bool:
        return self.node.op == INPUT or not self.node.requires_grad

    @property
    def grad(self) -> Tensor | None:
        tr = state.trace()
        if tr is not None:
            tr.read_grad(self)
        return self._grad

    @grad.setter
    def grad(self, g: Tensor | None) -> None:
        tr = state.trace()
        if tr is not None:
            tr.set_grad(self, g)
        self._grad = g

    @property
    def T(self) -> Tensor:
        return self.permute(list(range(self.ndim))[::-1])

    def __repr__(self) -> str:
        what = np.array2string(self.node.value, threshold=20) if self.node.value is not None else "lazy"
        rg = ", requires_grad" if self.requires_grad else ""
        return f"Tensor({what}, {self.dtype}{list(self.shape)}{rg})"

    __hash__ = object.__hash__

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    # reading values -------------------------------------------------------------------------
    def realize(self) -> Tensor:
        """Compute the value now (a no-op inside a trace, which runs as one program)."""
        if state.trace() is None:
            realize([self.node], self.runtime)
        return self

    def numpy(self) -> np.ndarray:
        """The value as a read-only numpy array (no copy)."""
        if state.trace() is not None:  # even a captured tensor's value: a replay would reuse it stale
            raise Error("a traced function cannot read a tensor's value",
                        hint="return the tensor from the function instead of calling .numpy()/.item() on it")
        self.realize()
        v = self.node.value.view()
        v.flags.writeable = False
        return v

    def item(self) -> Any:
        v = self.numpy()
        if v.size != 1:
            raise Error(f"item() needs a tensor of one element, this one has shape {list(self.shape)}")
        return v.reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def detach(self) -> Tensor:
        """The same value, cut from the gradient graph."""
        n = self.node
        if n.value is not None and state.trace() is None:
            return Tensor(Node(INPUT, (), {}, n.shape, n.dtype, value=n.value), runtime=self.runtime)
        # (inside caten.jit a fresh leaf would be a constant of the trace: every replay would read
        # the value the tensor had when traced, not the one it has when called)
        return Tensor(Node(DETACH, (n,), {}, n.shape, n.dtype), runtime=self.runtime)

    def assign(self, new: Any) -> Tensor:
        """Give this tensor a new value in place (an optimizer's update): graphs built before keep
        reading the old value; inside a trace the update is an output of the traced program."""
        new = new if isinstance(new, Tensor) else Tensor(new, dtype=self.dtype, runtime=self.runtime)
        if new.shape != self.shape or new.dtype != self.dtype:
            raise Error(f"assign: a {new.dtype}{list(new.shape)} value to a {self.dtype}{list(self.shape)} tensor")
        tr = state.trace()
        if tr is not None:
            tr.assign(self, new.node)
            return self
        realize([new.node], self.runtime)
        self.set_value(new.node.value)
        return self

    def set_value(self, value: np.ndarray) -> None:
        """Make this tensor a leaf holding `value` (kept as is: the caller gives up the array)."""
        rg = self.node.requires_grad and self.node.op == INPUT
        self.node = Node(INPUT, (), {}, self.node.shape, self.node.dtype, rg, value=value)
        self.node.owner = weakref.ref(self)

    # construction (the torch-spelled creation functions are in torch_create) ---------------------
    @staticmethod
    def uniform(shape: Sequence[int], low: float = 0.0, high: float = 1.0, dtype: Any = "f32",
                requires_grad: bool = False, runtime: str | None = None):
        t = Tensor.rand(list(shape), dtype=dtype, runtime=runtime) * (high - low) + low
        return _leafify(t, requires_grad)

    def cast(self, dtype: Any) -> Tensor:
        return apply("cast", [self, _dt(dtype)], {})


def _seed(seed: Any) -> Any:
    """A seed: the given one, or the next of the stream as an input (never a recompile)."""
    if seed is not None:
        return seed.node if isinstance(seed, Tensor) else int(seed)
    tr = state.trace()
    if tr is not None:
        return tr.seed()
    state.SEED[0] += 1
    return Tensor(np.array(state.SEED[0], dtype=np.int64)).node


def _leafify(t: Tensor, requires_grad: bool) -> Tensor:
    if not requires_grad:
        return t
    if state.trace() is not None:
        raise Error("a traced function cannot create a tensor that requires gradients",
                    hint="create parameters outside the function")
    return Tensor(t.numpy(), requires_grad=True, runtime=t.runtime)


def node_of(x: Any, runtime: str | None = None) -> Any:
    """A Tensor's node; a numpy array becomes a leaf; other values stay Python values."""
    if isinstance(x, Tensor):
        return x.node
    if isinstance(x, np.ndarray):
        return Tensor(x, runtime=runtime).node
    return x


def apply(op: str, args: Sequence[Any], kw: dict[str, Any], runtime: str | None = None) -> Any:
    """A call of the library composite (or principal op) `op`: Tensor(s) of the pending graph."""
    rts = {a.runtime for a in list(args) + list(kw.values()) if isinstance(a, Tensor)}
    if len(rts) > 1:
        raise Error(f"{op}: tensors of different runtimes ({', '.join(sorted(rts))})",
                    hint="create them with the same runtime= or move one with Tensor(t.numpy(), runtime=...)")
    rt = runtime or (rts.pop() if rts else state.RUNTIME[0])
    srcs = tuple(node_of(a, rt) for a in args)
    kwn = {k: node_of(v, rt) for k, v in kw.items()}
    res = infer(op, srcs, kwn)
    rg = state.grad_enabled() and any(isinstance(s, Node) and s.requires_grad for s in srcs + tuple(kwn.values()))
    if isinstance(res, list):
        multi = Node(op, srcs, kwn, None, None, rg, outs=res)
        return tuple(Tensor(Node(NTH, (multi, i), {}, s, d, rg and d in FLOATS), runtime=rt)
                     for i, (s, d) in enumerate(res))
    shape, dt = res
    return Tensor(Node(op, srcs, kwn, shape, dt, rg and dt in FLOATS), runtime=rt)


def assign_all(pairs: Sequence[tuple[Tensor, Tensor]]) -> None:
    """`t.assign(v)` for every pair, the new values computed by one program."""
    tr = state.trace()
    for t, v in pairs:
        if v.shape != t.shape or v.dtype != t.dtype:
            raise Error(f"assign: a {v.dtype}{list(v.shape)} value to a {t.dtype}{list(t.shape)} tensor")
    if tr is not None:
        for t, v in pairs:
            tr.assign(t, v.node)
        return
    if pairs:
        realize([v.node for _, v in pairs], pairs[0][0].runtime)
    for t, v in pairs:
        t.set_value(v.node.value)
