"""The collectives on caten.Tensor: calls of the language's ops (ops/collective.lisp), so they are
lazy, differentiable, and inside a caten.jit step they are part of its one program.

Unlike torch.distributed's in-place calls, each returns a new Tensor (as torch's functional
collectives do); `op` is "sum", "mean", "max", "min" or a torch.distributed.ReduceOp (SUM, AVG,
MAX, MIN).
"""

from __future__ import annotations

from typing import Any

from caten.errors import Error
from caten.ir import collective
from caten.tensor.tensor import Tensor, apply

_TORCH_OPS = {"SUM": "sum", "AVG": "mean", "MAX": "max", "MIN": "min"}


def _op(op: Any) -> str:
    name = op if isinstance(op, str) else getattr(op, "name", None) or str(op).rpartition(".")[2]
    name = _TORCH_OPS.get(str(name).upper(), str(name).lower())
    if name not in collective.REDUCE_OPS:
        raise Error(f"the reduction {op!r} is not a collective's :op", hint="sum, mean, max or min (ReduceOp.SUM, "
                    "AVG, MAX, MIN)")
    return name


def _tensor(t: Any) -> Tensor:
    return t if isinstance(t, Tensor) else Tensor(t)


def all_reduce(t: Any, op: Any = "sum") -> Tensor:
    """op of t over the group, on every rank."""
    return apply("all-reduce", [_tensor(t)], {"op": _op(op)})


def all_gather(t: Any, axis: int = 0) -> Tensor:
    """The ranks' t concatenated along `axis` in rank order."""
    return apply("all-gather", [_tensor(t)], {"axis": axis, "world": collective.world_size()})


def reduce_scatter(t: Any, axis: int = 0, op: Any = "sum") -> Tensor:
    """op of t over the group, cut along `axis` into world-size equal parts: this rank's part."""
    return apply("reduce-scatter", [_tensor(t)], {"axis": axis, "op": _op(op), "world": collective.world_size()})


def broadcast(t: Any, root: int = 0) -> Tensor:
    """Rank `root`'s t on every rank."""
    return apply("broadcast", [_tensor(t)], {"root": root})


def grad_all_reduce(t: Any, op: Any = "sum") -> Tensor:
    """t itself, whose gradient is all-reduced with op (sum or mean): data parallel's gradient
    averaging, and Megatron's `f` before a column-parallel layer."""
    name = _op(op)
    if name not in ("sum", "mean"):
        raise Error(f"grad_all_reduce sums or averages gradients; :op {name} is not a gradient's reduction")
    return apply("grad-all-reduce", [_tensor(t)], {"op": name})


def shard(t: Any, axis: int = 0) -> Tensor:
    """This rank's slice of t along `axis`: the r-th of world-size equal parts (differentiable)."""
    t = _tensor(t)
    w, r = collective.world_size(), collective.rank()
    if not t.shape:
        raise Error("shard of a rank-0 tensor: there is no axis to cut")
    ax = axis % len(t.shape) if -len(t.shape) <= axis < len(t.shape) else None
    if ax is None:
        raise Error(f"shard: axis {axis} is out of range for a tensor of rank {len(t.shape)}")
    n = t.shape[ax]
    if n % w:
        raise Error(f"shard: axis {ax} of size {n} does not split into {w} equal parts",
                    hint="pad the axis to a multiple of the world size")
    return t.narrow(ax, r * (n // w), n // w)
