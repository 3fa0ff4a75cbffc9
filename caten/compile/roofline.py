"""This host's roofline for `caten profile`: peak FLOP/s and memory bandwidth, measured once per
host CPU and cached.

Both ceilings come from loops written here in LLVM IR, compiled for the host and run on every
thread caten's parallel loops use at once (Python threads calling the JIT code: ctypes lets go
of the GIL for the call):
  - peak FLOP/s: independent chains of vector FMAs (enough to hide the FMA latency on every
    pipe), no memory access. numpy's SGEMM, the measure before, reached 178 GF/s where the FMA
    peak was 226 (AMD Zen 4, 2 cores): caten's GEMMs read 100-103% "of roofline" there.
  - bandwidth: the faster of a vector read stream over a buffer eight times a typical L3 and
    numpy copying it (bytes read and written), since a kernel's bytes count both.
The measures are nobody's code but this module's: caten's own kernels never set their ceiling.
"""

from __future__ import annotations

import ctypes
import json
import threading
import time
from dataclasses import dataclass

import numpy as np

from caten import target
from caten.cache import default_cache, key_of
from caten.compile import llvmobj
from caten.plugin import threads

FMA_X, FMA_Y = 0.9999, 1.0  # a_{k+1} = a_k * x + y: stays normal, never overflows (a -> y / (1 - x))
READ_UNROLL = 8  # vector accumulators of the read stream


@dataclass
class Roofline:
    cpu: str
    peak_gflops: float
    bandwidth_gbs: float

    def attainable(self, intensity: float) -> float:
        """GF/s a kernel of this arithmetic intensity can reach at best."""
        return min(self.peak_gflops, intensity * self.bandwidth_gbs)


def roofline(refresh: bool = False) -> Roofline:
    """This host's peak FLOP/s and memory bandwidth, measured once per CPU and cached (`refresh`:
    measure again, e.g. after a first measurement on a busy machine)."""
    cpu = target.host().describe()
    store = default_cache()
    key = key_of("roofline/2", cpu, str(threads()))
    blob = None if refresh else store.get(key, "roofline")
    if blob is not None:
        try:
            d = json.loads(blob)
            return Roofline(cpu, float(d["peak_gflops"]), float(d["bandwidth_gbs"]))
        except (ValueError, KeyError, TypeError):
            pass
    kernels = Kernels()
    r = Roofline(cpu, kernels.peak_gflops(), max(kernels.read_gbs(), _copy_gbs()))
    store.put(key, "roofline", json.dumps({"peak_gflops": r.peak_gflops, "bandwidth_gbs": r.bandwidth_gbs}).encode())
    return r


def fma_accumulators(vector_bits: int) -> int:
    """Independent FMA chains: latency x pipes needs ~8-10; as many as the vector registers
    hold, less the two operands (30 with AVX-512, 14 below it)."""
    return target.vector_registers(vector_bits // 8) - 2


class Kernels:
    """The FMA and read loops, JIT-compiled for the host once, callable from any thread."""

    def __init__(self) -> None:
        t = target.host()
        self.lanes = max(1, t.vector_bits // 32)
        self.accs = fma_accumulators(t.vector_bits)
        b = llvmobj.llvm()
        mod = llvmobj.optimize(_ir(self.lanes, self.accs, t.cpu, t.features), t.cpu, t.features, 3)
        self._engine = b.create_mcjit_compiler(mod, llvmobj.target_machine(t.cpu, t.features, 3, jit=True, own=True))
        self._engine.finalize_object()
        self.fma = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)(
            self._engine.get_function_address("caten_peak_fma"))
        self.read = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)(
            self._engine.get_function_address("caten_peak_read"))

    def fma_flops(self, iters: int) -> int:
        """FLOPs of one `fma(iters, ...)` call: each chain's multiply and add per iteration."""
        return 2 * iters * self.accs * self.lanes

    def peak_gflops(self, seconds: float = 0.05, reps: int = 5) -> float:
        """GF/s of the FMA loop on every thread at once, the best of `reps` runs of ~`seconds`."""
        iters = 1 << 14
        while self._fma_seconds(iters, 1) < seconds / 4:
            iters *= 4
        n = threads()
        best = min(self._fma_seconds(iters, n) for _ in range(reps))
        return n * self.fma_flops(iters) / best / 1e9

    def _fma_seconds(self, iters: int, n: int) -> float:
        return _on_threads(lambda i: self.fma(iters, FMA_X, FMA_Y), n)

    def read_gbs(self, nbytes: int = 256 << 20, reps: int = 10) -> float:
        """GB/s of the read stream over `nbytes` (first touched here), each thread its slice, or
        one thread all of it where that was faster (a VM's threads may share a memory channel,
        and starting Python threads costs tens of microseconds of the ~8 ms a pass takes)."""
        n = threads()
        step = self.lanes * READ_UNROLL
        count = nbytes // 4 // (n * step) * step  # floats per thread, whole unrolled iterations
        buf = np.ones(count * n, np.float32)
        base = buf.ctypes.data

        def part(i: int) -> None:
            self.read(base + 4 * i * count, count)

        best = min(_on_threads(part, n) for _ in range(reps))
        if n > 1:
            best = min(best, min(_on_threads(lambda i: self.read(base, count * n), 1) for _ in range(reps // 2)))
        return buf.nbytes / best / 1e9


def _on_threads(fn, n: int) -> float:
    """Seconds from releasing `n` threads (each calling fn(i)) to the last one's return."""
    start = threading.Barrier(n + 1)

    def run(i: int) -> None:
        start.wait()
        fn(i)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def _copy_gbs(nbytes: int = 256 << 20, reps: int = 6) -> float:
    """GB/s of numpy copying `nbytes` (read and written)."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best / 1e9


def _ir(lanes: int, accs: int, cpu: str, features: str) -> str:
    """`float caten_peak_fma(i64 n, float x, float y)`: `accs` chains a <- fma(a, x, y), n times,
    the lanes of all summed; `float caten_peak_read(ptr p, i64 n)`: the sum of p's n floats (n
    a multiple of lanes x READ_UNROLL), in READ_UNROLL vector accumulators."""
    v = f"<{lanes} x float>"
    splat = lambda s: (f"  %{s}1 = insertelement {v} poison, float %{s}, i64 0\n"  # noqa: E731
                       f"  %{s}v = shufflevector {v} %{s}1, {v} poison, <{lanes} x i32> zeroinitializer")
    fma = ["define float @caten_peak_fma(i64 %n, float %x, float %y) #0 {", "entry:", splat("x"), splat("y"),
           "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    fma += [f"  %a{j} = phi {v} [zeroinitializer, %entry], [%b{j}, %loop]" for j in range(accs)]
    fma += [f"  %b{j} = call {v} @llvm.fma.v{lanes}f32({v} %a{j}, {v} %xv, {v} %yv)" for j in range(accs)]
    fma += ["  %i1 = add nuw nsw i64 %i, 1", "  %more = icmp slt i64 %i1, %n",
            "  br i1 %more, label %loop, label %done", "done:"]
    fma += _reduce("b", accs, lanes) + ["}"]
    rd = ["define float @caten_peak_read(ptr %p, i64 %n) #0 {", "entry:", "  br label %loop", "loop:",
          "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    rd += [f"  %a{j} = phi {v} [zeroinitializer, %entry], [%b{j}, %loop]" for j in range(READ_UNROLL)]
    for j in range(READ_UNROLL):
        rd += [f"  %o{j} = add i64 %i, {j * lanes}", f"  %q{j} = getelementptr inbounds float, ptr %p, i64 %o{j}",
               f"  %l{j} = load {v}, ptr %q{j}, align 4", f"  %b{j} = fadd {v} %a{j}, %l{j}"]
    rd += [f"  %i1 = add nuw nsw i64 %i, {lanes * READ_UNROLL}", "  %more = icmp slt i64 %i1, %n",
           "  br i1 %more, label %loop, label %done", "done:"]
    rd += _reduce("b", READ_UNROLL, lanes) + ["}"]
    return "\n".join([*fma, *rd, f"declare {v} @llvm.fma.v{lanes}f32({v}, {v}, {v})",
                      f"declare float @llvm.vector.reduce.fadd.v{lanes}f32(float, {v})",
                      f'attributes #0 = {{ nounwind "target-cpu"="{cpu}" "target-features"="{features}" }}', ""])


def _reduce(name: str, count: int, lanes: int) -> list[str]:
    """Sum vectors %{name}0.. into one float returned (after the loop: its order is not timed)."""
    v = f"<{lanes} x float>"
    out, acc = [], f"%{name}0"
    for j in range(1, count):
        out.append(f"  %s{j} = fadd {v} {acc}, %{name}{j}")
        acc = f"%s{j}"
    return out + [f"  %r = call float @llvm.vector.reduce.fadd.v{lanes}f32(float 0.0, {v} {acc})", "  ret float %r"]
