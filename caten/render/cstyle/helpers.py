"""The C helper functions a rendered kernel may call (f16/bf16/float8 storage: a value's 16 or 8
bits to and from its f32 register) and the constant tables of `lut`, per target, emitted only when used. The
numerics of EXP2/LOG2/SIN, IDIV/MOD (of values and of dims), MAX, `rand`, f16/bf16 rounding and
float->int casts are not here: the decompose pass (caten.lower.decompose) writes them in
primitives (cstyle.prims)."""

from __future__ import annotations

import numpy as np

from caten.ir import dtypes as T
from caten.render.cstyle.prims import LUT_PREFIX, lut_source
from caten.render.cstyle.targets import Target
from caten.render.cstyle.tiles import TILE_PREFIX, tile_source


def _helpers(t: Target) -> dict[str, tuple[tuple[str, ...], str]]:
    f2u, u2f, d2u, u2d = t.bits
    fn = t.func
    h: dict[str, tuple[tuple[str, ...], str]] = {
        "caten_h2f": ((), f"""{fn} f32 caten_h2f(u16 h) {{
  u32 o = ((u32)(h & 0x7fffU)) << 13;
  u32 e = o & 0x0f800000U;
  o += 0x38000000U;
  if (e == 0x0f800000U) o += 0x38000000U;
  else if (e == 0U) {{ o += 0x00800000U; o = {f2u}({u2f}(o) - {u2f}(0x38800000U)); }}
  return {u2f}(o | (((u32)(h & 0x8000U)) << 16));
}}"""),
        "caten_f2h": ((), f"""{fn} u16 caten_f2h(f32 f) {{
  u32 x = {f2u}(f);
  u32 sign = x & 0x80000000U;
  u32 o;
  x ^= sign;
  if (x >= 0x47800000U) o = x > 0x7f800000U ? 0x7e00U : 0x7c00U;
  else if (x < 0x38800000U) o = {f2u}({u2f}(x) + {u2f}(0x3f000000U)) - 0x3f000000U;
  else {{ u32 odd = (x >> 13) & 1U; x += 0xc8000fffU + odd; o = x >> 13; }}
  return (u16)(o | (sign >> 16));
}}"""),
        "caten_bf2f": ((), f"{fn} f32 caten_bf2f(u16 b) {{ return {u2f}(((u32)b) << 16); }}"),
        "caten_f2bf": ((), f"{fn} u16 caten_f2bf(f32 f) {{ return (u16)({f2u}(f) >> 16); }}"),
    }
    for dt in T.FLOAT8:
        h |= _float8(t, dt)
    return h


def _float8(t: Target, dt: T.DType) -> dict[str, tuple[tuple[str, ...], str]]:
    """caten_NAME_u2f / caten_NAME_f2u: a float8 byte to its f32 register and back, exact (the
    decompose pass rounds a value to the grid before any store), in integer bit arithmetic; a
    subnormal is its mantissa times a power of two (caten.render.llvm.float8 says the same in IR)."""
    f2u, u2f = t.bits[:2]
    f, n = T.MINIFLOAT[dt], dt.name
    top = 0x7F ^ ((1 << f.man) - 1)  # e5m2: the inf/nan exponent
    if f.fnuz:
        load_special, store_tail = "  if (w == 128U) r = 0x7fc00000U;\n", \
            "  if (a >= 0x7f800000U) return (u8)128U;\n  return (u8)(c == 0U ? 0U : (c | s));"
    elif f.inf:
        load_special = f"  if (mag >= {top}U) r = mag == {top}U ? 0x7f800000U : 0x7fc00000U;\n"
        store_tail = (f"  if (a == 0x7f800000U) c = {top}U;\n  else if (a > 0x7f800000U) c = 0x7eU;\n"
                      "  return (u8)(c | s);")
    else:
        load_special = "  if (mag == 127U) r = 0x7fc00000U;\n"
        store_tail = "  if (a >= 0x7f800000U) c = 0x7fU;\n  return (u8)(c | s);"
    tiny = int(np.array(2.0 ** (1 - f.bias), np.float32).view(np.uint32))
    return {
        f"caten_{n}_u2f": ((), f"""{t.func} f32 caten_{n}_u2f(u8 b) {{
  u32 w = (u32)b, mag = w & 127U, r;
  if (mag < {1 << f.man}U) r = {f2u}((f32)mag * {(2.0 ** (1 - f.bias - f.man)).hex()}f);
  else r = (mag << {23 - f.man}) + {(127 - f.bias) << 23}U;
{load_special}  return {u2f}(r | ((w & 128U) << 24));
}}"""),
        f"caten_{n}_f2u": ((), f"""{t.func} u8 caten_{n}_f2u(f32 v) {{
  u32 b = {f2u}(v), s = (b >> 24) & 128U, a = b & 0x7fffffffU, c;
  if (a < {tiny}U) c = (u32)({u2f}(a) * {(2.0 ** (f.bias + f.man - 1)).hex()}f);
  else c = (a >> {23 - f.man}) - {(127 - f.bias) << f.man}U;
{store_tail}
}}"""),
    }


_HELPER_CACHE: dict[str, dict] = {}


def helper_source(t: Target, used: set[str]) -> str:
    """The helper functions named in `used`, with their dependencies, in a stable order."""
    lib = _HELPER_CACHE.setdefault(t.name, _helpers(t))
    order: list[str] = []

    def add(n: str) -> None:
        if n in order:
            return
        for d in lib[n][0]:
            add(d)
        order.append(n)

    for n in sorted(used):
        if not n.startswith((LUT_PREFIX, TILE_PREFIX)):
            add(n)
    luts = [lut_source(t, n) for n in sorted(used) if n.startswith(LUT_PREFIX)]
    tiles = [tile_source(n) for n in sorted(used) if n.startswith(TILE_PREFIX)]
    return "\n".join(luts + [lib[n][1] for n in order] + tiles)
