"""`caten.distributed.ZeroRedundancyOptimizer`: ZeRO stage 1, optimizer state sharded over the ranks.

The trainable parameters of one dtype are one flat vector, padded to a multiple of the world size
and cut into equal shards; rank r keeps the r-th shard as a leaf of its own, and the wrapped
optimizer (SGD, Adam, ...) holds state only for it. A step reduce-scatters the ranks' gradients
(mean: each rank gets its shard of the averaged gradient), updates this rank's shard, and
all-gathers the shards into every rank's parameters. So each rank stores 1/world of the momentum
or moments, and the weights equal plain data parallel's. Gradients already averaged (under
DistributedDataParallel) average to themselves: the two compose. Under `caten.jit` the whole step,
collectives included, is one program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from caten.distributed.ddp import _buckets, _flat, _unflat
from caten.distributed.tensor_ops import all_gather, reduce_scatter
from caten.errors import Error
from caten.ir import collective
from caten.tensor.lazy import np_dtype
from caten.tensor.optim.optimizer import clear_grads
from caten.tensor.state import enable_grad, no_grad
from caten.tensor.tensor import Tensor, assign_all
from caten.tensor.torch_shape import cat


class ZeroRedundancyOptimizer:
    """torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class, **defaults)."""

    def __init__(self, params: Iterable[Tensor], optimizer_class: Callable[..., Any], **defaults: Any):
        self.params_all = [p for p in params if p.requires_grad]
        if not self.params_all:
            raise Error("ZeroRedundancyOptimizer got no parameter that requires gradients")
        self.world, self.rank = collective.world_size(), collective.rank()
        self.buckets = _buckets(self.params_all)
        self.sizes: list[int] = []  # each bucket's shard length
        shards = []
        for b in self.buckets:
            n = sum(p.numel() for p in b)
            size = -(-n // self.world)
            self.sizes.append(size)
            flat = np.zeros(size * self.world, np_dtype(b[0].dtype))
            flat[:n] = np.concatenate([p.numpy().reshape(-1) for p in b])
            shards.append(Tensor(flat[self.rank * size:(self.rank + 1) * size], requires_grad=True,
                                 runtime=b[0].runtime))
        self.shards = shards
        self.optim = optimizer_class(shards, **defaults)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's groups (over the shards): where `lr` and schedulers act."""
        return self.optim.param_groups

    @property
    def state(self) -> dict:
        """This rank's optimizer state: for its shard only."""
        return self.optim.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        clear_grads(self.params_all, set_to_none)

    def _padded(self, ts: list[Tensor], size: int) -> Tensor:
        flat = _flat(ts)
        pad = size * self.world - flat.shape[0]
        return cat([flat, Tensor.zeros([pad], flat.dtype, runtime=flat.runtime)]) if pad else flat

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Reduce-scatter the gradients, update this rank's shard, all-gather the parameters."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            fresh = []
            for b, shard, size in zip(self.buckets, self.shards, self.sizes):
                # the shard restarts from the parameters (a load_state_dict between steps holds)
                # (no detach: under caten.jit a detached leaf would be read as its value at tracing)
                fresh.append((shard, self._padded(b, size).narrow(0, self.rank * size, size)))
                if all(p.grad is None for p in b):
                    shard.grad = None
                    continue
                grads = [p.grad if p.grad is not None else Tensor.zeros(list(p.shape), p.dtype, runtime=p.runtime)
                         for p in b]
                shard.grad = reduce_scatter(self._padded(grads, size), 0, "mean")
            assign_all(fresh)
        self.optim.step()
        with no_grad():
            pairs = []
            for b, shard in zip(self.buckets, self.shards):
                full = all_gather(shard, 0).narrow(0, 0, sum(p.numel() for p in b))
                pairs += list(zip(b, _unflat(full, b)))
            assign_all(pairs)
        return loss

    def state_dict(self) -> dict[str, Any]:
        """This rank's shard of the optimizer state (torch's consolidate_state_dict is not built)."""
        return self.optim.state_dict()
