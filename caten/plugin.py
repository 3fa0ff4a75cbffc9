"""The runtime plugin interface and the registry that finds plugins.

A runtime turns a `Program` into an `Executable`. Built-ins live in `caten.runtimes`
(the repository's `runtimes/` folder); third parties register under the
`caten.runtimes` entry-point group or are loaded from a file with `--plugin`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from caten.errors import Error
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.program import Program, c_symbol
from caten.options import Options
from caten.target import Target


@dataclass(frozen=True)
class Capabilities:
    """What a runtime's code generator has: its vector width, how many threads its kernels may
    use, whether host EXTERN kernels may run between its compiled stages (caten.pipeline.extern),
    whether its kernels run on a device, which hard ops it renders natively."""
    vector_bits: int = 0
    threads: int = 1
    extern_split: bool = False
    device: bool = False  # kernels run on a device: the bounds record is a kernel argument
    direct_conv: bool = False  # the renderer has direct convolution tiles (caten.schedule.direct)
    # kernels run on a GPU's thread blocks: GEMMs are the renderer's block tiles, not packed CPU
    # plans, and values a reduction reads are recomputed rather than kept in scratch memory
    gpu: bool = False
    gemm_tile: tuple[int, ...] = ()  # a GPU's GEMM block tile: caten.render.cstyle.gemm.Tile's fields
    # the hard ops (caten.lower.decompose.DECOMPOSED) and roundings (("round", "f16"), ("round",
    # "bf16")) the renderer spells itself; None: all of them (the decompose pass is skipped); an
    # empty set: every one is written in primitives first
    native: frozenset | None = None


class Executable(Protocol):
    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        """Compute into preallocated contiguous `outputs`; dims of `env` are already checked."""


class Runtime:
    """Base class of runtime plugins; subclasses set `name` and override what they do."""

    name: str = "?"
    description: str = ""
    emits_schedule: bool = False  # True: `emit(..., "schedule")` gives its own `--emit schedule` text
    checks_bounds: bool = False  # True: honours Options.check_bounds (caten.lower.bounds)

    # True: caten.pipeline drives this runtime: it schedules and lowers, then calls `render`,
    # `compile_source` (through the cache) and `load`, or `artifacts` for `--emit`
    renders: bool = False
    artifact_kind: str = "code"  # the compile cache's file suffix for what `compile_source` returns

    def available(self) -> tuple[bool, str]:
        return True, ""

    def capabilities(self, t: Target) -> Capabilities:
        return Capabilities()

    def toolchain(self, t: Target) -> str:
        """Versions and flags of the tools that turn its source into code (part of the cache key)."""
        return ""

    def prepare(self, t: Target, options: Options) -> None:
        """Called as a compile starts (before scheduling): a runtime may start its tools so
        they are ready when the source is (llvm starts its compile workers)."""

    def render(self, lowered: Sequence[Any], t: Target, options: Options) -> str:
        """The source of one or several lowered programs (`caten.pipeline.Lowered`) for target `t`;
        `options.extra["aot"]`: for `--emit` (files for another machine, not this process)."""
        raise NotImplementedError

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        """The loadable artifact (object, library) of `source`; the pipeline caches it."""
        raise NotImplementedError

    def load(self, artifact: bytes, lowered: Any, t: Target, options: Options) -> Executable:
        """An executable of one lowered program from its artifact."""
        raise NotImplementedError

    def artifacts(self, source: str, kind: str, lowered: Sequence[Any], t: Target,
                  options: Options) -> dict[str, bytes | str]:
        """`--emit KIND` files ({suffix: content}) of `source` (kind is not schedule or loops)."""
        raise Error(f"runtime '{self.name}' cannot emit '{kind}'")

    def supports(self, op: Op, dtype: DType) -> bool:
        return True

    def compile(self, program: Program, options: Options | None = None) -> Executable:
        """The executable of `program`, built once per structure (and dim names, by which
        executables read the dims they are given). Plugins implement `build`, or override this."""
        options = options or Options()
        key = (program.key(), tuple(program.dims), tuple(program.derived), options.target or
               os.environ.get("CATEN_CPU", ""), options.opt_level, options.check_bounds)
        with _memo_lock:
            memo = self.__dict__.setdefault("_compiled", {})
            if key not in memo:
                memo[key] = self.build(program, options)
            return memo[key]

    def build(self, program: Program, options: Options) -> Executable:
        raise NotImplementedError(f"runtime '{self.name}' implements neither compile nor build")

    def emit(self, program: Program, kind: str, options: Options) -> dict[str, bytes | str]:
        """Artifacts for `--emit KIND`, as {suffix: content}."""
        raise Error(f"runtime '{self.name}' cannot emit '{kind}'")


def named_programs(program: Program | Sequence[Program]) -> tuple[list[Program], list[str]]:
    """One program or several, with their C symbols, for `emit`; two composites may not share one."""
    progs = [program] if isinstance(program, Program) else list(program)
    names = [c_symbol(p.name) for p in progs]
    if len(set(names)) != len(names):
        raise Error("two composites have the same C name: " + ", ".join(names))
    return progs, names


_memo_lock = threading.RLock()

BUILTIN = {"numpy": "caten.runtimes.numpy_rt", "llvm": "caten.runtimes.llvm_rt", "c": "caten.runtimes.c_rt",
           "opencl": "caten.runtimes.opencl_rt", "cuda": "caten.runtimes.cuda_rt"}
_loaded: dict[str, Runtime] = {}
_plugin_files: dict[str, str] = {}  # runtime name -> the file it was loaded from


def _from_module(modname: str) -> Runtime:
    mod = importlib.import_module(modname)
    return mod.RUNTIME


def load_plugin(path: str) -> Runtime:
    """Load a runtime from a single Python file that defines RUNTIME (a Runtime instance)."""
    spec = importlib.util.spec_from_file_location(f"caten_plugin_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise Error(f"cannot load plugin {path}")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except FileNotFoundError:
        raise Error(f"no such plugin file: {path}") from None
    except Exception as e:  # the plugin's own bug: point at its line, not at caten
        raise plugin_error(path, e) from None
    rt = getattr(mod, "RUNTIME", None)
    if not isinstance(rt, Runtime):
        raise Error(f"plugin {path} defines no RUNTIME (an instance of caten.plugin.Runtime)")
    _loaded[rt.name] = rt
    _plugin_files[rt.name] = os.path.abspath(path)
    return rt


def plugin_error(path: str, e: BaseException) -> Error:
    """A diagnostic at the plugin line that raised e while it was loading."""
    import traceback

    from caten.errors import Span

    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(path)]
    span = None
    if frames:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            text = None
        span = Span(path, frames[-1].lineno or 1, 1, text=text)
    return Error(f"plugin {path} raised {type(e).__name__} while loading: {e}", span,
                 "fix the plugin file (caten imports it as a module and reads RUNTIME from it)")


def plugin_files() -> list[str]:
    """The plugin files loaded so far (a worker process loads them again)."""
    return list(_plugin_files.values())


def names() -> list[str]:
    found = list(BUILTIN)
    from importlib import metadata  # (imported when plugins are listed: ~20 ms a start)

    try:
        eps = metadata.entry_points(group="caten.runtimes")
    except TypeError:  # Python < 3.10 API
        eps = metadata.entry_points().get("caten.runtimes", [])
    found += [ep.name for ep in eps if ep.name not in found]
    return found + [n for n in _loaded if n not in found]


def get(name: str) -> Runtime:
    if name in _loaded:
        return _loaded[name]
    if name in BUILTIN:
        rt = _from_module(BUILTIN[name])
    else:
        from importlib import metadata

        eps = [ep for ep in metadata.entry_points(group="caten.runtimes") if ep.name == name]
        if not eps:
            from caten.errors import closest

            guess = closest(name, names())
            raise Error(f"unknown runtime '{name}'", hint=f"did you mean '{guess}'?" if guess else
                        f"available: {', '.join(names())}")
        rt = eps[0].load()
        rt = rt() if isinstance(rt, type) else rt
    _loaded[name] = rt
    return rt


def threads() -> int:
    """How many threads a CPU runtime's parallel loops may use: CATEN_NUM_THREADS, else the CPUs this process
    may run on, at most 8 (each thread has its own packed panels in the arena)."""
    env = os.environ.get("CATEN_NUM_THREADS", "").strip()
    if env:
        try:
            return max(1, min(64, int(env)))
        except ValueError:
            raise Error(f"CATEN_NUM_THREADS must be a positive integer, not {env!r}") from None
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))
