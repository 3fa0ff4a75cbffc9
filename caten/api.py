"""The Python API of LANGUAGE.md section 10: `caten.load`, `caten.loads`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from caten import plugin as R
from caten.options import Options
from caten.read.source import read_text
from caten.run.module import Module


def module(src, options: Options) -> Module:
    """The composites of `src` compiled lazily with `options` (the CLI calls this too)."""
    if options.plugin:
        R.load_plugin(options.plugin)
    if options.target:
        from caten.target import parse

        parse(options.target)  # a bad spec fails here, not at the first call
    return Module(src, R.get(options.runtime), options)


def load(path: str, runtime: str = "llvm", rules: Sequence[str] | None = None,
         defines: Mapping[str, object] | None = None, opt_level: int = 2, **kw: Any) -> Module:
    """Compile the composites of a .lisp or .yaml file for a runtime (lazily, per dtype binding).
    Every keyword is a field of `caten.options.Options`: `target="znver3"` (or CATEN_CPU) picks the
    CPU the llvm/c runtimes compile for (default: the host); `check_bounds=True` (default: the
    CATEN_CHECK_BOUNDS environment variable) checks every load and store of the generated code, an
    access outside its buffer raising caten.Error; `fast_math=True` runs the `fastmath` rule set
    (a / b as a * (1/b), ...), which no -O level does."""
    from caten import pipeline

    options = Options.of(runtime=runtime, rules=rules, defines=defines, opt_level=opt_level, **kw)
    return module(pipeline.read(str(path), cached=options.use_cache), options)


def loads(text: str, runtime: str = "llvm", rules: Sequence[str] | None = None,
          defines: Mapping[str, object] | None = None, opt_level: int = 2, yaml: bool = False,
          **kw: Any) -> Module:
    """Like `load`, from source text."""
    from caten.cache import key_of
    from caten.pipeline import lazysource
    from caten.pipeline.passes import gc_paused

    options = Options.of(runtime=runtime, rules=rules, defines=defines, opt_level=opt_level, **kw)
    key = key_of("text", str(yaml), text)
    # a cached parse would decode as slowly as the reader reads (caten.read.reader): a text read
    # before is read again only when a body is needed (caten.pipeline.lazysource)
    with gc_paused():  # (its forms live as long as the module: see gc_paused)
        src = lazysource.read(text, "<string>", yaml, key) if options.use_cache else read_text(text, "<string>", yaml)
    src.key = key
    return module(src, options)
