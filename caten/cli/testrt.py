"""`caten test-runtime`: run the op-coverage suite on a runtime and write its report."""

from __future__ import annotations

import os
import sys

import click

from caten.errors import Error


def run_conformance(runtime: str, output: str | None, compile_only: bool, pattern: str | None,
                    plugin: str | None, gradients: bool = True, jobs: int = 1) -> int:
    """Run the suite, write reports/RUNTIME.md and .json (or OUTPUT and its .json), print the
    summary line; 0 if no case failed, else 1. `gradients` False skips the gradient cases; `jobs`:
    forward rows on that many worker processes at once."""
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
    rows = C.rows(pattern)
    if not rows:
        raise Error(f"no op matches '{pattern}'", hint="see `caten ops` for the names")
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(rt.name, total=len(rows) * (len(C.DTYPES) + 1))

        def progress(name: str, n: int) -> None:
            bar.update(task, advance=n, description=name)

        res = run_suite(rt, compile_only=compile_only, progress=progress, rows=rows,
                        plugins=[plugin] if plugin else [], grads=gradients, jobs=jobs)
    md = output or os.path.join("reports", f"{rt.name}.md")
    md_path, js_path = report.write(res, md)
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
