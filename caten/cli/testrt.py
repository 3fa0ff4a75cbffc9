"""`caten test-runtime`: run the op-coverage suite on a runtime and write its report.

A whole run compiles every cell apart (~10 minutes for llvm on a 2-core host) and by default
replaces the committed reports/RUNTIME.md and .json, so it says first on stderr what it will do,
where it writes and about how long it takes, then shows its progress: a bar on a terminal, a
line every tenth of the cells otherwise (a log, CI)."""

from __future__ import annotations

import os
import re
import sys
import time

import click

from caten.errors import Error


def run_conformance(runtime: str, output: str | None, compile_only: bool, pattern: str | None,
                    plugin: str | None, gradients: bool = True, jobs: int = 1, part: str | None = None,
                    dtypes: str | None = None, merge: bool = False) -> int:
    """Run the suite, write reports/RUNTIME.md and .json (or OUTPUT and its .json), print the
    summary line; 0 if no case failed, else 1. `gradients` False skips the gradient cases; `jobs`:
    forward rows on that many worker processes at once; `part` "K/N": only that slice of the rows;
    `dtypes` "i4,u4": only those columns. `merge`: the forward cells run replace theirs in the
    existing report, which keeps every other cell (a new dtype's columns without an hour-long
    full run); no gradient case runs."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from caten import plugin as R
    from caten.conformance import cases as C
    from caten.conformance import report, run_suite

    if plugin:
        R.load_plugin(plugin)
    rt = R.get(runtime)
    ok, why = rt.available()
    if not ok and not compile_only:
        click.echo(f"caten: runtime '{rt.name}' is not available here ({why}); compiling every case without "
                   "running it", err=True)
        compile_only = True
    m = re.fullmatch(r"(\d+)/(\d+)", part or "")
    if part and not (m and int(m[1]) < int(m[2])):
        raise Error(f"--slice takes K/N with 0 <= K < N, got '{part}'", hint="e.g. --slice 0/3")
    rows = C.rows(pattern, part)
    if not rows:
        raise Error(f"no op matches '{pattern}'" + (f" in slice {part}" if part else ""),
                    hint="see `caten ops` for the names")
    dts = _dtypes(dtypes)
    gradients = gradients and not merge
    md = output or os.path.join("reports", f"{rt.name}.md")
    # each row makes a cell per dtype, and one gradient step (caten.conformance.gradrun)
    total = len(rows) * (len(dts) + (1 if gradients else 0))
    click.echo(_plan(rt.name, len(rows), len(dts), gradients, compile_only, jobs, md, output is None and not merge,
                     _last_seconds(md) if pattern is None and part is None and dtypes is None else None), err=True)
    console = Console(stderr=True)
    lines = _Lines(rt.name, total) if not console.is_terminal else None
    with Progress(TextColumn("[bold]{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(rt.name, total=total)

        def progress(name: str, n: int) -> None:
            bar.update(task, advance=n, description=name)
            if lines:
                lines.advance(n)

        res = run_suite(rt, compile_only=compile_only, progress=progress, rows=rows,
                        plugins=[plugin] if plugin else [], grads=gradients, jobs=jobs, dtypes=dts)
    grad_text = None
    if merge:
        ran = res
        res, grad_text = report.merge(res, md, {d.name for d in dts})
        click.echo(f"{rt.name}: this run: {ran.summary()}; merged into {md}", err=True)
    md_path, js_path = report.write(res, md, grad_text)
    grads = f"; gradients: {res.summary(grads=True)}" if gradients else ""
    click.echo(f"{rt.name}: {res.summary()}{grads} ({res.seconds:.0f} s) -> {md_path}, {js_path}")
    for c in res.cells:
        if c.status == "fail":
            click.echo(f"  FAIL {c.op} {c.dtype}: {c.reason}", err=True)
    for c in res.grads:
        if c.status == "fail":
            click.echo(f"  FAIL gradient {c.op} {c.dtype}: {c.reason}", err=True)
    sys.stdout.flush()
    return 1 if res.counts()["fail"] or res.counts(grads=True)["fail"] else 0


def _dtypes(names: str | None) -> tuple:
    """The dtypes of `--dtypes a,b` in the suite's column order (all of them without it)."""
    from caten.conformance import cases as C

    if not names:
        return C.DTYPES
    want = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in want if n not in {d.name for d in C.DTYPES}]
    if bad or not want:
        raise Error(f"--dtypes: unknown dtype {', '.join(bad) or '(none given)'}",
                    hint="dtypes: " + " ".join(d.name for d in C.DTYPES))
    return tuple(d for d in C.DTYPES if d.name in want)


def _plan(name: str, rows: int, dtypes: int, gradients: bool, compile_only: bool, jobs: int, md: str,
          default_path: bool, last: tuple[float, str] | None) -> str:
    """What the run will do, where it writes and about how long it takes (the last report's
    time where there is one, else a rough rate)."""
    js = os.path.splitext(md)[0] + ".json"
    cells = (f"{rows} {'op or composite' if rows == 1 else 'ops and composites'} x {dtypes} dtypes"
             + (", and each one's gradients" if gradients else ""))
    if last is not None:
        took = f"the last full run took {last[0] / 60:.0f} min ({last[0]:.0f} s) on {last[1]}"
    else:  # ~1-5 s a row on one process: a compile per cell, several per gradient
        took = f"about {max(1, round(rows * 3 / 60 / jobs))} min"
    lines = [f"caten test-runtime: {'compiles' if compile_only else 'compiles and runs'} {cells} on '{name}' "
             f"({took}; -j N: forward rows on N processes; --ops GLOB: only some ops)",
             f"caten test-runtime: writes {md} and {js}"
             + (" (replacing the committed reports; -o PATH writes elsewhere)" if default_path else "")]
    return "\n".join(lines)


def _last_seconds(md: str) -> tuple[float, str] | None:
    """The time and device of the report at `md`, from its header (caten.conformance.report
    writes "Device: D. Generated by `...` in N s")."""
    try:
        with open(md, encoding="utf-8") as f:
            head = f.read(2000)
    except OSError:
        return None
    m = re.search(r"Device: (.*?)\. Generated by `[^`]*` in (\d+) s", head)
    return (float(m.group(2)), m.group(1)) if m else None


class _Lines:
    """Progress as a line on stderr every tenth of the cells (where no bar can be drawn)."""

    def __init__(self, name: str, total: int) -> None:
        self.name, self.total, self.done, self.next = name, max(1, total), 0, 0.1
        self.t0 = time.perf_counter()

    def advance(self, n: int) -> None:
        self.done += n
        if self.done / self.total >= self.next - 1e-9:
            while self.done / self.total >= self.next - 1e-9:
                self.next += 0.1
            click.echo(f"caten test-runtime: {self.name} {self.done}/{self.total} cells "
                       f"({100 * self.done // self.total}%, {time.perf_counter() - self.t0:.0f} s)", err=True)
