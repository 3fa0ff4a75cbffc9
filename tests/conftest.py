"""Shared fixtures, and the graph verifier turned on for the whole suite.

`runtime` is parametrized over the runtimes named in the environment variable
CATEN_TEST_RUNTIMES (comma-separated, default "numpy"), so the same tests run on every
runtime under test: `CATEN_TEST_RUNTIMES=numpy,llvm pytest`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# every graph the stages build is checked as it leaves the elaborator and the rewriter
# (caten.ir.verify); CATEN_VERIFY=0 turns it off to time the suite without it
os.environ.setdefault("CATEN_VERIFY", "1")

# The suite never touches the user's compile cache: every process of a run (xdist workers and the
# subprocesses tests start inherit the environment) compiles into one private folder, and the
# XDG fallback (where a refused CATEN_CACHE_DIR sends caching) points into it too.
# CATEN_TEST_CACHE_DIR names a folder to keep between runs (a warm cache, for speed).
_USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "caten"
_KEEP = os.environ.get("CATEN_TEST_CACHE_DIR")
_OURS = os.environ.get("_CATEN_SUITE_CACHE")  # set by the controller, inherited by xdist workers


def _listing(root: Path) -> dict[str, tuple[int, int]] | None:
    """Every file under `root` with its size and mtime, or None where `root` is absent."""
    if not root.exists():
        return None
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                st = os.stat(os.path.join(dirpath, f))
            except OSError:
                continue
            out[os.path.relpath(os.path.join(dirpath, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


def pytest_configure(config: pytest.Config) -> None:
    if _OURS:  # an xdist worker: the controller made the folder
        return
    base = Path(_KEEP) if _KEEP else Path(tempfile.mkdtemp(prefix="caten-test-cache-"))
    os.environ["_CATEN_SUITE_CACHE"] = str(base)
    os.environ["CATEN_CACHE_DIR"] = str(base / "caten")
    os.environ["XDG_CACHE_HOME"] = str(base / "xdg")
    config._caten_user_cache = _listing(_USER_CACHE)  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails if anything under the user's ~/.cache/caten changed while it ran."""
    config = session.config
    if not hasattr(config, "_caten_user_cache"):
        return  # a worker, or a run whose configure did not get that far
    before, after = config._caten_user_cache, _listing(_USER_CACHE)
    if not _KEEP:
        shutil.rmtree(os.environ["_CATEN_SUITE_CACHE"], ignore_errors=True)
    if before != after:
        changed = sorted(set(after or {}) ^ set(before or {})
                         | {k for k in (after or {}) if k in (before or {}) and after[k] != before[k]})
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"the test run wrote under the user's cache {_USER_CACHE} ({len(changed)} files changed, "
               f"e.g. {changed[:5]}): tests must compile into their private cache")
        if reporter is not None:
            reporter.write_line(f"ERROR: {msg}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def runtimes_under_test() -> list[str]:
    names = [r.strip() for r in os.environ.get("CATEN_TEST_RUNTIMES", "numpy").split(",")]
    return [r for r in names if r] or ["numpy"]


@pytest.fixture(params=runtimes_under_test())
def runtime(request) -> str:
    """The name of a caten runtime, for `caten.loads(..., runtime=runtime)`."""
    return request.param


try:  # CI runs the property tests on fixed examples, so a red build is reproducible
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        settings.load_profile("ci")
except ImportError:  # hypothesis is a dev extra
    pass


@pytest.fixture(autouse=True)
def _restore_default_runtime():
    """caten.Tensor's default runtime as it was before each test: a test that sets it (many test
    files pin numpy) must not change what the next test in the same worker gets."""
    from caten.tensor import state

    before = state.RUNTIME[0]
    yield
    state.RUNTIME[0] = before


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CI (CI=true) runs a fixed slice of the slow parametrized suites marked `ci_slice(n)`: the
    cases whose test id hashes to 0 mod n, so a red build names a case that reproduces; every
    case runs locally and with CATEN_FULL_SUITE=1."""
    import zlib

    if os.environ.get("CI", "").lower() not in ("1", "true", "yes") or os.environ.get("CATEN_FULL_SUITE") == "1":
        return
    keep, drop = [], []
    for item in items:
        m = item.get_closest_marker("ci_slice")
        if m is not None and zlib.crc32(item.nodeid.encode()) % int(m.args[0]) != 0:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
