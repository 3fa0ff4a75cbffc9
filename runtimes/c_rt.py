"""`-r c`: the loop IR rendered as plain C by the shared C-style renderer, compiled by the
system C compiler (`cc -O3 -march=native -shared -fPIC`) and loaded with ctypes.

Each program becomes `NAME__impl(in..., out..., arena, dims...)` (called with a cached
arena) and the C ABI of LANGUAGE.md section 8, `int32_t NAME(const T *in..., T *out...,
int64_t dim...)`, which checks the `where` constraints and keeps its arena for the next
call. Compiled libraries are kept in the caten cache, keyed by source, compiler and flags.
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

from caten.cache.store import key_of
from caten.errors import Error
from caten.ir import dims as D
from caten.plugin import Capabilities, Options, Runtime, threads
from caten.render import cstyle as CS
from caten.render.checks import c_slots
from caten.render.cstyle.entry import impl, nested
from caten.render.llvm import c_header
from caten.run.arena import Arenas
from caten.target import Target

# -fno-tree-loop-if-convert: GCC 12.2 at -O3 with AVX2 turns a guarded load (a pad's
# `if (inside) v = in[i]`) into a masked vector load that reads the wrong lanes: (pad X [[2 0] [0 0]])
# of a 4x2 tensor came back with rows 2-3 zeroed on znver3 (found by `caten fuzz`, seed 153278).
# -fopenmp: a `Parallel` loop is an OpenMP parallel for (GEMMs split their rows; row kernels and
# sums their loops), on up to CATEN_NUM_THREADS threads, as on the llvm runtime.
FLAGS = ["-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fwrapv", "-fno-math-errno",
         "-fno-trapping-math", "-fno-strict-aliasing", "-fopenmp", "-fno-tree-loop-if-convert"]


def arch_flags(t: Target) -> list[str]:
    """cc flags for target `t`: `-march=native` on the host, else its cpu and `-mFEATURE`/`-mno-FEATURE`."""
    if t.native:
        return ["-march=native"]
    feats = [f"-m{f[1:]}" if f[0] == "+" else f"-mno-{f[1:]}" for f in t.features.split(",") if f]
    return [f"-march={t.cpu}", *feats]


def cc() -> str:
    return os.environ.get("CC", "cc")


def generate(lowered, t: Target) -> str:
    """C source of lowered programs (`caten.pipeline.Lowered`): static kernels, then each
    program's two entry points; bounds-checked programs carry their error records."""
    used: set[str] = set()
    funcs, checks = [], []
    for lw in lowered:
        if lw.bounds is not None:
            checks.append(c_slots(lw.bounds))
        funcs += [CS.c_function(k, CS.C, lw.defines, used) for k in lw.all_kernels()]
        funcs += [impl(p, lw.defines, used) for p in nested(lw.plan)]
        funcs.append(entries(lw.plan, lw.defines, used))
    head = [CS.C.prelude, "#include <stdlib.h>\n#include <stdatomic.h>", CS.helper_source(CS.C, used)]
    return "\n".join([*head, *checks, *funcs]) + "\n"


def entries(plan, defines: dict, used: set[str]) -> str:
    """`NAME__impl` (arena given) and the C ABI entry `NAME` (checks, keeps an arena) of an EntryPlan."""
    sig = [f"{'const ' if b[:2] == 'in' else ''}{CS.stype(dt)} *b_{b}" for b, dt in plan.inputs + plan.outputs]
    dims = [f"i64 d_{d}" for d in plan.dims]
    io = [b for b, _ in plan.inputs + plan.outputs]
    name = plan.name
    g = CS.Fn(CS.C, list(plan.dims), defines, used)
    for lhs, rhs in plan.constraints:
        g.emit(f"if ({g.dimval(lhs)} != {g.dimval(rhs)}) return 1;")
    # the last call's arena is kept for the next (as the llvm entry does); a call that finds it in
    # use (another thread's) mallocs its own
    keep = f"{name}__arena"
    g.emit(f"size_t need = (size_t){g.dimval(plan.arena_size)} + 64;")
    g.emit("int idle = 0, mine = atomic_compare_exchange_strong(&" + keep + ".busy, &idle, 1);")
    g.emit(f"if (mine && {keep}.cap < need) {{ free({keep}.p); {keep}.p = (u8 *)malloc(need); "
           f"{keep}.cap = {keep}.p ? need : 0; }}")
    g.emit(f"u8 *arena = mine ? {keep}.p : (u8 *)malloc(need);")
    g.emit(f"if (!arena) {{ if (mine) atomic_store(&{keep}.busy, 0); return 2; }}")
    args = [f"b_{b}" for b in io] + ["arena"] + [f"d_{d}" for d in plan.dims]
    g.emit(f"{name}__impl({', '.join(args)});")
    g.emit(f"if (mine) atomic_store(&{keep}.busy, 0); else free(arena);")
    g.emit("return 0;")
    return impl(plan, defines, used) + f"\nstatic struct {{ u8 *p; size_t cap; atomic_int busy; }} {keep};\n" \
        f"int32_t {name}({', '.join(sig + dims) or 'void'}) {{\n{g.body()}\n}}"


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
    def __init__(self, lowered, fn, oob: int = 0):
        self.program, self.sched, self.bounds, self.fn = lowered.program, lowered.sched, lowered.bounds, fn
        self.arena_size = lowered.arena_size
        self.oob = oob  # the address of the bounds-checked mode's error record, or 0
        self.arenas = Arenas()

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        env = {**self.program.defines, **env}
        size = D.evaluate(self.arena_size, env) if not isinstance(self.arena_size, int) else self.arena_size
        ins = [np.ascontiguousarray(a) for a in inputs]
        ptrs = [a.ctypes.data for a in ins] + [o.ctypes.data for o in outputs]
        self.fn(*ptrs, self.arenas.pointer(size), *[int(env[d]) for d in self.program.dims])
        if self.oob:
            from caten.ir.oob import raise_if_failed

            raise_if_failed(self.oob, self.bounds, self.program.name)


class CRuntime(Runtime):
    name = "c"
    renders = True
    artifact_kind = "c-so"
    checks_bounds = True
    restores = True  # `load` reads only caten.pipeline.restore.Restored's fields: warm loads skip lowering
    description = "plain C from the shared C-style renderer, built by the system cc (-O3 -march=native, or --cpu's)"

    def available(self) -> tuple[bool, str]:
        if shutil.which(cc()) is None:
            return False, f"no C compiler: '{cc()}' is not on PATH (set CC)"
        return True, ""

    def capabilities(self, t: Target) -> Capabilities:
        # (the pass decomposes every hard op)
        return Capabilities(vector_bits=t.vector_bits, threads=threads(), extern_split=True, native=frozenset())

    def toolchain(self, t: Target) -> str:
        if "ver" not in self.__dict__:
            r = subprocess.run([cc(), "--version"], capture_output=True, text=True)
            self.ver = r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "?"
        return f"{cc()} {self.ver} {' '.join(FLAGS + arch_flags(t))}"

    def render(self, lowered, t: Target, options: Options) -> str:
        return generate(lowered, t)

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        return build(source, ".so", arch_flags(t))

    def load(self, artifact: bytes, lowered, t: Target, options: Options) -> CExecutable:
        name = lowered.name
        dll = _load(artifact, f"{name}_{key_of(artifact)[:24]}")
        fn = getattr(dll, f"{name}__impl")
        fn.restype = None
        prog = lowered.program
        nptr = len(prog.inputs) + len(prog.outputs) + 1
        fn.argtypes = [ctypes.c_void_p] * nptr + [ctypes.c_int64] * len(prog.dims)
        oob = ctypes.addressof(ctypes.c_int64.in_dll(dll, f"{name}__oob")) if lowered.bounds else 0
        exe = CExecutable(lowered, fn, oob)
        exe._dll = dll
        return exe

    def artifacts(self, source: str, kind: str, lowered, t: Target,
                  options: Options) -> dict[str, bytes | str]:
        header = c_header([lw.program for lw in lowered], [lw.name for lw in lowered], options.extra.get("library"),
                          [lw.in_place for lw in lowered])
        if kind == "source":
            return {".c": source, ".h": header}
        if kind == "lib":
            return {".so": build(source, ".so", arch_flags(t)), ".h": header}
        if kind == "obj":
            return {".o": build(source, ".o", arch_flags(t)), ".h": header}
        if kind == "asm":
            return {".s": build(source, ".s", arch_flags(t)).decode()}
        raise Error(f"runtime 'c' cannot emit '{kind}'", hint="use loops, source (-S), asm, obj or lib")


RUNTIME = CRuntime()
