"""caten: a gcc-like compiler for deep-learning kernels written in a small Lisp.

The heavy parts (numpy, lark, llvmlite) load on first use, so `caten --help` stays fast.
"""

from caten.errors import Error
from caten.version import __version__

__all__ = ["Error", "load", "loads", "from_torch", "Tensor", "jit", "trace", "no_grad", "manual_seed",
           "__version__"]
_TENSOR = {"Tensor", "jit", "trace", "no_grad", "enable_grad", "manual_seed"}


def __getattr__(name: str):
    if name in ("load", "loads"):
        from caten import api

        return getattr(api, name)
    if name in ("nn", "optim", "functional", "tensor"):  # `caten.nn` without importing it first
        import importlib

        return importlib.import_module(f"caten.{name}")
    if name in _TENSOR:
        from caten import tensor

        return getattr(tensor, name)
    if name == "from_torch":
        from caten.frontends.torch_export import from_torch

        return from_torch
    raise AttributeError(f"module 'caten' has no attribute {name!r}")
