"""Float8 storage in LLVM IR: a stored byte to its f32 register and back (caten.ir.dtypes.MINIFLOAT).

The decompose pass rounds every float8 value in its f32 register (caten.lower.numerics_narrow), so
a store converts a value on the format's grid, exactly; a load is exact too. Both are integer bit
arithmetic, branch-free (a vectorized loop keeps them): a normal number moves its exponent and
mantissa fields; a subnormal is its mantissa times 2^(1 - bias - man), one exact int->float
conversion and an exact multiply by a power of two (no f32 subnormal is involved either way).
"""

from __future__ import annotations

import struct

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.render.llvm.emit import Emitter

_NAN, _INF = 0x7FC00000, 0x7F800000


def _bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def load(g: Emitter, raw: str, dt: DType) -> str:
    """The f32 value of float8 byte `raw` (an i8)."""
    f = T.MINIFLOAT[dt]
    w = g.conv("zext", "i8", raw, "i32")
    sign = g.ins(f"shl i32 {g.ins(f'and i32 {w}, 128')}, 24")
    mag = g.ins(f"and i32 {w}, 127")
    normal = g.ins(f"add i32 {g.ins(f'shl i32 {mag}, {23 - f.man}')}, {(127 - f.bias) << 23}")
    sub = g.fop("fmul", "float", g.conv("uitofp", "i32", mag, "float"), g.fc(2.0 ** (1 - f.bias - f.man), "float"),
                "")
    r = g.select(g.icmp("ult", "i32", mag, str(1 << f.man)), "i32", g.conv("bitcast", "float", sub, "i32"), normal)
    if f.fnuz:  # 0x80 is the one nan
        r = g.select(g.icmp("eq", "i32", w, "128"), "i32", str(_NAN), r)
    elif f.inf:  # the top exponent: inf (mantissa 0) or nan
        top = 0x7F ^ ((1 << f.man) - 1)
        special = g.select(g.icmp("eq", "i32", mag, str(top)), "i32", str(_INF), str(_NAN))
        r = g.select(g.icmp("uge", "i32", mag, str(top)), "i32", special, r)
    else:  # e4m3fn: S.1111.111 is nan
        r = g.select(g.icmp("eq", "i32", mag, "127"), "i32", str(_NAN), r)
    return g.conv("bitcast", "i32", g.ins(f"or i32 {r}, {sign}"), "float")


def store(g: Emitter, val: str, dt: DType) -> str:
    """The float8 byte (an i8) of f32 value `val`, which lies on the format's grid."""
    f = T.MINIFLOAT[dt]
    b = g.conv("bitcast", "float", val, "i32")
    sign = g.ins(f"and i32 {g.ins(f'lshr i32 {b}, 24')}, 128")
    a = g.ins(f"and i32 {b}, 2147483647")
    normal = g.ins(f"sub i32 {g.ins(f'lshr i32 {a}, {23 - f.man}')}, {(127 - f.bias) << f.man}")
    absv = g.conv("bitcast", "i32", a, "float")
    scaled = g.fop("fmul", "float", absv, g.fc(2.0 ** (f.bias + f.man - 1), "float"), "")
    sub = g.conv("fptoui", "float", scaled, "i32")
    code = g.select(g.icmp("ult", "i32", a, str(_bits(2.0 ** (1 - f.bias)))), "i32", sub, normal)
    nan = g.icmp("ugt" if f.inf else "uge", "i32", a, str(_INF))  # (e4m3fn: an inf, never stored, as nan)
    if f.fnuz:  # nan (inf cannot reach a store) is 0x80, a zero has no sign
        code = g.select(g.icmp("eq", "i32", code, "0"), "i32", "0", g.ins(f"or i32 {code}, {sign}"))
        code = g.select(nan, "i32", "128", code)
    else:
        if f.inf:
            code = g.select(g.icmp("eq", "i32", a, str(_INF)), "i32", str(0x7F ^ ((1 << f.man) - 1)), code)
        code = g.select(nan, "i32", str(0x7E if f.inf else 0x7F), code)
        code = g.ins(f"or i32 {code}, {sign}")
    return g.conv("trunc", "i32", code, "i8")
