"""The front half of the compiler: read -> elaborate -> rewrite, from source text to a `Program`
(per entry and binding of its type variables and dims), and the cache of elaborated programs.

One place that strings these passes together, for the CLI, `caten.load` and every tool. A cached
program is keyed by its source, its bindings, the options that choose rules, and the fingerprint of
the code of every module this one can import (`caten.cache.fingerprint`): an edit to any of them,
or to the library or the grammar, compiles afresh.
"""

from __future__ import annotations

import functools
import os
import pathlib

from caten.errors import Error
from caten.ir.dtypes import DType
from caten.ir.program import Program
from caten.options import Options
from caten.pipeline.passes import Timings, gc_paused
from caten.read.program import CompositeDef
from caten.read.source import Source


def split_defines(defines: dict[str, object] | None) -> tuple[dict[str, DType], dict[str, int]]:
    """-D NAME=VALUE: dtype names bind type variables, integers bind dims."""
    from caten.ir import dtypes as T

    types, dims = {}, {}
    for k, v in (defines or {}).items():
        if isinstance(v, DType):
            types[k] = v
        elif isinstance(v, str) and T.lookup(v):
            types[k] = T.lookup(v)
        else:
            try:
                dims[k] = int(v)
            except (TypeError, ValueError):
                raise Error(f"-D {k}={v}: expected an integer dimension or a dtype name") from None
    return types, dims


def read(path: str, timings: Timings | None = None, cached: bool = False) -> Source:
    """The definitions of a .lisp or .yaml file (the read pass); `cached`: through the compile
    cache (caten.read.cached), as `caten.load` reads."""
    from caten.read.cached import read_source_cached
    from caten.read.source import read_source

    with (timings or Timings()).stage("read"), gc_paused():  # (the forms live on: see gc_paused)
        return read_source_cached(path) if cached else read_source(path)


def compile_program(src: Source, cdef: CompositeDef, types: dict[str, DType], dims: dict[str, int],
                    options: Options | None = None, timings: Timings | None = None) -> Program:
    """Elaborate one composite for one binding of its type variables and dims into a Program,
    running the rewrite rules `options` select.

    Built-in rule sets run from -O1 (see caten.rewrite.LEVELS), `fastmath` only with
    `options.fast_math`; the program's own `defoptimizer` rules and the user rule files
    (`options.rules`) run at every level. Rules with `:runtime R` apply only when
    `options.runtime` is R. `options.explain`, when given (a caten.rewrite.Explain), collects what
    each rule did. `options.debug` checks the graph after each stage (caten.ir.verify)."""
    from caten.ir import verify  # (here: a cached program's load never imports it)

    o = options or Options(runtime="numpy")
    with verify.checking(o.debug):
        return _compile_program(src, cdef, types, dims, o, timings or Timings())


def _compile_program(src: Source, cdef: CompositeDef, types: dict[str, DType], dims: dict[str, int],
                     o: Options, tm: Timings) -> Program:
    from caten import rewrite
    from caten.elaborate.elaborator import Elaborator  # imported here: a cached program never needs it
    from caten.ir.empty import add_nonempty_constraints

    files = list(o.rules) + ([rewrite.FAST_MATH] if o.fast_math else [])
    user = {k: v for k, v in src.by_name.items()}
    with tm.stage("elaborate"):  # (the library loads on first use)
        names = rewrite.library_names() | set(user)
    with tm.stage("rewrite"):
        rules_list = rewrite.rules_for(src.unit.rules, o.opt_level, files, names)
        engine = rewrite.Engine(rules_list, o.runtime, o.explain)
    if engine.empty:
        with tm.stage("elaborate"):
            return add_nonempty_constraints(Elaborator(user).compile(cdef, types, dims))
    with tm.stage("elaborate"):  # (library-level rules fire inside it, through the call hook)
        elab = Elaborator(user, call_hook=engine.call_hook if engine.call_index else None)
        engine.elab = elab
        prog = elab.compile(cdef, types, dims)
    if engine.op_index:
        with tm.stage("rewrite"):
            prog.nodes = engine.rewrite(prog.nodes, cdef.name)
    return add_nonempty_constraints(prog)


def program(src: Source, cdef: CompositeDef, types: dict[str, DType], dims: dict[str, int], options: Options,
            runtime: str, timings: Timings | None = None) -> Program:
    """`compile_program` through the cache of elaborated programs (when `options.use_cache`)."""
    from caten.cache import default_cache

    key = program_cache_key(src, cdef.name, types, dims, options, runtime)
    store = default_cache()
    with gc_paused():  # (a warm load's graph: long-lived, see gc_paused)
        prog = _loads(store.get(key, "prog")) if key else None
    if prog is None:
        definition = getattr(src, "definition", None)  # (a LazySource: the text read now)
        prog = compile_program(src, definition(cdef) if definition else cdef, types, dims, options, timings)
        blob = _dumps(prog) if key else None
        if blob is not None:
            store.put(key, "prog", blob)
    return prog


def program_cache_key(src: Source, name: str, types: dict[str, DType], dims: dict[str, int], options: Options,
                      runtime: str) -> str | None:
    """The key of an elaborated (and rewritten) Program, or None when it must not be cached."""
    from caten.cache import key_of

    src_key = getattr(src, "key", None)
    o = options
    if src_key is None or o.explain is not None or not o.use_cache:
        return None
    rules = ["builtin:fastmath"] if o.fast_math else []
    for r in o.rules:
        if r.startswith("builtin:"):  # a shipped set: the front fingerprint covers its source
            rules.append(r)
            continue
        try:
            with open(r, "rb") as f:
                rules.append(f.read())
        except OSError:
            return None  # the compiler will report it
    from caten.ir.collective import cache_tag  # (all-gather's shape is the group's size times the input's)

    return key_of("program", src_key, front_fingerprint(), name, repr(sorted((k, v.name) for k, v in types.items())),
                  repr(sorted(dims.items())), str(o.opt_level), runtime, *rules, *cache_tag())


@functools.cache
def front_fingerprint() -> str:
    """The code of this module and of every module it can import, the grammar and the library's
    sources (caten.elaborate.library): a change to any of them invalidates cached programs."""
    from caten.cache import default_cache, key_of
    from caten.cache.fingerprint import fingerprint
    from caten.version import __version__

    store = default_cache()
    return key_of(__version__, fingerprint(ROOTS, store), _library_hash(store))


def _library_hash(store) -> str:
    """A hash of the library's sources (caten.elaborate.library.library_sources: the grammar,
    ops/*.lisp, ops/rules/*.lisp), remembered with the status of every file of the packages they
    come from (caten.cache.fingerprint.remembered): a warm load stats them, reads none."""
    from caten.cache import key_of
    from caten.cache.fingerprint import remembered
    from caten.elaborate.library import library_sources

    def digest() -> str:
        return key_of(*(part for source in library_sources() for part in source))

    paths = _package_files("caten.ops", "caten.grammar")
    return digest() if paths is None else remembered(store, "library", paths, digest)


def _package_files(*packages: str) -> list[str] | None:
    """Every file under the packages' folders but their bytecode, or None where one is not a folder
    on disk (a zip): a superset of what library_sources reads from them."""
    from importlib import resources

    out = []
    for name in packages:
        root = resources.files(name)
        if not isinstance(root, pathlib.Path) or not root.is_dir():
            return None
        for folder, subs, files in os.walk(root):
            subs[:] = sorted(d for d in subs if d != "__pycache__")
            out.extend(os.path.join(folder, f) for f in sorted(files))
    return out


ROOTS = (__name__,)  # the modules whose import closure the front fingerprint covers


def _dumps(prog: Program) -> bytes | None:
    """The cache payload of a program (data, not a pickle), or None if it holds something the
    cache's codec cannot represent."""
    from caten.cache.codec import CodecError
    from caten.cache.programs import dumps

    try:
        return dumps(prog)
    except CodecError:
        return None


def _loads(blob: bytes | None) -> Program | None:
    if blob is None:
        return None
    from caten.cache.programs import loads

    try:
        return loads(blob)
    except Exception:  # an entry from an incompatible build: elaborate afresh
        return None
