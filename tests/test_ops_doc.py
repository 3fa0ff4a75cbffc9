"""docs/ops.md is generated (`caten ops --markdown -o docs/ops.md`) from the op table and the
library, and the committed page is what the generator writes today: a new op, composite, keyword,
doc line or built-in rule fails here until the page is regenerated."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from caten.cli.main import cli
from caten.cli.opsdoc import COMMAND, markdown

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "ops.md"


def test_committed_page_is_fresh():
    want = markdown()
    have = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if have != want:
        old, new = have.splitlines(), want.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        raise AssertionError(f"docs/ops.md is stale (first difference at line {first + 1}: "
                             f"{old[first] if first < len(old) else '<end>'!r} vs "
                             f"{new[first] if first < len(new) else '<end>'!r}); regenerate it with `{COMMAND}`")


def _rows(page: str, section: str) -> list[list[str]]:
    """The table rows of one `## ` section, as lists of cells."""
    body = page.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in body.splitlines()
            if ln.startswith("| `")]


def test_page_lists_every_op_composite_and_rule_from_their_sources():
    from caten.elaborate.library import composites, rule_sets
    from caten.ir.ops import TABLE

    page = markdown()
    ops = [r[0] for r in _rows(page, "Principal ops")]
    assert ops == [f"`{op.value}`" for op in TABLE]
    for r, info in zip(_rows(page, "Principal ops"), TABLE.values()):
        assert r[1] == info.group and r[6] == info.doc.replace("|", "\\|"), r
        assert r[5] == ("VJP rule" if info.vjp is not None else "none"), r
    comps = _rows(page, "Library composites")
    for name, defs in composites().items():
        listed = [r for r in comps if r[0] == f"`{name}`"]
        assert len(listed) == len(defs), f"{name}: {len(defs)} definitions, {len(listed)} rows"
        for d in defs:
            keys, doc = [f":{k}" for k, _, _ in d.keys], (d.doc or "(no doc string)").replace("|", "\\|")
            doc += " (gradient: its own `:vjp`)" if d.vjp else ""
            assert any(re.findall(r"(?<=\s):[\w-]+", r[1].split(") ->")[0]) == keys and r[2] == doc
                       for r in listed), f"{name}: no row with keywords {keys} and doc {d.doc!r}: {listed}"
    rules = [r[0] for r in _rows(page, "Built-in rewrite rules")]
    assert sorted(rules) == sorted(f"`{r.name}`" for defs in rule_sets().values() for r in defs)


def test_cli_prints_and_writes_the_page(tmp_path):
    res = CliRunner().invoke(cli, ["ops", "--markdown"])
    assert res.exit_code == 0 and res.output == markdown()
    out = tmp_path / "ops.md"
    res = CliRunner().invoke(cli, ["ops", "--markdown", "-o", str(out)])
    assert res.exit_code == 0 and res.output == "" and out.read_text(encoding="utf-8") == markdown()
    res = CliRunner().invoke(cli, ["ops"])
    assert res.exit_code == 0 and res.output.startswith("Principal ops (the IR;")


def test_torch_names_section_lists_the_registry():
    """The Torch names section is the torchnames registry (one source with docs/tensor.md's table)."""
    import caten.tensor  # noqa: F401  (registers every torch name)
    from caten.tensor.torchnames import REGISTRY

    rows = _rows(markdown(), "Torch names")
    assert [r[0].split(".", 1)[1].rstrip("`") for r in rows] == sorted(REGISTRY)
    for r in rows:
        e = REGISTRY[r[0].split(".", 1)[1].rstrip("`")]
        assert r[0].startswith("`torch." if e.kind in ("static", "function") else "`Tensor.")
        assert r[1] == e.caten.replace("|", "\\|").replace("\n", " ") and r[2] == e.section, r
