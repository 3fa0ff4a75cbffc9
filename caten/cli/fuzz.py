"""`caten fuzz`: the differential program fuzzer (caten.fuzz) from the command line."""

from __future__ import annotations

import time

import click


def run_fuzz(seed: int, count: int | None, soak: int | None, targets: str, opencl: bool, shrink_budget: int,
             time_limit: float | None, show: bool) -> int:
    """Returns the exit status: 0 when every program agreed with the reference, 1 otherwise."""
    from caten.fuzz.check import parse_targets
    from caten.fuzz.driver import fuzz
    from caten.fuzz.gen import generate, render

    if show:
        click.echo(render(generate(seed)), nl=False)
        return 0
    tl = parse_targets(targets + (",opencl" if opencl else ""))
    n = soak if soak is not None else (count if count is not None else 100)
    stop_first = soak is None
    deadline = time.time() + time_limit if time_limit else None
    found = []

    def log(text: str) -> None:
        click.echo(text)

    seeds = range(seed, seed + n)
    if stop_first:
        for s in seeds:
            summary = fuzz([s], tl, shrink_budget, log, deadline)
            found += summary.findings
            if found or (deadline and time.time() > deadline):
                break
        click.echo(f"checked up to seed {s} on {', '.join(map(str, tl))}: "
                   f"{'FAILED' if found else 'all agree with the reference'}")
        return 1 if found else 0
    summary = fuzz(seeds, tl, shrink_budget, log, deadline)
    click.echo(f"{summary.programs} programs on {', '.join(map(str, tl))} in {summary.seconds:.0f} s: "
               f"{len(summary.findings)} failures, {len(summary.rejected)} refused by the reference")
    for s, why in summary.rejected[:10]:
        click.echo(f"  seed {s} refused by the reference (a fuzzer bug): {why[:300]}")
    return 1 if summary.findings else 0
