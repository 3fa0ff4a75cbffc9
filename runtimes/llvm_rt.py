"""`-r llvm`: fused loop kernels compiled by LLVM for the host CPU (JIT in-process, or AOT to
an object / shared library with a C header).

caten.pipeline schedules and lowers; this plugin renders the loop IR as LLVM IR text, runs O2
with both vectorizers (new pass manager; docs/runtimes.md says why O2), emits object code and
links it into one shared MCJIT engine. Each program exports `NAME__impl(in..., out..., arena, dims...)` (the JIT
calls it with a per-thread cached arena) and the C ABI entry of LANGUAGE.md
section 8, `int32_t NAME(const T *in..., T *out..., int64_t dim...)`, which keeps its arena
from one call to the next (a concurrent call mallocs its own).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Sequence

import numpy as np

from caten import target
from caten.compile import llvmobj
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.ir.ops import TABLE, Op
from caten.plugin import Capabilities, Options, Runtime, threads
from caten.run.arena import Arenas
from caten.target import Target

_lock = threading.RLock()
_state: dict = {}
BUNDLE = b"caten-objects 1\n"  # compile_source's artifact: the units' objects, each with its symbol


def _llvm():
    return llvmobj.llvm()


def target_machine(opt: int = 3, t: Target | None = None, jit: bool = False):
    """An LLVM target machine for `t` (default: the host, which the JIT engine always uses);
    `jit`: for objects the in-process JIT links (llvmobj.JIT_CODE_MODEL)."""
    t = t or target.host()
    return llvmobj.target_machine(t.cpu, t.features, opt, jit)


def jit_object(ir_text: str, opt: int = 3, t: Target | None = None) -> bytes:
    """Object code for the in-process JIT (large code model: see llvmobj.JIT_CODE_MODEL)."""
    t = t or target.host()
    return llvmobj.compile_object(ir_text, t.cpu, t.features, opt)


def _engine():
    if "engine" not in _state:
        llvm = _llvm()
        t = target.host()
        tm = llvmobj.target_machine(t.cpu, t.features, 3, jit=True, own=True)  # the engine's own
        _state["tm"] = tm
        _state["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    return _state["engine"]


def optimize(ir_text: str, opt: int = 3, t: Target | None = None):
    t = t or target.host()
    return llvmobj.optimize(ir_text, t.cpu, t.features, opt)


def bundle(objects: list[tuple[str, bytes]]) -> bytes:
    """One artifact of several objects, each with the symbol that tells whether it is linked
    (none: a whole program's module, linked with the program)."""
    head = json.dumps([[name, len(o)] for name, o in objects]).encode()
    return BUNDLE + head + b"\n" + b"".join(o for _, o in objects)


def unbundle(art: bytes) -> list[tuple[str, bytes]]:
    if not art.startswith(BUNDLE):
        raise Error("llvm runtime: not an object bundle (a cache entry of another caten version?)")
    head, _, rest = art[len(BUNDLE):].partition(b"\n")
    out, at = [], 0
    for name, n in json.loads(head):
        out.append((name, rest[at:at + n]))
        at += n
    return out


class LLVMExecutable:
    """One lowered program's JIT-compiled entry, called with a per-thread cached arena."""

    def __init__(self, lowered, fn, profile: bool = False) -> None:
        self.program, self.sched, self.bounds, self.fn = lowered.program, lowered.sched, lowered.bounds, fn
        self.arena_size = lowered.arena_size
        self.arenas = Arenas()
        self.kernel_names = lowered.kernel_names
        self._prof = f"{lowered.name}__prof" if profile else None

    def kernel_cycles(self, reset: bool = True) -> list[int]:
        """Cycles each kernel took over the calls since the last reset (compiled with
        Options.profile; `caten profile` reads this)."""
        if self._prof is None:
            raise Error("this program was not compiled with Options(profile=True)")
        n = len(self.kernel_names)
        arr = (ctypes.c_int64 * max(1, n)).from_address(_engine().get_global_value_address(self._prof))
        out = list(arr)[:n]
        if reset:
            ctypes.memset(ctypes.addressof(arr), 0, ctypes.sizeof(arr))
        return out

    def stage_cycles(self, reset: bool = True) -> dict[str, list[tuple[int, int]]]:
        """Per kernel, (schedule stage number or -1, cycles) of each of its outlined stages over
        the calls since the last reset, summed over the threads that ran it
        (caten.render.llvm.kernel). Kernels with no outlined stage are absent."""
        if self._prof is None:
            raise Error("this program was not compiled with Options(profile=True)")
        eng, out = _engine(), {}
        for k in self.kernel_names:
            at = eng.get_global_value_address(f"{k}__sprof")
            if not at:
                continue
            n = ctypes.c_int64.from_address(at).value  # then n counters, then n stage numbers
            arr = (ctypes.c_int64 * (2 * n)).from_address(at + 8)
            out[k] = list(zip(arr[n:], arr[:n]))
            if reset:
                ctypes.memset(at + 8, 0, 8 * n)
        return out

    def cycles(self) -> int:
        """The cycle counter now (to calibrate it against the wall clock)."""
        addr = _engine().get_function_address(self._prof[:-len("__prof")] + "__cycles")
        return ctypes.CFUNCTYPE(ctypes.c_int64)(addr)()

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        env = {**self.program.defines, **env}
        size = self.arena_size
        size = size if isinstance(size, int) else D.evaluate(size, env)
        ins = [np.ascontiguousarray(a) for a in inputs]
        for o in outputs:
            if not o.flags.c_contiguous:
                raise Error("llvm runtime: outputs must be C-contiguous")
        ptrs = [a.ctypes.data for a in ins] + [o.ctypes.data for o in outputs]
        dims = [int(env[d]) for d in self.program.dims]
        self.fn(*ptrs, self.arenas.pointer(size), *dims)
        if self.bounds is not None:
            from caten.ir.oob import raise_if_failed

            raise_if_failed(_engine().get_global_value_address(self.bounds.slot), self.bounds, self.program.name)


class LLVMRuntime(Runtime):
    name = "llvm"
    renders = True
    artifact_kind = "llvmobj"
    checks_bounds = True
    restores = True  # `load` reads only caten.pipeline.restore.Restored's fields: warm loads skip lowering
    description = "fused loop kernels compiled by LLVM for the host CPU (JIT, or AOT .so/.o/.ll)"

    def available(self) -> tuple[bool, str]:
        try:
            _llvm()
            return True, ""
        except Exception as e:  # pragma: no cover
            return False, f"llvmlite unavailable: {e}"

    def supports(self, op: Op, dtype: DType) -> bool:
        return dtype in TABLE[op].dtypes or op in (Op.CAST, Op.BUFFER, Op.CONST, Op.VIEW, Op.COPY, Op.REDUCE,
                                                   Op.WHERE)

    def capabilities(self, t: Target) -> Capabilities:
        return Capabilities(vector_bits=t.vector_bits, threads=threads(), extern_split=True, direct_conv=True,
                            # fptrunc to half: F16C, one instruction; LLVM's i4 type wraps i4/u4 itself
                            native=frozenset({("round", "f16"), ("wrap", "i4"), ("wrap", "u4")}))

    def toolchain(self, t: Target) -> str:
        return f"{_llvm_version()} {BUNDLE.decode().strip()}"

    def prepare(self, t: Target, options: Options) -> None:
        # (jobs, units, subprocess imported where used: a warm load, which links cached objects, needs none)
        from caten.compile import jobs

        jobs.warm_up(threads())  # the compile workers start while the program is scheduled

    def render(self, lowered, t: Target, options: Options) -> str:
        """One LLVM module (unoptimized IR text): every program's kernels and its two entries."""
        from caten.render.llvm import ModuleGen, entry_functions

        mod = ModuleGen(_llvm().get_process_triple(), str(target_machine(3, t).target_data), t.cpu, t.features,
                        t.vector_bits)
        mod.profile = options.profile
        for lw in lowered:
            for k in lw.all_kernels():
                mod.kernel(k, lw.defines)
            entry_functions(mod, lw.plan, lw.defines, options.profile)
        return mod.text()

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        """The module's objects: split into units (caten.render.llvm.units), each compiled once
        per content (the unit cache) and in parallel; or one object where it does not split."""
        from caten.compile import jobs
        from caten.render.llvm import units

        opt = _opt(options)
        parts = units.split(source)
        if parts is None:
            return bundle([("", jit_object(source, opt, t))])
        from caten.cache.store import default_cache

        store = default_cache() if options.use_cache else None
        objs = jobs.compile_units(parts, t.cpu, t.features, opt, store, _llvm_version(), threads())
        return bundle([(u.name, o) for u, o in zip(parts, objs)])

    def load(self, artifact: bytes, lowered, t: Target, options: Options) -> LLVMExecutable:
        """Link the objects into the process's one JIT engine, each once per symbol (a program's
        name is its code's cache key and a unit's its content's: equal names mean equal code)."""
        name = lowered.name
        with _lock:
            addr = _state.setdefault("loaded", {}).get(name)
            if addr is None:
                eng, linked = _engine(), _state.setdefault("symbols", set())
                for sym, obj in unbundle(artifact):
                    if not sym or sym not in linked:  # else a unit another program linked: equal code
                        eng.add_object_file(_llvm().ObjectFileRef.from_data(obj))
                        linked.add(sym)
                eng.finalize_object()
                addr = _state["loaded"][name] = eng.get_function_address(f"{name}__impl")
        prog = lowered.program
        nptr = len(prog.inputs) + len(prog.outputs) + 1
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nptr), *([ctypes.c_int64] * len(prog.dims)))
        return LLVMExecutable(lowered, proto(addr), options.profile)

    def artifacts(self, source: str, kind: str, lowered, t: Target,
                  options: Options) -> dict[str, bytes | str]:
        """AOT files of a module: its IR before or after optimization, assembly, object, library."""
        from caten.compile import jobs
        from caten.render.llvm import c_header, units

        if kind == "source":
            return {".ll": source}
        header = c_header([lw.program for lw in lowered], [lw.name for lw in lowered],
                          options.extra.get("library"), [lw.in_place for lw in lowered]) if kind == "lib" else ""
        if kind == "lib" and (parts := units.split(source)) is not None:
            # as the JIT compiles it: units in parallel, each cached by content, linked by cc
            from caten.cache.store import default_cache

            store = default_cache() if options.use_cache else None
            objs = jobs.compile_units(parts, t.cpu, t.features, _opt(options), store, _llvm_version(), threads(),
                                      pic=True)
            entries = [n for lw in lowered for n in (lw.name, f"{lw.name}__impl")]
            return {".so": link_shared(*objs, exports=entries), ".h": header}
        opt = max(0, min(3, int(options.opt_level if options.opt_level is not None else 3)))
        mod = optimize(source, opt, t)
        if kind in ("opt-ir", "ll"):
            return {".ll": str(mod)}
        tm = target_machine(opt, t)
        if kind == "asm":  # real machine assembly for the target
            return {".s": tm.emit_assembly(mod)}
        obj = tm.emit_object(mod)
        if kind == "obj":
            return {".o": obj}
        if kind == "lib":
            return {".so": link_shared(obj), ".h": header}
        raise Error(f"runtime 'llvm' cannot emit '{kind}'", hint="use loops, source, asm, obj, lib or schedule")


def _opt(options: Options) -> int:
    opt = 3 if options.opt_level is None else max(0, min(3, int(options.opt_level)))
    return 3 if opt >= 2 else opt


def _llvm_version() -> str:
    try:
        import llvmlite

        return f"llvmlite-{llvmlite.__version__}-llvm-{'.'.join(map(str, _llvm().llvm_version_info))}"
    except Exception:  # pragma: no cover
        return "llvmlite-unknown"


def link_shared(*objs: bytes, exports: list[str] | None = None) -> bytes:
    """A shared library of the objects, linked by the system's C compiler (CC); `exports`: the
    only symbols it exports (the units' functions link to each other but stay inside)."""
    import subprocess
    import tempfile

    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        os_, so = [os.path.join(d, f"k{i}.o") for i in range(len(objs))], os.path.join(d, "k.so")
        for o, obj in zip(os_, objs):
            with open(o, "wb") as f:
                f.write(obj)
        flags = []
        if exports is not None:
            script = os.path.join(d, "exports.map")
            with open(script, "w") as f:
                f.write(f"{{ global: {'; '.join(exports)}; local: *; }};\n")
            flags = [f"-Wl,--version-script={script}"]
        r = subprocess.run([cc, "-shared", "-o", so, *os_, *flags, "-lm", "-lpthread"], capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"linking the shared library failed: {r.stderr.strip()}")
        with open(so, "rb") as f:
            return f.read()


RUNTIME = LLVMRuntime()
