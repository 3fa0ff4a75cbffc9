"""caten's Python tensor library (LANGUAGE.md section 12): lazy Tensors compiled by caten.

`Tensor` builds the pending graph (`lazy`), printed as caten text (`emit`) and run through the
same pipeline as a `.lisp` file (`realize`); `autograd` differentiates it with the language's
`value-and-grad`; `trace` turns a Python function into one composite (`caten.trace`,
`caten.jit`); `methods` gives Tensor every library composite, and `torchnames` (filled by the
`torch_*` modules) torch's spellings on top of them. The module itself is callable as torch's
`torch.tensor`: `caten.tensor([1.0, 2.0])`.
"""

import sys
import types

from caten.tensor import methods as _methods
from caten.tensor import printing as _printing
from caten.tensor import (  # noqa: F401 (register)
    torch_create,
    torch_elementwise,
    torch_fft,
    torch_layout,
    torch_linalg,
    torch_math,
    torch_misc,
    torch_reduce,
    torch_scan,
    torch_scatter,
    torch_shape,
    torch_sort,
)
from caten.tensor import torch_inplace as _inplace
from caten.tensor import torchnames as _torchnames
from caten.tensor.control import cond, fori_loop, scan, while_loop
from caten.tensor.realize import stats
from caten.tensor.state import enable_grad, manual_seed, no_grad, set_default_runtime, set_grad_enabled
from caten.tensor.tensor import Tensor
from caten.tensor.trace import jit, trace

_methods.install()
_torchnames.install(Tensor)
_printing.install()
_inplace.install()

__all__ = ["Tensor", "jit", "trace", "no_grad", "enable_grad", "set_grad_enabled", "manual_seed",
           "set_default_runtime", "stats", "while_loop", "fori_loop", "scan", "cond"]


class _Module(types.ModuleType):
    """`caten.tensor(data, dtype=None, requires_grad=False)` is torch.tensor; attributes as ever."""

    def __call__(self, *args, **kwargs):
        return torch_create.tensor(*args, **kwargs)


sys.modules[__name__].__class__ = _Module
