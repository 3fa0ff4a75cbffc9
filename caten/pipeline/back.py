"""The back half of the compiler, written once for every runtime:

    schedule (fusion, vetoed by trial lowering) -> lower (loop IR) -> [bounds checks] -> decompose
    -> runtime.render -> runtime.compile_source, through the cache -> runtime.load

A runtime plugin that compiles code implements only the last three steps (see
`caten.plugin.Runtime`); what it is handed is a `Lowered` program: the schedule, the
loop-IR kernels and the `EntryPlan` of its entry function. The compile cache has one key, made
here (`cache_key`): the loop IR of every kernel and the entry plan, the runtime, the target,
the options, caten's version, the runtime's toolchain and the fingerprint of the code that turns
loop IR into machine code. Runtimes that interpret graphs directly (numpy) or third-party plugins
with their own `compile` are called as they are. `-v` prints how long each pass took.
`compile` itself lives in caten.pipeline.build, which loads this module only when the
program-level cache (caten.pipeline.restore) misses.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import caten.lower.kernel_lowerer as lowering  # by module: tests may stand a buggy `lower` in for the real one
from caten import loopir as L
from caten import target
from caten.cache import default_cache, key_of
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.program import Program, c_symbol
from caten.ir.verify import checking as verify_checking
from caten.ir.verify import enabled as verify_enabled
from caten.lower import bounds as B
from caten.lower.decompose import decompose
from caten.lower.dimargs import used_dims
from caten.lower.entry import EntryPlan, entry_plan
from caten.lower.scatter import in_place
from caten.lower.text import kernel_text
from caten.lower.trial import check_group
from caten.lower.verify import problems as loop_problems
from caten.pipeline import restore
from caten.pipeline.codekey import code_fingerprint, code_parts, tuned  # noqa: F401 (API: code_fingerprint)
from caten.pipeline.passes import Timings
from caten.plugin import Options, Runtime, named_programs
from caten.schedule import Schedule, schedule
from caten.schedule.plan import direct_tiles, gpu_schedule, invariant_inputs
from caten.target import Target

PLACEHOLDER = "caten_p"  # kernel-name prefix while a program's code is keyed (names are not part of the key)


@dataclass
class Lowered:
    """One program after the target-independent back end: what a runtime renders."""
    program: Program
    sched: Schedule
    kernels: list[L.Kernel]
    plan: EntryPlan
    bounds: B.Table | None = None  # the bounds-checked mode's table (caten.lower.bounds)
    in_place: frozenset[int] = frozenset()  # outputs whose memory is their input's (Program.in_place)
    subs: dict[int, dict[str, Lowered]] = field(default_factory=dict)  # control kernel -> its bodies

    def nested(self) -> list[Lowered]:
        """Every body lowered inside this program (loops' and branches'), recursively."""
        return [x for roles in self.subs.values() for lw in roles.values() for x in [lw, *lw.nested()]]

    def all_kernels(self) -> list[L.Kernel]:
        """The kernels a renderer emits: this program's and every body's."""
        return self.kernels + [k for lw in self.nested() for k in lw.kernels]

    def replan(self) -> None:
        self.plan = entry_plan(self.plan.name, self.sched, self.kernels,
                               {gi: {r: lw for r, lw in roles.items()} for gi, roles in self.subs.items()})

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def defines(self) -> dict[str, D.Dim]:
        return self.program.dim_defines()

    @property
    def arena_size(self) -> D.Dim:
        return self.sched.arena_size

    @property
    def kernel_names(self) -> list[str]:
        """The entry's steps by name, in order (a kernel's, or a control step's)."""
        return [c[0] if isinstance(c, tuple) else c.text(str)[0].split(':')[0] for c in self.plan.calls]

    def loops(self, canon: bool = False) -> str:
        """The loop IR of every kernel and the entry plan, as `--emit loops` prints it."""
        c = self.program.canonical_dims() if canon else None
        return "\n\n".join([kernel_text(k, c) for k in self.all_kernels()] + [self.plan.text(c)])

    def decompose(self, native: frozenset | None) -> None:
        """Write the hard ops the renderer lacks in primitives (caten.lower.decompose)."""
        if native is not None:
            for lw in self.subs_inner_first():
                lw.kernels = decompose(lw.kernels, native, lw.defines)
                lw.verify("the decompose pass")
                # each kernel takes the dims it reads, in its structure's order (caten.lower.dimargs)
                lw.kernels = [replace(k, dims=used_dims(k.body, k.dims)) for k in lw.kernels]
                lw.replan()

    def subs_inner_first(self) -> list[Lowered]:
        """This program and its bodies, each body before the program that runs it."""
        return [x for roles in self.subs.values() for lw in roles.values() for x in lw.subs_inner_first()] + [self]

    def verify(self, stage: str) -> None:
        """Check the loop IR (caten.lower.verify) under `Options.debug` or CATEN_VERIFY."""
        if not verify_enabled():
            return
        found = [p for k in self.kernels for p in loop_problems(k)]
        if found:
            raise Error(f"the loop IR after {stage} is malformed ({len(found)} problems):\n  "
                        + "\n  ".join(found[:8]), hint="a compiler bug: please report it with the program")

    def rename(self, name: str) -> None:
        """Give the program's kernels and entry their final names (kernel k is NAME__kK)."""
        old = {k.name: f"{name}__k{i}" for i, k in enumerate(self.kernels)}
        for sk in self.sched.kernels:
            sk.name = old.get(sk.name, sk.name)
        for k in self.kernels:
            k.name = old[k.name]
        for gi, roles in self.subs.items():
            for role, lw in roles.items():
                lw.rename(f"{name}__l{gi}{role[0]}")
        self.plan = replace(self.plan, name=name)
        self.replan()

    def check_bounds(self, device: bool = False) -> None:
        """Instrument every load and store with a bounds check (on a device, the error record is
        one more buffer argument of every kernel); a failure names the kernel as the program's
        own (NAME__kK), not by the code's cache name."""
        table = None
        for lw in self.subs_inner_first():  # (a loop's bodies report into the program's record)
            if device:
                lw.kernels, table = B.device_instrument(lw.kernels, lw.sched, table)
                lw.bounds = table
            else:
                lw.kernels, table = B.instrument(lw.kernels, lw.sched, f"{self.name}__oob", table)
            lw.verify("the bounds pass")
        self.bounds = table
        self.verify("the bounds pass")
        me = c_symbol(self.program.name)
        self.bounds.kernels = [me + k[len(self.name):] if k.startswith(self.name + "__") else k
                               for k in self.bounds.kernels]


def lower_program(program: Program, name: str, t: Target | None, threads: int,
                  timings: Timings | None = None, direct: bool = False, gpu: bool = False) -> Lowered:
    """schedule -> lower for CPU target `t` (None for a device: kernel shapes must not follow the
    host's vector width); the kernels are named NAME__kK. `direct`: the renderer has direct
    convolution tiles (`Capabilities.direct_conv`); `gpu`: the kernels run on a GPU
    (`Capabilities.gpu`)."""
    timings = timings or Timings()
    fast = program.in_place() if t is not None else frozenset()  # (a device's buffers are copies)
    with target.use(t), direct_tiles(direct), gpu_schedule(gpu), \
            in_place(frozenset((f"out{i}", j) for i, j in program.aliases if i in fast)):
        with timings.stage("schedule"):
            sched = schedule(program, check=check_group, threads=threads)
        lw = _lower_schedule(sched, name, timings)
    lw.in_place = _written_in_place(lw, program, fast)
    return lw


def _written_in_place(lw: Lowered, program: Program, fast: frozenset[int]) -> frozenset[int]:
    """The aliased outputs the kernels compute in their input's memory: the caller then passes the
    input's array as the output. No kernel may read that input besides (its memory changes as
    they run): the lowering left out the scatter's copy of it, so a reader is a compiler bug."""
    pos = dict(program.aliases)
    for i in fast:
        if any(p.name == f"in{pos[i]}" for k in lw.kernels for p in k.params):  # (a body names its own ins)
            raise Error(f"output {program.outputs[i].name} of {program.name} is computed in place, but a kernel "
                        "also reads the input it overwrites", hint="a compiler bug: please report it with the program")
    return fast


def _lower_schedule(sched: Schedule, name: str, timings: Timings) -> Lowered:
    """A schedule's kernels lowered (and its loops' and branches' bodies, each a program of its own)."""
    for i, k in enumerate(sched.kernels):
        k.name = f"{name}__k{i}"
    with timings.stage("lower"), invariant_inputs(sched.program):
        kernels = lowering.lower(sched)
    subs = {gi: {role: _lower_schedule(sub, f"{name}__l{gi}{role[0]}", timings)
                 for role, sub in k.stages[0].control.subs.items()}
            for gi, k in enumerate(sched.kernels) if k.stages[0].control is not None}
    lw = Lowered(sched.program, sched, kernels, entry_plan(name, sched, kernels, subs), subs=subs)
    lw.verify("lowering")
    return lw


def lower_all(runtime: Runtime, programs: Program | Sequence[Program], t: Target, check_bounds: bool = False,
              timings: Timings | None = None, decomposed: bool = True) -> list[Lowered]:
    """Several programs under their C symbols (AOT: one module, one library); `decomposed`: with
    the hard ops the runtime lacks written in primitives (what it renders)."""
    progs, names = named_programs(programs)
    caps = runtime.capabilities(t)
    timings = timings or Timings()
    out = [lower_program(p, n, None if caps.device else t, caps.threads, timings, caps.direct_conv,
                         caps.gpu)
           for p, n in zip(progs, names)]
    for lw in out:  # bounds first: its checks read buffer extents, dims that the pass then writes
        if check_bounds:
            with timings.stage("bounds"):
                lw.check_bounds(caps.device)
        if decomposed:
            with timings.stage("decompose"):
                lw.decompose(caps.native)
    return out


def cache_key(runtime: Runtime, lowered: Sequence[Lowered], t: Target, options: Options) -> str:
    """The one compile-cache key: loop IR + entry plans, runtime, target, options, versions."""
    return key_of(*code_parts(runtime, t, options), *(lw.loops(canon=True) for lw in lowered))


def build(runtime: Runtime, program: Program, t: Target, options: Options, tm: Timings, back_key: str | None = None):
    """The executable of `program` through the whole back end (caten.pipeline.build.compile
    calls it on a miss of the program-level cache); `back_key`: that cache's key, filled here."""
    caps = runtime.capabilities(t)
    store = default_cache() if options.use_cache else None
    runtime.prepare(t, options)
    lw = lower_program(program, PLACEHOLDER, None if caps.device else t, caps.threads, tm, caps.direct_conv,
                      caps.gpu)
    key = cache_key(runtime, [lw], t, options)
    lw.rename(f"caten_{key[:16]}")  # unique per code: JIT engines share one symbol table
    if options.check_bounds:  # before decompose: its checks read buffer extents, dims it writes
        with tm.stage("bounds"):
            lw.check_bounds(caps.device)
    with tm.stage("decompose"):
        lw.decompose(caps.native)
    art = store.get(key, runtime.artifact_kind) if store else None
    hit = art is not None
    if art is None:
        with tm.stage("render"):
            src = runtime.render([lw], t, options)
        with tm.stage("compile"):
            art = runtime.compile_source(src, t, options)
        if store:
            store.put(key, runtime.artifact_kind, art)
    with tm.stage("load"):
        exe = runtime.load(art, lw, t, options)
    exe.in_place = lw.in_place  # (caten.run.module passes those outputs their inputs' arrays)
    if store and back_key is not None:
        store.put(back_key, restore.KIND, restore.dumps(key, restore.Restored(
            lw.name, program, lw.arena_size, lw.kernel_names, lw.bounds, lw.in_place)))
    if options.verbose:
        print(tm.line(f"{runtime.name} {program.name} ({'cached code' if hit else 'compiled'})"), file=sys.stderr)
    return exe


def emit(runtime: Runtime, programs: Program | Sequence[Program], kind: str,
         options: Options | None = None, timings: Timings | None = None) -> dict[str, bytes | str]:
    """`--emit KIND` artifacts ({suffix: content}) of one program or several (one module);
    `timings`: the front passes' times, which `-v` prints with the back's."""
    options = options or Options()
    if not runtime.renders and kind not in ("schedule", "loops"):
        return runtime.emit(programs, kind, options)
    with verify_checking(options.debug):
        return _emit(runtime, programs, kind, options, timings or Timings())


def _emit(runtime: Runtime, programs: Program | Sequence[Program], kind: str,
          options: Options, tm: Timings) -> dict[str, bytes | str]:
    t = target.resolve(options.target)
    progs = [programs] if isinstance(programs, Program) else list(programs)
    if len(progs) == 1:  # (a module of several programs has no one tuning)
        t = tuned(runtime, t, progs[0], options)
    # a device runtime's checked code records into a buffer its manifest names (CPU AOT code would
    # call back into the Python process that compiled it: not for files)
    checked = bool(options.check_bounds) and runtime.checks_bounds and runtime.capabilities(t).device
    lowered = lower_all(runtime, programs, t, check_bounds=checked, timings=tm, decomposed=kind != "loops")
    if kind == "schedule":
        text = "\n\n".join(lw.sched.dump() for lw in lowered)
        return {".txt": f"{text}\n\ntarget {t.describe()}\n"}
    if kind == "loops":
        return {".txt": "\n\n".join(lw.loops() for lw in lowered) + f"\n\ntarget {t.describe()}\n"}
    options = replace(options, extra={**options.extra, "aot": True})  # files for another machine
    with tm.stage("render"):
        src = runtime.render(lowered, t, options)
    with tm.stage("compile"):  # (the source itself for -S: no time)
        out = runtime.artifacts(src, kind, lowered, t, options)
    if options.verbose:
        print(tm.line(f"{runtime.name} --emit {kind}"), file=sys.stderr)
    return out
