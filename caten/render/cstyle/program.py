"""Whole device programs: lowered kernels -> device kernels, with what a host needs to run
them (buffers with sizes, launches with sizes as expressions of the dims), the one source file
of several programs, and the JSON manifest written beside `-S` output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.oob import DEVICE_BUF, SLOTS
from caten.render.cstyle.gemm import Tile
from caten.render.cstyle.grid import DeviceKernel, device_kernels
from caten.render.cstyle.helpers import helper_source
from caten.render.cstyle.targets import Target, dim_py, stype

# the work-groups a GPU's full sum is cut into (`Capabilities.threads` of a GPU runtime): about
# one wave of 256-item work-groups on a 132-SM GPU
SUM_GROUPS = 1024


@dataclass
class DeviceBuffer:
    name: str
    dtype: DType
    role: str  # "in" | "out" | "temp"
    index: int  # position among inputs or outputs; -1 for temps
    elems: Dim

    @property
    def nbytes(self) -> Dim:
        return D.mul(self.elems, self.dtype.itemsize)


@dataclass
class DeviceProgram:
    program: object
    name: str
    kernels: list[DeviceKernel]
    buffers: dict[str, DeviceBuffer]
    uses_f64: bool = False
    launches: list[DeviceKernel] = field(default_factory=list)
    steps: list = field(default_factory=list)  # (DeviceKernel, None) or (loop/branch step, {role: DeviceProgram})

    def all_kernels(self) -> list[DeviceKernel]:
        """Its kernels and its bodies' (one source file holds them all)."""
        return self.kernels + [k for _, roles in self.steps if roles for d in roles.values() for k in d.all_kernels()]

    def manifest(self) -> dict:
        p = self.program
        out = {
            "name": p.name, "symbol": self.name,
            "inputs": [{"name": s.name, "dtype": s.dtype.name, "shape": [dim_py(d) for d in s.shape]}
                       for s in p.inputs],
            "outputs": [{"name": s.name, "dtype": s.dtype.name, "shape": [dim_py(d) for d in s.shape]}
                        for s in p.outputs],
            "dims": list(p.dims), "defines": dict(p.defines),
            "derived": {k: dim_py(v) for k, v in p.derived.items()},
            "constraints": [f"{dim_py(c.lhs)} == {dim_py(c.rhs)}" for c in p.constraints],
            "buffers": [{"name": b.name, "role": b.role, "index": b.index, "dtype": b.dtype.name,
                         "storage": stype(b.dtype), "elems": dim_py(b.elems), "bytes": dim_py(b.nbytes)}
                        for b in self.buffers.values()],
            "launches": [k.launch_info() for k in self.kernels],
        }
        if any(roles for _, roles in self.steps):
            # a loop or branch: its steps in order, each a launch or the statement (caten.lower.entry's
            # text: bounds, state buffers, slices) with its bodies' own programs
            out["steps"] = [{"launch": step.name} if roles is None else
                            {"control": step.text(lambda d: str(dim_py(d)))[0],
                             "bodies": {r: sub.manifest() for r, sub in roles.items()}}
                            for step, roles in self.steps]
        return out


def device_program(lowered, target: Target, local: int = 256, coop: bool = True, chunk: int = 1,
                   gemm: Tile | None = None) -> DeviceProgram:
    """The device kernels of one lowered program (`caten.pipeline.Lowered`: schedule, loop IR,
    bounds table), named by its kernels; what a host needs to run them comes with them.
    `gemm`: GEMMs as thread-block tiles of this shape (a GPU; caten.render.cstyle.gemm). A loop
    or branch is a step of `steps` holding its bodies' own device programs (the host runs it)."""
    sched, lkernels, table, program = lowered.sched, lowered.kernels, lowered.bounds, lowered.program
    defines = program.dim_defines()
    buffers: dict[str, DeviceBuffer] = {}
    if table is not None:
        buffers[DEVICE_BUF] = DeviceBuffer(DEVICE_BUF, T.i64, DEVICE_BUF, -1, SLOTS)
    for b in sched.buffers.values():
        if b.role != "temp" or b.local < 0:
            buffers[b.name] = DeviceBuffer(b.name, b.dtype, b.role, b.index, D.prod(b.shape))
    used: set[str] = set()
    dks: list[DeviceKernel] = []
    steps: list = []
    by_name = {sk.name: sk for sk in sched.kernels}
    subs = iter(sorted(lowered.subs.items()))
    for call in lowered.plan.calls:
        if not isinstance(call, tuple):  # a loop or branch: its bodies are device programs of their own
            _, roles = next(subs)
            steps.append((call, {r: device_program(lw, target, local, coop, chunk, gemm) for r, lw in roles.items()}))
            continue
        lk = next(k for k in lkernels if k.name == call[0])
        sk = by_name[lk.name]
        local_bufs = {p.name: D.prod(sched.buffers[p.name].shape[sched.buffers[p.name].local:])
                      for p in lk.params if p.name in sched.buffers and sched.buffers[p.name].role == "temp"
                      and sched.buffers[p.name].local >= 0}
        ks, sizes = device_kernels(lk, sk.outer, local_bufs, target, defines, used, local, coop, chunk, gemm)
        for b, n in sizes.items():
            sb = sched.buffers[b]
            buffers[b] = DeviceBuffer(b, sb.dtype, "temp", -1, n)
        dks += ks
        steps += [(k, None) for k in ks]
    dp = DeviceProgram(program, lowered.name, dks, buffers, steps=steps)
    dp.bounds = table  # type: ignore[attr-defined]
    subs_dp = [x for _, roles in steps if roles for x in roles.values()]
    dp.uses_f64 = any(getattr(k, "uses_f64", False) for k in dks) or any(
        b.dtype == T.f64 for b in buffers.values()) or any(x.uses_f64 for x in subs_dp)
    dp.used = used.union(*(x.used for x in subs_dp))  # type: ignore[attr-defined]
    return dp


def device_source(dps: Sequence[DeviceProgram], target: Target, header: str = "") -> str:
    """One source file holding the kernels of several device programs."""
    used: set[str] = set()
    for dp in dps:
        used |= dp.used  # type: ignore[attr-defined]
    parts = [header] if header else []
    parts.append(target.prelude)
    hs = helper_source(target, used)
    if hs:
        parts.append(hs)
    if any(getattr(dp, "bounds", None) for dp in dps):
        from caten.render.checks import c_recorder

        parts.append(c_recorder(target.func, target.gptr))
    for dp in dps:
        parts += [k.source for k in dp.all_kernels()]
    return "\n".join(parts) + "\n"


def manifest(dps: Sequence[DeviceProgram], runtime: str, source_name: str, extra: dict | None = None) -> dict:
    out = {"format": "caten-device-manifest/1", "runtime": runtime, "source": source_name,
           "notes": "sizes are Python expressions over the dims; launch kernels in order (a program with "
                    "loops or branches: its `steps`); "
                    "f16/bf16 buffers hold their 16-bit patterns, float8 and bool buffers one byte per element",
           "programs": [dp.manifest() for dp in dps]}
    out.update(extra or {})
    return out
