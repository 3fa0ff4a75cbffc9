"""`caten fuzz`: the differential program fuzzer (caten.fuzz) from the command line."""

from __future__ import annotations

import time

import click

from caten.errors import Error


def run_fuzz(seed: int, count: int | None, soak: int | None, targets: str, opencl: bool, shrink_budget: int,
             time_limit: float | None, show: bool) -> int:
    """Returns the exit status: 0 when every program agreed with the reference, 1 otherwise."""
    from caten import plugin as R
    from caten.fuzz.check import parse_targets
    from caten.fuzz.driver import fuzz
    from caten.fuzz.gen import generate, render

    if show:
        click.echo(render(generate(seed)), nl=False)
        return 0
    tl = parse_targets(targets + (",opencl+bounds" if opencl else ""))
    for t in tl:
        ok, why = R.get(t.runtime).available()
        if not ok:
            raise Error(f"cannot fuzz on runtime '{t.runtime}': {why}")
    n = soak if soak is not None else (count if count is not None else 100)
    deadline = time.time() + time_limit if time_limit else None
    summary = fuzz(range(seed, seed + n), tl, shrink_budget, click.echo, deadline, stop_first=soak is None)
    on = ", ".join(map(str, tl))
    if soak is None:
        click.echo(f"checked seeds {seed}..{summary.last_seed} on {on}: "
                   f"{'FAILED' if summary.findings else 'all agree with the reference'}")
    else:
        click.echo(f"{summary.programs} programs on {on} in {summary.seconds:.0f} s: "
                   f"{len(summary.findings)} failures, {len(summary.rejected)} refused by the reference")
    for s, why in summary.rejected[:10]:
        click.echo(f"  seed {s} refused by the reference (a fuzzer bug): {why[:300]}")
    return 1 if summary.findings or summary.rejected else 0
