"""The LLVM spellings of the loop-IR primitives that the decompose pass (caten.lower.decompose)
writes the hard ops in: a table, one line of IR each. The numerics themselves (polynomials,
range reductions, floor division, threefry) are written once, in the pass."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from caten.loopir import X
from caten.render.llvm.emit import Emitter
from caten.render.llvm.values import int_str, rty


def _lut(g: Emitter, x: X, s: list[str]) -> str:
    """Entry s[0] of a constant table: a private global, one per distinct table."""
    ty = rty(x.dtype)
    name = "@caten_lut_" + hashlib.blake2b(repr((ty, x.arg)).encode(), digest_size=6).hexdigest()
    g.mod.decls.setdefault(name, f"{name} = private unnamed_addr constant [{len(x.arg)} x {ty}] "
                                 f"[{', '.join(f'{ty} {int_str(v, x.dtype.bits)}' for v in x.arg)}]")
    return g.ins(f"load {ty}, ptr {g.ins(f'getelementptr inbounds {ty}, ptr {name}, i64 {s[0]}')}")


def _div(rem: bool) -> Callable[[Emitter, X, list[str]], str]:
    def spell(g: Emitter, x: X, s: list[str]) -> str:
        signed = x.dtype.kind == "int"
        op = ("s" if signed else "u") + ("rem" if rem else "div")
        return g.ins(f"{op} {rty(x.dtype)} {s[0]}, {s[1]}")
    return spell


PRIMS: dict[str, Callable[[Emitter, X, list[str]], str]] = {
    "bitcast": lambda g, x, s: g.conv("bitcast", rty(x.src[0].dtype), s[0], rty(x.dtype)),
    "shl": lambda g, x, s: g.ins(f"shl {rty(x.dtype)} {s[0]}, {s[1]}"),
    "shr": lambda g, x, s: g.ins(f"{'ashr' if x.dtype.kind == 'int' else 'lshr'} {rty(x.dtype)} {s[0]}, {s[1]}"),
    "ftoi": lambda g, x, s: g.conv("fptosi" if x.dtype.kind == "int" else "fptoui", rty(x.src[0].dtype), s[0],
                                   rty(x.dtype)),
    "floor": lambda g, x, s: g.intr("floor", rty(x.dtype), s[0]),
    "rint": lambda g, x, s: g.intr("rint", rty(x.dtype), s[0]),
    "fma": lambda g, x, s: g.intr("fma", rty(x.dtype), *s),
    "fmod": lambda g, x, s: g.fop("frem", rty(x.dtype), s[0], s[1], ""),
    "lut": _lut,
    "idiv": _div(False),
    "imod": _div(True),
}
