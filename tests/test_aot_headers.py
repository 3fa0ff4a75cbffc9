"""AOT libraries from C (llvm and c runtimes): two caten libraries in one C file (distinct include
guards, derived from each library's name), and an entry whose scratch arena cannot be allocated
returns 2 instead of crashing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

CC = os.environ.get("CC", "cc")

LIBS = {  # library name -> source: two entries each (one header for both); the first entries need a
    # scratch buffer of M floats (a reduction over rows)
    "shift": """(composite shift_cols ((X{f32}[N, M]) -> (Y{f32}[N, M]))
  (- X (max X :axis 0 :keepdims true)))
(composite shift_one ((X{f32}[N]) -> (Y{f32}[N])) (+ X 1))
""",
    "my-scale.v2": """(composite scale_cols ((X{f32}[N, M]) -> (Y{f32}[N, M]))
  (* X (sum X :axis 0 :keepdims true)))
(composite scale_two ((X{f32}[N]) -> (Y{f32}[N])) (* X 2))
""",
}

DRIVER = r"""
#include <stdio.h>
#include <sys/resource.h>
#include "shift.h"
#include "shift.h"
#include "my-scale.v2.h"
int main(void) {
    float x[12], y[12], z[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i * 0.5f - 2.0f;
    int a = shift_cols(x, y, 3, 4), b = scale_cols(x, z, 3, 4);
    float u[2], v[2];
    printf("%d %d %d %d\n", a, b, shift_one(x, u, 2), scale_two(x, v, 2));
    printf("%g %g %g %g\n", u[0], u[1], v[0], v[1]);
    for (int i = 0; i < 12; i++) printf("%.9g %.9g\n", y[i], z[i]);
    /* at most 8 GiB of address space: an arena of 2^40 floats cannot be malloc'ed (whatever the
       kernel's overcommit policy); the entry must say so, not write through a null pointer */
    struct rlimit rl = {1ull << 33, 1ull << 33};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 3;
    long long huge = 1LL << 40;
    printf("%d %d\n", shift_cols(x, y, 1, huge), scale_cols(x, z, 1, huge));
    return 0;
}
"""


def caten(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")
@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_two_libraries_in_one_c_file_and_failed_malloc(tmp_path, rt):
    for name, src in LIBS.items():
        (tmp_path / f"{name}.lisp").write_text(src)
        sched = caten("-r", rt, f"{name}.lisp", "--emit", "schedule", cwd=tmp_path)
        assert sched.returncode == 0, sched.stderr
        assert "1 temp buffer" in sched.stdout  # the premise: the entry mallocs an arena that grows with M
        r = caten("-r", rt, f"{name}.lisp", "-o", f"lib{name}.so", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    shift_h, scale_h = (tmp_path / "shift.h").read_text(), (tmp_path / "my-scale.v2.h").read_text()
    assert "#ifndef CATEN_SHIFT_H" in shift_h and "#ifndef CATEN_MY_SCALE_V2_H" in scale_h
    assert "2 if its scratch memory cannot be allocated" in shift_h
    (tmp_path / "main.c").write_text(DRIVER)
    r = subprocess.run([CC, "-Wall", "-Werror", "-o", "main", "main.c", "-L.", "-lshift", "-lmy-scale.v2",
                        f"-Wl,-rpath,{tmp_path}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    run = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"driver died (signal {-run.returncode})" if run.returncode < 0 else run.stdout
    lines = run.stdout.split("\n")
    assert lines[:2] == ["0 0 0 0", "-1 -0.5 -4 -3"]
    got = np.array([[float(v) for v in ln.split()] for ln in lines[2:14]], np.float32)
    x = (np.arange(12, dtype=np.float32) * np.float32(0.5) - np.float32(2)).reshape(3, 4)
    np.testing.assert_array_equal(got[:, 0].reshape(3, 4), x - x.max(axis=0, keepdims=True))
    np.testing.assert_allclose(got[:, 1].reshape(3, 4), x * x.sum(axis=0, keepdims=True), rtol=1e-6)
    assert lines[14] == "2 2"
