"""caten's Python tensor library (LANGUAGE.md section 12): lazy Tensors compiled by caten.

`Tensor` builds the pending graph (`lazy`), printed as caten text (`emit`) and run through the
same pipeline as a `.lisp` file (`realize`); `autograd` differentiates it with the language's
`value-and-grad`; `trace` turns a Python function into one composite (`caten.trace`,
`caten.jit`); `methods` gives Tensor every library composite.
"""

from caten.tensor import methods as _methods
from caten.tensor.realize import stats
from caten.tensor.state import enable_grad, manual_seed, no_grad, set_default_runtime
from caten.tensor.tensor import Tensor
from caten.tensor.trace import jit, trace

_methods.install()

__all__ = ["Tensor", "jit", "trace", "no_grad", "enable_grad", "manual_seed", "set_default_runtime", "stats"]
