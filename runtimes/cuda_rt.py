"""`-r cuda`: the loop IR rendered as CUDA C by the shared C-style renderer, compiled to PTX
in-process with NVRTC (the `nvidia-cuda-nvrtc` wheel, through ctypes) or with `nvcc -ptx`,
and run through `cuda-bindings` (cuda.bindings.driver) when a GPU is present.

Kernels map their independent leading loops to threads (one thread per iteration) or to
thread blocks of 256 (threads share the inner loops; reductions combine in shared memory).
`-S` writes the .cu source, `--emit asm` the PTX, `--emit lib`/`obj` a cubin (ptxas), each with
a JSON manifest beside it (kernels, argument order, buffer and launch sizes as expressions of
the dims). Without a GPU the runtime is unavailable but emits all of these.
Target: CATEN_CUDA_ARCH (e.g. sm_90; default sm_80, or the GPU's own when one is present).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import astuple

import numpy as np

from caten.errors import Error
from caten.ir.ops import Op
from caten.plugin import Capabilities, Options, Runtime
from caten.render import cstyle as CS
from caten.run.device import Adapter, DeviceExecutable, Grid
from caten.target import Target

BLOCK = 256
_state: dict = {}


# NVRTC through ctypes -------------------------------------------------------------------------
def _nvrtc_lib():
    if "nvrtc" in _state:
        return _state["nvrtc"]
    lib = None
    paths: list[str] = []
    try:
        from cuda import pathfinder

        paths.append(pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:
        pass
    for sp in sys.path:
        paths += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libnvrtc.so*")))
        paths += sorted(glob.glob(os.path.join(sp, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    found = ctypes.util.find_library("nvrtc")
    if found:
        paths.append(found)
    for p in paths:
        if "builtins" in p:
            continue
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError:
            continue
    _state["nvrtc"] = lib
    return lib


def nvrtc_version() -> tuple[int, int] | None:
    lib = _nvrtc_lib()
    if lib is None:
        return None
    a, b = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
    return a.value, b.value


def nvrtc_ptx(src: str, arch: str) -> str:
    lib = _nvrtc_lib()
    prog = ctypes.c_void_p()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"caten.cu", 0, None, None)
    if r != 0:
        raise Error(f"nvrtcCreateProgram failed ({r})")
    opts = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}".encode(), b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    try:
        r = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if r != 0:
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise Error(f"NVRTC failed on generated code (a caten bug): {log.value.decode(errors='replace')[:2000]}")
        n = ctypes.c_size_t()
        lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetPTX(prog, buf)
        return buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _tool_version(tool: str) -> tuple[int, int] | None:
    path = shutil.which(tool)
    if path is None:
        return None
    r = subprocess.run([path, "--version"], capture_output=True, text=True)
    m = re.search(r"release (\d+)\.(\d+)", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def nvcc_ptx(src: str, arch: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        cu, ptx = os.path.join(d, "k.cu"), os.path.join(d, "k.ptx")
        with open(cu, "w") as f:
            f.write(src)
        r = subprocess.run(["nvcc", "-ptx", f"-arch={arch.replace('sm_', 'compute_')}", "-o", ptx, cu],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"nvcc failed on generated code (a caten bug): {r.stderr.strip()[:2000]}")
        with open(ptx) as f:
            return f.read()


def to_ptx(src: str, arch: str) -> str:
    """PTX of CUDA C source: NVRTC in-process unless it is newer than the local toolkit's ptxas
    (whose PTX it could not assemble); else `nvcc -ptx`."""
    nv, tk = nvrtc_version(), _tool_version("ptxas") or _tool_version("nvcc")
    use_nvrtc = nv is not None and (tk is None or nv <= tk or shutil.which("nvcc") is None)
    if use_nvrtc:
        return nvrtc_ptx(src, arch)
    if shutil.which("nvcc"):
        return nvcc_ptx(src, arch)
    raise Error("no CUDA compiler: install nvidia-cuda-nvrtc (pip install 'caten[cuda]') or the CUDA toolkit (nvcc)")


def cubin(ptx: str, arch: str) -> bytes:
    if shutil.which("ptxas") is None:
        raise Error("ptxas is not on PATH", hint="use --emit asm for PTX, or install the CUDA toolkit")
    with tempfile.TemporaryDirectory() as d:
        p, o = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run(["ptxas", f"-arch={arch}", "-o", o, p], capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"ptxas failed: {r.stderr.strip()[:2000]}")
        with open(o, "rb") as f:
            return f.read()


# the driver -----------------------------------------------------------------------------------
def _driver():
    from cuda.bindings import driver as cu

    return cu


def _ok(res):
    cu = _driver()
    err, *rest = res if isinstance(res, tuple) else (res,)
    if err != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(err)[1]
        raise Error(f"CUDA driver error {name.decode() if isinstance(name, bytes) else name}")
    return rest[0] if len(rest) == 1 else rest


def gpu() -> dict:
    """Initialise the driver and the first GPU's primary context, once."""
    if "gpu" not in _state:
        cu = _driver()
        _ok(cu.cuInit(0))
        if _ok(cu.cuDeviceGetCount()) < 1:
            raise Error("no CUDA device")
        dev = _ok(cu.cuDeviceGet(0))
        ctx = _ok(cu.cuDevicePrimaryCtxRetain(dev))
        _ok(cu.cuCtxSetCurrent(ctx))
        a = cu.CUdevice_attribute
        major = _ok(cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = _ok(cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        name = _ok(cu.cuDeviceGetName(64, dev))
        _state["gpu"] = {"dev": dev, "ctx": ctx, "arch": f"sm_{major}{minor}",
                         "name": name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)}
    _ok(_driver().cuCtxSetCurrent(_state["gpu"]["ctx"]))
    return _state["gpu"]


def arch() -> str:
    env = os.environ.get("CATEN_CUDA_ARCH")
    if env:
        return env if env.startswith("sm_") else f"sm_{env}"
    return "sm_80"


class CUDAAdapter(Adapter):
    """The CUDA driver under caten.run.device: the null stream of the first GPU's primary
    context. The PTX module is loaded at the first run, so that compiling (e.g. `caten
    test-runtime --compile-only`) works on a machine without a GPU."""

    def __init__(self, ptx: str):
        self.ptx = ptx
        self.module = None

    def begin(self) -> None:
        gpu()  # initialises the driver once; makes the context current on this thread

    def kernel(self, name: str):
        cu = _driver()
        if self.module is None:
            self.module = _ok(cu.cuModuleLoadData(self.ptx.encode() + b"\0"))
        return _ok(cu.cuModuleGetFunction(self.module, name.encode()))

    def alloc(self, nbytes: int):
        return _ok(_driver().cuMemAlloc(nbytes))  # a CUdeviceptr

    def free(self, buf) -> None:
        _ok(_driver().cuMemFree(buf))

    def copy_in(self, buf, array: np.ndarray) -> None:
        _ok(_driver().cuMemcpyHtoD(buf, array.ctypes.data, array.nbytes))

    def copy_out(self, buf, array: np.ndarray) -> None:
        _ok(_driver().cuMemcpyDtoH(array.ctypes.data, buf, array.nbytes))

    def copy(self, dst, dst_offset: int, src, src_offset: int, nbytes: int) -> None:
        _ok(_driver().cuMemcpyDtoD(int(dst) + dst_offset, int(src) + src_offset, nbytes))

    def launch(self, kernel, args, grid: Grid) -> None:
        cu = _driver()
        # kernelParams: one pointer per argument, to its value (device pointers as u64, dims as i64)
        vals = [np.array([a], np.int64) if isinstance(a, np.int64) else np.array([int(a)], np.uint64) for a in args]
        argv = np.array([v.ctypes.data for v in vals], np.uint64)
        _ok(cu.cuLaunchKernel(kernel, grid.groups, 1, 1, grid.local, 1, 1, 0, cu.CUstream(0), argv.ctypes.data, 0))

    def sync(self) -> None:
        _ok(_driver().cuCtxSynchronize())


class CUDARuntime(Runtime):
    name = "cuda"
    renders = True
    artifact_kind = "ptx"
    checks_bounds = True  # the shared device host reads the error record back, as OpenCL's does
    description = "CUDA C from the shared C-style renderer -> PTX (NVRTC or nvcc), run with cuda-bindings"

    def device(self) -> str:
        """What `caten test-runtime` reports as the device."""
        ok, why = self.available()
        return why if ok else f"no CUDA GPU here: compile-only, PTX for {arch()} checked by ptxas"

    def available(self) -> tuple[bool, str]:
        try:
            _driver()
        except Exception as e:
            return False, f"no CUDA GPU: cuda-bindings is not importable ({e}); pip install 'caten[cuda]'"
        try:
            g = gpu()
        except Exception as e:
            return False, f"no CUDA GPU: {e}"
        if _nvrtc_lib() is None and shutil.which("nvcc") is None:
            return False, "no CUDA compiler: pip install nvidia-cuda-nvrtc, or put nvcc on PATH"
        return True, g["name"]

    def supports(self, op: Op, dtype) -> bool:
        return op is not Op.EXTERN

    def capabilities(self, t: Target) -> Capabilities:
        # EXP2 is CUDA's exp2f/exp2 (2 and 1 ulp: the special-function unit and a scaling, ~5
        # instructions; the primitives' polynomial is ~30, which bound a softmax by arithmetic);
        # the other hard ops in primitives. A full sum is cut into SUM_GROUPS work-groups' partial
        # sums (`threads`). The GEMM's tile is part of every cache key.
        return Capabilities(threads=CS.SUM_GROUPS, device=True, native=frozenset({Op.EXP2}), gpu=True,
                            gemm_tile=astuple(CS.Tile.from_env()))

    def toolchain(self, t: Target) -> str:
        return f"nvrtc {nvrtc_version()} nvcc {_tool_version('nvcc')} {_code_arch()[0]} block={BLOCK}"

    def _program(self, lowered, t: Target) -> CS.DeviceProgram:
        tile = CS.Tile(*self.capabilities(t).gemm_tile)
        return CS.device_program(lowered, CS.CUDA, local=BLOCK, coop=True, gemm=tile)

    def render(self, lowered, t: Target, options: Options) -> str:
        aot = options.extra.get("aot")
        header = "/* generated by caten -r cuda; see the .json manifest beside it */" if aot else ""
        return CS.device_source([self._program(lw, t) for lw in lowered], CS.CUDA, header)

    def compile_source(self, source: str, t: Target, options: Options) -> bytes:
        """PTX for this process's GPU (or CATEN_CUDA_ARCH / sm_80 without one, checked by ptxas)."""
        target, on_gpu = _code_arch()
        ptx = to_ptx(source, target)
        if not on_gpu and shutil.which("ptxas"):
            cubin(ptx, target)  # raises with ptxas's message if the PTX does not assemble
        return ptx.encode()

    def load(self, artifact: bytes, lowered, t: Target, options: Options) -> DeviceExecutable:
        return DeviceExecutable(self._program(lowered, t), CUDAAdapter(artifact.decode()))

    def artifacts(self, source: str, kind: str, lowered, t: Target,
                  options: Options) -> dict[str, bytes | str]:
        if kind not in ("source", "asm", "lib", "obj"):
            raise Error(f"runtime 'cuda' cannot emit '{kind}'", hint="use -S (CUDA C), asm (PTX) or lib (cubin)")
        dps = [self._program(lw, t) for lw in lowered]
        target = arch()
        man = json.dumps(CS.manifest(dps, "cuda", "", {"language": "CUDA C++", "arch": target,
                                                      "block": BLOCK}), indent=1) + "\n"
        if kind == "source":
            return {".cu": source, ".json": man}
        ptx = to_ptx(source, target)
        if kind == "asm":
            return {".ptx": ptx, ".json": man}
        return {".cubin": cubin(ptx, target), ".json": man}


def _code_arch() -> tuple[str, bool]:
    """(the sm_XX to compile for, whether a GPU is here to run it)."""
    try:
        return os.environ.get("CATEN_CUDA_ARCH") or gpu()["arch"], True
    except Exception:  # no GPU here: compile for CATEN_CUDA_ARCH or sm_80 and check with ptxas
        return arch(), False


RUNTIME = CUDARuntime()
