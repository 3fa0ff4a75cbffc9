"""The suite's private compile cache (conftest.py): a run that writes under the user's cache fails,
and caten compiles into the run's own folder, never the user's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _run_suite(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run pytest on one test file beside a copy of this suite's conftest, with a fake user cache."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(HERE / "conftest.py", suite / "conftest.py")
    (suite / "test_probe.py").write_text(body)
    xdg = tmp_path / "xdg"
    env = {k: v for k, v in os.environ.items()
           if k not in ("_CATEN_SUITE_CACHE", "CATEN_TEST_CACHE_DIR", "CATEN_CACHE_DIR", "PYTEST_ADDOPTS")}
    env["XDG_CACHE_HOME"] = str(xdg)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    return r, xdg / "caten"


def test_a_write_under_the_user_cache_fails_the_run(tmp_path: Path):
    user = tmp_path / "xdg" / "caten"
    r, _ = _run_suite(tmp_path, f"""
from pathlib import Path

import numpy as np
def test_writes():
    Path({str(user)!r}).mkdir(parents=True, exist_ok=True)
    Path({str(user)!r}, "entry").write_text("x")
""")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "wrote under the user's cache" in r.stdout


def test_caten_compiles_into_the_private_cache(tmp_path: Path):
    r, user = _run_suite(tmp_path, """
import os
import numpy as np
import caten
from caten.cache.store import default_dir
def test_compiles():
    assert "caten-test-cache-" in str(default_dir())
    m = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (* X 2.0))", runtime="llvm")
    np.testing.assert_array_equal(m.f(np.arange(3, dtype=np.float32)), [0, 2, 4])
    assert any(os.scandir(default_dir()))
""")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not user.exists()


def test_no_cache_holds_only_for_its_command(tmp_path: Path, monkeypatch):
    """`--no-cache` run in-process (click's runner) once left caching off for the whole process."""
    from click.testing import CliRunner

    import caten
    from caten.cache.store import default_cache
    from caten.cli.main import cli

    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    src = HERE.parent / "examples" / "softmax.lisp"
    r = CliRunner().invoke(cli, ["-r", "numpy", str(src), "--no-cache", "--emit", "ir"])
    assert r.exit_code == 0, r.output
    assert default_cache().enabled
    caten.load(str(src), runtime="llvm").softmax_rows(np.ones((2, 3), np.float32))
    assert any((tmp_path / "cache").rglob("*.*"))
