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
import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence

import numpy as np

from caten import target
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.ir.ops import TABLE, Op
from caten.plugin import Capabilities, Options, Runtime, threads
from caten.run.arena import Arenas
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
    """One lowered program's JIT-compiled entry, called with a per-thread cached arena."""

    def __init__(self, lowered, fn, profile: bool = False) -> None:
        self.program, self.sched, self.bounds, self.fn = lowered.program, lowered.sched, lowered.bounds, fn
        self.arenas = Arenas()
        self.kernel_names = [k for k, _, _ in lowered.plan.calls]
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

    def cycles(self) -> int:
        """The cycle counter now (to calibrate it against the wall clock)."""
        addr = _engine().get_function_address(self._prof[:-len("__prof")] + "__cycles")
        return ctypes.CFUNCTYPE(ctypes.c_int64)(addr)()

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        env = {**self.program.defines, **env}
        size = self.sched.arena_size
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
        return Capabilities(vector_bits=t.vector_bits, threads=threads(), extern_split=True,
                            native=frozenset({("round", "f16")}))  # fptrunc to half: F16C, one instruction

    def toolchain(self, t: Target) -> str:
        return _llvm_version()

    def render(self, lowered, t: Target, options: Options) -> str:
        """One LLVM module (unoptimized IR text): every program's kernels and its two entries."""
        from caten.render.llvm import ModuleGen, entry_functions

        mod = ModuleGen(_llvm().get_process_triple(), str(target_machine(3, t).target_data), t.cpu, t.features,
                        t.vector_bits)
        for lw in lowered:
            for k in lw.kernels:
                mod.kernel(k, lw.defines)
            entry_functions(mod, lw.plan, lw.defines, options.profile)
        return mod.text()

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        return jit_object(source, _opt(options), t)

    def load(self, artifact: bytes, lowered, t: Target, options: Options) -> LLVMExecutable:
        """Link the object into the process's one JIT engine (once per name: the name is the
        code's cache key, so equal names mean equal code)."""
        name = lowered.name
        with _lock:
            addr = _state.setdefault("loaded", {}).get(name)
            if addr is None:
                eng = _engine()
                eng.add_object_file(_llvm().ObjectFileRef.from_data(artifact))
                eng.finalize_object()
                addr = _state["loaded"][name] = eng.get_function_address(f"{name}__impl")
        prog = lowered.program
        nptr = len(prog.inputs) + len(prog.outputs) + 1
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nptr), *([ctypes.c_int64] * len(prog.dims)))
        return LLVMExecutable(lowered, proto(addr), options.profile)

    def artifacts(self, source: str, kind: str, lowered, t: Target,
                  options: Options) -> dict[str, bytes | str]:
        """AOT files of a module: its IR before or after optimization, assembly, object, library."""
        from caten.render.llvm import c_header

        if kind == "source":
            return {".ll": source}
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
            header = c_header([lw.program for lw in lowered], [lw.name for lw in lowered],
                              options.extra.get("library"))
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
