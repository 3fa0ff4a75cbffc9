"""Fail if a committed conformance report no longer matches a fresh run (cell by cell).

With `--slice K/N` the fresh run holds only that slice of the rows (`caten test-runtime --slice`):
its cells must match the committed ones, and the committed reports must still have a row for every
op and composite there is (a row that a new op lacks would otherwise hide outside the slice)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cells(path: Path) -> dict[tuple[str, str], str]:
    data = json.loads(path.read_text())
    out = {(r["op"], r["dtype"]): r["status"] for r in data["results"]}
    out.update({(f"gradient {r['op']}", r["dtype"]): r["status"] for r in data.get("gradients", [])})
    return out


def main(committed: str, fresh: str, runtimes: list[str], part: str | None = None) -> int:
    bad = 0
    for rt in runtimes:
        old, new = cells(Path(committed) / f"{rt}.json"), cells(Path(fresh) / f"{rt}.json")
        keys = old.keys() | new.keys()
        if part:
            from caten.conformance.cases import in_slice, rows

            names = {r.name for r in rows()}
            have = {op for op, _ in old if not op.startswith("gradient ")}
            for name in sorted(names - have)[:40]:
                print(f"reports/{rt}.json has no row for {name}")
                bad = 1
            for name in sorted(have - names)[:40]:
                print(f"reports/{rt}.json has a row for {name}, which is no op or composite now")
                bad = 1
            keys = {k for k in keys if in_slice(k[0].removeprefix("gradient "), part)}
        diff = sorted(k for k in keys if old.get(k) != new.get(k))
        for op, dt in diff[:40]:
            print(f"reports/{rt}.json out of date: {op} {dt}: committed {old.get((op, dt))}, now {new.get((op, dt))}")
        if diff or bad:
            bad = 1
            print(f"regenerate with: caten test-runtime -r {rt}")
    return bad


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("committed")
    ap.add_argument("fresh")
    ap.add_argument("runtimes", nargs="+")
    ap.add_argument("--slice", dest="part", help="the fresh run is this slice K/N of the rows")
    a = ap.parse_args()
    sys.exit(main(a.committed, a.fresh, a.runtimes, a.part))
