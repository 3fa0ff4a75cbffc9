"""`caten test-runtime`'s manners: before the first case it says on stderr what it runs, where
it writes (and that the default path replaces the committed reports) and about how long it takes;
then it shows progress (a line every tenth of the cells where stderr is no terminal). The
report itself is the suite's (tests/test_conformance.py)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from caten.cli.main import cli
from caten.cli.testrt import _last_seconds, _plan


def test_it_says_what_where_and_how_long_then_shows_progress(tmp_path):
    out = tmp_path / "n.md"
    r = CliRunner().invoke(cli, ["test-runtime", "-r", "numpy", "--ops", "CMP*", "-o", str(out)])
    assert r.exit_code == 0, r.output
    err = r.stderr.splitlines()
    assert err[0].startswith("caten test-runtime: compiles and runs 2 ops and composites x 19 dtypes, and each "
                             "one's gradients on 'numpy' (about 1 min;"), err
    assert err[1] == f"caten test-runtime: writes {out} and {tmp_path / 'n.json'}"  # not the default: no warning
    counts = [tuple(map(int, m.groups())) for m in (re.search(r"numpy (\d+)/(\d+) cells", ln) for ln in err) if m]
    assert counts and counts[-1] == (40, 40) and [d for d, _ in counts] == sorted(d for d, _ in counts)
    assert len(counts) <= 11  # a line a tenth, not one a cell
    assert "38 passed, 0 failed, 0 unsupported" in r.stdout and "cells" not in r.stdout  # stdout as before
    seconds, device = _last_seconds(str(out))  # the time the next run announces, read back from this report
    assert seconds >= 0 and device.startswith("host CPU")


def test_the_default_path_warns_that_it_replaces_the_committed_reports():
    text = _plan("llvm", 136, 13, True, False, 1, "reports/llvm.md", True, (220.0, "host CPU: X"))
    assert "the last full run took 4 min (220 s) on host CPU: X" in text
    assert "writes reports/llvm.md and reports/llvm.json (replacing the committed reports; -o PATH" in text
    assert "about 7 min" in _plan("llvm", 136, 13, True, False, 1, "reports/llvm.md", True, None)
    assert _last_seconds("no/such/report.md") is None


def test_slices_partition_the_rows_and_the_check_sees_a_missing_row(tmp_path):
    """`--slice K/N` (CI's sampled report check): the N slices cover every row once, and
    .ci/check_reports.py with --slice compares the slice's cells and still fails a committed report
    that lacks an op's row."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from caten.conformance.cases import rows

    names = [r.name for r in rows()]
    parts = [[r.name for r in rows(part=f"{k}/3")] for k in range(3)]
    assert sorted(sum(parts, [])) == sorted(names) and all(parts)

    def report(folder: str, ops: list[str], status: str = "pass") -> str:
        (tmp_path / folder).mkdir()
        data = {"results": [{"op": op, "dtype": "f32", "status": status} for op in ops]}
        (tmp_path / folder / "numpy.json").write_text(json.dumps(data))
        return str(tmp_path / folder)

    check = [sys.executable, str(Path(__file__).resolve().parent.parent / ".ci" / "check_reports.py"),
             report("all", names), report("fresh", parts[0]), "numpy", "--slice", "0/3"]
    assert subprocess.run(check, capture_output=True, text=True).returncode == 0
    check[3] = report("failing", parts[0], "fail")
    assert subprocess.run(check, capture_output=True, text=True).returncode == 1
    check[2:4] = [report("old", [n for n in names if n != parts[1][0]]), str(tmp_path / "fresh")]
    out = subprocess.run(check, capture_output=True, text=True)
    assert out.returncode == 1 and f"no row for {parts[1][0]}" in out.stdout
