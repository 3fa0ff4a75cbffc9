"""The C-style renderer's code compiles without warnings (issue 44): a user who builds caten's C
or CUDA with `-Wall` (or nvcc, which warns by default) must not see warnings about code they did
not write. The workloads hit the cases that warned: an arena temporary no kernel of an entry
takes (C), a size-1 axis of a device grid whose variable nothing reads (CUDA, OpenCL), and the
smallest i64 as an argmax's initial value (`-9223372036854775808L` is an unsigned literal negated)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = """\
(composite mlp ((X{f32}[B, R, D]) (W1{f32}[D, H]) (b1{f32}[H]) (W2{f32}[H, D]) (b2{f32}[D])
                -> (Y{f32}[B, R, D]))
  (setf h (gelu (linear X W1 b1)))
  (return (linear h W2 b2)))
(composite heads ((X{f32}[B, T, D]) -> (Y{f32}[B, 1, T, D]))
  (return (reshape (* X 0.0) [B 1 T D])))
(composite pick ((X{f32}[B, N]) -> (Y{i64}[B]))
  (return (argmax X :axis 1)))
"""


def emit(tmp_path: Path, runtime: str, out: str) -> Path:
    (tmp_path / "w.lisp").write_text(SRC)
    env = dict(os.environ, CATEN_CACHE_DIR=str(tmp_path / ".cache"))
    p = subprocess.run([sys.executable, "-m", "caten", "--no-cache", "-r", runtime, "-S", "w.lisp", "-o", out],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return tmp_path / out


def test_emitted_c_compiles_without_warnings(tmp_path: Path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc)")
    src = emit(tmp_path, "c", "w.c")
    p = subprocess.run([cc, "-c", "-Wall", "-Werror", "-Wno-unknown-pragmas", str(src), "-o", str(tmp_path / "w.o")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def test_emitted_cuda_compiles_without_warnings(tmp_path: Path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc")
    src = emit(tmp_path, "cuda", "w.cu")
    p = subprocess.run([nvcc, "-c", "--std=c++17", "-Werror", "all-warnings", str(src), "-o", str(tmp_path / "w.o")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
