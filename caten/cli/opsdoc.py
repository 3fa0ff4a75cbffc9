"""`caten ops --markdown`: docs/ops.md, the op reference, generated from where each op is defined.

The principal ops come from the op table (`caten/ir/ops.py`), the composites and rule sets from
the parsed library (`ops/*.lisp`, `ops/rules/*.lisp`: signatures, keywords with defaults, doc
strings, each file's leading `;;;` comment), the special forms and compile-time functions from
the elaborator, the torch names from the registry of `caten.tensor.torchnames` (the one
docs/tensor.md's table comes from). Nothing is written by hand, so the page is as current as its sources;
tests/test_ops_doc.py fails when the committed page is not what this module writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from caten.cli.info import _OPERANDS, dtype_class, signature
from caten.read.sexpr import show

COMMAND = "caten ops --markdown -o docs/ops.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(head)
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _intro(text: str) -> str:
    """A library file's leading `;;;` comment, as one paragraph."""
    lines = []
    for ln in text.splitlines():
        if not ln.startswith(";;;"):
            break
        lines.append(ln[3:].strip())
    return " ".join(x for x in lines if x)


def _principal() -> list[str]:
    from caten.ir import ops as O

    rows = []
    for op, info in O.TABLE.items():
        operands = "x..." if info.arity < 0 else _OPERANDS.get(info.arity, f"{info.arity} operands")
        arity = "variadic" if info.arity < 0 else str(info.arity)
        grad = "VJP rule" if info.vjp is not None else "none"
        rows.append([f"`{op.value}`", info.group, arity, _code(operands), dtype_class(info.dtypes), grad,
                     _cell(info.doc)])
    return ["## Principal ops", "",
            f"The {len(O.TABLE)} ops of the IR, from the op table `caten/ir/ops.py` (each entry also holds the op's",
            "dtype rule and its numpy reference, which the `numpy` runtime runs). dtypes: all = every dtype;",
            "numeric = all but bool; float = " + " ".join(d.name for d in O.FLOATS) +
            "; bool/int = bool and the integers. gradient: whether the entry has a VJP rule (`grad` and",
            "friends differentiate through it) or passes none (flat almost everywhere, or a leaf).", ""] + _table(
        ["op", "group", "arity", "operands", "dtypes", "gradient", "doc"], rows) + [""]


def _composites(sources: list[tuple[str, str]]) -> list[str]:
    from caten.elaborate.library import composites

    by_file: dict[str, list] = {}
    for defs in composites().values():
        for d in defs:
            by_file.setdefault(d.span.file.removeprefix("<ops>/"), []).append(d)
    total = sum(len(v) for v in by_file.values())
    out = ["## Library composites", "",
           f"{len(composites())} names ({total} definitions; overloads of one name differ in arity), written in",
           "caten's own language over the principal ops, file by file in definition order. `X{T}[...]` is a",
           "tensor of any rank and dtype `T`; a bare name is a compile-time parameter; `:KEY DEFAULT` is a",
           "keyword with its default; `&fold`: more arguments fold left; `&rest NAME`: the remaining",
           "arguments as a list.", ""]
    for name, text in sources:
        if name not in by_file:
            continue
        out += [f"### ops/{name}", ""]
        if _intro(text):
            out += [_intro(text), ""]
        rows = [[f"`{d.name}`", _code(signature(d)),
                 _cell((d.doc or "(no doc string)") + (" (gradient: its own `:vjp`)" if d.vjp else ""))]
                for d in sorted(by_file[name], key=lambda d: (d.span.line, d.span.col))]
        out += _table(["name", "call", "doc"], rows) + [""]
    return out


def _rules(sources: list[tuple[str, str]]) -> list[str]:
    from caten.elaborate.library import rule_sets
    from caten.rewrite import LEVELS, OPT_IN

    out = ["## Built-in rewrite rules", "",
           "The rule sets of `ops/rules/` (in the rule language of `docs/rules.md`), by the -O level that",
           "turns them on.", ""]
    texts = dict(sources)
    for stem, defs in sorted(rule_sets().items(), key=lambda kv: (kv[0] in OPT_IN, LEVELS.get(kv[0], 2), kv[0])):
        when = f"opt-in: `--rules builtin:{stem}`" if stem in OPT_IN else f"-O{LEVELS.get(stem, 2)} and up"
        out += [f"### ops/rules/{stem}.lisp, {when}", ""]
        intro = _intro(texts.get(f"rules/{stem}.lisp", ""))
        if intro:
            out += [intro, ""]
        rows = [[f"`{r.name}`", _code(show(r.pattern)), _code(show(r.replacement)),
                 _code(show(r.guard)) if r.guard is not None else ""] for r in defs]
        out += _table(["rule", "pattern", "replacement", "when"], rows) + [""]
    return out


def _torch_names() -> list[str]:
    """torch's names and what caten computes each with, from the registry docs/tensor.md's table uses."""
    import caten.tensor  # noqa: F401  (registers every torch name)
    from caten.tensor.torchnames import REGISTRY

    rows = [[f"`{'torch' if e.kind in ('static', 'function') else 'Tensor'}.{e.name}`", _cell(e.caten), e.section]
            for e in sorted(REGISTRY.values(), key=lambda e: e.name)]
    return ["## Torch names", "",
            f"The {len(REGISTRY)} torch spellings registered in `caten/tensor/torchnames.py` (`@torch_name`), by name,",
            "with the library composite or principal op caten computes each with (docs/tensor.md shows the",
            "same registry with each call's signature; every library composite is also a Tensor method of",
            "its own name, and the torch names caten lacks are listed there with why).", ""] + _table(
        ["torch", "caten computes it with", "section"], rows) + [""]


def markdown() -> str:
    """The whole page."""
    from caten.elaborate import meta
    from caten.elaborate.elaborator import SPECIAL
    from caten.elaborate.library import library_sources

    sources = [(n, t) for n, t in library_sources() if n != "<grammar>"]
    lines = ["# Op reference", "",
             f"<!-- generated by `{COMMAND}` from caten/ir/ops.py and ops/; do not edit -->", "",
             "Every principal op, library composite and built-in rewrite rule caten has, generated from the",
             "places they are defined (`caten ops` prints the same listing as text). `docs/language.md` is the",
             "reference of the language they are called from.", "",
             "Contents: [Principal ops](#principal-ops) · [Library composites](#library-composites) · "
             "[Built-in rewrite rules](#built-in-rewrite-rules) · [Torch names](#torch-names) · "
             "[Special forms and compile-time functions](#special-forms-and-compile-time-functions)", ""]
    lines += _principal() + _composites(sources) + _rules(sources) + _torch_names()
    lines += ["## Special forms and compile-time functions", "",
              "Special forms: " + " ".join(f"`{s}`" for s in SPECIAL), "",
              "Compile-time functions (shape bookkeeping; they compute no tensor values): "
              + " ".join(f"`{m}`" for m in meta.META)]
    return "\n".join(lines) + "\n"
