"""caten: a gcc-like compiler for deep-learning kernels written in a small Lisp.

The heavy parts (numpy, lark, llvmlite) load on first use, so `caten --help` stays fast.
torch's top-level habits resolve here too: `caten.tensor(...)`, `caten.zeros(2, 3)`, `caten.cat`,
`caten.where`, `caten.float32`, `caten.sum(t, 1)` (every name of `caten.tensor.torchnames`).
"""

from caten.errors import Error
from caten.version import __version__

__all__ = ["Error", "load", "loads", "from_torch", "Tensor", "jit", "trace", "no_grad", "manual_seed",
           "while_loop", "fori_loop", "scan", "cond",
           "__version__"]
_TENSOR = {"Tensor", "jit", "trace", "no_grad", "enable_grad", "set_grad_enabled", "manual_seed", "while_loop",
           "fori_loop", "scan", "cond"}


def __getattr__(name: str):
    if name in ("load", "loads"):
        from caten.compile import llvmobj

        llvmobj.prefetch()  # (the default runtime's LLVM maps on a thread while caten.api imports)
        from caten import api

        return getattr(api, name)
    if name in ("nn", "optim", "functional", "tensor", "fft"):  # `caten.nn` without importing it first
        import importlib

        return importlib.import_module(f"caten.{name}")
    if name in _TENSOR:
        from caten import tensor

        return getattr(tensor, name)
    if name == "from_torch":
        from caten.frontends.torch.export import from_torch

        return from_torch
    import importlib.util

    # (not for a submodule: `from caten import rewrite` asks here before it imports caten.rewrite,
    # and a compile must not load the Tensor library)
    if not name.startswith("_") and importlib.util.find_spec(f"caten.{name}") is None:
        import caten.tensor  # noqa: F401  (registers torch's names)
        from caten.tensor import torchnames

        dt = torchnames.DTYPES.get(name) or torchnames.DTYPE_ALIASES.get(name)
        fn = dt or torchnames.function(name) or _library(name)  # a composite too: caten.exp(t)
        if fn is not None:
            return fn
    raise AttributeError(f"module 'caten' has no attribute {name!r}")


_LIBRARY: dict = {}


def _library(name: str):
    if not _LIBRARY:
        from caten.tensor.methods import functions

        _LIBRARY.update(functions())
    return _LIBRARY.get(name)
