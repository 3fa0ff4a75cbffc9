"""Fingerprints of the code behind a cached artifact, derived from the import graph.

A cache key must change whenever code that could change what it keys changes, or an editable
install that pulls a fix keeps serving the old compiled program. So a fingerprint is not a hand
list of files: it is the hash of every module a pass's module can import, directly or not (an
import inside a function counts; so does every package whose `__init__` runs on the way), read
as files, not imported: a warm start loads none of them. A new module is covered as soon as a
covered one imports it. Each closure is computed once per process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterable

_ROOT = "caten"


def module_file(name: str) -> str | None:
    """The source file of module `name` of caten (a package's `__init__.py`), or None when caten
    has no such module (`from caten.x import f` names a function). A file's path names itself (a
    runtime plugin loaded from a file)."""
    if name.endswith(".py"):
        return name if os.path.isfile(name) else None
    if name in sys.modules and getattr(sys.modules[name], "__file__", None):
        return sys.modules[name].__file__
    parts = name.split(".")
    if parts[0] != _ROOT:
        return None
    # below the deepest package already imported (caten.runtimes lies outside caten/ in an
    # editable install: the package's __path__ says where)
    k = max(i for i in range(1, len(parts)) if ".".join(parts[:i]) in sys.modules) if len(parts) > 1 else 1
    for base in getattr(sys.modules[".".join(parts[:k])], "__path__", ()):
        path = os.path.join(base, *parts[k:])
        for f in (path + ".py", os.path.join(path, "__init__.py")):
            if os.path.isfile(f):
                return f
    return None


# an import statement: its indentation, then `from X import NAMES` (parenthesized names may span
# lines) or `import A, B as C`; a regex, not `ast`: parsing every module took a second. Compiled
# on first use: a warm start, whose fingerprints are remembered, never walks the imports
_IMPORT = r"^([ \t]*)(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]*))"


@functools.cache
def _import_re() -> re.Pattern[str]:
    return re.compile(_IMPORT, re.MULTILINE)


def imports_of(name: str, path: str, top_only: bool = False) -> dict[str, bool]:
    """{module of caten: whether only its module-level code runs} for what module `name` (file
    `path`) imports anywhere in its text, or at module level only with `top_only` (what runs when
    a package is imported for a module inside it). `from P import m` of a submodule m runs only
    P's module level; `from P import f` of anything else may call any function of P."""
    package = name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out: dict[str, bool] = {}

    def add(m: str, top: bool) -> None:
        if m.split(".")[0] == _ROOT and module_file(m):
            out[m] = out.get(m, True) and top

    for indent, base, names, plain in _import_re().findall(text):
        if top_only and indent:
            continue
        if plain:
            for p in plain.split(","):
                if p.split():
                    add(p.split()[0], False)
            continue
        if base.startswith("."):  # relative: from .x import y
            level = len(base) - len(base.lstrip("."))
            anchor = package.split(".")[:len(package.split(".")) - level + 1]
            base = ".".join(anchor + ([base.lstrip(".")] if base.lstrip(".") else []))
        subs = [f"{base}.{n.split()[0]}" for n in names.strip("()").split(",") if n.split()]
        for m in subs:
            add(m, False)
        add(base, all(module_file(m) for m in subs))
    return out


def closure(roots: Iterable[str]) -> dict[str, str]:
    """{module: file} of `roots` (module names, or files) and of every module of caten they
    import, transitively (an import inside a function counts: a pass may call it), with the
    packages that contain them (importing caten.a.b runs caten/a/__init__.py's module-level code,
    and so its module-level imports)."""
    seen: dict[str, str] = {}
    full: set[str] = set()
    todo = [(r, False) for r in roots]
    while todo:
        name, top_only = todo.pop()
        if name in full or (top_only and name in seen):
            continue
        path = module_file(name)
        if path is None:
            continue
        seen[name] = path
        if not top_only:
            full.add(name)
        parent = "" if name.endswith(".py") else name.rpartition(".")[0]
        if parent:
            todo.append((parent, True))
        todo.extend(imports_of(name, path, top_only).items())
    return seen


_memo: dict[tuple[str, ...], str] = {}
MEMO_KIND = "fp"


def fingerprint(roots: Iterable[str], store=None) -> str:
    """A hash of the files of `closure(roots)`, once per process. `store` (a caten.cache.Cache):
    where the hash is remembered across processes with the status (size, mtime, ctime, inode)
    of each file it covers, as Python's bytecode cache trusts a source's mtime and size: while
    none of those files changed, a warm start neither walks the imports nor reads them."""
    key = tuple(sorted(roots))
    if key not in _memo:
        at = _memo_key(key) if store is not None else None
        _memo[key] = (_remembered(store, at) if at else None) or _compute(key, store, at)
    return _memo[key]


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _memo_key(key: tuple[str, ...]) -> str | None:
    """The memo's cache key: the roots and the files they are (another install of caten, another
    plugin file: another entry), or None where a root has no file."""
    from caten.cache.store import key_of

    files = [module_file(r) for r in key]
    if any(f is None for f in files):
        return None
    return key_of("fingerprint-memo/1", *key, *(os.path.abspath(f) for f in files))  # type: ignore[arg-type]


def _remembered(store, at: str) -> str | None:
    """The remembered hash if every file it covered still has the status it had, else None."""
    from caten.cache import codec

    blob = store.get(at, MEMO_KIND)
    if blob is None:
        return None
    try:
        entry = codec.loads(blob)
        files, fp = entry["files"], entry["fp"]
        if isinstance(fp, str) and files and all(_stat(p) == st for p, st in files):
            return fp
    except (codec.CodecError, KeyError, TypeError, ValueError):
        pass
    return None


def remembered(store, name: str, paths: list[str], compute: Callable[[], str]) -> str:
    """compute(), a hash of what the files `paths` hold, remembered in `store` (a caten.cache.Cache)
    under `name` and those paths with each file's status, as `fingerprint` remembers code: while
    none of them changed, a later process stats the files instead of reading them. `paths` must
    list every file the value reads (a file added there makes another list: another entry)."""
    from caten.cache import codec
    from caten.cache.store import key_of

    at = key_of("remembered/1", name, *paths)
    got = _remembered(store, at) if paths else None
    if got is not None:
        return got
    files = [(p, _stat(p)) for p in paths]  # before computing: an edit in between no longer matches
    value = compute()
    if paths and all(st is not None for _, st in files):
        store.put(at, MEMO_KIND, codec.dumps({"files": files, "fp": value}))
    return value


def _compute(key: tuple[str, ...], store, at: str | None) -> str:
    h = hashlib.sha256()
    files = []
    for name, path in sorted(closure(key).items()):
        st = _stat(path)  # before the read: an edit in between leaves a status that no longer matches
        with open(path, "rb") as f:
            h.update(f"{name}\0{hashlib.sha256(f.read()).hexdigest()}\0".encode())
        files.append((path, st))
    fp = h.hexdigest()
    if at is not None and all(st is not None for _, st in files):
        from caten.cache import codec

        store.put(at, MEMO_KIND, codec.dumps({"files": files, "fp": fp}))
    return fp
