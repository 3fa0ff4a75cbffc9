"""Top-level forms -> definitions: composites (with their signatures), rules and imports.

Signature grammar (LANGUAGE.md section 4, plus the library's extensions in docs/language.md):
    (INPUTS -> OUTPUTS [where SYM = DIMEXPR, ...] [&key (NAME DEFAULT) ...])
INPUTS holds annotations `X{T}[M, N]` (tensors; `[...]` = any shape), plain symbols
(compile-time parameters), `&rest NAME` (the remaining arguments as a list) and `&fold`
(calls with more arguments fold left, as `+` does).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from caten.errors import Error, Span
from caten.read.sexpr import Annot, Form, Kw, Num, SList, Str, Sym, head, show


@dataclass
class Param:
    name: str
    span: Span
    dtype: str | None = None  # None: a compile-time parameter, not a tensor
    dims: list[Form] | None = None  # None: scalar; [Sym("...")]: any shape

    @property
    def tensor(self) -> bool:
        return self.dtype is not None

    @property
    def any_shape(self) -> bool:
        return self.dims is not None and len(self.dims) == 1 and isinstance(self.dims[0], Sym) \
            and self.dims[0].name == "..."


@dataclass
class Where:
    name: str
    expr: Form
    span: Span


@dataclass
class CompositeDef:
    name: str
    params: list[Param]
    outputs: list[Param]
    wheres: list[Where]
    keys: list[tuple[str, Form | None, Span]]
    rest: str | None
    fold: bool
    doc: str
    body: list[Form]
    span: Span
    library: bool = False
    # `:vjp ((dY...) BODY...)`: the composite's own gradient (cotangent names, one per output, and
    # the body that returns one cotangent per tensor parameter); None: differentiate the expansion
    vjp: tuple[tuple[str, ...], list[Form]] | None = None

    @property
    def arity(self) -> int:
        return len(self.params)

    @property
    def standalone(self) -> bool:
        """Whether it compiles on its own: tensor parameters and outputs of concrete rank, no
        compile-time parameters (the others are helpers that other composites call)."""
        return self.rest is None and not self.keys and not self.fold and \
            all(p.tensor and not p.any_shape for p in self.params + self.outputs)


@dataclass
class RuleDef:
    name: str
    pattern: Form
    replacement: Form
    guard: Form | None
    options: dict[str, Form]
    span: Span


@dataclass
class Unit:
    """Everything one source file defines, imports already followed."""
    composites: list[CompositeDef] = field(default_factory=list)
    rules: list[RuleDef] = field(default_factory=list)


_DTYPE_LIKE = re.compile(r"^(bool\w*|[iuf]\d+|bf\d+|float\d*|int\d*|uint\d*|double|half)$")


def check_dtype_name(name: str, span: Span) -> None:
    """A name that looks like a dtype but is none is a typo, not a type variable."""
    from caten.ir import dtypes as T

    if T.lookup(name) is None and _DTYPE_LIKE.match(name):
        from caten.errors import closest

        guess = closest(name, T.BY_NAME)
        raise Error(f"unknown dtype `{name}`", span, f"did you mean `{guess}`?" if guess else
                    "dtypes: " + " ".join(T.BY_NAME))


def _param(f: Form, where: str) -> Param:
    if isinstance(f, Annot):
        check_dtype_name(f.dtype, f.span)
        return Param(f.name, f.span, f.dtype, f.dims)
    if isinstance(f, Sym) and where == "inputs":
        return Param(f.name, f.span)
    raise Error(f"expected a tensor annotation like X{{f32}}[N] in the {where}, got `{show(f)}`",
                f.span if not isinstance(f, SList) or f.span else None)


def parse_composite(form: SList, library: bool = False) -> CompositeDef:
    items = form.items
    if len(items) < 3 or not isinstance(items[1], Sym):
        raise Error("expected (composite NAME (INPUTS -> OUTPUTS) BODY...)", form.span,
                    "e.g. (composite f ((X{f32}[N]) -> (Y{f32}[N])) (return (exp X)))")
    name, sig = items[1].name, items[2]
    if not isinstance(sig, SList) or sig.bracket:
        raise Error(f"composite `{name}` needs a signature (INPUTS -> OUTPUTS)", getattr(sig, "span", form.span))
    parts = sig.items
    arrow = next((i for i, p in enumerate(parts) if isinstance(p, Sym) and p.name == "->"), None)
    if arrow is None or arrow == 0 or arrow + 1 >= len(parts):
        raise Error(f"the signature of `{name}` must read (INPUTS -> OUTPUTS)", sig.span,
                    "INPUTS and OUTPUTS are parenthesised lists of annotations")
    end = arrow + 1
    while end < len(parts) and isinstance(parts[end], SList) and not parts[end].bracket:
        end += 1
    groups = [("inputs", parts[:arrow]), ("outputs", parts[arrow + 1:end])]
    for what, lst in groups:
        for g in lst:
            if not isinstance(g, SList) or g.bracket:
                raise Error(f"the {what} of `{name}` must be a parenthesised list", getattr(g, "span", sig.span))
    if end == arrow + 1:
        raise Error(f"`{name}` declares no outputs", sig.span, "write (INPUTS -> (Y{f32}[N]))")
    ins = SList([x for g in parts[:arrow] for x in g.items], sig.span)
    outs = SList([x for g in parts[arrow + 1:end] for x in g.items], sig.span)
    params: list[Param] = []
    rest, fold = None, False
    it = list(ins.items)
    i = 0
    while i < len(it):
        f = it[i]
        if isinstance(f, Sym) and f.name == "&fold":
            fold = True
        elif isinstance(f, Sym) and f.name == "&rest":
            if i + 1 >= len(it) or not isinstance(it[i + 1], Sym):
                raise Error("&rest needs a name", f.span)
            rest = it[i + 1].name
            i += 1
        else:
            params.append(_param(f, "inputs"))
        i += 1
    outputs = [_param(f, "outputs") for f in outs.items]
    seen: dict[str, Param] = {}
    inputs = {p.name: p for p in params}
    for p in params + outputs:
        if p.name in seen and seen[p.name] is inputs.get(p.name) and p is not inputs[p.name]:
            seen[p.name] = p  # an output named as an input writes that input in place (LANGUAGE: in-place outputs)
            continue
        if p.name in seen:
            raise Error(f"`{p.name}` is declared twice in the signature of `{name}`", p.span,
                        f"first declared at line {seen[p.name].span.line}, column {seen[p.name].span.col}")
        seen[p.name] = p
    wheres: list[Where] = []
    keys: list[tuple[str, Form | None, Span]] = []
    tail = parts[end:]
    j = 0
    while j < len(tail):
        f = tail[j]
        if isinstance(f, Sym) and f.name == "where":
            j += 1
            while j < len(tail) and not (isinstance(tail[j], Sym) and tail[j].name in ("&key", "where")):
                if j + 2 >= len(tail) or not isinstance(tail[j], Sym) or not (
                        isinstance(tail[j + 1], Sym) and tail[j + 1].name == "="):
                    raise Error("expected `SYM = DIMEXPR` in the where clause", tail[j].span if hasattr(
                        tail[j], "span") else sig.span, "e.g. where K = (* 2 M)")
                wheres.append(Where(tail[j].name, tail[j + 2], tail[j].span))
                j += 3
        elif isinstance(f, Sym) and f.name == "&key":
            j += 1
            while j < len(tail) and not (isinstance(tail[j], Sym) and tail[j].name == "where"):
                k = tail[j]
                if isinstance(k, Sym):
                    keys.append((k.name, None, k.span))
                elif isinstance(k, SList) and len(k.items) == 2 and isinstance(k.items[0], Sym):
                    keys.append((k.items[0].name, k.items[1], k.span))
                else:
                    raise Error("expected NAME or (NAME DEFAULT) after &key", getattr(k, "span", sig.span))
                j += 1
        else:
            raise Error(f"unexpected `{show(f)}` in the signature of `{name}`", getattr(f, "span", sig.span),
                        "after OUTPUTS only `where SYM = DIMEXPR, ...` may follow")
    body = items[3:]
    doc = ""
    if body and isinstance(body[0], Str) and len(body) > 1:
        doc, body = body[0].value, body[1:]
    elif body and isinstance(body[0], Str):
        doc = body[0].value
        body = []
    vjp = None
    if len(body) >= 2 and isinstance(body[0], Kw) and body[0].name == "vjp":
        vjp = _vjp_clause(name, body[1], outputs, body[0].span)
        body = body[2:]
    if not body:
        raise Error(f"composite `{name}` has an empty body", form.span, "add (return EXPR)")
    return CompositeDef(name, params, outputs, wheres, keys, rest, fold, doc, body, form.span, library, vjp)


def _vjp_clause(name: str, f: Form, outputs: list[Param], span: Span) -> tuple[tuple[str, ...], list[Form]]:
    """`((dY...) BODY...)`: one cotangent name per output, then the body."""
    if not isinstance(f, SList) or f.bracket or len(f.items) < 2 or not isinstance(f.items[0], SList) or \
            not all(isinstance(x, Sym) for x in f.items[0].items):
        raise Error(f"expected :vjp ((dY ...) BODY...) in `{name}`", getattr(f, "span", span),
                    "name one cotangent per output, e.g. :vjp ((dY) (* dY 2))")
    names = tuple(x.name for x in f.items[0].items)
    if len(names) != len(outputs):
        raise Error(f"`{name}` has {len(outputs)} output{'s' if len(outputs) != 1 else ''} but its :vjp names "
                    f"{len(names)} cotangent{'s' if len(names) != 1 else ''}", f.items[0].span)
    return names, list(f.items[1:])


def parse_rule(form: SList) -> RuleDef:
    items = form.items
    if len(items) < 5 or not isinstance(items[1], Sym) or not (isinstance(items[3], Sym) and items[3].name == "=>"):
        raise Error("expected (defoptimizer NAME PATTERN => REPLACEMENT [:when GUARD])", form.span,
                    "e.g. (defoptimizer neg-neg (neg (neg ?x)) => ?x)")
    opts: dict[str, Form] = {}
    rest = items[5:]
    if len(rest) % 2:
        raise Error("options after the replacement come in :key value pairs", rest[-1].span)
    for k, v in zip(rest[::2], rest[1::2]):
        if not isinstance(k, Kw):
            raise Error(f"expected an option like :when, got `{show(k)}`", k.span)
        opts[k.name] = v
    guard = opts.pop("when", None)
    return RuleDef(items[1].name, items[2], items[4], guard, opts, form.span)


def parse_forms(forms: list[Form], file: str, library: bool = False, seen: set[str] | None = None) -> Unit:
    """Definitions of a file's forms, following `(import "path")` relative to the file."""
    from caten.read.reader import read_file

    seen = seen if seen is not None else set()
    unit = Unit()
    for f in forms:
        h = head(f)
        if h in ("composite", "defcomposite"):
            unit.composites.append(parse_composite(f, library))
        elif h == "defoptimizer":
            unit.rules.append(parse_rule(f))
        elif h == "import":
            if len(f.items) != 2 or not isinstance(f.items[1], Str):
                raise Error('expected (import "relative/path.lisp")', f.span)
            base = os.path.dirname(file) if not file.startswith("<") else os.getcwd()
            path = os.path.normpath(os.path.join(base, f.items[1].value))
            if path in seen:
                continue
            seen.add(path)
            if not os.path.exists(path):
                raise Error(f"cannot import {f.items[1].value}: no such file", f.items[1].span)
            sub = load_unit_file(path, library, seen) if path.endswith((".yaml", ".yml")) else \
                parse_forms(read_file(path), path, library, seen)
            unit.composites += sub.composites
            unit.rules += sub.rules
        else:
            span = f.span if not isinstance(f, SList) or f.span else None
            what = f"({h} ...)" if h else show(f)[:40]
            from caten.errors import closest

            guess = closest(h, ["composite", "defcomposite", "defoptimizer", "import"]) if h else None
            raise Error(f"expected a top-level form (composite, defcomposite, defoptimizer or import), got `{what}`",
                        span, f"did you mean `{guess}`?" if guess else None)
    return unit


def load_unit_file(path: str, library: bool = False, seen: set[str] | None = None) -> Unit:
    from caten.read.reader import load_text, read

    text = load_text(path)
    if path.endswith((".yaml", ".yml")):
        from caten.read.yaml_form import read_yaml  # (PyYAML is imported only for YAML)

        return parse_forms(read_yaml(text, path), path, library, seen)
    return parse_forms(read(text, path), path, library, seen)


def load_unit_text(text: str, file: str = "<string>", yaml: bool = False) -> Unit:
    from caten.read.reader import read

    if yaml:
        from caten.read.yaml_form import read_yaml

        return parse_forms(read_yaml(text, file), file)
    return parse_forms(read(text, file), file)


def num(f: Form) -> int | float | None:
    return f.value if isinstance(f, Num) else None
