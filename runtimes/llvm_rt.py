"""`-r llvm`: fused loop kernels compiled by LLVM for the host CPU (JIT in-process, or AOT to
an object / shared library with a C header).

Pipeline: schedule (fusion + arena plan) -> loop IR -> LLVM IR text -> O2 with both
vectorizers (new pass manager) -> object code -> one shared MCJIT engine (docs/runtimes.md
says why O2). Each program exports `NAME__impl(in..., out..., arena, dims...)` (the JIT
calls it with a per-thread cached arena) and the C ABI entry of LANGUAGE.md
section 8, `int32_t NAME(const T *in..., T *out..., int64_t dim...)`, which mallocs its
own arena.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence

import numpy as np

from caten import target
from caten.cache import codec, default_cache, key_of
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.ir.ops import TABLE, Op
from caten.ir.program import Program
from caten.run.arena import Arenas
from caten.run.runtime import CompileOptions, Runtime, named_programs
from caten.run.split import ExternSplit, has_extern
from caten.target import Target

_lock = threading.RLock()
_state: dict = {}


def _llvm():
    import llvmlite.binding as llvm

    if "init" not in _state:
        try:
            llvm.initialize()
        except Exception:  # newer llvmlite initializes itself and may refuse the call
            pass
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _state["init"] = True
    return llvm


# The JIT links its objects at whatever addresses the process's memory manager hands out; with
# many large shared libraries mapped (torch, scikit-learn) code, constants and libm can end up
# more than 2 GB apart, and a 32-bit PC-relative relocation then aborts the whole process in
# RuntimeDyldELF (`isInt<32>(RealOffset)`). The large code model addresses every symbol and
# constant pool with 64-bit absolute values, so no relocation can overflow. Shared libraries
# (AOT) keep the default model: the system linker places their sections together.
JIT_CODE_MODEL = "large"


def target_machine(opt: int = 3, t: Target | None = None, jit: bool = False):
    """An LLVM target machine for `t` (default: the host, which the JIT engine always uses);
    `jit`: for objects the in-process JIT links (JIT_CODE_MODEL)."""
    llvm = _llvm()
    t = t or target.host()
    tgt = llvm.Target.from_triple(llvm.get_process_triple())
    return tgt.create_target_machine(cpu=t.cpu, features=t.features, opt=opt, reloc="static" if jit else "pic",
                                     codemodel=JIT_CODE_MODEL if jit else "default")


def jit_object(ir_text: str, opt: int = 3, t: Target | None = None) -> bytes:
    """Object code for the in-process JIT (large code model: see JIT_CODE_MODEL)."""
    return target_machine(opt, t, jit=True).emit_object(optimize(ir_text, opt, t))


def _engine():
    if "engine" not in _state:
        llvm = _llvm()
        tm = target_machine(jit=True)
        _state["tm"] = tm
        _state["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    return _state["engine"]


def threads() -> int:
    """How many threads a GEMM may split over: CATEN_NUM_THREADS, else the CPUs this process
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


def generate(programs: Program | Sequence[Program], names: str | Sequence[str],
             nthreads: int | None = None, t: Target | None = None, check_bounds: bool = False) -> tuple[str, list]:
    """LLVM IR text (unoptimized) of one or several programs in one module, and their schedules,
    for target `t` (default: the host); with `check_bounds`, each schedule with its bounds table
    `sched.bounds` (caten.lower.bounds)."""
    from caten.lower import bounds, check_group, lower
    from caten.render.llvm import ModuleGen, entry_functions
    from caten.schedule import schedule

    if isinstance(programs, Program):
        programs, names = [programs], [names]
    t = t or target.host()
    tm = target_machine(3, t)
    mod = ModuleGen(_llvm().get_process_triple(), str(tm.target_data), t.cpu, t.features, t.vector_bits)
    scheds = []
    for program, name in zip(programs, names):
        with target.use(t):
            sched = schedule(program, check=check_group, threads=threads() if nthreads is None else nthreads)
        for i, k in enumerate(sched.kernels):
            k.name = f"{name}__k{i}"
        with target.use(t):
            kernels = lower(sched)
        sched.bounds = None
        if check_bounds:
            kernels, sched.bounds = bounds.instrument(kernels, sched, f"{name}__oob")
        defines = program.dim_defines()
        for k in kernels:
            mod.kernel(k, defines)
        entry_functions(mod, name, sched, kernels, defines)
        scheds.append(sched)
    return mod.text(), scheds


def optimize(ir_text: str, opt: int = 3, t: Target | None = None):
    llvm = _llvm()
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    if opt > 0:
        tm = target_machine(opt, t)
        # LLVM's O2 pipeline with both vectorizers. O3 cost 35% more compile time on the Mixer and
        # changed no inner loop of the benchmark kernels (identical code for a and b; for d and e1
        # only where loop-invariant checks sit). Only loops that ask are unrolled (the GEMM
        # micro-kernel's k loop): unrolling everything doubled the machine code and compile time.
        pto = llvm.create_pipeline_tuning_options(speed_level=min(opt, 2))
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = False
        try:
            pto.loop_interleaving = True
        except Exception:
            pass
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return mod


class LLVMExecutable:
    def __init__(self, program: Program, sched, fn, ir: str | None, name: str, compile_s: float,
                 arena_size=None, nthreads: int = 1, t: Target | None = None, bounds=None):
        self.program, self._sched, self.fn, self._ir, self.name = program, sched, fn, ir, name
        self.bounds = bounds  # the bounds-checked mode's table (caten.lower.bounds), or None
        self.nthreads, self.target = nthreads, t or target.host()
        self.compile_s = compile_s
        size = sched.arena_size if sched is not None else arena_size
        # in canonical dim names, so that a structurally equal program with other names can share the code
        self.arena_size = size if isinstance(size, int) or sched is None else \
            D.substitute(size, program.canonical_dims())
        self.arenas = Arenas()

    def rebind(self, program: Program) -> LLVMExecutable:
        """This code for a structurally equal program (other names): same function, own arena."""
        return LLVMExecutable(program, None, self.fn, self._ir, self.name, 0.0, self.arena_size, self.nthreads,
                              self.target, self.bounds)

    @property
    def sched(self):
        """The schedule (recomputed on demand when the code came from the disk cache)."""
        if self._sched is None:
            from caten.lower import check_group
            from caten.schedule import schedule

            with target.use(self.target):
                self._sched = schedule(self.program, check=check_group, threads=self.nthreads)
        return self._sched

    @property
    def ir(self) -> str:
        if self._ir is None:
            self._ir = generate(self.program, self.name, self.nthreads, self.target, self.bounds is not None)[0]
        return self._ir

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        env = {**self.program.defines, **env}
        if isinstance(self.arena_size, int):
            size = self.arena_size
        else:
            canon = {str(v): env[k] for k, v in self.program.canonical_dims().items() if k in env}
            size = D.evaluate(self.arena_size, canon)
        ins = [np.ascontiguousarray(a) for a in inputs]
        for o in outputs:
            if not o.flags.c_contiguous:
                raise Error("llvm runtime: outputs must be C-contiguous")
        ptrs = [a.ctypes.data for a in ins] + [o.ctypes.data for o in outputs]
        dims = [int(env[d]) for d in self.program.dims]
        self.fn(*ptrs, self.arenas.pointer(size), *dims)
        if self.bounds is not None:
            from caten.lower.bounds import raise_if_failed

            raise_if_failed(_engine().get_global_value_address(self.bounds.slot), self.bounds, self.program.name)


class LLVMRuntime(Runtime):
    name = "llvm"
    emits_schedule = True
    checks_bounds = True
    description = "fused loop kernels compiled by LLVM for the host CPU (JIT, or AOT .so/.o/.ll)"

    def __init__(self) -> None:
        self._cache: dict = {}

    def available(self) -> tuple[bool, str]:
        try:
            _llvm()
            return True, ""
        except Exception as e:  # pragma: no cover
            return False, f"llvmlite unavailable: {e}"

    def supports(self, op: Op, dtype: DType) -> bool:
        return dtype in TABLE[op].dtypes or op in (Op.CAST, Op.BUFFER, Op.CONST, Op.VIEW, Op.COPY, Op.REDUCE,
                                                   Op.WHERE)

    def compile(self, program: Program, options: CompileOptions | None = None) -> LLVMExecutable:
        options = options or CompileOptions()
        if has_extern(program):  # cut at EXTERN calls: compiled stages around host kernels (e.g. BLAS)
            return ExternSplit(program, lambda p: self.compile(p, options))
        opt = 3 if options.opt_level is None else max(0, min(3, int(options.opt_level)))
        opt = 3 if opt >= 2 else opt
        # structure only: renaming a composite or its variables, or reformatting, finds the same code
        nthreads = threads()
        t = target.resolve(options.target)
        target.check_runnable(t)
        key = (program.key(), opt, nthreads, t.key()) + (("check-bounds",) if options.check_bounds else ())
        with _lock:
            hit = self._cache.get(key)
            if hit is not None:  # the same structure, perhaps under other names
                return hit if hit.program is program else hit.rebind(program)
            t0 = time.perf_counter()
            digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
            name = f"caten_{digest}"
            nptr = len(program.inputs) + len(program.outputs) + 1
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nptr), *([ctypes.c_int64] * len(program.dims)))
            store = default_cache() if options.use_cache else None
            ckey = key_of("llvm-program", repr(key), code_fingerprint(), *map(str, t.key())) if store else ""
            cached = _object_entry(store.get(ckey, "llvmobj")) if store else None
            eng = _engine()
            if cached is not None:
                meta = cached
                eng.add_object_file(_llvm().ObjectFileRef.from_data(meta["obj"]))
                eng.finalize_object()
                exe = LLVMExecutable(program, None, proto(eng.get_function_address(f"{name}__impl")), None, name,
                                     time.perf_counter() - t0, meta["arena"], nthreads, t, meta.get("bounds"))
            else:
                ir, (sched,) = generate(program, name, nthreads, t, options.check_bounds)
                # machine code is generated once: the object file both feeds the engine and is cached
                obj = jit_object(ir, opt, t)
                if store is not None:
                    arena = sched.arena_size if isinstance(sched.arena_size, int) else \
                        D.substitute(sched.arena_size, program.canonical_dims())
                    store.put(ckey, "llvmobj", codec.dumps({"obj": obj, "arena": arena, "bounds": sched.bounds}))
                eng.add_object_file(_llvm().ObjectFileRef.from_data(obj))
                eng.finalize_object()
                exe = LLVMExecutable(program, sched, proto(eng.get_function_address(f"{name}__impl")), ir, name,
                                     time.perf_counter() - t0, nthreads=nthreads, t=t, bounds=sched.bounds)
            self._cache[key] = exe
            if options.verbose:
                how = "loaded from the cache" if cached is not None else "compiled"
                print(f"[llvm] {how} {program.name} in {exe.compile_s * 1e3:.1f} ms")
            return exe

    def emit(self, program: Program | Sequence[Program], kind: str,
             options: CompileOptions | None = None) -> dict[str, bytes | str]:
        """AOT artifacts of one program or several (one module, one library, one header)."""
        from caten.render.llvm import c_header

        options = options or CompileOptions()
        opt = max(0, min(3, int(options.opt_level if options.opt_level is not None else 3)))
        progs, names = named_programs(program)
        t = target.resolve(options.target)
        if kind == "schedule":
            from caten.lower import check_group
            from caten.schedule import schedule
            with target.use(t):
                text = "\n\n".join(schedule(p, check=check_group, threads=threads()).dump() for p in progs)
            return {".txt": f"{text}\n\ntarget {t.describe()}\n"}
        ir, _ = generate(progs, names, t=t)
        if kind == "source":
            return {".ll": ir}
        mod = optimize(ir, opt, t)
        if kind in ("opt-ir", "ll"):
            return {".ll": str(mod)}
        tm = target_machine(opt, t)
        if kind == "asm":  # real machine assembly for the target
            return {".s": tm.emit_assembly(mod)}
        obj = tm.emit_object(mod)
        if kind == "obj":
            return {".o": obj}
        if kind == "lib":
            return {".so": link_shared(obj), ".h": c_header(progs, names, options.extra.get("library"))}
        raise Error(f"runtime 'llvm' cannot emit '{kind}'", hint="use source, asm, obj, lib or schedule")


def _object_entry(blob: bytes | None) -> dict | None:
    """A cached {"obj": object file, "arena": size} (plain data), or None if absent or unreadable."""
    try:
        meta = codec.loads(blob) if blob is not None else None
    except codec.CodecError:
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("obj"), bytes) else None


def code_fingerprint() -> str:
    """A hash of the code generator's own sources: editing it invalidates cached objects.
    (Files are located, not imported: a warm start never loads the code generator.)"""
    if "fingerprint" not in _state:
        import importlib.util

        import caten

        def origin(mod: str) -> str:
            spec = importlib.util.find_spec(mod)
            return spec.origin if spec and spec.origin else ""

        lower = origin("caten.lower")
        files = [origin("caten.schedule"), origin("caten.render.llvm"), __file__,
                 *sorted(glob.glob(os.path.join(os.path.dirname(lower), "*.py")))]
        parts = [caten.__version__, _llvm_version()]
        for f in files:
            with open(f, "rb") as fh:
                parts.append(hashlib.sha256(fh.read()).hexdigest())
        _state["fingerprint"] = key_of(*parts)
    return _state["fingerprint"]


def _llvm_version() -> str:
    try:
        import llvmlite

        return f"llvmlite-{llvmlite.__version__}-llvm-{'.'.join(map(str, _llvm().llvm_version_info))}"
    except Exception:  # pragma: no cover
        return "llvmlite-unknown"


def link_shared(obj: bytes) -> bytes:
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        o, so = os.path.join(d, "k.o"), os.path.join(d, "k.so")
        with open(o, "wb") as f:
            f.write(obj)
        r = subprocess.run([cc, "-shared", "-o", so, o, "-lm", "-lpthread"], capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"linking the shared library failed: {r.stderr.strip()}")
        with open(so, "rb") as f:
            return f.read()


RUNTIME = LLVMRuntime()
