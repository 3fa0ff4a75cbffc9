"""`compile`: a program's executable from this process's memo, from the program-level cache
(caten.pipeline.restore) or, on a miss of both, from the back end (caten.pipeline.back).

It lives apart from the back end so that a warm load never imports the scheduler, the lowerer
or a renderer: only a miss loads `back`. The code fingerprint still covers all of them (this
module imports `back` inside a function, which the import closure counts).
"""

from __future__ import annotations

import contextlib
import sys
import threading

from caten import target
from caten.cache import default_cache
from caten.ir.program import Program
from caten.pipeline import restore
from caten.pipeline.codekey import code_parts, tuned
from caten.pipeline.passes import Timings, gc_paused
from caten.plugin import Options, Runtime
from caten.target import Target

_memo_lock = threading.RLock()


def compile(runtime: Runtime, program: Program, options: Options | None = None, timings: Timings | None = None):
    """The executable of `program` on `runtime`, built once per structure in this process and
    loaded from the cache when another process built the same code. `timings`: the front passes'
    times, which `-v` prints with the back's."""
    options = options or Options()
    if not runtime.renders:
        return runtime.compile(program, options)
    tm = timings or Timings()
    with _memo_lock:
        # the warm path (LLVM's bindings imported, the cache's entries decoded and linked) with
        # the garbage collector paused (caten.pipeline.passes.gc_paused); a miss builds after it
        with gc_paused():
            t, key, memo, back_key, exe = _warm(runtime, program, options, tm)
        if exe is not None:
            return exe
        with verify_checking(options.debug):
            exe, keep = _built(runtime, program, t, options, tm, back_key)
        if keep:  # (a program cut at its host kernels is cut afresh each time)
            memo[key] = exe
        return exe


def verify_checking(on: bool) -> contextlib.AbstractContextManager:
    """caten.ir.verify.checking(on), imported only when `on` (checking(False) changes nothing):
    a warm load does without the verifier's module."""
    if not on:
        return contextlib.nullcontext()
    from caten.ir.verify import checking

    return checking(True)


def _warm(runtime: Runtime, program: Program, options: Options, tm: Timings):
    """(the target, the memo's key, the memo, the program-level cache's key (None: not asked), the
    executable from the memo or that cache, else None)."""
    t = target.resolve(options.target)
    target.check_runnable(t)
    t = tuned(runtime, t, program, options)
    key = (program.key(), tuple(program.dims), tuple(program.derived), t.key(), runtime.capabilities(t),
           options.opt_level, options.check_bounds, options.profile)
    memo = runtime.__dict__.setdefault("_pipeline_memo", {})
    if key in memo:
        return t, key, memo, None, memo[key]
    exe = back_key = None
    store = default_cache() if options.use_cache else None
    if store and getattr(runtime, "restores", False) and not options.profile:
        back_key = restore.back_key(code_parts(runtime, t, options), program, runtime.capabilities(t))
        with verify_checking(options.debug):
            exe = _restored(runtime, store, back_key, program, t, options, tm)
        if exe is not None:
            memo[key] = exe
    return t, key, memo, back_key, exe


def _built(runtime: Runtime, program: Program, t: Target, options: Options, tm: Timings, back_key: str | None):
    """(the executable, whether `compile` keeps it): cut at its host kernels (not kept), else built
    by the back end (which fills the program-level cache). The cache was asked first (`_warm`):
    a program it holds calls no host kernel (such a program is never built whole), so a warm
    load skips the scan of its graph for them. `back_key`: that cache's key, filled here."""
    if runtime.capabilities(t).extern_split:
        from caten.pipeline.extern import ExternSplit, has_extern

        if has_extern(program):
            return ExternSplit(program, lambda p: compile(runtime, p, options)), False
    from caten.pipeline import back

    return back.build(runtime, program, t, options, tm, back_key), True


def _restored(runtime: Runtime, store, back_key: str, program: Program, t: Target, options: Options, tm: Timings):
    """The executable from the program-level cache and the code cache, or None on a miss of either."""
    with tm.stage("load"):
        blob = store.get(back_key, restore.KIND)
        entry = restore.loads(blob, program) if blob is not None else None
        art = store.get(entry[0], runtime.artifact_kind) if entry is not None else None
        if art is None:
            return None
        exe = runtime.load(art, entry[1], t, options)
    exe.in_place = entry[1].in_place  # (caten.run.module passes those outputs their inputs' arrays)
    if options.verbose:
        print(tm.line(f"{runtime.name} {program.name} (cached program)"), file=sys.stderr)
    return exe
