"""The parts of the compile cache's keys that name the code and the target, not the program:
the runtime, its toolchain, the fingerprint of the compiler's code, the target (tuned for the
program where `caten tune` chose its GEMM shapes) and the options that change code. Both the
program-level cache (caten.pipeline.build) and the loop-IR cache (caten.pipeline.back) key with them.
"""

from __future__ import annotations

import sys

from caten.cache import default_cache, key_of, tuning
from caten.cache.fingerprint import fingerprint
from caten.ir.program import Program
from caten.plugin import Options, Runtime
from caten.target import Target
from caten.version import __version__


def tuned(runtime: Runtime, t: Target, program: Program, options: Options) -> Target:
    """`t` with the GEMM shapes `caten tune` chose for this program on this CPU, if it did."""
    if runtime.capabilities(t).device:
        return t
    return tuning.apply(t, program.key(), default_cache() if options.use_cache else None)


def code_fingerprint(runtime: Runtime, store=None) -> str:
    """A hash of the code that turns a Program into machine code for `runtime` -- caten.pipeline's
    build and back (and this module, which build imports), the runtime plugin's, and every module
    of caten they can import (the scheduler, the lowerer, the renderers, the passes: bounds,
    decompose, the kernels' dim arguments; the op table, ...) -- and of caten's version: editing
    any of them invalidates cached code. Files are read, not imported: a warm start never loads a
    renderer. `store`: the cache that remembers it across processes (caten.cache.fingerprint)."""
    plugin: str | None = type(runtime).__module__
    if plugin not in sys.modules:  # a plugin loaded from a file (`--plugin`): the file
        code = next((f.__code__ for f in vars(type(runtime)).values() if hasattr(f, "__code__")), None)
        plugin = code.co_filename if code is not None else None
    roots = ("caten.pipeline.build", "caten.pipeline.back") + ((plugin,) if plugin else ())
    return key_of(__version__, fingerprint(roots, store))


def code_parts(runtime: Runtime, t: Target, options: Options) -> list[str]:
    """Every part of the compile-cache key but the loop IR (the program-level cache's too)."""
    fp = code_fingerprint(runtime, default_cache() if options.use_cache else None)
    return ["caten-code/1", runtime.name, runtime.toolchain(t), fp, *map(str, t.key()),
            str(options.opt_level), str(bool(options.check_bounds)), str(bool(options.profile))]
