"""`caten ops` and `caten runtimes`: read straight from the op table, the library and the registry."""

from __future__ import annotations

import click


def print_ops() -> None:
    from caten.elaborate.library import composites
    from caten.ir.ops import TABLE

    click.echo("Principal ops (the IR; semantics in caten/ir/ops.py):")
    for op, info in TABLE.items():
        click.echo(f"  {op.value:<8} {info.group:<8} {info.doc}")
    click.echo("\nLibrary composites (ops/*.lisp):")
    for name, defs in sorted(composites().items()):
        for d in defs:
            click.echo(f"  {name:<14} {d.doc}")


def print_runtimes(plugin: str | None) -> None:
    from caten.run import runtime as R

    if plugin:
        R.load_plugin(plugin)
    for name in R.names():
        try:
            rt = R.get(name)
            ok, why = rt.available()
            desc = rt.description
        except Exception as e:  # a plugin that fails to load is reported, not fatal
            ok, why, desc = False, f"failed to load: {e}", ""
        state = "available" if ok else f"unavailable: {why}"
        click.echo(f"  {name:<10} {state}" + (f"  ({desc})" if desc and ok else ""))
