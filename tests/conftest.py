"""Shared fixtures, and the graph verifier turned on for the whole suite.

`runtime` is parametrized over the runtimes named in the environment variable
CATEN_TEST_RUNTIMES (comma-separated, default "numpy"), so the same tests run on every
runtime under test: `CATEN_TEST_RUNTIMES=numpy,llvm pytest`.
"""

from __future__ import annotations

import os

import pytest

# every graph the stages build is checked as it leaves the elaborator and the rewriter
# (caten.ir.verify); CATEN_VERIFY=0 turns it off to time the suite without it
os.environ.setdefault("CATEN_VERIFY", "1")


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
