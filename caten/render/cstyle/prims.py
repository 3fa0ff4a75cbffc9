"""The C, OpenCL C and CUDA C spellings of the loop-IR primitives that the decompose pass
(caten.lower.decompose) writes EXP2, LOG2, SIN, IDIV, MOD, NaN-propagating MAX and `rand` in:
a table, one expression each (compare caten.render.llvm.prims). The numerics themselves live
once, in the pass; this module only says how each dialect writes a bit cast, a shift, a libm
rounding call or a constant table."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Protocol

from caten import loopir as L
from caten.ir.dtypes import DType
from caten.loopir import X
from caten.render.cstyle.targets import Target, ctype, int_lit, uty


class Fn(Protocol):
    """What a spelling needs of the function being rendered (cstyle.fn.Fn)."""

    t: Target
    used: set[str]

    def fmath(self, name: str, dt: DType) -> str: ...

LUT_PREFIX = "caten_lut_"
# the constant tables rendered so far, by name; a name is a digest of (element type, entries),
# so one table is declared once per source file however many kernels read it
_LUTS: dict[str, tuple[DType, tuple[int, ...]]] = {}
# program-scope qualifier of a constant table: read-only data / constant address space
_LUT_QUAL = {"c": "static const", "opencl": "__constant", "cuda": "__constant__ const"}


def _bitcast(f: Fn, x: X, s: list[str]) -> str:
    """Same-width reinterpretation, through the target's float<->unsigned bit casts
    (C: memcpy helpers; OpenCL: as_uint/as_float; CUDA: __float_as_uint etc.)."""
    src, dst = L.register(x.src[0].dtype), L.register(x.dtype)  # f16/bf16: their f32 register's bits
    if src.is_int and dst.is_int:
        return f"(({dst.name}){s[0]})"
    f2u, u2f, d2u, u2d = f.t.bits
    if src.bits != dst.bits:
        raise NotImplementedError(f"bitcast of {x.src[0].dtype} to {x.dtype}")
    if src.is_float:
        return f"(({dst.name}){f2u if src.bits == 32 else d2u}({s[0]}))"
    return f"{u2f if dst.bits == 32 else u2d}(({uty(dst)}){s[0]})"


def _shl(f: Fn, x: X, s: list[str]) -> str:
    """Shifted as unsigned (a signed left shift into the sign bit is undefined in C), then wrapped."""
    return f"(({x.dtype.name})(({uty(x.dtype)}){s[0]} << {s[1]}))"


def _shr(f: Fn, x: X, s: list[str]) -> str:
    """`>>` is arithmetic on signed operands in gcc/clang, OpenCL C and CUDA C, logical on unsigned
    ones; narrow operands promote to int with their sign, so the result is the same."""
    return f"(({x.dtype.name})({s[0]} >> {s[1]}))"


def _math(name: str) -> Callable[[Fn, X, list[str]], str]:
    def spell(f: Fn, x: X, s: list[str]) -> str:
        return f"{f.fmath(name, x.dtype)}({', '.join(s)})"
    return spell


def _div(sym: str) -> Callable[[Fn, X, list[str]], str]:
    """C's truncating `/` and `%` in the operand dtype (the pass rules out b == 0 and MIN / -1)."""
    def spell(f: Fn, x: X, s: list[str]) -> str:
        return f"(({ctype(x.dtype)})({s[0]} {sym} {s[1]}))"
    return spell


def _lut(f: Fn, x: X, s: list[str]) -> str:
    """Entry s[0] of a constant table declared once at program scope (lut_source)."""
    name = LUT_PREFIX + hashlib.blake2b(repr((x.dtype.name, x.arg)).encode(), digest_size=6).hexdigest()
    _LUTS.setdefault(name, (x.dtype, tuple(x.arg)))
    f.used.add(name)
    return f"{name}[{s[0]}]"


def lut_source(t: Target, name: str) -> str:
    """The program-scope declaration of table `name` for target t."""
    dt, table = _LUTS[name]
    body = ", ".join(int_lit(v, dt) for v in table)
    return f"{_LUT_QUAL[t.name]} {dt.name} {name}[{len(table)}] = {{{body}}};"


PRIMS: dict[str, Callable[[Fn, X, list[str]], str]] = {
    "bitcast": _bitcast,
    "shl": _shl,
    "shr": _shr,
    "ftoi": lambda f, x, s: f"(({x.dtype.name}){s[0]})",  # in range by the pass: a plain conversion
    "floor": _math("floor"),
    "rint": _math("rint"),
    "fma": _math("fma"),
    "fmod": _math("fmod"),
    "lut": _lut,
    "idiv": _div("/"),
    "imod": _div("%"),
}
