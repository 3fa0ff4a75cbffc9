"""The benchmarks' optional packages: a missing one ends a script at its start with one line
naming the install (caten.frontends.deps's hint), not with a traceback after minutes of work."""

from __future__ import annotations

import sys
from types import ModuleType


def need_or_exit(script: str, module: str, extra: str, why: str) -> ModuleType:
    """Import `module` (of the pip extra `extra`), or exit with status 1 and one line saying
    what in `script` needs it (`why`) and how to install it."""
    import caten
    from caten.frontends.deps import need

    try:
        return need(module, extra)
    except caten.Error as e:
        sys.exit(f"{script}: {why} needs {module}, which is not installed here: {e.hint}")
