"""`caten.nn` (LANGUAGE.md section 12): torch.nn's layers, losses and containers over caten
Tensors. The public face of `caten.tensor.nn`, where each part lives in a module by job;
`caten.nn.functional`, `caten.nn.init` and `caten.nn.utils` import as torch's do (`import caten.nn.functional as F`);
`DistributedDataParallel` (also as `caten.nn.parallel.DistributedDataParallel`) is caten.distributed's."""

import sys
import types

from caten.distributed.ddp import DistributedDataParallel
from caten.tensor.nn import *  # noqa: F403 (the face re-exports the package's __all__)
from caten.tensor.nn import __all__ as _nn_all
from caten.tensor.nn import functional, init, utils  # noqa: F401

__all__ = _nn_all + ["DistributedDataParallel"]

sys.modules[__name__ + ".functional"] = functional
sys.modules[__name__ + ".init"] = init
sys.modules[__name__ + ".utils"] = utils
# torch's spelling, torch.nn.parallel.DistributedDataParallel
parallel = types.ModuleType(__name__ + ".parallel", "torch.nn.parallel's DistributedDataParallel (caten.distributed)")
parallel.DistributedDataParallel = DistributedDataParallel  # type: ignore[attr-defined]
sys.modules[parallel.__name__] = parallel
