"""The layering of caten's packages holds: the import-linter contracts of pyproject.toml (the
pipeline order, the whole stack, the back end seeing only the IR, the runtime plugins' limits)
are kept, caten/ never imports its runtime plugins, and every package of caten/ has its place in
the stack, so a new one cannot slip outside the contracts."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter")
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Contracts:" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, f"`lint-imports` (from the repository root) fails:\n{p.stdout}\n{p.stderr}"


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, node.lineno)] + [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return out


def test_caten_never_imports_its_runtime_plugins():
    """The plugins (runtimes/, installed as caten.runtimes) depend on caten, never the other way:
    the registry loads them by name. import-linter cannot see this edge (runtimes/ lies outside
    caten/), so it is checked here."""
    bad = []
    for f in sorted((ROOT / "caten").rglob("*.py")):
        for mod, line in _imports(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if mod == "caten.runtimes" or mod.startswith(("caten.runtimes.", "runtimes")):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {mod}")
    assert not bad, "caten/ imports runtime plugins (move what it needs into caten/):\n" + "\n".join(bad)


def test_the_stack_contract_places_every_package():
    contracts = {c["id"]: c for c in _pyproject()["tool"]["importlinter"]["contracts"]}
    placed = {m.strip() for layer in contracts["stack"]["layers"] for m in layer.replace(":", "|").split("|")}
    children = {f"caten.{p.parent.name}" for p in (ROOT / "caten").glob("*/__init__.py")}
    children |= {f"caten.{p.stem}" for p in (ROOT / "caten").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert children - placed == set(), f"place these in the `stack` contract of pyproject.toml: {children - placed}"
    assert "runtimes" in placed
    assert placed - children - {"runtimes"} == set(), "the stack names packages that do not exist"


def test_the_pipeline_contract_is_the_pipeline_order():
    """read -> autodiff -> elaborate -> rewrite -> schedule -> lower -> render: each stage may import
    the stages before it (whose output it consumes), never one after it; the stack keeps the same
    order. autodiff is a graph transform the elaborator's `grad` forms call, so it sits below it."""
    contracts = {c["id"]: c for c in _pyproject()["tool"]["importlinter"]["contracts"]}
    order = ["caten.read", "caten.autodiff", "caten.elaborate", "caten.rewrite", "caten.schedule", "caten.lower",
             "caten.render"]
    assert contracts["pipeline"]["type"] == "layers" and contracts["pipeline"]["layers"] == order[::-1]
    stack = [m for m in contracts["stack"]["layers"] if m in order]
    assert stack == order[::-1]
    assert contracts["runtimes-no-schedule-lower"]["forbidden_modules"] == ["caten.schedule", "caten.lower"]
