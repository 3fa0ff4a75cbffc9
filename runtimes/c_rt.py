"""`-r c`: the loop IR rendered as plain C by the shared C-style renderer, compiled by the
system C compiler (`cc -O3 -march=native -shared -fPIC`) and loaded with ctypes.

Each program becomes `NAME__impl(in..., out..., arena, dims...)` (called with a cached
arena) and the C ABI of LANGUAGE.md section 8, `int32_t NAME(const T *in..., T *out...,
int64_t dim...)`, which checks the `where` constraints and mallocs its own arena. Compiled
libraries are kept in the caten cache, keyed by source, compiler and flags.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

import numpy as np

from caten import target
from caten.cache.store import default_cache, key_of
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.ops import Op
from caten.ir.program import Program, c_symbol
from caten.render import cstyle as CS
from caten.run.arena import Arenas
from caten.run.runtime import CompileOptions, Runtime, named_programs
from caten.target import Target

# -fno-tree-loop-if-convert: GCC 12.2 at -O3 with AVX2 turns a guarded load (a pad's
# `if (inside) v = in[i]`) into a masked vector load that reads the wrong lanes: (pad X [[2 0] [0 0]])
# of a 4x2 tensor came back with rows 2-3 zeroed on znver3 (found by `caten fuzz`, seed 153278).
FLAGS = ["-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fwrapv", "-fno-math-errno",
         "-fno-trapping-math", "-fno-strict-aliasing", "-fopenmp-simd", "-fno-tree-loop-if-convert"]


def arch_flags(t: Target) -> list[str]:
    """cc flags for target `t`: `-march=native` on the host, else its cpu and `-mFEATURE`/`-mno-FEATURE`."""
    if t.native:
        return ["-march=native"]
    feats = [f"-m{f[1:]}" if f[0] == "+" else f"-mno-{f[1:]}" for f in t.features.split(",") if f]
    return [f"-march={t.cpu}", *feats]


def cc() -> str:
    return os.environ.get("CC", "cc")


def generate(progs: Sequence[Program], names: Sequence[str], t: Target | None = None,
             check_bounds: bool = False) -> tuple[str, list]:
    """C source of several programs for target `t` (kernel shapes follow its vector width):
    static kernels, then each program's two entry points. With `check_bounds`, the schedules
    come with their bounds tables (`sched.bounds`)."""
    from caten.lower import bounds, check_group, lower
    from caten.schedule import schedule

    used: set[str] = set()
    funcs, scheds = [], []
    checks = []
    for prog, name in zip(progs, names):
        with target.use(t or target.host()):
            sched = schedule(prog, check=check_group)
            for i, k in enumerate(sched.kernels):
                k.name = f"{name}__k{i}"
            kernels = lower(sched)
        sched.bounds = None
        if check_bounds:
            kernels, sched.bounds = bounds.instrument(kernels, sched, f"{name}__oob")
            checks.append(bounds.c_slots(sched.bounds))
        defines = prog.dim_defines()
        funcs += [CS.c_function(k, CS.C, defines, used) for k in kernels]
        funcs.append(entries(prog, name, sched, kernels, defines, used))
        scheds.append(sched)
    text = "\n".join([CS.C.prelude, "#include <stdlib.h>", CS.helper_source(CS.C, used), *checks, *funcs]) + "\n"
    return text, scheds


def entries(prog: Program, name: str, sched, kernels, defines: dict, used: set[str]) -> str:
    g = CS.Fn(CS.C, prog.dims, defines, used)
    io = [f"in{i}" for i in range(len(prog.inputs))] + [f"out{i}" for i in range(len(prog.outputs))]
    sig = [f"{'const ' if b[:2] == 'in' else ''}{CS.stype(sched.buffers[b].dtype)} *b_{b}" for b in io]
    dims = [f"i64 d_{d}" for d in prog.dims]
    for b in sched.buffers.values():
        if b.role == "temp":
            g.emit(f"{CS.stype(b.dtype)} *b_{b.name} = ({CS.stype(b.dtype)} *)(arena + {g.dimval(b.offset)});")
    for k in kernels:
        g.emit(f"{k.name}({', '.join([f'b_{p.name}' for p in k.params] + [f'd_{d}' for d in k.dims])});")
    impl = f"void {name}__impl({', '.join(sig + ['u8 *arena'] + dims)}) {{\n{g.body()}\n}}"
    g = CS.Fn(CS.C, prog.dims, defines, used)
    for c in prog.constraints:
        g.emit(f"if ({g.dimval(c.lhs)} != {g.dimval(c.rhs)}) return 1;")
    g.emit(f"u8 *arena = (u8 *)malloc((size_t){g.dimval(sched.arena_size)} + 64);")
    g.emit("if (!arena) return 2;")
    args = [f"b_{b}" for b in io] + ["arena"] + [f"d_{d}" for d in prog.dims]
    g.emit(f"{name}__impl({', '.join(args)});")
    g.emit("free(arena);")
    g.emit("return 0;")
    return impl + f"\nint32_t {name}({', '.join(sig + dims) or 'void'}) {{\n{g.body()}\n}}"


def build(src: str, out_suffix: str = ".so", extra: Sequence[str] = ()) -> bytes:
    flags = [f for f in FLAGS if out_suffix == ".so" or f != "-shared"] + list(extra)
    with tempfile.TemporaryDirectory() as d:
        c, out = os.path.join(d, "k.c"), os.path.join(d, "k" + out_suffix)
        with open(c, "w") as f:
            f.write(src)
        mode = {".so": [], ".o": ["-c"], ".s": ["-S"]}[out_suffix]
        r = subprocess.run([cc(), *flags, *mode, "-o", out, c, *(["-lm"] if out_suffix == ".so" else [])],
                           capture_output=True, text=True)
        if r.returncode != 0:
            march = next((f for f in extra if f.startswith("-march=") and f != "-march=native"), None)
            if march and ("bad value" in r.stderr or "unrecognized" in r.stderr):
                raise Error(f"{cc()} does not know the target {march}: {r.stderr.strip()[:300]}",
                            hint="name a cpu both LLVM and the C compiler know (e.g. znver3, rocketlake, x86-64-v3)")
            raise Error(f"the C compiler failed on generated code (a caten bug): {r.stderr.strip()[:2000]}")
        with open(out, "rb") as f:
            return f.read()


_tmpdir: list[str] = []


def _load(lib: bytes, tag: str) -> ctypes.CDLL:
    if not _tmpdir:
        _tmpdir.append(tempfile.mkdtemp(prefix="caten-c-"))
        atexit.register(shutil.rmtree, _tmpdir[0], True)
    path = os.path.join(_tmpdir[0], f"{tag}.so")
    if not os.path.exists(path):  # never rewrite a library that may be mapped: same tag, same bytes
        with open(path + ".tmp", "wb") as f:
            f.write(lib)
        os.replace(path + ".tmp", path)
    return ctypes.CDLL(path)


class CExecutable:
    def __init__(self, program: Program, sched, fn, source: str, oob: int = 0):
        self.program, self.sched, self.fn, self.source = program, sched, fn, source
        self.oob = oob  # the address of the bounds-checked mode's error record, or 0
        self.arenas = Arenas()

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        env = {**self.program.defines, **env}
        size = D.evaluate(self.sched.arena_size, env) if not isinstance(self.sched.arena_size, int) \
            else self.sched.arena_size
        ins = [np.ascontiguousarray(a) for a in inputs]
        ptrs = [a.ctypes.data for a in ins] + [o.ctypes.data for o in outputs]
        self.fn(*ptrs, self.arenas.pointer(size), *[int(env[d]) for d in self.program.dims])
        if self.oob:
            from caten.lower.bounds import raise_if_failed

            raise_if_failed(self.oob, self.sched.bounds, self.program.name)


class CRuntime(Runtime):
    name = "c"
    checks_bounds = True
    description = "plain C from the shared C-style renderer, built by the system cc (-O3 -march=native, or --cpu's)"

    def available(self) -> tuple[bool, str]:
        if shutil.which(cc()) is None:
            return False, f"no C compiler: '{cc()}' is not on PATH (set CC)"
        return True, ""

    def supports(self, op: Op, dtype) -> bool:
        return op is not Op.EXTERN

    def _version(self) -> str:
        if "ver" not in self.__dict__:
            r = subprocess.run([cc(), "--version"], capture_output=True, text=True)
            self.ver = r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "?"
        return self.ver

    def library(self, src: str, use_cache: bool, t: Target) -> bytes:
        flags = arch_flags(t)
        key = key_of("c-rt/1", src, cc(), self._version(), " ".join(FLAGS + flags), *map(str, t.key()))
        store = default_cache() if use_cache else None
        lib = store.get(key, "c-so") if store else None
        if lib is None:
            lib = build(src, ".so", flags)
            if store:
                store.put(key, "c-so", lib)
        return lib

    def build(self, program: Program, options: CompileOptions) -> CExecutable:
        name = c_symbol(program.name)
        t = target.resolve(options.target)
        target.check_runnable(t)
        src, (sched,) = generate([program], [name], t, options.check_bounds)
        lib = self.library(src, options.use_cache, t)
        dll = _load(lib, f"{name}_{key_of(src, lib)[:24]}")
        fn = getattr(dll, f"{name}__impl")
        fn.restype = None
        nptr = len(program.inputs) + len(program.outputs) + 1
        fn.argtypes = [ctypes.c_void_p] * nptr + [ctypes.c_int64] * len(program.dims)
        oob = ctypes.addressof(ctypes.c_int64.in_dll(dll, f"{name}__oob")) if sched.bounds else 0
        exe = CExecutable(program, sched, fn, src, oob)
        exe._dll = dll
        return exe

    def emit(self, program: Program | Sequence[Program], kind: str,
             options: CompileOptions | None = None) -> dict[str, bytes | str]:
        from caten.render.llvm import c_header

        options = options or CompileOptions()
        progs, names = named_programs(program)
        t = target.resolve(options.target)
        src, _ = generate(progs, names, t)
        header = c_header(progs, names, options.extra.get("library"))
        if kind == "source":
            return {".c": src, ".h": header}
        if kind == "lib":
            return {".so": self.library(src, options.use_cache, t), ".h": header}
        if kind == "obj":
            return {".o": build(src, ".o", arch_flags(t)), ".h": header}
        if kind == "asm":
            return {".s": build(src, ".s", arch_flags(t)).decode()}
        raise Error(f"runtime 'c' cannot emit '{kind}'", hint="use source (-S), asm, obj or lib")


RUNTIME = CRuntime()
