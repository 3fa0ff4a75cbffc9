"""The documentation stands on its own: README.md and docs/*.md name only files that exist and
link only to files and headings that exist, the README's first command and shell tour run as
written and write only under build/, every shell and python block of docs/*.md runs as written
(or its marker says what it needs, tests/mdblocks.py), docs/language.md covers every command and
option the CLI has, and `caten ops` prints each op's signature, keywords and defaults from the op
table and the library (one source of truth)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import mdblocks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LANGUAGE = ROOT / "docs" / "language.md"


def _blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of a markdown text whose info string is `lang` ("" for none)."""
    return [b.text for b in mdblocks.blocks(text) if b.info == lang]


def _caten_bin(tmp: Path) -> Path:
    """A folder whose `caten` and `python` are this interpreter's: the installed console script
    when it sits beside the interpreter, else a shim running `python -m caten`. It is made beside
    `tmp`, the working folder, so that it is not among the files a command wrote there."""
    here = Path(sys.executable).parent
    bindir = tmp.parent / f"_bin_{tmp.name}"
    bindir.mkdir(exist_ok=True)
    for name, cmd in (("caten", f'"{sys.executable}" -m caten "$@"'), ("python", f'"{sys.executable}" "$@"')):
        target = here / name
        if (bindir / name).exists():
            continue
        # python itself always through a shim: a symlink to a venv's python, run from another
        # folder, finds no pyvenv.cfg beside it (3.12) and starts outside the venv
        if target.exists() and name != "python":
            (bindir / name).symlink_to(target)
        else:
            (bindir / name).write_text(f"#!/bin/sh\nexec {cmd}\n")
            (bindir / name).chmod(0o755)
    return bindir


def _shell(cmd: str, cwd: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{_caten_bin(cwd)}{os.pathsep}{os.environ.get('PATH', '')}", **env_vars)
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _ops_output() -> str:
    p = subprocess.run([sys.executable, "-m", "caten", "ops"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


# --- caten ops ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ops_out() -> str:
    return _ops_output()


def _sig_lines(out: str, name: str) -> list[str]:
    return [ln.strip() for ln in out.splitlines() if ln.strip().startswith(f"({name} ")]


@pytest.mark.parametrize("name,needle", [
    ("softmax", "(softmax X{T}[...] :axis -1) -> Y{T}[...]"),
    ("log-softmax", ":axis -1)"),
    ("sum", "(sum X{T}[...] :axis nil :keepdims false)"),
    ("mean", ":axis nil :keepdims false)"),
    ("argmax", ":axis nil :keepdims false) -> Y{i64}[...]"),
    ("layernorm", "(layernorm X{T}[...] gamma{T}[...] beta{T}[...] :axis -1 :eps 1e-5)"),
    ("rmsnorm", ":axis -1 :eps 1e-6)"),
    ("max-pool2d", ":kernel 2 :stride nil :padding 0)"),
    ("pad", "(pad X{T}[...] widths :value 0)"),
    ("full", "(full shape v :dtype f32)"),
    ("arange", "(arange n :dtype i64)"),
    ("rand", ":seed 0 :dtype f32)"),
    ("concat", "(concat &rest xs :axis 0)"),
    ("+", "(+ A{T}[...] B{T}[...] &fold)"),
    ("slice", "(slice X{T}[...] &rest specs)"),
])
def test_ops_shows_keywords_with_defaults(ops_out, name, needle):
    lines = _sig_lines(ops_out, name)
    assert any(needle in ln for ln in lines), f"`caten ops` shows {name} as {lines}, expected {needle!r}"


def test_ops_shows_both_conv2d_overloads_with_their_keywords(ops_out):
    lines = _sig_lines(ops_out, "conv2d")
    assert len(lines) == 2, lines
    keys = ":stride 1 :padding 0 :dilation 1 :groups 1)"
    assert any(ln.startswith("(conv2d X{T}[...] Wt{T}[...] :stride") and keys in ln for ln in lines), lines
    assert any(ln.startswith("(conv2d X{T}[...] Wt{T}[...] b{T}[...] :stride") and keys in ln for ln in lines), lines


def test_ops_lists_every_library_composite_with_its_keywords_and_doc(ops_out):
    from caten.elaborate.library import composites

    lines = [ln.strip() for ln in ops_out.splitlines()]
    for name, defs in composites().items():
        idx = [i for i, ln in enumerate(lines) if ln.startswith(f"({name} ")]
        assert len(idx) == len(defs), f"{name}: {len(defs)} definitions, {len(idx)} signatures listed"
        for d in defs:
            want_keys = [k for k, _, _ in d.keys]
            match = [i for i in idx if re.findall(r"(?<=\s):([\w-]+)", lines[i].split(") ->")[0]) == want_keys
                     and len(re.findall(r"\{", lines[i].split(") ->")[0])) == sum(p.tensor for p in d.params)]
            assert match, f"{name}: no signature with keywords {want_keys}: {[lines[i] for i in idx]}"
            assert any(lines[i + 1] == (d.doc or "(no doc string)") for i in match), f"{name}: doc line missing"


def test_ops_lists_every_principal_op_with_arity_dtypes_and_doc(ops_out):
    from caten.ir.ops import TABLE

    for op, info in TABLE.items():
        line = next((ln for ln in ops_out.splitlines() if ln.split()[:1] == [op.value]), None)
        assert line is not None, f"`caten ops` does not list {op.value}"
        assert info.doc in line and info.group in line
        assert ("variadic" if info.arity < 0 else f"arity {info.arity}") in line, line
    legend = next(ln for ln in ops_out.splitlines() if "float =" in ln)
    assert "f16 bf16 f32 f64" in legend
    assert re.search(r"^\s+INDEX\b.*\bi32 i64\b", ops_out, re.M)
    assert re.search(r"^\s+SQRT\b.*\bfloat\b", ops_out, re.M)
    assert re.search(r"^\s+NEG\b.*\bnumeric\b", ops_out, re.M)


def test_ops_lists_special_forms_and_compile_time_functions(ops_out):
    from caten.elaborate import meta
    from caten.elaborate.elaborator import SPECIAL

    special = next(ln for ln in ops_out.splitlines() if ln.startswith("Special forms:"))
    meta_line = next(ln for ln in ops_out.splitlines() if ln.startswith("Compile-time functions:"))
    assert special.split(":", 1)[1].split() == list(SPECIAL)
    assert meta_line.split(":", 1)[1].split() == list(meta.META)


# --- paths and references ------------------------------------------------------------------------
_PATH = re.compile(r"(?<![\w/.~-])((?:examples|docs|ops|benchmarks|reports|tests|caten|runtimes|grammar)/[\w./*-]*)")


def _mentioned_paths() -> list[tuple[str, str]]:
    out = []
    for f in [README] + DOCS:
        for m in _PATH.finditer(f.read_text(encoding="utf-8")):
            out.append((f.name, m.group(1).rstrip(".")))
    return out


def test_docs_mention_only_paths_that_exist():
    paths = _mentioned_paths()
    assert any(p.startswith("examples/") for _, p in paths) and any(p.startswith("docs/") for _, p in paths)
    missing = [(f, p) for f, p in paths if not (glob.glob(str(ROOT / p)) if "*" in p else (ROOT / p).exists())]
    assert not missing, f"documents name files that do not exist: {missing}"


def test_docs_do_not_point_outside_the_repository():
    for f in [README, ROOT / "reports" / "README.md"] + DOCS:
        text = f.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/LANGUAGE" not in text, f"{f.name} points outside the repository"
        assert "LANGUAGE.md" not in text, f"{f.name} cites LANGUAGE.md, not in the repository (docs/language.md)"


def test_language_reference_shows_every_principal_op_in_source():
    """The table of section 5 ("Principal ops in source") gives each op's form; BUFFER only exists
    in the graph, and LOOP and IF (whose bodies are sub-graphs) are named with the forms that
    write them."""
    from caten.ir.ops import TABLE

    text = LANGUAGE.read_text(encoding="utf-8")
    table = text.split("### Principal ops in source", 1)[1].split("\n### ", 1)[0]
    missing = [op.value for op, info in TABLE.items() if op.value != "BUFFER" and (
        f"`({op.value} " not in table if info.group != "control" else f"`{op.value}`" not in table)]
    assert not missing, f"docs/language.md's principal-op table lacks {missing}"


def test_relative_links_resolve_to_files_and_headings():
    """Every relative link of README.md and docs/*.md names a file that exists and, with `#anchor`,
    a heading of that page (the anchor GitHub gives it)."""
    n, broken = 0, []
    for f in [README] + DOCS:
        for target in mdblocks.links(f.read_text(encoding="utf-8")):
            n += 1
            path, _, anchor = target.partition("#")
            page = (f.parent / path) if path else f
            if not page.exists():
                broken.append(f"{f.name}: {target} (no such file)")
            elif anchor and page.suffix == ".md" and anchor not in mdblocks.anchors(page.read_text(encoding="utf-8")):
                broken.append(f"{f.name}: {target} (no such heading in {page.name})")
    assert n > 10, "the link finder found almost no links"
    assert not broken, broken


def test_readme_principal_op_count_is_the_tables():
    from caten.ir.ops import TABLE

    m = re.search(r"graph of (\d+) principal ops", README.read_text(encoding="utf-8"))
    assert m, "README no longer states the number of principal ops"
    assert int(m.group(1)) == len(TABLE)


def test_language_reference_covers_every_command_and_option():
    """Generated from the click command tree, so a new option fails here until it is documented."""
    import click

    from caten.cli.main import cli

    text = LANGUAGE.read_text(encoding="utf-8")
    missing = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if path and path != ["compile"] and f"caten {' '.join(path)}" not in text:
            missing.append(" ".join(path))
        for p in cmd.params:
            if isinstance(p, click.Option):
                for o in p.opts:
                    if o not in ("-h", "--help") and not re.search(rf"(?<![\w-]){re.escape(o)}(?![A-Za-z-])", text):
                        missing.append(f"{' '.join(path) or 'caten'} {o}")
                if isinstance(p.type, click.Choice):  # each value on the option's own line
                    missing.extend(f"{p.opts[-1]} {c}" for c in p.type.choices if not re.search(
                        rf"{re.escape(p.opts[-1])}[^\n]*(?<![\w-]){re.escape(c)}(?![\w-])", text))
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])

    walk(cli, [])
    assert not missing, f"docs/language.md does not document: {missing}"


def test_language_reference_has_the_contract_sections():
    """Sections 1-10 keep the numbers the code's docstrings cite ("section 8" is the command line)."""
    text = LANGUAGE.read_text(encoding="utf-8")
    heads = [int(h) for h in re.findall(r"^## (\d+)\. ", text, re.M)]
    assert heads[:10] == list(range(1, 11)) and heads == sorted(heads)
    for n, title in ((1, "Files"), (5, "Bodies"), (6, "Rewrite rules"), (7, "YAML"), (8, "Command line"),
                     (9, "op-coverage"), (10, "Python")):
        assert re.search(rf"^## {n}\. .*{title}", text, re.M), f"section {n} is not about {title}"


# --- the README tour, run as written ---------------------------------------------------------------
def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _tour_lines() -> list[str]:
    """The shell lines of the README after the install/test commands (the first two blocks)."""
    return [ln for b in _blocks(_readme(), "sh")[2:] for ln in b.splitlines() if ln.strip()]


def _first_command() -> str:
    """The top command, minus `pip install .` (this environment has caten installed)."""
    cmd = _blocks(_readme(), "sh")[0].strip()
    assert cmd.startswith("pip install . && ")
    return cmd[len("pip install . && "):]


def _setup(tmp: Path) -> None:
    """A working folder as a fresh clone's root has it, for what the README runs: examples/, and
    reports/ so that a command writing into the committed reports shows as a change."""
    shutil.copytree(ROOT / "examples", tmp / "examples")
    shutil.copytree(ROOT / "reports", tmp / "reports")


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root (relative path -> size, mtime)."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _written(before: dict, after: dict) -> set[str]:
    return {f for f, v in after.items() if before.get(f) != v}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_readme_first_command_runs_and_writes_only_under_build(tmp_path):
    work = tmp_path / "repo"
    _setup(work)
    before = _listing(work)
    p = _shell(_first_command(), work)
    assert p.returncode == 0, p.stdout + p.stderr
    np.testing.assert_allclose(np.load(work / "build" / "y.npy"), _softmax(np.load(work / "build" / "x.npy")),
                               rtol=1e-5)
    assert sorted(_written(before, _listing(work))) == ["build/x.npy", "build/y.npy"]


def test_readme_first_command_writes_no_compile_cache(tmp_path):
    """--no-cache leaves the cache folder alone: not even the parsed library (a `.lib` entry) or
    lark's grammar tables, which it once wrote."""
    work, cache, xdg = tmp_path / "repo", tmp_path / "cache", tmp_path / "xdg"
    _setup(work)
    p = _shell(_first_command(), work, CATEN_CACHE_DIR=str(cache), XDG_CACHE_HOME=str(xdg))
    assert p.returncode == 0, p.stdout + p.stderr
    assert not (xdg.exists() and _listing(xdg)), sorted(_listing(xdg))
    assert not (cache.exists() and _listing(cache)), sorted(_listing(cache))


def test_readme_second_command_is_the_test_suite():
    cmd = _blocks(_readme(), "sh")[1].strip()
    assert cmd.startswith("pip install -e \".[dev") and cmd.endswith("python3 -m pytest -q -n auto")
    assert cmd.split(" && ")[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI runs exactly it


def _tour_command(line: str) -> str:
    """The line as the test runs it: the op-coverage suite (~10 minutes) on one op shows that the
    command works and where it writes."""
    cmd = line.split("  #")[0].strip()
    return cmd + " --ops NEG" if cmd.startswith("caten test-runtime") else cmd


def test_readme_tour_runs_in_order_and_writes_only_under_build(tmp_path):
    """The first command, then every tour line, in one folder as a user runs them: each line
    succeeds and writes what it says, nothing lands outside build/ (which git ignores), and no
    two lines write the same file."""
    work = tmp_path / "repo"
    _setup(work)
    assert _shell(_first_command(), work).returncode == 0
    writers: dict[str, str] = {}
    for line in _tour_lines():
        cmd = _tour_command(line)
        before = _listing(work)
        p = _shell(cmd, work)
        assert p.returncode == 0, f"{cmd}\n{p.stdout}\n{p.stderr}"
        wrote = _written(before, _listing(work))
        assert all(f.startswith("build/") for f in wrote), f"{cmd} wrote outside build/: {sorted(wrote)}"
        for o in re.findall(r"-o (\S+)", cmd):
            assert o in wrote, f"{cmd} did not write {o}"
        for f in wrote:
            assert f not in writers, f"{f} is written by two tour lines: {writers.get(f)!r} and {cmd!r}"
            writers[f] = cmd
        if "--emit ir" in cmd and "--rules" in cmd:
            assert p.stdout.count("EXTERN") == 2 and "blas-matmul" in p.stderr and "fired 2 times" in p.stderr
        if "-o build/libaxpy.so" in cmd:
            assert "int32_t axpy(" in (work / "build" / "axpy.h").read_text()
        if "-e shifted-exp" in cmd:
            assert p.stdout.startswith("E = ")
        if "--emit loops" in cmd:
            assert "kernel softmax_rows__k0(" in p.stdout and "for " in p.stdout
    manifests = [f for f in writers if f.endswith(".json")]
    assert {"build/k-cuda.json", "build/k-opencl.json"} <= set(manifests), manifests


def test_readme_python_snippet_runs(tmp_path, monkeypatch):
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    (code,) = _blocks(_readme(), "python")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    x_rows = scope["y"]
    assert x_rows.shape == (4, 7) and x_rows.dtype == np.float32
    np.testing.assert_allclose(x_rows.sum(axis=1), 1.0, rtol=1e-5)


def test_readme_diagnostic_example_is_what_caten_prints(tmp_path):
    block = next(b for b in _blocks(_readme(), "") if b.startswith("bad.lisp:"))
    source = block.splitlines()[1]
    (tmp_path / "bad.lisp").write_text(source + "\n")
    p = _shell("caten bad.lisp", tmp_path)
    assert p.returncode == 1
    assert p.stderr.strip() == block.strip()


# --- examples/mlp.lisp, the README's rules example ---------------------------------------------------
@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
@pytest.mark.parametrize("rules", [[], [str(ROOT / "examples" / "rules" / "blas_matmul.lisp")]])
def test_mlp_example_matches_numpy(runtime, rules):
    import caten

    rng = np.random.default_rng(1)
    b, d, h, k = 5, 7, 9, 3
    x, w1, b1, w2, b2 = (rng.standard_normal(s).astype(np.float32) for s in ((b, d), (d, h), (h,), (h, k), (k,)))
    mod = caten.load(str(ROOT / "examples" / "mlp.lisp"), runtime=runtime, rules=rules)
    want = np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(mod.mlp2(x, w1, b1, w2, b2), want, rtol=1e-5, atol=1e-5)


def _lisp_examples() -> list[tuple[str, str]]:
    """The Lisp blocks of README.md and docs/language.md that are whole programs (no `...`)."""
    out = []
    for f in (README, LANGUAGE):
        out += [(f.name, b) for b in _blocks(f.read_text(encoding="utf-8"), "lisp") if "..." not in b]
    return out


@pytest.mark.parametrize("where,text", _lisp_examples(), ids=lambda v: v.splitlines()[0][:40] if "\n" in v else v)
def test_lisp_examples_in_docs_load(where, text):
    import caten

    caten.loads(text, runtime="numpy")


def test_readme_softmax_snippet_computes_softmax():
    import caten

    text = next(b for b in _blocks(_readme(), "lisp") if "softmax-rows" in b)
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    y = caten.loads(text, runtime="numpy").softmax_rows(x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_language_reference_names_every_op_composite_and_function():
    """Generated from the op table, the library and the elaborator: a new name fails here until
    docs/language.md documents it."""
    from caten.elaborate import meta
    from caten.elaborate.elaborator import SPECIAL
    from caten.elaborate.library import composites
    from caten.ir.ops import TABLE

    text = LANGUAGE.read_text(encoding="utf-8")
    names = [op.value for op in TABLE] + list(composites()) + list(meta.META) + list(SPECIAL)
    missing = [n for n in names if not re.search(rf"(?<![\w?-]){re.escape(n)}(?![\w?-])", text)]
    assert not missing, f"docs/language.md does not mention: {missing}"


# --- the shell and python blocks of docs/*.md ------------------------------------------------------
# docs/tensor.md's blocks run in tests/test_tensor_example.py.
PAGES = [f for f in DOCS if f.name != "tensor.md"]
X = np.random.default_rng(3).random((4, 7), dtype=np.float32)
_PROG = "(composite f ((X{f32}[N, M]) -> (Y{f32}[N, M])) (neg (neg (softmax X :axis 1))))\n"


def _onnx_model(path: Path) -> None:
    """x_input{f32}[N, 7] -> relu(x_input @ W), W an initializer: what docs/import.md imports."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(4).standard_normal((7, 3)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x_input", "W"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                          "g", [helper.make_tensor_value_info("x_input", TensorProto.FLOAT, ["N", 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


STAND_INS = {  # the placeholder files a block's `files` clause names
    "prog.lisp": lambda p: p.write_text(_PROG),
    "model.lisp": lambda p: p.write_text(_PROG),
    "rules.lisp": lambda p: p.write_text("(defoptimizer neg-neg (neg (neg ?x)) => ?x)\n"),
    "x.npy": lambda p: np.save(p, X),
    "model.onnx": _onnx_model,
}


def _doc_blocks() -> list[tuple[Path, mdblocks.Block]]:
    return [(f, b) for f in PAGES for b in mdblocks.blocks(f.read_text(encoding="utf-8"), f.name)
            if b.info in ("sh", "python")]


def _need(what: str) -> None:
    if what in ("torch", "onnx"):
        pytest.importorskip(what)
    elif what == "gpu":
        from caten import plugin

        ok, why = plugin.get("cuda").available()
        if not ok:
            pytest.skip(f"needs a GPU: {why}")
    else:
        raise AssertionError(f"unknown need {what!r} (known: torch, onnx, gpu)")


def _pip_extras_exist(line: str) -> None:
    """A `pip install` line is not run; the extras it names must be the package's."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    named = [e.strip() for m in re.findall(r"\[([\w,\s-]+)\]", line.split("#")[0]) for e in m.split(",")]
    assert named and all(e in extras for e in named), f"{line!r} names extras {named}; the package has {sorted(extras)}"


@pytest.mark.parametrize("page,block", _doc_blocks(), ids=lambda v: f"{v.name}" if isinstance(v, Path) else str(v.line))
def test_docs_block_runs_as_written(page, block, tmp_path, monkeypatch):
    m = block.marker
    if "long" in m:
        pytest.skip("long-running (marked `long` in the page)")
    for what in m.get("needs", []):
        _need(what)
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    for name in m.get("files", []):
        assert name in STAND_INS, f"{page.name}:{block.line} needs {name}, which the test has no stand-in for"
        STAND_INS[name](work / name)
    if block.info == "sh":
        for line in filter(None, (ln.strip() for ln in block.text.splitlines())):
            if line.startswith("pip install"):
                _pip_extras_exist(line)
                continue
            p = _shell(line, work)
            assert p.returncode == 0, f"{page.name}:{block.line}: {line}\n{p.stdout}\n{p.stderr}"
            for o in re.findall(r"-o (\S+)", line.split("  #")[0]):
                assert (work / o).exists(), f"{line} did not write {o}"
        return
    chain = [block]
    while "continues" in chain[0].marker:
        chain.insert(0, [b for b in mdblocks.blocks(page.read_text(encoding="utf-8"))
                         if b.info == "python" and b.line < chain[0].line][-1])
    monkeypatch.chdir(work)
    scope: dict = {}
    for b in chain:
        exec(compile(b.text, f"{page.name}:{b.line}", "exec"), scope)


def test_docs_blocks_marked_long_are_few():
    """`long` excuses a block from running: only the fuzzer's minutes-long runs take it."""
    long = [(f.name, b.line) for f, b in _doc_blocks() if "long" in b.marker]
    assert [f for f, _ in long] == ["testing.md"], long


def test_language_gradient_example_with_several_wrt_names():
    """docs/language.md section 12's `:wrt [W b]` example, against the gradients of the mean
    squared error written out in numpy."""
    import caten

    text = next(b.text for b in mdblocks.blocks(LANGUAGE.read_text(encoding="utf-8")) if "affine-step" in b.text)
    rng = np.random.default_rng(5)
    x, w, b, y = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (3, 2), (2,), (5, 2)))
    loss, w2, b2 = caten.loads(text, runtime="numpy").affine_step(x, w, b, y)
    r = x.astype(np.float64) @ w + b - y
    dr = 2 * r / r.size
    np.testing.assert_allclose(loss, np.mean(r ** 2), rtol=1e-5)
    np.testing.assert_allclose(w2, w - 0.1 * (x.T @ dr), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b2, b - 0.1 * dr.sum(axis=0), rtol=1e-5, atol=1e-6)
