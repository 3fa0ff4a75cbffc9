"""Optional dependencies: a missing one is a caten.Error naming the pip extra, not a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

from caten.errors import Error


def need(module: str, extra: str) -> ModuleType:
    """Import `module`, or fail with a diagnostic telling how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise Error(f"`{module}` is not installed", None, f"pip install 'caten[{extra}]'") from None
