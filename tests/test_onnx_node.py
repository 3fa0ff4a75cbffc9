"""onnx's own backend node tests (onnx.backend.test.BackendTest) through caten.onnx.backend on llvm.

Four tests run a quarter of the cases each (by name hash, so that test workers share them) and
hold the result to `tests/onnx_xfail.txt`, torch-mlir style: an unlisted failure fails,
and so does a listed case that now passes (remove it: the list may only shrink). The committed
`reports/onnx.json` must match this run case by case (regenerate with
`python -m caten.onnx.report --write-xfail`).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

pytest.importorskip("onnx")

from caten.onnx.report import XFAIL_FILE, read_xfail, run_cases  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


PARTS = 8  # the cases in eight tests (by name hash), so that test workers share them; CI runs half


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("part", range(PARTS))
def test_node_tests_match_expected_failures_and_report(part):
    results = run_cases("llvm", part=(part, PARTS))
    assert len(results) > 1500 // PARTS  # every node case of the installed onnx ran, an eighth here
    xfail = read_xfail(ROOT / XFAIL_FILE)
    failing = {r.case: r.reason for r in results if r.status != "pass"}
    new_failures = sorted(set(failing) - set(xfail))
    now_passing = sorted(c for c in xfail if c not in failing and any(r.case == c for r in results))
    msg = []
    if new_failures:
        msg.append("cases that fail but are not in tests/onnx_xfail.txt:\n  " +
                   "\n  ".join(f"{c}: {failing[c]}" for c in new_failures[:40]))
    if now_passing:
        msg.append("cases in tests/onnx_xfail.txt that pass now (remove them):\n  " + "\n  ".join(now_passing[:40]))
    assert not msg, "\n".join(msg)
    committed = json.loads((ROOT / "reports" / "onnx.json").read_text())
    old = {r["case"]: r["status"] for r in committed["results"] if zlib.crc32(r["case"].encode()) % PARTS == part}
    new = {r.case: r.status for r in results}
    stale = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    assert not stale, f"reports/onnx.json is out of date for {stale[:20]}: python -m caten.onnx.report"
