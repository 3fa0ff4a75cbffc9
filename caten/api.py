"""The Python API of LANGUAGE.md section 10: `caten.load`, `caten.loads`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caten.driver import split_defines
from caten.read.source import read_source, read_text
from caten.run import runtime as R
from caten.run.module import Module


def _module(src, runtime: str, rules: Sequence[str] | None, defines: Mapping[str, object] | None,
            opt_level: int, plugin: str | None = None, use_cache: bool = True, explain=None,
            target: str = "", fast_math: bool = False, check_bounds: bool | None = None) -> Module:
    """fast_math=True runs the `fastmath` rule set (a / b as a * (1/b), ...), which no -O level does."""
    from caten.rewrite import FAST_MATH

    if plugin:
        R.load_plugin(plugin)
    if target:
        from caten.target import parse

        parse(target)  # a bad spec fails here, not at the first call
    types, dims = split_defines(dict(defines or {}))
    rules = [str(r) for r in rules or []] + ([FAST_MATH] if fast_math else [])
    return Module(src, R.get(runtime), types, dims, opt_level, rules, use_cache, explain, target, check_bounds)


def load(path: str, runtime: str = "llvm", rules: Sequence[str] | None = None,
         defines: Mapping[str, object] | None = None, opt_level: int = 2, **kw) -> Module:
    """Compile the composites of a .lisp or .yaml file for a runtime (lazily, per dtype binding).
    `target="znver3"` (or CATEN_CPU) picks the CPU the llvm/c runtimes compile for (default: the host).
    `check_bounds=True` (default: the CATEN_CHECK_BOUNDS environment variable) checks every load
    and store of the generated code; an access outside its buffer raises caten.Error."""
    from caten.read.cached import read_source_cached

    src = read_source_cached(str(path)) if kw.get("use_cache", True) else read_source(str(path))
    return _module(src, runtime, rules, defines, opt_level, **kw)


def loads(text: str, runtime: str = "llvm", rules: Sequence[str] | None = None,
          defines: Mapping[str, object] | None = None, opt_level: int = 2, yaml: bool = False, **kw) -> Module:
    """Like `load`, from source text."""
    src = read_text(text, "<string>", yaml)
    from caten.cache import key_of

    src.key = key_of("text", str(yaml), text)
    return _module(src, runtime, rules, defines, opt_level, **kw)
