"""AOT output of the LLVM runtime: IR text, object file, and a shared library + C header that a
C program links against (LANGUAGE.md section 8)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from caten.runtimes.llvm_rt import RUNTIME

from caten import pipeline
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.ir.program import Constraint
from caten.plugin import Options
from tests.llvm_util import program


def axpy_program():
    n = D.sym("N")
    x = B.buffer(T.f32, (n,), 0, "x")
    y = B.buffer(T.f32, (n,), 1, "y")
    a = B.buffer(T.f32, (), 2, "a")
    out = B.alu(Op.ADD, B.alu(Op.MUL, a, x), y)
    total = B.reduce(out, "add", (0,))
    p = program("axpy", [x, y, a], [out, total], dims=["N"])
    return p


def test_emit_source_and_obj():
    p = axpy_program()
    src = pipeline.emit(RUNTIME, p, "source", Options())[".ll"]
    assert "define i32 @axpy(" in src and "prefer-vector-width" in src
    ir = pipeline.emit(RUNTIME, p, "opt-ir", Options())[".ll"]
    assert "<4 x float>" in ir or "<8 x float>" in ir or "<16 x float>" in ir  # vectorized, whatever the host
    # real assembly for each of the project's two kinds of CPU, on either host (tests/test_target.py runs them)
    avx512 = pipeline.emit(RUNTIME, p, "asm", Options(target="rocketlake"))[".s"]
    avx2 = pipeline.emit(RUNTIME, p, "asm", Options(target="znver3"))[".s"]
    assert "%zmm" in avx512
    assert "%ymm" in avx2 and "%zmm" not in avx2
    obj = pipeline.emit(RUNTIME, p, "obj", Options())[".o"]
    assert obj[:4] == b"\x7fELF"
    sched = pipeline.emit(RUNTIME, p, "schedule", Options())[".txt"]
    assert "kernel" in sched and "arena" in sched


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_shared_library_from_c(tmp_path):
    p = axpy_program()
    p.constraints.append(Constraint(D.sym("N"), 8, "N = 8"))
    art = pipeline.emit(RUNTIME, p, "lib", Options())
    (tmp_path / "libaxpy.so").write_bytes(art[".so"])
    (tmp_path / "axpy.h").write_text(art[".h"])
    assert "int32_t axpy(const float *X0, const float *X1, const float *X2, float *Y0, float *Y1, int64_t N);" \
        in art[".h"]
    (tmp_path / "main.c").write_text(r"""
#include <stdio.h>
#include "axpy.h"
int main(void) {
    float x[8], y[8], a = 2.0f, out[8], total[1];
    for (int i = 0; i < 8; i++) { x[i] = (float)i; y[i] = 1.0f; }
    int32_t rc = axpy(x, y, &a, out, total, 8);
    int32_t bad = axpy(x, y, &a, out, total, 7);
    printf("%d %d %g %g %g\n", rc, bad, out[0], out[7], total[0]);
    return 0;
}
""")
    r = subprocess.run(["cc", "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), f"-L{tmp_path}", "-laxpy",
                        f"-Wl,-rpath,{tmp_path}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "1", "1", "15", str(int(np.sum(2.0 * np.arange(8) + 1)))]


def test_a_library_of_units_exports_its_entries_only_and_runs_as_the_jit_does(tmp_path):
    """A module that splits into units is compiled unit by unit (in parallel, cached) and linked
    by cc; the units' functions link to each other inside the library, which exports only the
    entry and its __impl."""
    import ctypes
    import os

    import caten
    from caten.render.llvm import units

    src = open(os.path.join(os.path.dirname(__file__), "..", "examples", "mlp_mixer.lisp")).read()
    m = caten.loads(src, runtime="llvm")
    prog = m.mixer_block.elaborate({})
    assert units.split(pipeline.emit(RUNTIME, prog, "source", Options())[".ll"]) is not None
    lib = tmp_path / "libmix.so"
    lib.write_bytes(pipeline.emit(RUNTIME, prog, "lib", Options())[".so"])
    so = ctypes.CDLL(str(lib))
    assert hasattr(so, "mixer_block") and hasattr(so, "mixer_block__impl")
    if shutil.which("nm"):
        syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
        assert sorted(ln.split()[-1] for ln in syms.splitlines() if " T " in ln) == ["mixer_block",
                                                                                    "mixer_block__impl"]
    rng = np.random.default_rng(0)
    B, T, C, DT, DC = 3, 20, 24, 12, 40
    shapes = [(B, T, C), (C,), (C,), (T, DT), (DT,), (DT, T), (T,), (C,), (C,), (C, DC), (DC,), (DC, C), (C,)]
    args = [(rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32) for s in shapes]
    y = np.zeros((B, T, C), np.float32)
    ptrs = [a.ctypes.data_as(ctypes.c_void_p) for a in [*args, y]]
    assert so.mixer_block(*ptrs, *[ctypes.c_int64(v) for v in (B, T, C, DT, DC)]) == 0
    np.testing.assert_allclose(y, m.mixer_block(*args), rtol=1e-5, atol=1e-6)
