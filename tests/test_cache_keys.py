"""The cache keys cannot go stale: the front fingerprint (cached programs) and the back fingerprint
(cached code) cover every module the import graph says their passes can run, so an edit to any of
them -- or to the library or the grammar -- misses the cache, and a new module is covered as soon
as a covered one imports it. Before, caten/driver.py was outside the program key and the code key
named nine lower/ files by hand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources

import pytest

import caten
from caten import plugin as R
from caten.cache import fingerprint as F
from caten.pipeline import front

grimp = pytest.importorskip("grimp")

PKG = os.path.dirname(caten.__file__)


def _roots(rt: str) -> tuple[str, ...]:
    return ("caten.pipeline.back", type(R.get(rt)).__module__)


def _top_level(module: str, line: int) -> bool:
    with open(F.module_file(module), encoding="utf-8") as f:
        text = f.read().splitlines()[line - 1]
    return not text[:1].isspace()


def _graph_closure(graph, roots: tuple[str, ...]) -> set[str]:
    """What grimp's import graph says the roots can run: what they import, transitively, and each
    package that contains one, with what that package imports at module level."""
    seen: set[str] = set()
    full: set[str] = set()
    todo = [(r, False) for r in roots]
    while todo:
        m, top = todo.pop()
        if m in full or (top and m in seen):
            continue
        seen.add(m)
        if not top:
            full.add(m)
        if "." in m:
            todo.append((m.rpartition(".")[0], True))
        g = m.replace("caten.runtimes", "runtimes", 1)  # grimp sees the plugins under their own root
        for imp in graph.find_modules_directly_imported_by(g):
            details = graph.get_import_details(importer=g, imported=imp)
            if top and not any(_top_level(m, d["line_number"]) for d in details):
                continue
            todo.append((imp.replace("runtimes", "caten.runtimes", 1) if imp.startswith("runtimes") else imp, False))
    return seen


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("caten", "runtimes", cache_dir=None)


@pytest.mark.parametrize("rt", [None, "llvm", "c"])
def test_covered_modules_are_what_the_import_graph_says(graph, rt):
    roots = front.ROOTS if rt is None else _roots(rt)
    assert set(F.closure(roots)) == _graph_closure(graph, roots)


def test_the_modules_that_must_be_covered_are():
    """A sample that must be in the keys whatever the graph says: the front pass and the whole
    front end (but the rule checker); every lowering, render and schedule module (but the loop-IR interpreter the tests
    use as an oracle); the runtime plugins; the op table."""
    fr = set(F.closure(front.ROOTS).values())
    back = set(F.closure(_roots("llvm")).values()) | set(F.closure(_roots("c")).values())
    for pkg in ("read", "elaborate", "rewrite", "autodiff"):
        for f in os.listdir(os.path.join(PKG, pkg)):
            if f.endswith(".py") and (pkg, f) != ("rewrite", "check.py"):  # `caten rules check` compiles nothing
                assert os.path.join(PKG, pkg, f) in fr, f"{pkg}/{f}"
    assert os.path.join(PKG, "pipeline", "front.py") in fr and os.path.join(PKG, "ir", "ops.py") in fr
    for pkg in ("lower", "render", "schedule"):
        for d, _, files in os.walk(os.path.join(PKG, pkg)):
            for f in files:
                if f.endswith(".py") and f != "evaluate.py":
                    assert os.path.join(d, f) in back, os.path.join(d, f)
    assert os.path.join(PKG, "ir", "ops.py") in back and os.path.join(PKG, "pipeline", "back.py") in back
    assert {R.get(rt).__class__.__module__ for rt in ("llvm", "c")} <= set(F.closure(_roots("llvm"))) | \
        set(F.closure(_roots("c")))


_PROBE = r"""
import json, os, sys
import caten
from caten import plugin as R
from caten.pipeline import back, front
from caten.cache import fingerprint as F
from caten.read import cached

walks = {}
walk = F.closure
F.closure = lambda roots: walks.setdefault(tuple(roots), walk(roots))  # a comment adds no import: walk once

def key(what):
    F._memo.clear()
    front.front_fingerprint.cache_clear()
    cached.reader_fingerprint.cache_clear()
    if what == "source":
        return cached.source_key("x.lisp", b"")
    return front.front_fingerprint() if what == "front" else back.code_fingerprint(R.get(what))

covered = {"front": F.closure(front.ROOTS), "source": F.closure(("caten.read.program",)),
           **{rt: F.closure(("caten.pipeline.back", type(R.get(rt)).__module__)) for rt in ("llvm", "c")}}
base = {what: key(what) for what in covered}
files = sorted({p for c in covered.values() for p in c.values()} | set(sys.argv[1:]))
stale = []
for path in files:
    # the front key where it claims the file (or it is data: the library, the grammar); one back
    # key that claims it (both hash their closures with the same function)
    claims = [w for w in ("front",) if path in covered[w].values() or not path.endswith(".py")]
    claims += [w for w in ("source",) if path in covered[w].values() or path.endswith(".lark")]
    claims += [w for w in ("llvm", "c") if path in covered[w].values()][:1]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "a", encoding="utf-8") as f:
        f.write({".lisp": "\n;; edited\n", ".lark": "\n// edited\n"}.get(os.path.splitext(path)[1], "\n# edited\n"))
    stale += [(w, path) for w in claims if key(w) == base[w]]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
assert {what: key(what) for what in covered} == base
print(json.dumps({"stale": stale, "front": sorted(covered["front"]), "source": sorted(covered["source"]),
                  "files": len(files)}))
"""


def test_an_edit_to_any_covered_module_changes_its_key(tmp_path):
    """In a copy of caten (installed layout: plugins, library and grammar inside the package):
    append a comment to every module a fingerprint covers, and to each library and grammar file;
    the key that covers it changes (the closure is walked once: the test above checks it). A new
    module, imported inside a function of a covered one, is covered too."""
    root = tmp_path / "site"
    pkg = root / "caten"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for sub in ("runtimes", "ops", "grammar"):
        src = str(resources.files(f"caten.{sub}"))  # (outside caten/ in an editable install)
        if not (pkg / sub).exists():
            shutil.copytree(src, pkg / sub, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "elaborate" / "brand_new.py").write_text("X = 1\n")
    with open(pkg / "elaborate" / "values.py", "a") as f:
        f.write("\n\ndef _probe():\n    from caten.elaborate import brand_new\n    return brand_new.X\n")
    data = [str(p) for p in sorted((pkg / "ops").rglob("*.lisp"))] + [str(pkg / "grammar" / "caten.lark")]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _PROBE, *data], capture_output=True, text=True, env=env, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    assert res["stale"] == [], res["stale"]
    assert "caten.elaborate.brand_new" in res["front"] and "caten.pipeline.front" in res["front"]
    assert "caten.read.reader" in res["source"]  # parsed sources are keyed by the reader's code too
    assert res["files"] > 100


def test_fingerprints_are_computed_once_per_process(monkeypatch):
    front.front_fingerprint()
    from caten.pipeline import back

    back.code_fingerprint(R.get("c"))

    def again(roots):
        raise AssertionError("a fingerprint's import closure was walked twice")

    monkeypatch.setattr(F, "closure", again)
    assert front.front_fingerprint() == front.front_fingerprint()
    assert back.code_fingerprint(R.get("c")) == back.code_fingerprint(R.get("c"))
