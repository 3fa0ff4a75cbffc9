"""caten text written by the importers (ONNX, torch.export): a literal of a dtype, a unique symbol
for a foreign name. Shared by both, so that neither imports the other's converter."""

from __future__ import annotations

import re
from typing import Any

from caten.ir import dtypes as T
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


def cast_float8(x: str, src: str, dst: str, saturate: bool) -> str:
    """caten text casting `x` (caten dtype `src`) to the float8 dtype `dst` as ONNX's Cast does.
    saturate=1 is caten's own `cast`; saturate=0 (ml_dtypes' conversion, and torch's `.to` but
    for e4m3fn) rounds in f32 with `round-to-minifloat` (overflow: inf in e5m2, nan in the
    others) and casts the result, exact but for an infinity, which the cast would saturate: it is
    made again by doubling the largest value."""
    if saturate or src == dst:
        return f"(cast {x} {dst})" if src != dst else f"(contiguous {x})"
    f = T.MINIFLOAT[T.BY_NAME[dst]]
    xw = x if src == "f32" else f"(cast {x} f32)"
    num = {k: float_text(v) for k, v in (("step", f.tiny), ("tiny", 2.0 ** (1 - f.bias)), ("maxv", f.max))}
    r = (f"(round-to-minifloat {xw} :step {num['step']} :tiny {num['tiny']} :maxv {num['maxv']} "
         f":over {'inf' if f.inf else 'nan'} :nanval nan :negzero {'false' if f.fnuz else 'true'})")
    if not f.inf:
        return f"(cast {r} {dst})"
    return f"(let ((f8r {r}) (f8c (cast f8r {dst}))) (where (< (abs f8r) inf) f8c (* f8c 2.0)))"
