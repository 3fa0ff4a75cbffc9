"""`-r opencl`: the loop IR rendered as OpenCL C by the shared C-style renderer, built and run
with pyopencl on any OpenCL device (PoCL on the CPU when nothing else is there).

Each loop-IR kernel becomes one or more device kernels (see `caten.render.cstyle`): the
independent leading loops spread over work-items, or over work-groups whose work-items share
the inner loops, reductions combining in local memory. A program's intermediates stay on the
device between its kernels; on a CPU device inputs and outputs are used in place
(CL_MEM_USE_HOST_PTR), elsewhere they are copied. `-S` writes the .cl source and a JSON
manifest beside it (kernels, argument order, buffer and launch sizes as expressions of the dims).
Pick a device with CATEN_OPENCL_DEVICE=PLATFORM_SUBSTRING[:DEVICE_INDEX] (default: a GPU if
there is one, else the first device).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import astuple

import numpy as np

from caten.errors import Error
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.plugin import Capabilities, Options, Runtime
from caten.render import cstyle as CS
from caten.run.device import Adapter, DeviceExecutable, Grid
from caten.target import Target

# OpenCL C's float `/` and sqrt may be off by 2.5 and 3 ulp unless asked for correct rounding;
# caten's `/` is IEEE's (LANGUAGE.md 5.1), so every build asks (the manifest tells a host to, too)
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)

_state: dict = {}


def _cl():
    import pyopencl as cl

    return cl


def device():
    """(context, queue, device), created once."""
    if "dev" not in _state:
        cl = _cl()
        devs = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
        if not devs:
            raise Error("no OpenCL device found")
        want = os.environ.get("CATEN_OPENCL_DEVICE", "")
        if want:
            plat, _, idx = want.partition(":")
            devs = [(p, d) for p, d in devs if plat.lower() in p.name.lower()] or devs
            devs = devs[int(idx):] if idx.isdigit() else devs
        gpus = [pd for pd in devs if pd[1].type & cl.device_type.GPU]
        d = (gpus or devs)[0][1]
        ctx = cl.Context([d])
        _state["dev"] = (ctx, cl.CommandQueue(ctx), d)
    return _state["dev"]


def settings(dev) -> dict:
    """How to map kernels onto a device: work-group size, whether work-groups share inner loops,
    the chunk of iterations a CPU work-item runs as a plain (vectorizable) loop, the target table."""
    cl = _cl()
    cpu = bool(dev.type & cl.device_type.CPU)
    lim = min(256, dev.max_work_group_size)
    local = 1 << (lim.bit_length() - 1)
    env = {k: int(os.environ[f"CATEN_OPENCL_{k.upper()}"]) for k in ("local", "chunk", "coop", "gemm")
           if os.environ.get(f"CATEN_OPENCL_{k.upper()}", "").isdigit()}
    if cpu:
        s = {"local": 16, "coop": False, "chunk": 1024, "cpu": True, "target": CS.OPENCL, "gemm": False}
    else:
        s = {"local": local, "coop": True, "chunk": 1, "cpu": False, "target": CS.OPENCL, "gemm": lim >= 256}
    s.update({k: (bool(v) if k in ("coop", "gemm") else v) for k, v in env.items()})
    return s


def _gemm_tiles() -> bool:
    """Whether GEMMs are thread-block tiles here (a GPU, or CATEN_OPENCL_GEMM=1) rather than packed
    CPU plans (caten.render.cstyle.gemm)."""
    try:
        return settings(device()[2])["gemm"]
    except Exception:  # no device: `--emit` writes the CPU plans
        return False


class OpenCLAdapter(Adapter):
    """pyopencl under caten.run.device: one queue; on a CPU device inputs and outputs are the
    host arrays themselves (CL_MEM_USE_HOST_PTR) and items-mode kernels pick their own
    work-group size."""

    def __init__(self, prog, ctx, queue, cpu: bool):
        self.prog, self.ctx, self.queue, self.cpu = prog, ctx, queue, cpu

    def kernel(self, name: str):
        return _cl().Kernel(self.prog, name)

    def alloc(self, nbytes: int):
        return _cl().Buffer(self.ctx, _cl().mem_flags.READ_WRITE, nbytes)

    def host_buffer(self, array: np.ndarray, writable: bool):
        if not self.cpu:
            return None
        mf = _cl().mem_flags
        return _cl().Buffer(self.ctx, (mf.READ_WRITE if writable else mf.READ_ONLY) | mf.USE_HOST_PTR, hostbuf=array)

    def copy_in(self, buf, array: np.ndarray) -> None:
        _cl().enqueue_copy(self.queue, buf, array)

    def copy_out(self, buf, array: np.ndarray) -> None:
        cl = _cl()
        if buf.flags & cl.mem_flags.USE_HOST_PTR:  # the array's own memory: mapping makes it current
            arr, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ, 0, array.shape, array.dtype,
                                           is_blocking=True)
            arr.base.release(self.queue)
        else:
            cl.enqueue_copy(self.queue, array, buf)

    def copy(self, dst, dst_offset: int, src, src_offset: int, nbytes: int) -> None:
        _cl().enqueue_copy(self.queue, dst, src, byte_count=nbytes, src_offset=src_offset, dst_offset=dst_offset)

    def launch(self, kernel, args, grid: Grid) -> None:
        kernel.set_args(*args)
        local = (grid.local,) if (grid.mode == "groups" or not self.cpu) else None
        _cl().enqueue_nd_range_kernel(self.queue, kernel, (grid.groups * grid.local if local else grid.count,), local)

    def sync(self) -> None:
        self.queue.finish()


class OpenCLRuntime(Runtime):
    name = "opencl"
    renders = True
    artifact_kind = "cl"  # the source: the device driver builds it at load (pyopencl caches binaries)
    checks_bounds = True
    description = "OpenCL C from the shared C-style renderer, run with pyopencl (PoCL on the CPU)"

    def available(self) -> tuple[bool, str]:
        try:
            _cl()
        except Exception as e:
            return False, f"pyopencl is not installed ({e}); pip install 'caten[opencl]'"
        try:
            _, _, d = device()
        except Exception as e:
            return False, f"no usable OpenCL device: {e}"
        return True, d.name.strip()

    def supports(self, op: Op, dtype: DType) -> bool:
        if op is Op.EXTERN:
            return False
        if dtype.name == "f64":
            try:
                return "cl_khr_fp64" in device()[2].extensions
            except Exception:
                return True
        return True

    def capabilities(self, t: Target) -> Capabilities:
        gpu = _gemm_tiles()  # (hard ops in primitives; a GPU's full sums over SUM_GROUPS work-groups)
        return Capabilities(threads=CS.SUM_GROUPS if gpu else 1, device=True, native=frozenset(), gpu=gpu,
                            gemm_tile=astuple(CS.Tile.from_env()) if gpu else ())

    def toolchain(self, t: Target) -> str:
        _, _, dev = device()
        st = settings(dev)
        return (f"{dev.platform.name} {dev.name} {dev.driver_version} local={st['local']} coop={st['coop']} "
                f"chunk={st['chunk']} gemm={st['gemm']} {' '.join(BUILD_OPTIONS)}")

    def _programs(self, lowered, t: Target, options: Options) -> tuple[list[CS.DeviceProgram], CS.Target]:
        """Device programs: mapped for this process's device, or generically for `--emit`."""
        tile = self.capabilities(t).gemm_tile
        gemm = CS.Tile(*tile) if tile else None
        if options.extra.get("aot"):
            return [CS.device_program(lw, CS.OPENCL, local=256, coop=True, gemm=gemm) for lw in lowered], CS.OPENCL
        st = settings(device()[2])
        return [CS.device_program(lw, st["target"], local=st["local"], coop=st["coop"], chunk=st["chunk"], gemm=gemm)
                for lw in lowered], st["target"]

    def render(self, lowered, t: Target, options: Options) -> str:
        dps, tgt = self._programs(lowered, t, options)
        header = "/* generated by caten -r opencl; see the .json manifest beside it */" \
            if options.extra.get("aot") else ""
        return CS.device_source(dps, tgt, header)

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        return source.encode()

    def load(self, artifact: bytes, lowered, t: Target, options: Options) -> DeviceExecutable:
        cl = _cl()
        ctx, q, dev = device()
        (dp,), _ = self._programs([lowered], t, options)
        src = artifact.decode()
        try:
            with warnings.catch_warnings():  # e.g. "division by zero" in branches never taken
                warnings.simplefilter("ignore")
                # -w: the device compiler's own warnings (PoCL's clang prints them to stderr)
                prog = cl.Program(ctx, src).build(options=["-w", *BUILD_OPTIONS])
        except cl.RuntimeError as e:
            raise Error(f"the OpenCL compiler failed on generated code (a caten bug): {str(e)[:2000]}") from None
        return DeviceExecutable(dp, OpenCLAdapter(prog, ctx, q, settings(dev)["cpu"]))

    def artifacts(self, source: str, kind: str, lowered, t: Target,
                  options: Options) -> dict[str, bytes | str]:
        if kind not in ("source", "lib"):
            raise Error(f"runtime 'opencl' cannot emit '{kind}'",
                        hint="use -S (OpenCL C source and a JSON manifest); the device driver compiles it")
        dps, _ = self._programs(lowered, t, options)
        man = CS.manifest(dps, "opencl", "", {"language": "OpenCL C 1.2", "build_options": " ".join(BUILD_OPTIONS)})
        return {".cl": source, ".json": json.dumps(man, indent=1) + "\n"}


RUNTIME = OpenCLRuntime()
