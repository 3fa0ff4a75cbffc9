"""`pip install .` into a fresh virtual environment works from any folder (spine acceptance 1).

The venv does not see this checkout: its dependencies come through a .pth line naming the
host's site-packages, which adds the folder but not the editable-install hooks inside it. The build
is isolated, as a user's `pip install .` is: pip brings the setuptools that pyproject's
build-system asks for, whatever this Python has (ensurepip's setuptools 65 predates the SPDX
`license` that pyproject.toml uses; Python 3.12's venvs have none at all).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    host = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    Path(purelib, "_host_deps.pth").write_text("\n".join(sorted(host)) + "\n")
    build = tmp_path_factory.mktemp("build")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(REPO)],
                       capture_output=True, text=True, cwd=build)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return subprocess.run([str(venv / "bin" / "caten"), *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_installed_package_runs_softmax_from_another_folder(venv: Path, tmp_path: Path):
    x = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = tmp_path / "softmax.lisp"
    src.write_text((REPO / "examples" / "softmax.lisp").read_text())
    r = _run(venv, "run", "softmax.lisp", "X=x.npy", "-o", "y.npy", "-r", "numpy", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import caten.ops, caten; print(caten.ops.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(venv) in where and str(REPO) not in where, where


@pytest.mark.parametrize("args,needle", [(["--help"], "run"), (["--version"], "0."), (["ops"], "softmax"),
                                         (["runtimes"], "numpy")])
def test_installed_commands(venv: Path, tmp_path: Path, args, needle):
    r = _run(venv, *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout


def test_benchmarks_run_from_a_plain_install(venv: Path, tmp_path: Path):
    """benchmarks/ import the installed caten, not the checkout's folders (which are no package
    as installed: caten.grammar and caten.ops live elsewhere in the tree)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CATEN_CACHE_DIR"] = str(tmp_path / "cache")
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, str(REPO / "benchmarks" / "bench_llvm.py"), "--reps", "1", "--max-s", "0.1",
                        "--only", "b", "--no-torch"], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| b:" in r.stdout
    r = subprocess.run([py, str(REPO / "benchmarks" / "bench_compile.py"), "--runs", "1"], capture_output=True,
                       text=True, cwd=REPO, env=env, timeout=300)  # started inside the checkout
    assert r.returncode == 0, r.stdout + r.stderr
    assert "empty cache" in r.stdout


def test_no_undeclared_package_data(tmp_path: Path):
    """setuptools warns when package data sits in a folder that is not a declared package."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), str(REPO)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Installing 'caten.ops.rules' as data is deprecated" not in r.stdout + r.stderr


def test_every_package_is_declared():
    """A package folder missing from pyproject's list is absent from a plain install (caten.fuzz was)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    declared = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "caten").rglob("__init__.py")}
    assert found <= declared, sorted(found - declared)
