"""The CPU a program is compiled for: the host, or one named with `--cpu` / `CATEN_CPU`.

Why a separate target: the project's machines are of two kinds (AVX2+FMA AMD EPYC, AVX-512 Intel),
and code built on one must be inspectable for the other. A target fixes the LLVM cpu name and
feature string, the C compiler's `-march`, and the kernel shapes that depend on the vector
registers (the GEMM micro-tile width, LLVM's preferred vector width). The spec is
`NAME[,+feature,-feature...]`, e.g. `znver3`, `rocketlake`, `x86-64-v3`, `host`, or
`znver3,-avx2`. A target the host cannot run (wider vectors than it has) can still be emitted
(`-S`, `--emit obj|lib`), never run here.

The scheduler reads the target through `current()`, set by a runtime with `use(target)` while
it builds, so that stages below the runtime need no extra parameter.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from caten.errors import Error

# vector register width of the LLVM/GCC x86 cpu names the project meets (others: by features, else SSE)
_AVX512 = {"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
           "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "knl", "knm",
           "znver4", "znver5", "x86-64-v4"}
_AVX2 = {"haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
         "gracemont", "znver1", "znver2", "znver3", "bdver4", "x86-64-v3"}
# per-core L2 bytes of the cpu names the project meets (the GEMM's packed B block lives there);
# others get 512 KiB, a size every x86 core of the last decade has at least half of
_L2 = {"znver1": 512 << 10, "znver2": 512 << 10, "znver3": 512 << 10, "znver4": 1 << 20, "znver5": 1 << 20,
       "skylake-avx512": 1 << 20, "cascadelake": 1 << 20, "cooperlake": 1 << 20, "icelake-server": 1280 << 10,
       "sapphirerapids": 2 << 20, "emeraldrapids": 2 << 20, "graniterapids": 2 << 20, "rocketlake": 512 << 10,
       "icelake-client": 512 << 10, "tigerlake": 1280 << 10, "alderlake": 1280 << 10, "raptorlake": 2 << 20,
       "haswell": 256 << 10, "broadwell": 256 << 10, "skylake": 256 << 10}
L2_DEFAULT = 512 << 10
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_FEAT = re.compile(r"^[+-][A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Target:
    """One CPU to compile for. `native` is True for the host itself (then `-march=native`)."""

    cpu: str
    features: str
    vector_bits: int
    native: bool = False
    l2_bytes: int = L2_DEFAULT  # one core's L2 cache: the GEMM sizes its packed B block by it
    # GEMM shape knobs a `caten tune` search chose (caten.schedule.plan.KNOBS), over the model's
    gemm: tuple[tuple[str, int], ...] = ()

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    def key(self) -> tuple:
        """What about the target changes generated code (part of every compile-cache key)."""
        return (self.cpu, self.features, self.vector_bits, self.l2_bytes) + ((self.gemm,) if self.gemm else ())

    def describe(self) -> str:
        isa = {512: "AVX-512", 256: "AVX2", 128: "SSE"}.get(self.vector_bits, f"{self.vector_bits}-bit")
        tuned = f", tuned {' '.join(f'{k}={v}' for k, v in self.gemm)}" if self.gemm else ""
        return f"{self.cpu} ({isa}{', host' if self.native else ''}{tuned})"


def vector_registers(vector_bytes: int) -> int:
    """Vector registers of an x86 target of registers `vector_bytes` wide: 32 with AVX-512, 16
    below it (what a GEMM micro-tile's accumulators and an FMA peak's chains fit in)."""
    return 32 if vector_bytes >= 64 else 16


def _vector_bits(cpu: str, features: str) -> int:
    feats = {f[1:]: f[0] == "+" for f in features.split(",") if f[:1] in "+-" and len(f) > 1}
    bits = 512 if cpu in _AVX512 else 256 if cpu in _AVX2 else 128
    if feats.get("avx512f"):
        bits = 512
    elif feats.get("avx2") and bits < 256:
        bits = 256
    if feats.get("avx512f") is False:
        bits = min(bits, 256)
    if feats.get("avx2") is False or feats.get("avx") is False:
        bits = min(bits, 128)
    return bits


def _host_l2(cpu: str) -> int:
    """This machine's per-core L2 size from sysfs (a VM reports its host's), else by cpu name."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in sorted(os.listdir(base)):
            with open(f"{base}/{d}/level") as f:
                level = f.read().strip()
            with open(f"{base}/{d}/type") as f:
                kind = f.read().strip()
            if level == "2" and kind in ("Unified", "Data"):
                with open(f"{base}/{d}/size") as f:
                    size = f.read().strip().upper()
                mult = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
                n = int(size.rstrip("KM")) * mult
                if n >= 64 << 10:
                    return n
    except (OSError, ValueError):
        pass
    return _L2.get(cpu, L2_DEFAULT)


_HOST: list[Target] = []


def host() -> Target:
    """The machine this process runs on, as LLVM sees it (cpu name and enabled features)."""
    if not _HOST:
        import llvmlite.binding as llvm

        try:
            llvm.initialize_native_target()
        except Exception:  # pragma: no cover - llvmlite that initializes itself
            pass
        cpu = llvm.get_host_cpu_name()
        try:
            feats = llvm.get_host_cpu_features().flatten()
        except Exception:  # pragma: no cover - a host LLVM cannot describe
            feats = ""
        _HOST.append(Target(cpu, feats, _vector_bits(cpu, feats), native=True, l2_bytes=_host_l2(cpu)))
    return _HOST[0]


def parse(spec: str) -> Target:
    """A target from `NAME[,+feat,-feat...]`; `host` (or empty) is this machine."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or parts[0] in ("host", "native"):
        if len(parts) > 1:
            raise Error(f"target '{spec}': features go with a cpu name, not with 'host'",
                        hint="name the cpu, e.g. --cpu znver3,-avx2")
        return host()
    name, feats = parts[0], parts[1:]
    if not _NAME.match(name):
        raise Error(f"target cpu '{name[:80]}' is not a cpu name",
                    hint="e.g. --cpu znver3, --cpu rocketlake, --cpu host")
    bad = [f for f in feats if not _FEAT.match(f)]
    if bad:
        raise Error(f"target feature '{bad[0][:80]}' must be +NAME or -NAME", hint="e.g. --cpu znver3,+avx2,-avx512f")
    features = ",".join(feats)
    h = host()
    if name == h.cpu and not features:
        return h
    return Target(name, features, _vector_bits(name, features), l2_bytes=_L2.get(name, L2_DEFAULT))


def resolve(spec: str | None = None) -> Target:
    """The target of an explicit spec, else of `CATEN_CPU`, else the host."""
    if spec is None or spec == "":
        spec = os.environ.get("CATEN_CPU", "")
    return parse(spec)


def check_runnable(t: Target) -> None:
    """Refuse to run code for a CPU with wider vectors than the host has (it would die of SIGILL)."""
    h = host()
    if t.native or t.vector_bits <= h.vector_bits:
        return
    raise Error(f"code built for {t.describe()} cannot run on this host, {h.describe()}",
                hint="emit it instead (-S, --emit obj|lib), or pick a target this host runs (--cpu host)")


_CURRENT: contextvars.ContextVar[Target | None] = contextvars.ContextVar("caten_target", default=None)


def current() -> Target | None:
    """The target being compiled for, if a runtime set one (device runtimes do not)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use(t: Target | None) -> Iterator[None]:
    tok = _CURRENT.set(t)
    try:
        yield
    finally:
        _CURRENT.reset(tok)
