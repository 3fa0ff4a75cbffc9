"""The composite library: every `ops/*.lisp` file, read once per process."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources

from caten.read.program import CompositeDef, RuleDef, parse_forms


def library_sources() -> list[tuple[str, str]]:
    """(name, text) of every library file: the grammar, ops/*.lisp and ops/rules/*.lisp."""
    root = resources.files("caten.ops")
    out = [("<grammar>", resources.files("caten.grammar").joinpath("caten.lark").read_text(encoding="utf-8"))]
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".lisp"):
            out.append((entry.name, entry.read_text(encoding="utf-8")))
    rdir = root.joinpath("rules")
    if rdir.is_dir():
        for entry in sorted(rdir.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".lisp"):
                out.append(("rules/" + entry.name, entry.read_text(encoding="utf-8")))
    return out


def _parse(sources: list[tuple[str, str]]) -> tuple[dict[str, list[CompositeDef]], dict[str, list[RuleDef]]]:
    from caten.read.reader import read  # (here: a warm load hashes the sources, reads none)

    comps: dict[str, list[CompositeDef]] = {}
    rules: dict[str, list[RuleDef]] = {}
    for name, text in sources:
        if name == "<grammar>":
            continue
        if name.startswith("rules/"):
            unit = parse_forms(read(text, f"<ops>/{name}"), name)
            rules[name[len("rules/"):-5]] = unit.rules
        else:
            for c in parse_forms(read(text, f"<ops>/{name}"), name, True).composites:
                comps.setdefault(c.name, []).append(c)
    return comps, rules


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Mapping[str, list[CompositeDef]], dict[str, list[RuleDef]]]:
    """The parsed library, from the compile cache when its sources are unchanged."""
    from caten.cache import codec, default_cache, key_of
    from caten.cache.fingerprint import fingerprint
    from caten.version import __version__

    sources = library_sources()
    store = default_cache()
    # the code that wrote the entry decodes it: each composite decodes on first use (codec.Lazy)
    code = fingerprint(("caten.read.program", "caten.cache.codec"), store)
    key = key_of("library", __version__, code, *(part for s in sources for part in s))
    blob = store.get(key, "lib")
    if blob is not None:
        try:
            comps, rules = codec.loads(blob)
            return comps, rules
        except Exception:  # an entry from an incompatible build: rebuild it
            pass
    parsed = _parse(sources)
    try:
        store.put(key, "lib", codec.dumps((codec.Lazy(parsed[0]), parsed[1])))
    except codec.CodecError:  # something the cache cannot hold: parse again next time
        pass
    return parsed


def composites() -> Mapping[str, list[CompositeDef]]:
    """Library composites by name; a name may have overloads of different arity."""
    return _load()[0]


def rule_sets() -> dict[str, list[RuleDef]]:
    """Built-in rule files of ops/rules/, by file stem."""
    return _load()[1]
