"""`caten ops` and `caten runtimes`: read straight from the op table, the library and the registry.

Nothing here is a hand-written list: each line comes from `caten/ir/ops.py` (principal ops),
the parsed `ops/*.lisp` (composite signatures, `&key` defaults, doc strings), the elaborator's
special forms and compile-time functions, or the runtime registry, so the listing cannot drift
from what the compiler accepts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import click

from caten.ir.dtypes import DType
from caten.read.program import CompositeDef
from caten.read.sexpr import Annot, show

_OPERANDS = {0: "", 1: "x", 2: "a b", 3: "c a b"}


def dtype_class(dts: Sequence[DType]) -> str:
    """The op table's dtype set, named after the table's own classes where one matches."""
    from caten.ir import ops as O

    for name, group in (("all", O.ALL), ("numeric", O.NUMERIC), ("float", O.FLOATS), ("bool/int", O.INTLIKE)):
        if tuple(dts) == tuple(group):
            return name
    return " ".join(d.name for d in dts)


def facts(info) -> str:
    """The table's other facts about an op, as `caten ops` shows them: `[:key ... commutative ...]`."""
    out = [":" + k for k in sorted(info.keywords)]
    out += [f for f in ("commutative", "associative") if getattr(info, f)]
    if info.reduces:
        out.append(f"combines reduce-{info.reduces}")
    return f" [{' '.join(out)}]" if out else ""


def principal_lines() -> list[str]:
    """One line per entry of the op table: `NAME group operands dtypes doc [facts]`."""
    from caten.ir.ops import TABLE

    out = []
    for op, info in TABLE.items():
        operands = "x..." if info.arity < 0 else _OPERANDS.get(info.arity, f"{info.arity} operands")
        arity = "variadic" if info.arity < 0 else f"arity {info.arity}"
        out.append(f"  {op.value:<7} {info.group:<8} {arity:<9} ({operands:<5}) {dtype_class(info.dtypes):<9} "
                   f"{info.doc}{facts(info)}")
    return out


def _lisp(text: str) -> str:
    """Python's `1e-05` as a Lisp user writes it: `1e-5`."""
    return re.sub(r"e([+-]?)0+(\d)", r"e\1\2", text)


def signature(d: CompositeDef) -> str:
    """A composite's call form: `(NAME PARAM... :KEY DEFAULT...) -> OUTPUT... [where ...]`."""
    parts = [d.name]
    for p in d.params:
        parts.append(show(Annot(p.name, p.dtype, p.dims, p.span)) if p.tensor else p.name)
    if d.fold:
        parts.append("&fold")
    if d.rest:
        parts += ["&rest", d.rest]
    for k, default, _ in d.keys:
        parts += [f":{k}", "nil" if default is None else _lisp(show(default))]
    outs = " ".join(show(Annot(o.name, o.dtype, o.dims, o.span)) for o in d.outputs)
    wheres = ", ".join(f"{w.name} = {show(w.expr)}" for w in d.wheres)
    return f"({' '.join(parts)}) -> {outs}" + (f" where {wheres}" if wheres else "")


def composite_lines() -> list[str]:
    """Two lines per library composite (overloads each get theirs): the signature, then the doc."""
    from caten.elaborate.library import composites

    out = []
    for _, defs in sorted(composites().items()):
        for d in defs:
            out.append(f"  {signature(d)}")
            out.append(f"      {d.doc or '(no doc string)'}")
    return out


def ops_text() -> str:
    """The `caten ops` listing."""
    from caten.elaborate import meta
    from caten.elaborate.elaborator import SPECIAL
    from caten.ir import ops as O

    out = ["Principal ops (the IR; semantics in caten/ir/ops.py): name, group, operands, dtypes, doc",
           "  dtypes: all = every dtype; numeric = all but bool; float = "
           + " ".join(d.name for d in O.FLOATS) + "; bool/int = bool and the integers"]
    out += principal_lines()
    out += ["", "Library composites (ops/*.lisp): (NAME PARAMS... :KEY DEFAULT...) -> OUTPUTS",
            "  X{T}[...] is a tensor of any rank and dtype T; a bare name is a compile-time parameter;",
            "  &fold: more arguments fold left; &rest NAME: the remaining arguments as a list;",
            "  overloads of one name differ in arity"]
    out += composite_lines()
    out += ["", "Special forms: " + " ".join(SPECIAL), "Compile-time functions: " + " ".join(meta.META)]
    return "\n".join(out) + "\n"


def print_runtimes(plugin: str | None) -> None:
    from caten import plugin as R

    if plugin:
        R.load_plugin(plugin)
    for name in R.names():
        try:
            rt = R.get(name)
            ok, why = rt.available()
            desc = rt.description
        except Exception as e:  # a plugin that fails to load is reported, not fatal
            ok, why, desc = False, f"failed to load: {e}", ""
        state = "available" if ok else f"unavailable: {why}"
        click.echo(f"  {name:<10} {state}" + (f"  ({desc})" if desc and ok else ""))
