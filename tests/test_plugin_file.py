"""A runtime defined in a single file outside the package is found with --plugin: listed by
`caten runtimes --plugin FILE`, used by `caten run FILE --plugin P -r NAME`, and by the Python
API after `load_plugin`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import caten
from caten import plugin as R

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "tests" / "plugins" / "myrt.py"


def cli(cwd, *args, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-m", "caten", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_plugin_is_listed(tmp_path):
    out = cli(tmp_path, "runtimes", "--plugin", PLUGIN)
    line = next(ln for ln in out.splitlines() if ln.split() and ln.split()[0] == "myrt")
    assert "available" in line and "one-file test plugin" in line


def test_plugin_runs_a_composite_from_the_cli(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    log = tmp_path / "ran.txt"
    cli(tmp_path, "run", ROOT / "examples" / "softmax.lisp", "--plugin", PLUGIN, "-r", "myrt", "X=x.npy",
        "-o", "y.npy", env_extra={"CATEN_MYRT_LOG": str(log)})
    assert log.read_text().startswith("ran ")
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), e / e.sum(1, keepdims=True), rtol=1e-6)


def test_plugin_from_python(tmp_path):
    rt = R.load_plugin(str(PLUGIN))
    assert rt.name == "myrt" and "myrt" in R.names()
    mod = caten.loads("(composite f ((A{f32}[N]) -> (B{f32}[N])) (* A 2))", runtime="myrt")
    np.testing.assert_array_equal(mod.f(np.arange(4, dtype=np.float32)), np.arange(4) * 2)


def test_plugin_file_written_by_a_user(tmp_path):
    """The smallest plugin: a few lines in a fresh folder."""
    p = tmp_path / "tiny.py"
    p.write_text("from caten.plugin import Runtime\n"
                 "class Tiny(Runtime):\n    name = 'tiny'\n    description = 'nothing yet'\n"
                 "    def available(self):\n        return False, 'just a demo'\n"
                 "RUNTIME = Tiny()\n")
    out = cli(tmp_path, "runtimes", "--plugin", p)
    assert "tiny" in out and "unavailable: just a demo" in out


def test_a_c_variant_is_a_page_of_code(tmp_path, monkeypatch):
    """tests/plugins/c_debug.py: a code-generating runtime in 30 lines (the pipeline drives it);
    its code is cached under its own key and computes what numpy does."""
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    path = ROOT / "tests" / "plugins" / "c_debug.py"
    assert len(path.read_text().splitlines()) <= 40
    src = "(composite f ((X{f32}[B, N]) -> (Y{f32}[B, N])) (setf Y (softmax X :axis 1)))"
    x = np.random.default_rng(3).standard_normal((5, 33)).astype(np.float32)
    y = caten.loads(src, runtime="c-debug", plugin=str(path)).f(x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    kinds = {p.suffix for p in (tmp_path / "cache").rglob("*")}
    assert ".c-debug-so" in kinds, kinds  # its own entry, under its own key (not the c runtime's)
