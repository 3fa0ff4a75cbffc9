"""Every choice of a compile in one documented object.

The CLI builds an `Options` from its flags, `caten.load`/`caten.loads` from their keyword
arguments (`Options.of`), and the driver, the module, the pipeline and the runtime plugins read
the same object: a new option is one field here, not a parameter threaded through five functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from caten.errors import Error, closest


@dataclass(frozen=True)
class Options:
    runtime: str = "llvm"  # the runtime plugin (`caten runtimes` lists them)
    opt_level: int = 2  # -O0..-O3: which built-in rule sets run (caten.rewrite.LEVELS); llvm's pass level
    rules: tuple[str, ...] = ()  # user rule files (--rules), run at every level
    fast_math: bool = False  # the `fastmath` rule set too (results that are not IEEE-exact)
    defines: Mapping[str, Any] = field(default_factory=dict)  # -D NAME=VALUE: dims and type variables
    use_cache: bool = True  # read and write the compile cache (~/.cache/caten or CATEN_CACHE_DIR)
    verbose: bool = False  # -v: what each stage did and how long it took
    target: str = ""  # --cpu / CATEN_CPU for the CPU runtimes; "" = CATEN_CPU or the host
    check_bounds: bool | None = None  # check every load and store; None = CATEN_CHECK_BOUNDS
    profile: bool = False  # llvm: time each kernel call (`caten profile`); part of the compile key
    debug: bool = False  # --debug: check the graph and the loop IR between stages (also CATEN_VERIFY=1)
    plugin: str | None = None  # a runtime plugin file to load first (--plugin)
    explain: Any = None  # a caten.rewrite.Explain collecting what each rule did (--explain-rules)
    extra: Mapping[str, Any] = field(default_factory=dict)  # for the runtime (e.g. the AOT library's name)

    @classmethod
    def of(cls, **kw: Any) -> Options:
        """Options from keyword arguments; an unknown name is a diagnostic naming the closest one."""
        names = [f.name for f in fields(cls)]
        for k in kw:
            if k not in names:
                guess = closest(k, names)
                raise Error(f"unknown option `{k}`", hint=f"did you mean `{guess}`?" if guess else
                            f"options: {', '.join(names)}")
        if "rules" in kw:
            kw["rules"] = tuple(str(r) for r in kw["rules"] or ())
        if kw.get("defines") is None:
            kw.pop("defines", None)
        return cls(**kw)

    def but(self, **kw: Any) -> Options:
        """A copy with some options changed."""
        return replace(self, **kw)


def check_bounds_enabled(flag: bool | None = None) -> bool:
    """`Options.check_bounds`' value: an explicit flag wins, else the CATEN_CHECK_BOUNDS environment
    variable (read here, not in caten.lower.bounds: a warm load never imports the lowerer)."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("CATEN_CHECK_BOUNDS", "").strip().lower() not in ("", "0", "false", "no", "off")
