"""The YAML form (LANGUAGE.md section 7) -> the same forms the Lisp reader gives.

Each YAML scalar is read by the Lisp reader over a copy of the file in which everything
outside that scalar is blanked, so every span points into the YAML file itself.
"""

from __future__ import annotations

import yaml

from caten.errors import Error, Span
from caten.read.reader import read
from caten.read.sexpr import Form, SList, Str, Sym

_KEYS = ("in", "out", "where", "doc", "impl")


def _span(file: str, mark, text: str) -> Span:
    return Span(file, mark.line + 1, mark.column + 1, mark.line + 1, mark.column + 2, text)


def _read_scalar(node: yaml.ScalarNode, text: str, file: str) -> list[Form]:
    lo, hi = node.start_mark.index, node.end_mark.index
    if node.style in ('"', "'"):
        lo, hi = lo + 1, hi - 1
    elif node.style in ("|", ">"):
        lo = text.index("\n", lo) + 1 if "\n" in text[lo:hi] else hi
    masked = "".join(ch if lo <= i < hi or ch == "\n" else " " for i, ch in enumerate(text))
    return read(masked, file, display_text=text)


def read_yaml(text: str, file: str) -> list[Form]:
    depth = 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
        if depth > 100:
            line = text.count("\n", 0, i) + 1
            raise Error("YAML nests deeper than 100 levels", Span(file, line, i - text.rfind("\n", 0, i), text=text))
    try:
        root = yaml.compose(text)
    except RecursionError:
        raise Error("YAML nests too deeply", Span(file, 1, 1, text=text)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        span = _span(file, mark, text) if mark else Span(file, 1, 1, text=text)
        raise Error(f"invalid YAML: {getattr(e, 'problem', None) or e}", span) from None
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise Error("a YAML program is a mapping from composite names to {in, out, impl}",
                    _span(file, root.start_mark, text))
    forms: list[Form] = []
    for knode, vnode in root.value:
        span = _span(file, knode.start_mark, text)
        if not isinstance(vnode, yaml.MappingNode):
            raise Error(f"composite `{knode.value}` must map to in/out/impl", span)
        fields = {k.value: v for k, v in vnode.value}
        for k, _ in vnode.value:
            if k.value not in _KEYS:
                raise Error(f"unknown key `{k.value}` (expected one of {', '.join(_KEYS)})",
                            _span(file, k.start_mark, text))
        for req in ("in", "out", "impl"):
            if req not in fields:
                raise Error(f"composite `{knode.value}` lacks `{req}`", span)

        def seq(key: str, fields: dict = fields) -> list[Form]:
            node = fields.get(key)
            if node is None:
                return []
            items = node.value if isinstance(node, yaml.SequenceNode) else [node]
            out: list[Form] = []
            for it in items:
                if not isinstance(it, yaml.ScalarNode):
                    raise Error(f"`{key}` holds strings", _span(file, it.start_mark, text))
                out += _read_scalar(it, text, file)
            return out

        sig: list[Form] = [SList(seq("in"), span), Sym("->", span), SList(seq("out"), span)]
        wheres = seq("where")
        if wheres:
            sig += [Sym("where", span)] + wheres
        body = _read_scalar(fields["impl"], text, file) if isinstance(fields["impl"], yaml.ScalarNode) else []
        doc = [Str(fields["doc"].value, span)] if "doc" in fields else []
        forms.append(SList([Sym("composite", span), Sym(str(knode.value), span), SList(sig, span)] + doc + body,
                           span))
    return forms
