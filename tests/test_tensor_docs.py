"""docs/tensor.md is true of the code: its Python blocks (each full of asserts) run top to bottom
in one session as the page says, and its shell lines then compile and run the traced program the
Python wrote, with the outputs checked against the Tensor's own result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tensor.md"


def _blocks(lang: str) -> list[str]:
    out, cur, info = [], None, ""
    for ln in PAGE.read_text(encoding="utf-8").splitlines(keepends=True):
        if ln.startswith("```"):
            if cur is None:
                cur, info = [], ln[3:].strip()
            else:
                if info == lang:
                    out.append("".join(cur))
                cur = None
        elif cur is not None:
            cur.append(ln)
    return out


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The page's Python blocks run in order in one namespace, in a scratch folder (none needs torch)."""
    import os

    tmp = tmp_path_factory.mktemp("tensor_docs")
    cwd = os.getcwd()
    os.chdir(tmp)
    scope: dict = {}
    try:
        for i, code in enumerate(_blocks("python")):
            exec(compile(code, f"docs/tensor.md python block {i + 1}", "exec"), scope)
    finally:
        os.chdir(cwd)
    return tmp, scope


def test_python_blocks_run(session):
    _, scope = session
    assert len(_blocks("python")) >= 10
    assert scope["step"].traces == 1 and scope["losses"][-1] < scope["losses"][0]


def test_shell_lines_compile_the_traced_program(session):
    tmp, scope = session
    lines = [ln.split("#")[0].strip() for b in _blocks("sh") for ln in b.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("caten ") for ln in lines)
    want = scope["net"](scope["Tensor"](np.ones((2, 4), np.float32))).softmax(axis=-1).numpy()
    for ln in lines:
        p = subprocess.run([sys.executable, "-m", "caten", *ln.split()[1:]], cwd=tmp, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, f"{ln}\n{p.stdout}\n{p.stderr}"
    np.testing.assert_allclose(np.load(tmp / "y.npy"), want, rtol=1e-5)
    assert (tmp / "libpredict.so").exists() and "predict(" in (tmp / "predict.h").read_text()
