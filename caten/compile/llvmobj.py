"""LLVM IR text -> object code: LLVM's O2 pipeline with both vectorizers, then the target's code
generator. It runs in the compiling process, and unchanged as a worker process
(`python -m caten.compile.llvmobj`) compiling the modules sent over its stdin: llvmlite runs
every call of a process behind one lock, so a second core needs a second process.

This module imports llvmlite and nothing of caten's, so a worker starts in ~0.1 s.
"""

from __future__ import annotations

import json
import sys
import threading

_ready: list = []

# The JIT links its objects at whatever addresses the process's memory manager hands out; with
# many large shared libraries mapped (torch, scikit-learn) code, constants and libm can end up
# more than 2 GB apart, and a 32-bit PC-relative relocation then aborts the whole process in
# RuntimeDyldELF (`isInt<32>(RealOffset)`). The large code model addresses every symbol and
# constant pool with 64-bit absolute values, so no relocation can overflow. Shared libraries
# (AOT) keep the default model: the system linker places their sections together.
JIT_CODE_MODEL = "large"


def llvm():
    """llvmlite.binding, its native target initialized once."""
    import llvmlite.binding as binding

    if not _ready:
        try:
            binding.initialize()
        except Exception:  # newer llvmlite initializes itself and may refuse the call
            pass
        binding.initialize_native_target()
        binding.initialize_native_asmprinter()
        _ready.append(True)
    return binding


_prefetching: list[threading.Thread] = []


def prefetch() -> None:
    """Start mapping llvmlite's shared library (all of LLVM, ~15 ms of the dynamic loader's work,
    which runs without Python's lock) on a thread, so that it overlaps a load's imports of
    caten's modules; llvmlite's own dlopen of the same file then finds it mapped. Once per
    process; nothing where llvmlite is missing or already loaded."""
    if _prefetching or _ready or "llvmlite.binding" in sys.modules:
        return
    t = threading.Thread(target=_map_library, name="caten-llvm-prefetch", daemon=True)
    _prefetching.append(t)
    t.start()


def _map_library() -> None:
    try:
        import ctypes
        import importlib.util
        import os

        spec = importlib.util.find_spec("llvmlite")
        if spec is None or not spec.submodule_search_locations:
            return
        name = {"darwin": "libllvmlite.dylib", "win32": "llvmlite.dll"}.get(sys.platform, "libllvmlite.so")
        path = os.path.join(list(spec.submodule_search_locations)[0], "binding", name)
        if os.path.isfile(path):
            ctypes.CDLL(path)  # (ctypes never unloads it: llvmlite's CDLL takes the same mapping)
    except Exception:  # only a head start: llvmlite reports its own failures when it loads
        pass


_machines: dict[tuple, object] = {}


def target_machine(cpu: str, features: str, opt: int = 3, jit: bool = False, own: bool = False):
    """An LLVM target machine of this process's triple for `cpu`/`features`; `jit`: for
    objects the in-process JIT links (JIT_CODE_MODEL). Made once per setting (a module's
    units each need two, ~1 ms apiece), or a new one for a caller that hands it on (`own`:
    an execution engine takes its machine over)."""
    key = (cpu, features, opt, jit)
    tm = None if own else _machines.get(key)
    if tm is None:
        b = llvm()
        tgt = b.Target.from_triple(b.get_process_triple())
        tm = tgt.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="static" if jit else "pic",
                                       codemodel=JIT_CODE_MODEL if jit else "default")
        if not own:
            _machines[key] = tm
    return tm


_settings: list[str] = []


def settings_key() -> str:
    """A hash of this module's source: the pass pipeline and code generator settings its objects
    are made with. A unit's cache key holds it (caten.compile.jobs), so objects made under other
    settings, by an older caten, are never taken for this one's (the same IR, other code)."""
    if not _settings:
        import hashlib

        with open(__file__, "rb") as f:
            _settings.append(hashlib.sha256(f.read()).hexdigest()[:16])
    return _settings[0]


def optimize(ir_text: str, cpu: str, features: str, opt: int = 3):
    """The parsed, verified and optimized module."""
    b = llvm()
    mod = b.parse_assembly(ir_text)
    mod.verify()
    if opt > 0:
        # LLVM's O2 pipeline with both vectorizers. O3 cost 35% more compile time on the Mixer and
        # changed no inner loop of the benchmark kernels (identical code for a and b; for d and e1
        # only where loop-invariant checks sit). Only loops that ask are unrolled (the GEMM
        # micro-kernel's k loop): unrolling everything doubled the machine code and compile time.
        pto = b.create_pipeline_tuning_options(speed_level=min(opt, 2))
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = False
        try:
            pto.loop_interleaving = True
        except Exception:
            pass
        pb = b.create_pass_builder(target_machine(cpu, features, opt), pto)
        pb.getModulePassManager().run(mod, pb)
    return mod


def compile_object(ir_text: str, cpu: str, features: str, opt: int = 3, light: bool = False,
                   pic: bool = False) -> bytes:
    """Object code for the in-process JIT (large code model: see JIT_CODE_MODEL), or with `pic`
    for a shared library (position independent, the default model). `light`: glue that runs a
    few hundred instructions a call (a program's entries, the thread pool), compiled without
    optimization: a quarter of O2's time (the Mixer's entries: 18 -> 4.4 ms)."""
    if light:
        opt = 0
    return target_machine(cpu, features, opt, jit=not pic).emit_object(optimize(ir_text, cpu, features, opt))


def serve(inp, out) -> None:
    """The worker loop: a request is a JSON line {cpu, features, opt, light, size} then `size`
    bytes of IR; the answer is `ok N` or `error N` and N bytes (the object, or the message).
    LLVM loads before the first request: a worker starts while its caller lowers and renders,
    and is ready when the units are."""
    llvm()
    while True:
        line = inp.readline()
        if not line:
            return
        req = json.loads(line)
        text = inp.read(req["size"]).decode()
        try:
            status, body = b"ok", compile_object(text, req["cpu"], req["features"], req["opt"], req["light"],
                                                 req.get("pic", False))
        except Exception as e:  # the caller compiles it again in its own process, for its diagnostic
            status, body = b"error", str(e).encode()
        out.write(status + b" %d\n" % len(body) + body)
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
