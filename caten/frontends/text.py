"""caten text written by the importers (ONNX, torch.export): a literal of a dtype, a unique symbol
for a foreign name. Shared by both, so that neither imports the other's converter."""

from __future__ import annotations

import re
from typing import Any

from caten.ir.literal import float_text

_SYM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def lit(v: Any, dt: str) -> str:
    """A literal of dtype `dt` as caten text (ints for integer tensors, true/false for bool)."""
    if dt == "bool":
        return "true" if bool(v) else "false"
    if dt.startswith(("i", "u")):
        return str(int(v))
    return float_text(float(v))


def sym(name: str, taken: set[str], prefix: str = "v_") -> str:
    """A caten symbol for an ONNX name, unique within `taken`."""
    s = name if _SYM.match(name) else prefix + re.sub(r"[^A-Za-z0-9_]", "_", name)
    base, i = s, 1
    while s in taken:
        s, i = f"{base}_{i}", i + 1
    taken.add(s)
    return s
