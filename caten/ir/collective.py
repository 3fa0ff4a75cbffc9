"""The collectives' host side (LANGUAGE.md section 15): what an EXTERN "all-reduce", "all-gather",
"reduce-scatter", "broadcast" or "reduce" node does between compiled kernels.

The group is torch.distributed's default process group, whoever started it; without one (or
without torch) every collective is the identity over one rank, so a program with collectives
still runs alone. Buffers go to torch as tensors wrapping the numpy arrays (no copy); a dtype gloo
cannot carry is widened for a reduction (exactly: integer sums wrap as in one process) or moved
as bytes. A failure of the group (a rank died, a timeout) is a `caten.Error`, never a hang past
the group's timeout.

`check` is the kernels' shape and dtype rule, used where the source form is elaborated: the
output of all-gather and reduce-scatter depends on the world size, which is bound then and kept
in the node (`world`), so a program compiled for one group size refuses to run in another.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir import dims as D

REDUCE_OPS = ("sum", "mean", "max", "min")
_HINT = ("another process of the group died, timed out, or called a different collective; every process must run "
         "the same program (torch.distributed's default group, docs/distributed.md)")


def group() -> Any:
    """torch.distributed when its default process group is initialized, else None (torch is not
    imported here: no group can exist in a process that never imported it)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def world_size() -> int:
    d = group()
    return 1 if d is None else int(d.get_world_size())


def rank() -> int:
    d = group()
    return 0 if d is None else int(d.get_rank())


def cache_tag() -> tuple[str, ...]:
    """What a cache key of an elaborated program adds for the group it was elaborated in."""
    w = world_size()
    return () if w == 1 else (f"world={w}",)


# shape and dtype rules ------------------------------------------------------------------------
def check(name: str, dtype: Any, shape: tuple, params: dict[str, Any]) -> tuple[tuple, tuple]:
    """(output shape, the node's sorted params) of collective `name` on an operand of `dtype` and
    `shape`; a ValueError says what is wrong."""
    allowed = {"all-reduce": {"op"}, "all-gather": {"axis", "world"}, "reduce-scatter": {"axis", "op", "world"},
               "broadcast": {"root"}, "reduce": {"root"}}[name]
    extra = set(params) - allowed
    if extra:
        raise ValueError(f"{name} takes no :{sorted(extra)[0]} (it takes {' '.join(':' + k for k in sorted(allowed))})")
    out = dict(params)
    if "op" in allowed:
        op = out.setdefault("op", "sum")
        if op not in REDUCE_OPS:
            raise ValueError(f"{name} :op is sum, mean, max or min, not {op}")
        if op in ("sum", "mean") and dtype.is_bool:
            raise ValueError(f"{name} :op {op} needs a numeric operand, got bool (max/min are any/all)")
        if op == "mean" and not dtype.is_float:
            raise ValueError(f"{name} :op mean needs a float operand, got {dtype.name}; cast first")
    if "root" in allowed:
        root = out.setdefault("root", 0)
        if not isinstance(root, int) or not 0 <= root < world_size():
            raise ValueError(f"{name} :root {root} is not a rank of this group of {world_size()}")
    if "axis" not in allowed:
        return tuple(shape), tuple(sorted(out.items()))
    if not shape:
        raise ValueError(f"{name} of a rank-0 tensor: there is no axis to gather or split")
    axis = out.setdefault("axis", 0)
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        raise ValueError(f"{name} :axis {axis} is out of range for rank {len(shape)}")
    axis = out["axis"] = axis % len(shape)
    w = out.get("world")
    if w is None:
        w = out["world"] = world_size()
    if not isinstance(w, int) or w < 1:
        raise ValueError(f"{name} :world {w} is not a number of processes")
    dim = shape[axis]
    if name == "all-gather":
        new = D.mul(dim, w)
    else:
        if D.divides(dim, w) is False:
            raise ValueError(f"reduce-scatter along axis {axis} of size {dim}: not divisible by the world size {w}")
        new = D.exact_div(dim, w)
        if new is None:  # symbolic: checked again at run time
            new = D.floordiv(dim, w)
    return tuple(shape[:axis]) + (new,) + tuple(shape[axis + 1:]), tuple(sorted(out.items()))


# host functions ----------------------------------------------------------------------------------
def _comm(what: str, fn: Callable[[], Any]) -> Any:
    """fn() with torch.distributed's failures as caten errors."""
    try:
        return fn()
    except Error:
        raise
    except Exception as e:  # RuntimeError, DistBackendError, DistNetworkError, ...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Error(f"{what} failed on rank {rank()}: {first[:300]}", hint=_HINT) from e


def _expect(world: int | None) -> int:
    """The group's size, checked against the one a program was compiled for."""
    w = world_size()
    if world is not None and world != w:
        raise Error(f"this program was compiled for a group of {world} processes and runs in one of {w}",
                    hint="compile it in the group that runs it (the cache keeps one program per world size)")
    return w


def _tensor(a: np.ndarray) -> Any:
    """A torch tensor over a's memory (a C-contiguous array)."""
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_NATIVE = {"uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"}
_SIGN = np.uint64(1 << 63)


def _to_wire(a: np.ndarray, op: str) -> np.ndarray:
    """A fresh contiguous array gloo can reduce with `op` exactly as a's dtype would."""
    n = a.dtype.name
    if n == "bool":
        return a.astype(np.uint8)
    if n in ("int16", "uint16"):
        return a.astype(np.int32)
    if n == "uint32":
        return a.astype(np.int64)
    if n == "uint64":  # sums wrap alike in two's complement; flipping the top bit keeps the order
        return (a.copy() if op == "sum" else a ^ _SIGN).view(np.int64)
    return np.array(a, copy=True, order="C")


def _from_wire(w: np.ndarray, like: np.dtype, op: str) -> np.ndarray:
    if like.name == "uint64":
        u = w.view(np.uint64)
        return u if op == "sum" else u ^ _SIGN
    if w.dtype != like:
        return w.astype(like)  # integers wrap, as a sum in one process does
    return w


def _reduce_op(dist: Any, op: str) -> Any:
    return {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN}[op]


def _scatter(dist: Any) -> Callable[..., Any]:
    """reduce_scatter of one flat tensor (torch's newer name, else the older)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _nan_mask(dist: Any, a: np.ndarray, what: str, split: tuple[int, int] | None = None) -> np.ndarray:
    """Where any rank's float value is nan (max and min propagate nan, as the language's do)."""
    m = np.isnan(a).astype(np.uint8).reshape(-1)
    if split is None:
        _comm(what, lambda: dist.all_reduce(_tensor(m), op=dist.ReduceOp.MAX))
        return m.astype(bool)
    out = np.empty(m.size // split[0], np.uint8)
    _comm(what, lambda: _scatter(dist)(_tensor(out), _tensor(m), op=dist.ReduceOp.MAX))
    return out.astype(bool)


def all_reduce(x: np.ndarray, op: str = "sum", scratch: bool = False) -> np.ndarray:
    """op of x over the group, on every rank (mean: the sum divided by the world size)."""
    return start_all_reduce(x, op, scratch)()


def start_all_reduce(x: np.ndarray, op: str = "sum", scratch: bool = False) -> Callable[[], np.ndarray]:
    """Start all_reduce(x) in the background (torch's async_op): the function that waits for it
    and gives the result. Compiled kernels run meanwhile (overlap)."""
    dist = group()
    if dist is None or x.size == 0:
        out0 = np.array(x, copy=True)
        return lambda: out0
    mask = _nan_mask(dist, x, "all-reduce") if op in ("max", "min") and x.dtype.kind == "f" else None
    in_place = scratch and x.dtype.name in _NATIVE and x.flags.c_contiguous  # the caller's scratch operand
    wire = x if in_place else _to_wire(x, op)
    what = f"all-reduce :op {op}"
    work = _comm(what, lambda: dist.all_reduce(_tensor(wire), op=_reduce_op(dist, op), async_op=True))

    def finish() -> np.ndarray:
        _comm(what, work.wait)
        out = _from_wire(wire, x.dtype, op)
        if op == "mean":
            out = (out / np.asarray(dist.get_world_size(), out.dtype)).astype(x.dtype)
        if mask is not None:
            out = np.where(mask.reshape(out.shape), np.asarray(np.nan, out.dtype), out)
        return out
    return finish


def _bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def all_gather(x: np.ndarray, axis: int = 0, world: int | None = None, scratch: bool = False) -> np.ndarray:
    """The ranks' x concatenated along `axis`, in rank order."""
    w = _expect(world)
    dist = group()
    if dist is None:
        return np.array(x, copy=True)
    if x.size == 0:
        return np.concatenate([x] * w, axis=axis)
    b = _bytes(x)
    out = np.empty(b.size * w, np.uint8)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    _comm("all-gather", lambda: gather(_tensor(out), _tensor(b)))
    parts = out.view(x.dtype).reshape((w,) + x.shape)
    return parts.reshape((w * x.shape[0],) + x.shape[1:]) if axis == 0 else np.concatenate(list(parts), axis=axis)


def reduce_scatter(x: np.ndarray, axis: int = 0, op: str = "sum", world: int | None = None,
                   scratch: bool = False) -> np.ndarray:
    """op of x over the group, cut along `axis` into world-size equal parts: this rank's part."""
    w = _expect(world)
    if x.shape[axis] % w:
        raise Error(f"reduce-scatter along axis {axis} of size {x.shape[axis]}: not divisible by the world size {w}",
                    hint="pad the axis to a multiple of the world size")
    dist = group()
    if dist is None:
        return np.array(x, copy=True)
    part = x.shape[:axis] + (x.shape[axis] // w,) + x.shape[axis + 1:]
    if x.size == 0:
        return np.empty(part, x.dtype)
    stacked = np.stack(np.split(x, w, axis=axis))  # (w, *part), contiguous: rank r's part at r
    wire = _to_wire(stacked, op).reshape(-1)
    mask = _nan_mask(dist, stacked, "reduce-scatter", (w, 0)) if op in ("max", "min") and x.dtype.kind == "f" \
        else None
    out = np.empty(wire.size // w, wire.dtype)
    _comm(f"reduce-scatter :op {op}",
          lambda: _scatter(dist)(_tensor(out), _tensor(wire), op=_reduce_op(dist, op)))
    res = _from_wire(out, x.dtype, op).reshape(part)
    if op == "mean":
        res = (res / np.asarray(w, res.dtype)).astype(x.dtype)
    if mask is not None:
        res = np.where(mask.reshape(part), np.asarray(np.nan, res.dtype), res)
    return res


def broadcast(x: np.ndarray, root: int = 0, scratch: bool = False) -> np.ndarray:
    """Rank `root`'s x on every rank."""
    dist = group()
    if dist is None or x.size == 0:
        return np.array(x, copy=True)
    out = x if scratch and x.flags.c_contiguous else np.array(x, copy=True, order="C")
    b = out.reshape(-1).view(np.uint8)
    _comm(f"broadcast :root {root}", lambda: dist.broadcast(_tensor(b), src=root))
    return out


def reduce(x: np.ndarray, root: int = 0, scratch: bool = False) -> np.ndarray:
    """The sum of x over the group on rank `root`, zeros on the others (broadcast's gradient)."""
    dist = group()
    if dist is None or x.size == 0:
        return np.array(x, copy=True)
    w = _to_wire(x, "sum")
    _comm(f"reduce :root {root}", lambda: dist.reduce(_tensor(w), dst=root, op=dist.ReduceOp.SUM))
    out = _from_wire(w, x.dtype, "sum")
    return out if dist.get_rank() == root else np.zeros_like(out)


# the kernels that can run in the background: name -> start(*operands, **params) -> wait()
STARTS: dict[str, Callable[..., Callable[[], np.ndarray]]] = {"all-reduce": start_all_reduce}

KERNELS: dict[str, Callable[..., np.ndarray]] = {
    "all-reduce": all_reduce, "all-gather": all_gather, "reduce-scatter": reduce_scatter, "broadcast": broadcast,
    "reduce": reduce,
}
