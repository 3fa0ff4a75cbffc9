"""The C helper functions a rendered kernel may call (f16/bf16 conversions and rounding,
saturating float->int, floor division and modulo, the f32 exp2/log2/sin polynomials, threefry),
per target, emitted only when used."""

from __future__ import annotations

import math

import numpy as np

from caten.ir import dtypes as T
from caten.render.cstyle.targets import Target, uty


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
        "caten_rh": (("caten_h2f", "caten_f2h"), f"{fn} f32 caten_rh(f32 f) {{ return caten_h2f(caten_f2h(f)); }}"),
        "caten_bf2f": ((), f"{fn} f32 caten_bf2f(u16 b) {{ return {u2f}(((u32)b) << 16); }}"),
        "caten_f2bf": ((), f"{fn} u16 caten_f2bf(f32 f) {{ return (u16)({f2u}(f) >> 16); }}"),
        "caten_rbf": ((), f"""{fn} f32 caten_rbf(f32 f) {{
  u32 b = {f2u}(f);
  u32 r = (b + 0x7fffU + ((b >> 16) & 1U)) & 0xffff0000U;
  if (f != f) r = (b | 0x400000U) & 0xffff0000U;
  return {u2f}(r);
}}"""),
        "caten_f2i64": ((), f"""{fn} i64 caten_f2i64(fw x) {{
  if (!(x - x == (fw)0)) return 0;
  if (x >= (fw)9223372036854775808.0) return 9223372036854775807L;
  if (x < (fw)-9223372036854775808.0) return -9223372036854775807L - 1L;
  return (i64)x;
}}"""),
        "caten_f2u64": (("caten_f2i64",), f"""{fn} u64 caten_f2u64(fw x) {{
  if (!(x - x == (fw)0)) return 0UL;
  if (x < (fw)0) return (u64)caten_f2i64(x);
  if (x >= (fw)18446744073709551616.0) return 18446744073709551615UL;
  return (u64)x;
}}"""),
        "caten_dfloordiv": ((), f"""{fn} i64 caten_dfloordiv(i64 a, i64 b) {{
  if (b == 0) return 0;
  i64 q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}}"""),
        "caten_dmod": ((), f"""{fn} i64 caten_dmod(i64 a, i64 b) {{
  if (b == 0) return 0;
  i64 r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}"""),
    }
    for dt in (T.i8, T.i16, T.i32, T.i64):
        n, ut = dt.name, uty(dt)
        h[f"caten_idiv_{n}"] = ((), f"""{fn} {n} caten_idiv_{n}({n} a, {n} b) {{
  if (b == 0) return 0;
  if (b == -1) return ({n})(({ut})0 - ({ut})a);
  {n} q = ({n})(a / b), r = ({n})(a % b);
  return (r != 0 && ((r < 0) != (b < 0))) ? ({n})(q - 1) : q;
}}""")
        h[f"caten_imod_{n}"] = ((), f"""{fn} {n} caten_imod_{n}({n} a, {n} b) {{
  if (b == 0 || b == -1) return 0;
  {n} r = ({n})(a % b);
  return (r != 0 && ((r < 0) != (b < 0))) ? ({n})(r + b) : r;
}}""")
    for dt in (T.u8, T.u16, T.u32, T.u64):
        n = dt.name
        for what, sym in (("idiv", "/"), ("imod", "%")):
            h[f"caten_{what}_{n}"] = ((), f"{fn} {n} caten_{what}_{n}({n} a, {n} b) "
                                          f"{{ return b == 0 ? ({n})0 : ({n})(a {sym} b); }}")
    for fty, k in (("f32", 0), ("f64", 1)):
        fmod, floor, cps = (t.math[m][k] for m in ("fmod", "floor", "copysign"))
        z, one, half = ("0.0f", "1.0f", "0.5f") if fty == "f32" else ("0.0", "1.0", "0.5")
        h[f"caten_fmod_{fty}"] = ((), f"""{fn} {fty} caten_fmod_{fty}({fty} a, {fty} b) {{
  {fty} m = {fmod}(a, b);
  if (b == {z}) return m;
  if (m != {z}) {{ if ((b < {z}) != (m < {z})) m += b; }}
  else m = {cps}({z}, b);
  return m;
}}""")
        h[f"caten_fdiv_{fty}"] = ((), f"""{fn} {fty} caten_fdiv_{fty}({fty} a, {fty} b) {{
  if (b == {z}) return a / b;
  {fty} m = {fmod}(a, b);
  {fty} d = (a - m) / b;
  if (m != {z} && ((b < {z}) != (m < {z}))) d -= {one};
  if (d == {z}) return {cps}({z}, a / b);
  {fty} f = {floor}(d);
  if (d - f > {half}) f += {one};
  return f;
}}""")
    e2 = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
          2.402264791363012e-1, 6.931472028550421e-1)
    hx = "".join("(" for _ in e2[1:]) + f"{float(np.float32(e2[0])).hex()}f" + "".join(
        f" * f + {float(np.float32(c)).hex()}f)" for c in e2[1:])
    clamp = ("f32 xc = fminf(fmaxf(x, -150.0f), 128.0f);" if t.name == "c" else  # gcc vectorizes only this form
             "f32 xc = x > 128.0f ? 128.0f : x;\n  xc = xc < -150.0f ? -150.0f : xc;\n  xc = x != x ? 0.0f : xc;")
    h["caten_exp2_f32"] = ((), f"""{fn} f32 caten_exp2_f32(f32 x) {{
  {clamp}
  f32 y = xc + 0.5f, n = (f32)(i32)y;
  n = y < n ? n - 1.0f : n;
  f32 f = xc - n;
  f32 r = {hx} * f + 1.0f;
  i32 ni = (i32)n, n1 = ni >> 1, n2 = ni - n1;
  f32 res = r * {u2f}((u32)(n1 + 127) << 23) * {u2f}((u32)(n2 + 127) << 23);
  return x != x ? x : res;
}}""")
    lc = [2.0 / (2 * k + 1) for k in range(10, -1, -1)]
    hl = "".join("(" for _ in lc[1:]) + f"{lc[0].hex()}" + "".join(f" * s2 + {c.hex()})" for c in lc[1:])
    h["caten_log2_f32"] = ((), f"""{fn} f32 caten_log2_f32(f32 xf) {{
  f64 x = (f64)xf;
  i64 small = x < 0x1p-1022;
  f64 xs = small ? x * 0x1p52 : x;
  u64 bits = {d2u}(xs);
  i64 e = (i64)(bits >> 52) - 1023;
  f64 m = {u2d}((bits & 0xfffffffffffffUL) | 0x3ff0000000000000UL);
  i64 big = m > 0x1.6a09e667f3bcdp+0;
  m = big ? m * 0.5 : m;
  e = e + big - (small ? 52 : 0);
  f64 s = (m - 1.0) / (m + 1.0);
  f64 s2 = s * s;
  f64 res = (f64)e + {hl} * s * {(1 / math.log(2)).hex()};
  res = x == 0.0 ? -{u2d}(0x7ff0000000000000UL) : res;
  res = x < 0.0 ? {u2d}(0x7ff8000000000000UL) : res;
  res = x == {u2d}(0x7ff0000000000000UL) ? x : res;
  return x != x ? xf : (f32)res;
}}""")
    sp = (3.140625, 0.0009670257568359375, 6.2771141529083251953e-07, 1.2154201256553420762e-10)
    sc = [(-1) ** j / math.factorial(2 * j + 1) for j in range(6, 0, -1)]
    hs = "".join("(" for _ in sc[1:]) + f"{float(np.float32(sc[0])).hex()}f" + "".join(
        f" * r2 + {float(np.float32(c)).hex()}f)" for c in sc[1:])
    fmaf = "fma" if t.name == "opencl" else "fmaf"
    parts = "".join(f"  r = {fmaf}(-k, {float(np.float32(p)).hex()}f, r);\n" for p in sp)
    # |x| >= 2^14: the 4-part reduction loses the argument; C uses libm's double sin (correctly
    # rounded to f32), OpenCL its builtin (<= 4 ulp over the whole range, by the spec)
    big = "(f32)sin((f64)x)" if t.name == "c" else "sin(x)"
    h["caten_sin_f32"] = ((), f"""{fn} f32 caten_sin_f32(f32 x) {{
  if ((x >= 0x1p14f || x <= -0x1p14f) && x - x == 0.0f) return {big};
  bool fin = x - x == 0.0f;
  f32 xs = fin ? x : 0.0f;
  f32 y = xs * {float(np.float32(1 / math.pi)).hex()}f + 0.5f;
  f32 ay = y < 0.0f ? -y : y;
  f32 k = (f32)(i32)(ay < 0x1p23f ? y : 0.0f);
  k = ay < 0x1p23f ? (y < k ? k - 1.0f : k) : y - 0.5f;
  f32 r = xs;
{parts}  f32 ak = k < 0.0f ? -k : k;
  bool odd = ((ak < 0x1p62f ? (i64)k : (i64)0) & 1) != 0;
  f32 r2 = r * r;
  f32 p = r + r * r2 * {hs};
  p = odd ? -p : p;
  return fin ? p : {u2f}(0x7fc00000U);
}}""")
    rounds = []
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    for r in range(20):
        rounds.append(f"x0 += x1; x1 = ((x1 << {rot[r % 8]}) | (x1 >> {32 - rot[r % 8]})) ^ x0;")
        if r % 4 == 3:
            i = r // 4 + 1
            ks = ("k0", "k1", "k2")
            rounds.append(f"x0 += {ks[i % 3]}; x1 += {ks[(i + 1) % 3]} + {i}U;")
    h["caten_threefry"] = ((), f"""{fn} u32 caten_threefry(u64 ctr, u32 k0, u32 k1) {{
  u32 k2 = 0x1BD11BDAU ^ k0 ^ k1;
  u32 x0 = (u32)ctr + k0, x1 = (u32)(ctr >> 32) + k1;
  {chr(10).join('  ' + r for r in rounds).strip()}
  return x0;
}}""")
    return h


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
        add(n)
    return "\n".join(lib[n][1] for n in order)
