"""`--explain-rules`: which rules fired, where, how often, and the time spent per rule set."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from caten.rewrite.rule import Rule


class Explain:
    """A collector the engine reports to; one may span several compiled composites."""

    def __init__(self) -> None:
        self.fired: dict[tuple[str, str], dict] = {}  # (rule set, rule name) -> {rule, count, where: {loc: n}}
        self.seconds: dict[str, float] = defaultdict(float)
        self.sizes: dict[str, set[str]] = defaultdict(set)
        self.order: list[str] = []

    def declare(self, rule: Rule) -> None:
        if rule.ruleset not in self.sizes:
            self.order.append(rule.ruleset)
        self.sizes[rule.ruleset].add(rule.name)

    def record(self, rule: Rule, where: str) -> None:
        e = self.fired.setdefault((rule.ruleset, rule.name), {"rule": rule, "count": 0, "where": {}})
        e["count"] += 1
        e["where"][where] = e["where"].get(where, 0) + 1

    def add_time(self, ruleset: str, seconds: float) -> None:
        self.seconds[ruleset] += seconds

    @property
    def total(self) -> int:
        return sum(e["count"] for e in self.fired.values())

    def report(self) -> str:
        out = []
        if not self.fired:
            out.append("rewrite rules: none fired")
        else:
            out.append(f"rewrite rules: {len(self.fired)} fired, {self.total} rewrite{'s' if self.total != 1 else ''}")
            for (rs, name), e in sorted(self.fired.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
                r = e["rule"]
                out.append(f"  {name}  [{rs}, {r.where()}]  fired {e['count']} time{'s' if e['count'] != 1 else ''}")
                for loc, n in list(e["where"].items())[:20]:
                    out.append(f"      at {loc}" + (f" (x{n})" if n > 1 else ""))
                if len(e["where"]) > 20:
                    out.append(f"      ... and {len(e['where']) - 20} more places")
        if self.order:
            out.append("time per rule set:")
            width = max(len(rs) for rs in self.order)
            for rs in self.order:
                n = len(self.sizes[rs])
                ms = self.seconds.get(rs, 0.0) * 1e3
                out.append(f"  {rs:<{width}}  {ms:8.3f} ms  ({n} rule{'s' if n != 1 else ''})")
        return "\n".join(out)
