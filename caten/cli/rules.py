"""`caten rules check FILE...`: soundness of rewrite rules on random inputs (caten.rewrite.check)."""

from __future__ import annotations

import os
import time

import click

from caten.errors import Error


def _load(path: str):
    """Rules and composites of a rule file; `builtin` or `builtin:NAME` names the shipped sets."""
    from caten.elaborate.library import rule_sets
    from caten.read.program import load_unit_file

    if path == "builtin" or path.startswith("builtin:"):
        sets = rule_sets()
        want = path.split(":", 1)[1] if ":" in path else None
        if want is not None and want not in sets:
            raise Error(f"no built-in rule set `{want}`", None, "built-in sets: " + ", ".join(sorted(sets)))
        return [(name, defs, []) for name, defs in sorted(sets.items()) if want in (None, name)]
    if not os.path.isfile(path):
        raise Error(f"{path}: no such file")
    unit = load_unit_file(path)
    return [(os.path.basename(path), unit.rules, unit.composites)]


def check_files(files: list[str], verbose: bool) -> int:
    """Check every rule of every file; print a counterexample for each unsound rule. Exit code."""
    from caten.rewrite import compile_rules, library_names
    from caten.rewrite.check import check_rule

    bad = 0
    total = 0
    t0 = time.perf_counter()
    for path in files:
        for ruleset, defs, comps in _load(path):
            user: dict = {}
            for c in comps:
                user.setdefault(c.name, []).append(c)
            from caten.elaborate.library import composites

            lib = composites()
            rules = compile_rules(defs, ruleset, library_names() | set(user))
            if not rules:
                click.echo(f"{path}: no rules")
            for r in rules:
                total += 1
                out = check_rule(r, {**lib, **user})
                if out.status == "ok":
                    if verbose:
                        click.echo(f"{r.where()}: ok: `{r.name}` agrees on {out.cases} random cases")
                elif out.status == "untested":
                    click.echo(f"{r.where()}: warning: `{r.name}` never fired on the generated inputs; not tested")
                else:
                    bad += 1
                    what = "is unsound" if out.status == "unsound" else "is broken"
                    click.echo(Error(f"rule `{r.name}` {what}", r.span).format())
                    for line in out.details:
                        click.echo("  " + line)
    dt = time.perf_counter() - t0
    click.echo(f"{total} rule{'s' if total != 1 else ''} checked, {bad} unsound ({dt:.1f} s)")
    return 1 if bad else 0
