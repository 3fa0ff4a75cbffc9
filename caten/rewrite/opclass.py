"""Op classes in rule patterns: `(?op{binary} ?a ?b)` matches a node of any op of the class and
binds ?op to that op, so the replacement can rebuild it: `=> (fold (?op ?a ?b))`.

The `{...}` is the language's annotation syntax (`x{f32}` names a parameter's type), here naming
the op variable's class. Classes are derived from the op table, never listed by hand: one per
elementwise group (`unary`, `binary`, `ternary`) and one per boolean fact of `OpInfo`
(`commutative`, `associative`), plus `elementwise` (all of them). Their members are the
elementwise ops whose node holds nothing besides its operands, so an op and its operands say
everything: CAST (whose node holds the target dtype) is matched by name. A bare `?op` head is the
class `elementwise`; an op variable seen again as a head (`(?op{associative} (?op ?a ?b) ?c)`)
must be the same op. A class pattern only matches nodes whose op takes as many operands as the
pattern gives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from caten.ir.ops import ELEMENTWISE, TABLE, OpInfo
from caten.read.sexpr import Annot, Form, SList, Sym


def _classes() -> dict[str, frozenset]:
    alu = [o for o, i in TABLE.items() if o in ELEMENTWISE and i.arg == "none"]
    out: dict[str, frozenset] = {"elementwise": frozenset(alu)}
    for o in alu:
        out.setdefault(TABLE[o].group, frozenset())
        out[TABLE[o].group] |= {o}
    for f in dataclasses.fields(OpInfo):
        if f.type in ("bool", bool):
            out[f.name] = frozenset(o for o in alu if getattr(TABLE[o], f.name))
    return out


CLASSES: dict[str, frozenset] = _classes()


@dataclass(frozen=True)
class OpClass:
    """The head of a class pattern: the ?var bound to the matched op, the class, its members."""
    var: str
    name: str
    members: frozenset  # the class's ops taking as many operands as the pattern gives

    def __str__(self) -> str:
        return f"{self.var}{{{self.name}}}" if self.name != "elementwise" else self.var


def class_head(f: Form) -> tuple[str, str] | None:
    """(var, class name) if `f` heads a class pattern (`?op{binary}` or a bare `?op`), else None."""
    if isinstance(f, Sym) and f.name.startswith("?") and len(f.name) > 1:
        return f.name, "elementwise"
    if isinstance(f, Annot) and f.name.startswith("?") and len(f.name) > 1 and f.dims is None:
        return f.name, f.dtype
    return None


def instantiate(f: Form, ops: dict[str, Any]) -> Form:
    """`f` with each call head that is an op variable in `ops` (bare or annotated) replaced by that
    op's name: what the elaborator can evaluate (a replacement, or a pattern the checker runs)."""
    if not isinstance(f, SList) or not f.items:
        return f
    items = [instantiate(x, ops) for x in f.items]
    ch = None if f.bracket else class_head(f.items[0])
    if ch is not None and ch[0] in ops:
        items[0] = Sym(ops[ch[0]].value, getattr(f.items[0], "span", None))
    return SList(items, f.span, f.bracket)
