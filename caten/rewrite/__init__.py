"""The rewrite engine: `defoptimizer` rules over library calls and principal-op graphs.

Public surface:
- `rules_for(src, opt_level, files, known)`: the rules a compilation runs (built-in sets chosen by
  -O level, rules defined in the program, then `--rules` files), each checked at load.
- `Engine(rules, runtime, explain)`: `call_hook` for the elaborator, `rewrite(nodes)` for graphs.
- `Explain`: what `--explain-rules` prints.

Built-in rule sets are the files of `ops/rules/`; LEVELS says which -O level turns each on, except
the OPT_IN sets (fastmath), which only `--fast-math` or `--rules builtin:NAME` turn on.
"""

from __future__ import annotations

import functools
import os

from caten.errors import Error
from caten.read.program import RuleDef
from caten.rewrite.engine import Engine
from caten.rewrite.explain import Explain
from caten.rewrite.rule import Rule, compile_rule

__all__ = ["Engine", "Explain", "Rule", "LEVELS", "OPT_IN", "FAST_MATH", "builtin_rules", "compile_rules",
           "load_rule_file", "rules_for"]

# -O level from which each built-in rule set (ops/rules/NAME.lisp) runs; other files: from -O2
LEVELS = {"fold": 1, "algebra": 2}
# built-in sets no -O level turns on: they change results' bits, so the user names them
# (`--fast-math` is `--rules builtin:fastmath`; caten.load(fast_math=True) the same)
OPT_IN = {"fastmath"}
FAST_MATH = "builtin:fastmath"


def level_of(ruleset: str) -> int:
    return LEVELS.get(ruleset, 2)


def library_names() -> set[str]:
    from caten.elaborate.library import composites

    return set(composites())


def compile_rules(defs: list[RuleDef], ruleset: str, known: set[str]) -> list[Rule]:
    return [compile_rule(d, ruleset, known) for d in defs]


@functools.lru_cache(maxsize=8)
def builtin_rules(opt_level: int) -> tuple[Rule, ...]:
    """The built-in rules -O`opt_level` runs (none at -O0), in file order."""
    from caten.elaborate.library import rule_sets

    if opt_level <= 0:
        return ()
    known = library_names()
    out: list[Rule] = []
    for name, defs in sorted(rule_sets().items(), key=lambda kv: (level_of(kv[0]), kv[0])):
        if name not in OPT_IN and level_of(name) <= opt_level:
            out += compile_rules(defs, name, known)
    return tuple(out)


_FILE_CACHE: dict[str, tuple[float, list[RuleDef]]] = {}


def load_rule_file(path: str) -> list[RuleDef]:
    """The rules of a `--rules` file (re-read when it changes), or of a built-in set named `builtin:NAME`."""
    from caten.read.program import load_unit_file

    if path.startswith("builtin:"):
        from caten.elaborate.library import rule_sets

        sets = rule_sets()
        name = path.split(":", 1)[1]
        if name not in sets:
            raise Error(f"no built-in rule set `{name}`", None, "built-in sets: " + ", ".join(sorted(sets)))
        return sets[name]
    if not os.path.isfile(path):
        raise Error(f"rule file {path}: no such file", None, "pass --rules PATH to an existing .lisp file")
    mtime = os.path.getmtime(path)
    hit = _FILE_CACHE.get(path)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    unit = load_unit_file(path)
    if unit.composites and not unit.rules:
        c = unit.composites[0]
        raise Error(f"rule file {path} defines composites but no rules", c.span,
                    "a --rules file holds (defoptimizer ...) forms; import composites from the program")
    _FILE_CACHE[path] = (mtime, unit.rules)
    return unit.rules


def rules_for(program_rules: list[RuleDef], opt_level: int, files: list | None, known: set[str]) -> list[Rule]:
    """Built-in sets for `opt_level`, then the program's own rules, then each `--rules` file, in order."""
    out = list(builtin_rules(opt_level))
    if program_rules:
        file = program_rules[0].span.file if program_rules[0].span else "<program>"
        out += compile_rules(program_rules, os.path.basename(file) if file else "<program>", known)
    for f in files or []:
        name = str(f).split(":", 1)[1] if str(f).startswith("builtin:") else os.path.basename(str(f))
        out += compile_rules(load_rule_file(str(f)), name, known)
    return out
