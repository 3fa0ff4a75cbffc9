"""Where a compiled composite spends its time, kernel by kernel, against the machine's roofline.

The llvm runtime compiled with `Options(profile=True)` adds each kernel call's cycles to a
counter (caten.render.llvm.entry); the counter is calibrated against the wall clock. A kernel's
work comes from its schedule: FLOPs are the ops of each stage's loop body times its iteration
space (a contraction's multiply and add: 2 per point), bytes are the buffers it reads and writes
(each once: a lower bound of its traffic). The roofline they are set against is
caten.compile.roofline's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir import dims as D
from caten.ir.ops import FREE, Op


@dataclass
class KernelStat:
    name: str
    seconds: float  # per call
    flops: float
    bytes: float
    stages: list[KernelStat] = field(default_factory=list)  # a kernel's stages (its time shared out)

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbytes(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")


def _cone_ops(n: Any, stop: set) -> int:
    """Ops computed per point of n's loop: n and its operands up to stored values (views free)."""
    seen, stack, count = {n}, [n], 0
    while stack:
        x = stack.pop()
        count += x.op not in FREE
        for s in x.src:
            if s not in seen and s not in stop:
                seen.add(s)
                stack.append(s)
    return count


def kernel_work(sched: Any, env: dict[str, int]) -> list[tuple[float, float]]:
    """(FLOPs, bytes) of each kernel of a schedule at the dims `env`."""
    out = []
    for k in sched.kernels:
        flops = sum(stage_work(sched, st, env)[0] for st in k.stages)
        out.append((flops, _nbytes(sched, set(k.reads) | set(k.writes), env)))
    return out


def stage_work(sched: Any, st: Any, env: dict[str, int]) -> tuple[float, float]:
    """(FLOPs, bytes) of one schedule stage: the ops of its loop body times its points, and the
    stored values it reads and the buffer it writes (each once)."""
    stored = set(sched.node_buf)
    n = st.node

    def size(shape: Any) -> float:
        return float(np.prod([D.evaluate(d, env) for d in shape], dtype=np.float64))

    if n.op is Op.REDUCE and st.plan is not None and st.plan.gemm is not None:
        flops = 2 * size(n.src[0].shape)  # a packed GEMM: its operands are computed once each, not per point
    elif n.op is Op.REDUCE:
        src = n.src[0]
        flops = size(src.shape) * (_cone_ops(src, stored) + 1) if src not in stored else size(src.shape)
    else:
        flops = size(n.shape) * max(1, _cone_ops(n, stored) - (n.op in FREE))
    reads: set[str] = set()
    seen, stack = {n}, list(n.src)
    while stack:
        x = stack.pop()
        if x in stored:
            reads.add(sched.node_buf[x])
            continue
        for s in x.src:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return flops, _nbytes(sched, reads | ({st.buffer} if st.buffer else set()), env)


def _nbytes(sched: Any, bufs: set[str], env: dict[str, int]) -> float:
    return sum(float(D.evaluate(sched.buffers[b].nbytes, env)) for b in bufs if b in sched.buffers)


def _describe(st: Any, env: dict[str, int]) -> str:
    """A stage in a few words: a GEMM's M x N x K, else its op and shape."""
    n = st.node

    def dims(ds: Any) -> str:
        return "x".join(str(D.evaluate(d, env)) for d in ds)
    if st.plan is not None and st.plan.gemm is not None:
        g = st.plan.gemm
        mnk = [D.evaluate(d, env) for d in (g.M, g.N, g.K)]
        batch = np.prod([D.evaluate(d, env) for d in n.src[0].shape], dtype=np.float64) / max(1, np.prod(mnk))
        return f"{'conv' if g.direct is not None else 'gemm'} {f'{batch:.0f} x ' if batch > 1 else ''}{dims(mnk)}"
    op = f"reduce-{n.arg[0]}" if n.op is Op.REDUCE else n.op.name.lower()
    return f"{op} {dims(n.shape)}"


def stage_stats(sched: Any, kernel: Any, stat: KernelStat, cycles: list[tuple[int, int]],
                env: dict[str, int]) -> list[KernelStat]:
    """The schedule stages of one kernel, its time shared out by their cycles (summed over the
    threads that ran each: under a split outer loop the stages' cycles add up to about the
    threads times the kernel's); cycles outside any known stage (packing operands once, before
    the threads start) make a row of their own. A stage's bytes count each buffer once: a
    stage whose data stays in cache can run past the DRAM roofline."""
    total = sum(c for _, c in cycles)
    if total <= 0:
        return []
    by: dict[int, int] = {}
    for si, c in cycles:
        by[si] = by.get(si, 0) + c
    rows = []
    for si, c in sorted(by.items()):
        share = stat.seconds * c / total
        if 0 <= si < len(kernel.stages):
            st = kernel.stages[si]
            flops, nbytes = stage_work(sched, st, env)
            rows.append(KernelStat(f"  s{si} {_describe(st, env)}", share, flops, nbytes))
        else:
            rows.append(KernelStat("  (outside the stages)", share, 0.0, 0.0))
    return rows


@dataclass
class Profile:
    """What `profile` measured: each kernel's time in the instrumented build, and the time of a
    whole call of the plain build (what a caller gets) beside the instrumented one's."""
    stats: list[KernelStat]
    call_seconds: float  # the plain build's median call (the instrumented one's where none was given)
    profiled_seconds: float  # the instrumented build's median call
    calls: int  # calls timed of each build


def profile(composite: Any, arrays: list[np.ndarray], reps: int = 10, plain: Any = None,
            seconds: float = 0.3) -> Profile:
    """Per-kernel time of `composite` (compiled with Options(profile=True)) on `arrays`, and the
    time of one call of `plain` (the same composite compiled without counters).

    Each build is called as many times, at least `reps` and for at least `seconds`, after
    warm-up calls, the plain build first: each module has a thread pool of its own, whose
    workers spin and poll for a while after its last loop, so calls alternating between the
    two builds made each build's workers take the cores the other's needed (plain calls
    1.1-1.4x a caller's).
    A call's time is the median of its calls, not their mean: on a loaded 2-core host a call
    whose pool thread is descheduled takes 10-30x the others, and the mean of ten calls read
    2-5x a caller's warm call. The kernels' times are the means over the instrumented calls at
    or below that build's median (the same quiet calls for every kernel, so that they add up
    to at most that call)."""
    from caten.run.module import check_shapes

    types = composite._bind_types(arrays)
    prog, exe = composite.program(types)
    if not hasattr(exe, "kernel_cycles"):
        raise Error(f"runtime '{composite.module.runtime.name}' cannot time kernels", hint="profile with -r llvm")
    env = {**prog.defines, **check_shapes(prog, arrays)}
    plain_walls, n, secs = [], max(1, reps), seconds
    if plain is not None:
        _warm(plain, arrays)
        plain_walls = _timed(plain, arrays, n, seconds)
        n, secs = len(plain_walls), 0.0  # the instrumented build: as many calls
    cycles: list[list[int]] = []
    stages: list[dict[str, list[tuple[int, int]]]] = []

    def counted() -> None:
        cycles.append(exe.kernel_cycles(reset=True))
        stages.append(exe.stage_cycles(reset=True))

    c0, t0 = exe.cycles(), time.perf_counter()
    _warm(composite, arrays)
    exe.kernel_cycles(reset=True)
    exe.stage_cycles(reset=True)
    walls = _timed(composite, arrays, n, secs, after=counted)
    hz = (exe.cycles() - c0) / (time.perf_counter() - t0)
    med = float(np.median(walls))
    quiet = [i for i, w in enumerate(walls) if w <= med]
    per_kernel = np.mean([cycles[i] for i in quiet], axis=0) if cycles[0] else []
    work = kernel_work(exe.sched, env)
    if len(work) != len(per_kernel):
        work = [(0.0, 0.0)] * len(per_kernel)
    label = composite.cdef.name
    stats = [KernelStat(f"{label}__k{i}", float(c) / hz, f, b) for i, (c, (f, b)) in enumerate(zip(per_kernel, work))]
    if len(exe.sched.kernels) == len(stats):
        for name, k, st in zip(exe.kernel_names, exe.sched.kernels, stats):
            summed: dict[int, int] = {}
            for i in quiet:
                for si, c in stages[i].get(name, []):
                    summed[si] = summed.get(si, 0) + c
            st.stages = stage_stats(exe.sched, k, st, sorted(summed.items()), env)
    return Profile(stats, float(np.median(plain_walls)) if plain_walls else med, med, len(walls))


def _timed(fn: Any, arrays: list[np.ndarray], n: int, seconds: float = 0.0, after: Any = None) -> list[float]:
    """Seconds of each of `n` calls of `fn`, and of more until `seconds` have passed; `after`
    runs after each call, untimed."""
    walls: list[float] = []
    t0 = time.perf_counter()
    while len(walls) < n or time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        fn(*arrays)
        walls.append(time.perf_counter() - t)
        if after:
            after()
    return walls


def _warm(fn: Any, arrays: list[np.ndarray], seconds: float = 0.03) -> None:
    """Call `fn` until pages are touched and pool threads up (>= 5 calls and `seconds`)."""
    _timed(fn, arrays, 5, seconds)
