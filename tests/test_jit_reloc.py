"""The LLVM JIT must not abort the process when its code lands far from the symbols it uses.

With many large shared libraries mapped (torch, scikit-learn), JIT code, its constants and
libm/pthread could be more than 2 GB apart, and a 32-bit relocation then aborted the whole
process in RuntimeDyldELF (`isInt<32>(RealOffset)`). The JIT objects use the large code model:
every relocation is 64 bits wide, so none can overflow, wherever the sections land.
"""

from __future__ import annotations

import os
import platform
import struct
import subprocess
import sys
import textwrap

import pytest
from caten.runtimes import llvm_rt

import caten
from caten import pipeline, target
from caten.plugin import Options

X86_64 = platform.machine() in ("x86_64", "AMD64")
# x86-64 ELF relocation types with a 32-bit field (PC32, PLT32, GOTPCREL, 32, 32S, GOTPC32,
# GOTPCRELX, REX_GOTPCRELX): the ones that overflow when the target is over 2 GB away
NARROW = {2, 4, 9, 10, 11, 26, 41, 42}

SRC = """
(composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (+ (exp X) (sin (* X 3.5)))))
(composite g ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (return (exp (matmul A B))))
"""


def relocation_types(obj: bytes) -> set[int]:
    """Types of the relocations of an ELF64 little-endian object (from its SHT_RELA sections)."""
    assert obj[:4] == b"\x7fELF" and obj[4] == 2 and obj[5] == 1
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    types: set[int] = set()
    for i in range(shnum):
        _, typ, _, _, off, size, _, _, _, _ = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
        if typ == 4:  # SHT_RELA: entries of (offset, info, addend)
            for k in range(size // 24):
                _, info, _ = struct.unpack_from("<QQq", obj, off + k * 24)
                types.add(info & 0xFFFFFFFF)
    return types


@pytest.mark.skipif(not X86_64, reason="relocation types checked are x86-64 ELF ones")
def test_jit_objects_have_no_32bit_relocations():
    """Code calling libm (exp, sin) and pthreads (a threaded GEMM): every relocation of the
    object the JIT links is 64-bit (the old small-model objects had PC32 ones)."""
    mod = caten.loads(SRC, runtime="llvm")
    for name in ("f", "g"):
        prog = getattr(mod, name).elaborate({})
        lw = pipeline.lower_program(prog, name, target.host(), threads=2)
        lw.decompose(llvm_rt.RUNTIME.capabilities(target.host()).native)
        ir = llvm_rt.RUNTIME.render([lw], target.host(), Options())
        types = relocation_types(llvm_rt.jit_object(ir, 3))
        assert types, "expected relocations (libm, constants) in the object"
        assert not types & NARROW, f"32-bit relocations {sorted(types & NARROW)} in JIT code of {name}"


_STRESS = textwrap.dedent("""
    import ctypes, glob, os, sys
    # big shared libraries first, as torch and scikit-learn would be
    for mod in ("scipy.linalg", "scipy.special", "pyopencl"):
        try:
            __import__(mod)
        except Exception:
            pass
    libs = [p for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib") for p in glob.glob(d + "/*.so*")
            if "san" not in os.path.basename(p) and os.path.isfile(p)]
    held = []
    for p in sorted(libs, key=lambda p: -os.path.getsize(p))[:30]:
        try:
            held.append(ctypes.CDLL(p))
        except OSError:
            pass
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    import numpy as np
    import caten
    rng = np.random.default_rng(0)
    for it in range(4):
        # reserve 3 GB of address space between compiles (PROT_NONE, MAP_PRIVATE|ANONYMOUS|NORESERVE)
        libc.mmap(None, 3 << 30, 0, 0x02 | 0x20 | 0x4000, -1, 0)
        src = sys.argv[1].replace("3.5", f"{it}.5")
        mod = caten.loads(src, runtime="llvm")
        x = np.linspace(-2, 2, 1001).astype(np.float32)
        np.testing.assert_allclose(mod.f(x), np.exp(x) + np.sin(x * np.float32(it + .5)), rtol=2e-5, atol=2e-6)
        a = (rng.random((256, 96)) * 0.1).astype(np.float32)
        b = (rng.random((96, 192)) * 0.1).astype(np.float32)
        np.testing.assert_allclose(mod.g(a, b), np.exp(a.astype(np.float64) @ b), rtol=2e-5)
    print("ok", len(held))
""")


def test_jit_survives_far_libraries(tmp_path):
    """Compile and run libm and threaded code after loading many big libraries and reserving
    address space, in fresh processes (a relocation overflow aborts the process: rc -6)."""
    env = dict(os.environ, CATEN_NUM_THREADS="2")
    for run in range(2):
        env["CATEN_CACHE_DIR"] = str(tmp_path / f"cache{run}")  # compile afresh each time
        r = subprocess.run([sys.executable, "-c", _STRESS, SRC], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-2000:])
