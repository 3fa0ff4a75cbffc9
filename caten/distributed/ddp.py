"""`caten.nn.DistributedDataParallel`: data parallel training over the process group.

Every rank holds the whole model and a slice of the batch. The wrapper's forward runs the module
with each trainable parameter replaced by `grad-all-reduce` of it (itself, whose gradient is
all-reduced with :op mean), the parameters of one dtype as flat buckets of at most
`bucket_cap_mb` (torch's 25 MB), the last layers' first: so `loss.backward()` leaves every rank
the average of the ranks' gradients, one collective per bucket, each started in the background
while the next bucket's gradients are computed, and inside a `caten.jit` step they are part of
the step's one program. At construction rank 0's
parameters and buffers are copied to every rank (torch's DDP does the same).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from caten.distributed.tensor_ops import broadcast, grad_all_reduce
from caten.ir import collective
from caten.tensor import state
from caten.tensor.lazy import np_dtype
from caten.tensor.nn.module import Module
from caten.tensor.tensor import Tensor, assign_all
from caten.tensor.torch_shape import cat


def _nbytes(t: Tensor) -> int:
    return t.numel() * np_dtype(t.dtype).itemsize


def _buckets(tensors: list[Tensor], cap_bytes: float | None = None) -> list[list[Tensor]]:
    """The tensors grouped by dtype, in order (one flat bucket each), each group cut into buckets
    of at most `cap_bytes` (a tensor larger than that is a bucket of its own)."""
    by: dict[str, list[list[Tensor]]] = {}
    for t in tensors:
        groups = by.setdefault(t.dtype, [[]])
        size = sum(_nbytes(x) for x in groups[-1])
        if cap_bytes is not None and groups[-1] and size + _nbytes(t) > cap_bytes:
            groups.append([])
        groups[-1].append(t)
    return [b for groups in by.values() for b in groups]


def _flat(ts: list[Tensor]) -> Tensor:
    return cat([t.reshape([-1]) for t in ts]) if len(ts) > 1 else ts[0].reshape([-1])


def _unflat(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    out, at = [], 0
    for t in like:
        n = t.numel()
        out.append(flat.narrow(0, at, n).reshape(list(t.shape)))
        at += n
    return out


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel over caten's process group: parameters'
    gradients are averaged over the ranks in backward (see the module docstring)."""

    def __init__(self, module: Module, broadcast_buffers: bool = True, init_sync: bool = True,
                 bucket_cap_mb: float = 25.0):
        self.module = module
        self._sync = True
        self._cap = bucket_cap_mb * 2 ** 20
        if init_sync and collective.world_size() > 1:
            tensors = [t for _, t in module.named_tensors()]
            if not broadcast_buffers:
                tensors = [t for t in tensors if t.requires_grad]
            with state.no_grad():
                pairs = []
                for bucket in _buckets(tensors):
                    pairs += list(zip(bucket, _unflat(broadcast(_flat([t.detach() for t in bucket]), 0), bucket)))
                assign_all(pairs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forward passes in here leave their gradients local (accumulate, then sync on a later pass)."""
        was, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = was

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not (self._sync and params and state.grad_enabled() and collective.world_size() > 1):
            return self.module(*args, **kwargs)
        synced: dict[int, Tensor] = {}
        # the last layers' gradients are ready first: their buckets' all-reduces overlap the rest
        for bucket in _buckets(params[::-1], self._cap):
            for p, v in zip(bucket, _unflat(grad_all_reduce(_flat(bucket), "mean"), bucket)):
                synced[id(p)] = v
        undo = _swap(self.module, synced)
        try:
            return self.module(*args, **kwargs)
        finally:
            for owner, k, v in reversed(undo):
                setattr(owner, k, v)


def _swap(root: Module, new: dict[int, Tensor]) -> list[tuple[Module, str, Any]]:
    """Replace every attribute (or list/tuple item) of the modules under `root` that is a key of
    `new` by its value; the (module, attribute, old value) to put back."""
    undo: list[tuple[Module, str, Any]] = []
    for m in root.modules():
        for k, v in list(vars(m).items()):
            if isinstance(v, Tensor) and id(v) in new:
                undo.append((m, k, v))
                setattr(m, k, new[id(v)])
            elif isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) and id(x) in new for x in v):
                undo.append((m, k, v))
                setattr(m, k, type(v)(new.get(id(x), x) if isinstance(x, Tensor) else x for x in v))
    return undo
