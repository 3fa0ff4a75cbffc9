"""Fail if a committed conformance report no longer matches a fresh run (cell by cell)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cells(path: Path) -> dict[tuple[str, str], str]:
    data = json.loads(path.read_text())
    out = {(r["op"], r["dtype"]): r["status"] for r in data["results"]}
    out.update({(f"gradient {r['op']}", r["dtype"]): r["status"] for r in data.get("gradients", [])})
    return out


def main(committed: str, fresh: str, runtimes: list[str]) -> int:
    bad = 0
    for rt in runtimes:
        old, new = cells(Path(committed) / f"{rt}.json"), cells(Path(fresh) / f"{rt}.json")
        diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        for op, dt in diff[:40]:
            print(f"reports/{rt}.json out of date: {op} {dt}: committed {old.get((op, dt))}, now {new.get((op, dt))}")
        if diff:
            bad = 1
            print(f"regenerate with: caten test-runtime -r {rt}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
