"""The composite library: every `ops/*.lisp` file, read once per process."""

from __future__ import annotations

import functools
from importlib import resources

from caten.read.program import CompositeDef, RuleDef, parse_forms
from caten.read.reader import read


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, list[CompositeDef]], dict[str, list[RuleDef]]]:
    comps: dict[str, list[CompositeDef]] = {}
    rules: dict[str, list[RuleDef]] = {}
    root = resources.files("caten.ops")
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".lisp"):
            unit = parse_forms(read(entry.read_text(encoding="utf-8"), f"<ops>/{entry.name}"), entry.name, True)
            for c in unit.composites:
                comps.setdefault(c.name, []).append(c)
    rdir = root.joinpath("rules")
    if rdir.is_dir():
        for entry in sorted(rdir.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".lisp"):
                unit = parse_forms(read(entry.read_text(encoding="utf-8"), f"<ops>/rules/{entry.name}"), entry.name)
                rules[entry.name[:-5]] = unit.rules
    return comps, rules


def composites() -> dict[str, list[CompositeDef]]:
    """Library composites by name; a name may have overloads of different arity."""
    return _load()[0]


def rule_sets() -> dict[str, list[RuleDef]]:
    """Built-in rule files of ops/rules/, by file stem."""
    return _load()[1]
