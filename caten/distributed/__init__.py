"""`caten.distributed` (LANGUAGE.md section 15, docs/distributed.md): several processes, one
program each, over torch.distributed's default process group (gloo on CPU).

`init()` starts the group from torchrun's environment; `rank()` and `world_size()` read it. The
collectives on caten.Tensor are the language's ops (lazy and differentiable): `all_reduce`,
`all_gather`, `reduce_scatter`, `broadcast`; `grad_all_reduce` is the identity whose gradient is
all-reduced; `shard` gives this rank's slice. `DistributedDataParallel` (also `caten.nn`'s)
averages gradients over the ranks; `ZeroRedundancyOptimizer` shards optimizer state (ZeRO-1);
`ColumnParallelLinear` and `RowParallelLinear` split a linear layer over the ranks (Megatron).
Without a group each collective is the identity.
"""

from caten.distributed.ddp import DistributedDataParallel
from caten.distributed.group import free_port, init, is_initialized, rank, shutdown, world_size
from caten.distributed.tensor_ops import all_gather, all_reduce, broadcast, grad_all_reduce, reduce_scatter, shard
from caten.distributed.tensor_parallel import ColumnParallelLinear, ParallelSelfAttention, RowParallelLinear
from caten.distributed.zero import ZeroRedundancyOptimizer

__all__ = ["init", "shutdown", "is_initialized", "rank", "world_size", "free_port", "all_reduce", "all_gather",
           "reduce_scatter", "broadcast", "grad_all_reduce", "shard", "DistributedDataParallel",
           "ZeroRedundancyOptimizer", "ColumnParallelLinear", "RowParallelLinear",
           "ParallelSelfAttention"]
