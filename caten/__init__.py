"""caten: a gcc-like compiler for deep-learning kernels written in a small Lisp.

The heavy parts (numpy, lark, llvmlite) load on first use, so `caten --help` stays fast.
"""

from caten.errors import Error
from caten.version import __version__

__all__ = ["Error", "load", "loads", "from_torch", "__version__"]


def __getattr__(name: str):
    if name in ("load", "loads"):
        from caten import api

        return getattr(api, name)
    if name == "from_torch":
        from caten.frontends.torch_export import from_torch

        return from_torch
    raise AttributeError(f"module 'caten' has no attribute {name!r}")
