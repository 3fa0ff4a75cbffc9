"""`caten.optim` (LANGUAGE.md section 12): torch.optim's optimizers and learning-rate schedulers
over caten Tensors. The public face of `caten.tensor.optim`; `caten.optim.lr_scheduler` imports
as torch's does (`from caten.optim.lr_scheduler import StepLR`)."""

import sys

from caten.tensor.optim import *  # noqa: F403 (the face re-exports the package's __all__)
from caten.tensor.optim import __all__, lr_scheduler  # noqa: F401

sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler
