"""One C-style renderer of the loop IR, shared by plain C, OpenCL C and CUDA C.

The three targets differ only in the small `Target` tables below: type names, qualifiers,
bit casts, math function names, the thread-index expressions, shared memory and barriers.
Everything else — expressions, casts with caten's semantics (floor division, saturating
float->int, f16/bf16 computed in f32 and rounded after every op), masks, the counter-based
RNG — is rendered once here.

Plain C runs each loop-IR kernel as one serial function. The device targets map a kernel
to one or more device kernels (`DeviceKernel`): the leading loops whose iterations are
independent are spread over the grid — one work-item per iteration ("items" mode), or one
work-group per iteration whose work-items share the inner loops ("groups" mode: strided
loops, tree reductions in local/shared memory, barriers between stages).
`device_program` does schedule -> lower -> render and returns what a host needs to run the
result (buffers with sizes, launches with sizes as expressions of the dims) — the same data
the JSON manifest beside `-S` output holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np

from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import COMBINERS, Op
from caten.ir.program import c_symbol
from caten.ir.walk import Visit, drive
from caten.lower import loopir as L
from caten.lower.loopir import X

_TYPEDEFS = {"i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t", "u8": "uint8_t",
             "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t"}


@dataclass(frozen=True)
class Target:
    name: str
    prelude: str  # includes, pragmas and the typedefs i8..u64, f32, f64
    kernel: str  # qualifier of a (device) kernel
    func: str  # qualifier of helper functions
    gptr: str  # address space of buffer pointers
    restrict: str
    shared: str  # qualifier of work-group arrays
    barrier: str
    gid: str  # global work-item index (i64), work-group index, local index
    grp: str
    lid: str
    bits: tuple[str, str, str, str]  # f32->u32, u32->f32, f64->u64, u64->f64
    math: dict[str, tuple[str, str]]  # name -> (f32 function, f64 function)
    gpu: bool
    poly: bool = False  # f32 exp2/log2/sin as inline polynomials (vectorize on CPUs), not library calls


_CMATH = {n: (n + "f", n) for n in ("exp2", "log2", "sin", "sqrt", "floor", "fmod", "copysign", "rint")}
_POLY = {"exp2": "caten_exp2_f32", "log2": "caten_log2_f32", "sin": "caten_sin_f32"}  # vectorizable on CPUs

C = Target(
    "c",
    "#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
    + "".join(f"typedef {v} {k};\n" for k, v in _TYPEDEFS.items())
    + "typedef float f32;\ntypedef double f64;\ntypedef double fw;\n"
    "static inline u32 caten_bits_f2u(f32 x) { u32 u; memcpy(&u, &x, 4); return u; }\n"
    "static inline f32 caten_bits_u2f(u32 u) { f32 x; memcpy(&x, &u, 4); return x; }\n"
    "static inline u64 caten_bits_d2u(f64 x) { u64 u; memcpy(&u, &x, 8); return u; }\n"
    "static inline f64 caten_bits_u2d(u64 u) { f64 x; memcpy(&x, &u, 8); return x; }\n",
    # noinline: GCC 12.2 at -O3 (-march=x86-64-v2 and up) mis-orders a kernel's loads from a temp
    # buffer before the previous kernel's stores to it once both are inlined into the entry, each
    # with its own `restrict` parameter for that buffer (caten fuzz seed 3002096: an i8 prod then abs)
    "static __attribute__((noinline)) void", "static inline", "", "restrict", "", "", "", "", "",
    ("caten_bits_f2u", "caten_bits_u2f", "caten_bits_d2u", "caten_bits_u2d"), _CMATH, False, poly=True)

OPENCL = Target(
    "opencl",
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "typedef char i8;\ntypedef short i16;\ntypedef int i32;\ntypedef long i64;\n"
    "typedef uchar u8;\ntypedef ushort u16;\ntypedef uint u32;\ntypedef ulong u64;\ntypedef float f32;\n"
    "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\ntypedef double f64;\ntypedef double fw;\n"
    "#else\ntypedef float fw;\n#endif\n",
    "__kernel void", "static inline", "__global ", "restrict", "__local",
    "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)",
    "(i64)get_global_id(0)", "(i64)get_group_id(0)", "(i32)get_local_id(0)",
    ("as_uint", "as_float", "as_ulong", "as_double"),
    {n: (n, n) for n in ("exp2", "log2", "sin", "sqrt", "floor", "fmod", "copysign", "rint")}, True)

CUDA = Target(
    "cuda",
    "typedef signed char i8;\ntypedef short i16;\ntypedef int i32;\ntypedef long long i64;\n"
    "typedef unsigned char u8;\ntypedef unsigned short u16;\ntypedef unsigned int u32;\n"
    "typedef unsigned long long u64;\ntypedef float f32;\ntypedef double f64;\ntypedef double fw;\n",
    'extern "C" __global__ void', "static __device__ __forceinline__", "", "__restrict__", "__shared__",
    "__syncthreads()",
    "((i64)blockIdx.x * (i64)blockDim.x + (i64)threadIdx.x)", "((i64)blockIdx.x)", "((i32)threadIdx.x)",
    ("__float_as_uint", "__uint_as_float", "(u64)__double_as_longlong", "__longlong_as_double"), _CMATH, True)

OPENCL_CPU = replace(OPENCL, poly=True)
TARGETS = {"c": C, "opencl": OPENCL, "cuda": CUDA}


def ctype(dt: DType) -> str:
    """The register type of a dtype (f16/bf16 live in f32)."""
    if dt.is_bool:
        return "bool"
    if dt.is_float:
        return "f64" if dt.bits == 64 else "f32"
    return dt.name


def stype(dt: DType) -> str:
    """The storage type of a dtype (bool as u8, f16/bf16 as their u16 bits)."""
    if dt.is_bool:
        return "u8"
    if dt.name in ("f16", "bf16"):
        return "u16"
    return ctype(dt)


def _uty(dt: DType) -> str:
    return "u64" if dt.bits == 64 else "u32"


def int_lit(v: int, dt: DType) -> str:
    bits = dt.bits
    v &= (1 << bits) - 1
    if dt.kind == "int" and v >= 1 << (bits - 1):
        v -= 1 << bits
    if bits == 64:
        if dt.kind == "uint":
            return f"{v}UL"
        return "(-9223372036854775807L - 1L)" if v == -(1 << 63) else f"{v}L"
    if dt.kind == "uint":
        return f"(({dt.name}){v}U)"
    return f"(({dt.name}){v})" if bits < 32 else ("(-2147483647 - 1)" if v == -(1 << 31) else str(v))


def idx_lit(v: int) -> str:
    return f"{v}L" if not -(1 << 31) <= v < (1 << 31) else str(v)


def dim_py(d: Dim) -> str:
    """A dim as a Python/C-like infix expression over dim names (`//`, `%` floor; max(), min())."""
    if isinstance(d, int):
        return str(d)
    terms = []
    for m, c in sorted(d.terms.items(), key=lambda mc: (len(mc[0]) == 0, repr(mc[0]))):
        fs = [_atom_py(a) for a in m]
        if c != 1 or not fs:
            fs.insert(0, str(c))
        terms.append("*".join(fs))
    return " + ".join(terms).replace("+ -", "- ")


def _atom_py(a) -> str:
    if a.op == "sym":
        return a.args[0]
    x, y = (dim_py(s) for s in a.args)
    if a.op in ("max", "min"):
        return f"{a.op}({x}, {y})"
    return f"(({x}) {'//' if a.op == 'idiv' else '%'} ({y}))"


def eval_dim(d: Dim, env: dict[str, int]) -> int:
    return D.evaluate(d, env) if not isinstance(d, int) else d


# helper functions, emitted only when used -----------------------------------------------------
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
        n, ut = dt.name, _uty(dt)
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


# expressions and statements ----------------------------------------------------------------------
class Fn:
    """Renders one function body; values are C expressions over named temporaries."""

    def __init__(self, target: Target, dims: Sequence[str], defines: dict[str, Dim], used: set[str],
                 rebase: dict[str, str] | None = None):
        self.t, self.dims, self.defines, self.used = target, list(dims), defines, used
        self.rebase = rebase or {}
        self.lines: list[str] = []
        self.decls: list[str] = []  # accumulators and shared arrays, at function scope
        self.ind = 1
        self.n = 0
        self.scopes: list[dict] = [{}]
        self.accs: dict[str, DType] = {}
        self.uses_f64 = False

    # plumbing ----------------------------------------------------------------------------------
    def emit(self, s: str) -> None:
        self.lines.append("  " * self.ind + s)

    def tmp(self, ty: str, expr: str) -> str:
        self.n += 1
        name = f"t{self.n}"
        self.emit(f"{ty} {name} = {expr};")
        return name

    def open(self, head: str) -> None:
        self.emit(head + " {")
        self.ind += 1
        self.scopes.append({})

    def close(self) -> None:
        self.scopes.pop()
        self.ind -= 1
        self.emit("}")

    def helper(self, name: str) -> str:
        self.used.add(name)
        return name

    def fmath(self, name: str, dt: DType) -> str:
        return self.t.math[name][1 if dt.bits == 64 else 0]

    # literals and dims ---------------------------------------------------------------------------
    def lit(self, v, dt: DType) -> str:
        if dt.is_bool:
            return "true" if v else "false"
        if dt.is_int:
            return int_lit(int(v), dt)
        v = float(v)
        with np.errstate(over="ignore"):  # beyond a 16-bit float's range the constant is inf, as the cast says
            if dt.name == "f16":
                v = float(np.float16(v))
            elif dt.name == "bf16":
                v = float(ml_dtypes.bfloat16(v))
            elif dt.bits == 32:
                v = float(np.float32(v))
        if dt.bits == 64:
            self.uses_f64 = True
            if math.isfinite(v):
                return f"({v.hex()})"
            bits = 0x7FF8000000000000 if math.isnan(v) else (0xFFF0000000000000 if v < 0 else 0x7FF0000000000000)
            return f"{self.t.bits[3]}({bits}UL)"
        if math.isfinite(v):
            return f"({v.hex()}f)"
        bits = 0x7FC00000 if math.isnan(v) else (0xFF800000 if v < 0 else 0x7F800000)
        return f"{self.t.bits[1]}({bits}U)"

    def dimval(self, d: Dim) -> str:
        if isinstance(d, int):
            return idx_lit(d)
        terms = []
        for m, c in sorted(d.terms.items(), key=lambda mc: repr(mc[0])):
            fs = [self.atom(a) for a in m]
            if c != 1 or not fs:
                fs.insert(0, idx_lit(c))
            terms.append(" * ".join(fs))
        return "(" + " + ".join(terms) + ")"

    def atom(self, a) -> str:
        if a.op == "sym":
            name = a.args[0]
            if name in self.defines:  # an int (-D), or a derived dim's expression (where K = (/ N 2))
                v = self.defines[name]
                return idx_lit(int(v)) if isinstance(v, int) else self.dimval(v)
            if name not in self.dims:
                raise KeyError(f"dimension {name} is neither a dynamic dim nor defined")
            return f"d_{name}"
        x, y = (self.dimval(s) for s in a.args)
        if a.op == "idiv":
            return f"{self.helper('caten_dfloordiv')}({x}, {y})"
        if a.op == "mod":
            return f"{self.helper('caten_dmod')}({x}, {y})"
        return f"(({x}) {'>' if a.op == 'max' else '<'} ({y}) ? ({x}) : ({y}))"

    # values --------------------------------------------------------------------------------------
    def v(self, x: X) -> str:
        """The C expression or temporary for x, emitting what it needs (walked without recursion:
        caten.ir.walk)."""
        return drive(self._vis(x))

    def _vis(self, x: X) -> Visit[str]:
        if x.op == "const":
            return self.lit(x.arg, x.dtype) if x.dtype != L.IDX else idx_lit(int(x.arg))
        if x.op == "var":
            return f"a_{x.arg}" if x.arg in self.accs else f"v_{x.arg}"
        for sc in reversed(self.scopes):
            r = sc.get(x)
            if r is not None:
                return r
        if x.dtype.bits == 64 and x.dtype.is_float:
            self.uses_f64 = True
        r = yield from self._v(x)
        self.scopes[-1][x] = r
        return r

    def _v(self, x: X) -> Visit[str]:
        op = x.op
        if op == "dim":
            return self.tmp("i64", self.dimval(x.arg))
        if op == "load":
            return self.tmp(ctype(x.dtype), self.load(x.arg, (yield self._vis(x.src[0])), x.dtype))
        if op == "masked":
            cond = yield self._vis(x.src[0])
            self.n += 1
            name = f"t{self.n}"
            self.emit(f"{ctype(x.dtype)} {name} = {self.lit(0, x.dtype)};")
            self.open(f"if ({cond})")
            val = yield self._vis(x.src[1])
            self.emit(f"{name} = {val};")
            self.close()
            return name
        if op == "bcheck":  # caten.lower.bounds: the index, or 0 after recording the failure
            slot, kid, bid = x.arg
            idx, ext = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
            return self.tmp("i64", f"caten_bcheck({slot}, {idx}, {ext}, {kid}, {bid})")
        if op == "rand":
            seed = int(x.arg)
            ctr = yield self._vis(x.src[0])
            return self.tmp("u32", f"{self.helper('caten_threefry')}((u64){ctr}, "
                                   f"{seed & 0xFFFFFFFF}U, {(seed >> 32) & 0xFFFFFFFF}U)")
        if op in ("idiv", "imod"):
            a, b = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
            return self.tmp("i64", f"{a} {'/' if op == 'idiv' else '%'} {b}")
        if op is Op.CAST:
            return self.tmp(ctype(x.dtype), self.cast((yield self._vis(x.src[0])), x.src[0].dtype, x.dtype))
        srcs = []
        for s in x.src:
            srcs.append((yield self._vis(s)))
        return self.tmp(ctype(x.dtype), self.alu(op, x.dtype, x.src[0].dtype if x.src else x.dtype, srcs))

    def ref(self, buf: str, idx: str) -> str:
        base = self.rebase.get(buf)
        return f"b_{buf}[{idx} + {base}]" if base else f"b_{buf}[{idx}]"

    def load(self, buf: str, idx: str, dt: DType) -> str:
        r = self.ref(buf, idx)
        if dt.is_bool:
            return f"({r} != 0)"
        if dt.name == "f16":
            return f"{self.helper('caten_h2f')}({r})"
        if dt.name == "bf16":
            return f"{self.helper('caten_bf2f')}({r})"
        return r

    def store(self, buf: str, idx: str, val: str, dt: DType) -> None:
        if dt.is_bool:
            val = f"(u8)({val} ? 1 : 0)"
        elif dt.name == "f16":
            val = f"{self.helper('caten_f2h')}({val})"
        elif dt.name == "bf16":
            val = f"{self.helper('caten_f2bf')}({val})"
        self.emit(f"{self.ref(buf, idx)} = {val};")

    def round(self, dt: DType, e: str) -> str:
        if dt.name == "f16":
            return f"{self.helper('caten_rh')}({e})"
        if dt.name == "bf16":
            return f"{self.helper('caten_rbf')}({e})"
        return e

    def cast(self, v: str, src: DType, dst: DType) -> str:
        if src == dst:
            return v
        if dst.is_bool:
            return f"({v} != {self.lit(0, src)})"
        if src.is_bool:
            return f"({v} ? {self.lit(1, dst)} : {self.lit(0, dst)})"
        if src.is_int and dst.is_int:
            return f"(({dst.name}){v})"
        if src.is_int and dst.is_float:
            return self.round(dst, f"(({ctype(dst)}){v})")
        if src.is_float and dst.is_int:
            fn = self.helper("caten_f2u64" if dst.kind == "uint" else "caten_f2i64")
            return f"(({dst.name}){fn}((fw){v}))"
        if ctype(src) == "f32" and ctype(dst) == "f64":
            return f"((f64){v})"
        if ctype(src) == "f64":
            v = f"((f32){v})"
        return self.round(dst, v)

    def alu(self, op: Op, dt: DType, sdt: DType, s: list[str]) -> str:
        """An ALU op over operand expressions (names or literals: each may appear twice)."""
        if op is Op.WHERE:
            return f"({s[0]} ? {s[1]} : {s[2]})"
        if op is Op.CMPLT:
            return f"({s[0]} < {s[1]})"
        if op is Op.CMPNE:
            return f"({s[0]} != {s[1]})"
        if dt.is_float:
            return self.round(dt, self.falu(op, dt, s))
        if dt.is_bool:
            if op is Op.NOT:
                return f"(!{s[0]})"
            sym = {Op.AND: "&", Op.OR: "|", Op.XOR: "^", Op.MAX: "|", Op.ADD: "|", Op.MUL: "&"}[op]
            return f"(({s[0]} {sym} {s[1]}) != 0)"
        n, ut = dt.name, _uty(dt)
        if op in (Op.ADD, Op.MUL) and n == "i64":  # index math (and i64 data): plain, wraps in practice
            return f"({s[0]} {'+' if op is Op.ADD else '*'} {s[1]})"
        if op in (Op.ADD, Op.MUL):
            return f"(({n})(({ut}){s[0]} {'+' if op is Op.ADD else '*'} ({ut}){s[1]}))"
        if op is Op.NEG:
            return f"(({n})(({ut})0 - ({ut}){s[0]}))"
        if op is Op.NOT:
            return f"(({n})~{s[0]})"
        if op in (Op.AND, Op.OR, Op.XOR):
            return f"(({n})({s[0]} {({Op.AND: '&', Op.OR: '|', Op.XOR: '^'})[op]} {s[1]}))"
        if op is Op.MAX:
            return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})"
        if op is Op.IDIV:
            return f"{self.helper('caten_idiv_' + n)}({s[0]}, {s[1]})"
        if op is Op.MOD:
            return f"{self.helper('caten_imod_' + n)}({s[0]}, {s[1]})"
        raise NotImplementedError(f"{op} on {dt}")

    def falu(self, op: Op, dt: DType, s: list[str]) -> str:
        ty = ctype(dt)
        if op is Op.ADD:
            return f"({s[0]} + {s[1]})"
        if op is Op.MUL:
            return f"({s[0]} * {s[1]})"
        if op is Op.NEG:
            return f"(-{s[0]})"
        if op is Op.RECIP:
            return f"({'1.0f' if ty == 'f32' else '1.0'} / {s[0]})"
        if op is Op.FDIV:
            return f"({s[0]} / {s[1]})"
        if op is Op.MAX:
            return f"(({s[0]} >= {s[1]} || {s[0]} != {s[0]}) ? {s[0]} : {s[1]})"
        if op in (Op.EXP2, Op.LOG2, Op.SIN) and self.t.poly and ty == "f32":
            return f"{self.helper(_POLY[op.value.lower()])}({s[0]})"
        if op in (Op.SQRT, Op.EXP2, Op.LOG2, Op.SIN):
            return f"{self.fmath(op.value.lower(), dt)}({s[0]})"
        if op is Op.IDIV:
            return f"{self.helper('caten_fdiv_' + ty)}({s[0]}, {s[1]})"
        if op is Op.MOD:
            return f"{self.helper('caten_fmod_' + ty)}({s[0]}, {s[1]})"
        raise NotImplementedError(f"{op} on floats")

    # statements ----------------------------------------------------------------------------------
    def declare_acc(self, s: L.Acc) -> None:
        if s.var not in self.accs:
            self.accs[s.var] = s.dtype
            self.decls.append(f"{ctype(s.dtype)} a_{s.var};")

    def stmt(self, s) -> None:
        if isinstance(s, L.Loop):
            self.loop(s)
        elif isinstance(s, L.Store):
            self.store(s.buf, self.v(s.idx), self.v(s.value), s.value.dtype)
        elif isinstance(s, L.Acc):
            self.declare_acc(s)
            self.emit(f"a_{s.var} = {self.v(s.init)};")
        elif isinstance(s, L.SetAcc):
            self.emit(f"a_{s.var} = {self.v(s.value)};")
        else:
            raise TypeError(f"unknown loop-IR statement {type(s).__name__}")

    def stmts(self, body: list) -> None:
        for s in body:
            self.stmt(s)

    def loop(self, s: L.Loop, start: str = "0", step: str = "") -> None:
        ext = self.v(s.extent)
        inc = f"v_{s.var} += {step}" if step else f"v_{s.var}++"
        sums = _float_sums(s.body)
        # the reassociation the loop IR allows an "acc" update: partial sums, as LLVM's vector
        # lanes give (far closer to a pairwise sum than one serial chain: 660 ulp off over 33k f32)
        if sums and self.t.name == "c":
            self.emit(f"#pragma omp simd reduction(+:{', '.join(f'a_{v}' for v in sums)})")
        elif sums and not step and start == "0":
            self.partial_sums(s, ext, sums)
            return
        self.open(f"for (i64 v_{s.var} = {start}; v_{s.var} < {ext}; {inc})")
        self.stmts(s.body)
        self.close()

    def partial_sums(self, s: L.Loop, ext: str, sums: list[str]) -> None:
        """`for v: acc += x(v)` as 8 interleaved partial sums, added pairwise at the end."""
        w = _PARTIALS
        self.open("")
        for a in sums:
            self.emit(f"{ctype(self.accs[a])} p_{a}[{w}] = {{{', '.join(['0'] * w)}}};")
        self.open(f"for (i64 v_{s.var} = 0; v_{s.var} < {ext}; v_{s.var}++)")
        for st in s.body:
            self.emit(f"p_{st.var}[v_{s.var} % {w}] += {self.v(st.value.src[1])};")
        self.close()
        for a in sums:
            terms = [f"p_{a}[{i}]" for i in range(w)]
            while len(terms) > 1:
                terms = [f"({x} + {y})" for x, y in zip(terms[::2], terms[1::2])]
            self.emit(f"a_{a} = a_{a} + {terms[0]};")
        self.close()

    def body(self) -> str:
        return "\n".join(["  " + d for d in self.decls] + self.lines)


_PARTIALS = 8


def _float_sums(body: list) -> list[str]:
    """The accumulators of a loop body made only of float `acc` additions, else []."""
    out = []
    for s in body:
        v = getattr(s, "value", None)
        if not (isinstance(s, L.SetAcc) and v.op is Op.ADD and v.arg == "acc" and v.dtype.name in ("f32", "f64")
                and v.src[0].op == "var" and v.src[0].arg == s.var):
            return []
        out.append(s.var)
    return out


def expand(stmts: list) -> list:
    """The body with every statement outside the four basic kinds replaced by its `expand()`
    (e.g. TileMM: a renderer without a special path for it renders the plain loops)."""
    out: list = []
    for s in stmts:
        if isinstance(s, L.Loop):
            out.append(L.Loop(s.var, s.extent, expand(s.body)))
        elif isinstance(s, (L.Store, L.Acc, L.SetAcc)):
            out.append(s)
        elif hasattr(s, "expand"):
            out += expand(s.expand())
        else:
            raise TypeError(f"unknown loop-IR statement {type(s).__name__}")
    return out


def c_function(k: L.Kernel, target: Target, defines: dict[str, Dim], used: set[str], qual: str | None = None) -> str:
    """A loop-IR kernel as one serial C-style function."""
    fn = Fn(target, k.dims, defines, used)
    fn.stmts(expand(k.body))
    return f"{qual or target.kernel} {k.name}({params(k, target)}) {{\n{fn.body()}\n}}"


def params(k: L.Kernel, t: Target) -> str:
    ps = [f"{t.gptr}{'const ' if p.role == 'in' else ''}{stype(p.dtype)} *{t.restrict} b_{p.name}" for p in k.params]
    ps += [f"i64 d_{d}" for d in k.dims]
    return ", ".join(ps) or "void"


# device mapping --------------------------------------------------------------------------------
def _walk(stmts: list):
    for s in stmts:
        yield s
        if isinstance(s, L.Loop):
            yield from _walk(s.body)


def _vars(x: X, memo: dict | None = None) -> set[str]:
    """The loop and accumulator variables x reads."""
    return drive(_vars_of(x, {} if memo is None else memo))


def _vars_of(x: X, memo: dict) -> Visit[set[str]]:
    hit = memo.get(id(x))
    if hit is not None:
        return hit
    out: set[str] = {x.arg} if x.op == "var" else set()
    for s in x.src:
        out |= yield _vars_of(s, memo)
    memo[id(x)] = out
    return out


def _extent(x: X) -> Dim | None:
    if x.op == "const":
        return int(x.arg)
    if x.op == "dim":
        return x.arg
    return None


def parallel_ok(loop: L.Loop, rebased: set[str]) -> bool:
    """Iterations of `loop` touch disjoint memory and carry no register state."""
    ext = _extent(loop.extent)
    if ext is None:
        return False
    inner_accs = {s.var for s in _walk(loop.body) if isinstance(s, L.Acc)}
    for s in _walk(loop.body):
        if isinstance(s, L.SetAcc) and s.var not in inner_accs:
            return False
        if isinstance(s, L.Store) and ext != 1 and s.buf not in rebased and loop.var not in _vars(s.idx):
            return False
    return True


_COMBINE = COMBINERS  # the op table's reduce combiners


def reduction_loop(loop: L.Loop, var: str) -> Op | None:
    """The combining op if `loop` only updates accumulator `var` with an associative op (and
    accumulators of its own, started inside it: the blocks of a blocked sum, caten.lower.reduce)."""
    op = None
    own: set[str] = set()
    for s in _walk([loop]):
        if isinstance(s, L.Loop):
            if _extent(s.extent) is None and not own:  # a block's loop may end at min(c, rest)
                return None
            continue
        if isinstance(s, L.Acc) and s.var != var:
            own.add(s.var)
            continue
        if not isinstance(s, L.SetAcc) or (s.var != var and s.var not in own):
            return None
        v = s.value
        if not (isinstance(v.op, Op) and v.op in _COMBINE and v.src and v.src[0].op == "var" and v.src[0].arg == s.var):
            return None
        if v.op is not Op.OR and v.arg != "acc":
            return None
        if s.var != var:
            continue
        if op is not None and op is not v.op:
            return None
        op = v.op
    return op


def coop_ok(stmts: list, rebased: set[str]) -> bool:
    """Whether a work-group can share `stmts` (see `DeviceFn.coop`)."""
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, L.Acc):
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            if isinstance(nxt, L.Loop) and any(isinstance(u, L.SetAcc) and u.var == s.var for u in _walk([nxt])):
                if reduction_loop(nxt, s.var) is None and not parallel_ok(nxt, rebased) and not coop_ok(nxt.body,
                                                                                                        rebased):
                    return False
                i += 2
                continue
        elif isinstance(s, L.Loop) and not parallel_ok(s, rebased):
            if _extent(s.extent) is None or not coop_ok(s.body, rebased):
                return False
        i += 1
    return True


class DeviceFn(Fn):
    """A device kernel body: grid-mapped leading loops, then serial or work-group-shared code."""

    def __init__(self, *a, local: int = 1, **kw):
        super().__init__(*a, **kw)
        self.L = local
        self.shared: dict[str, str] = {}

    def strided(self, loop: L.Loop) -> None:
        self.loop(loop, start="(i64)lid", step=f"{self.L}")

    def tree_reduce(self, var: str, dt: DType, op: Op) -> None:
        st = "u8" if dt.is_bool else ctype(dt)
        arr = self.shared.get(st)
        if arr is None:
            arr = self.shared[st] = f"red_{st}"
            self.decls.append(f"{self.t.shared} {st} {arr}[{self.L}];")
        b = self.t.barrier
        self.emit(f"{arr}[lid] = a_{var};")
        self.emit(f"{b};")
        self.open(f"for (i32 s = {self.L // 2}; s > 0; s >>= 1)")
        self.open("if (lid < s)")
        x = f"(({ctype(dt)}){arr}[lid])" if dt.is_bool else f"{arr}[lid]"
        y = f"(({ctype(dt)}){arr}[lid + s])" if dt.is_bool else f"{arr}[lid + s]"
        self.emit(f"{ctype(dt)} x = {x}, y = {y};")
        self.emit(f"{arr}[lid] = {self.alu(op, dt, dt, ['x', 'y'])};")
        self.close()
        self.emit(f"{b};")
        self.close()
        self.emit(f"a_{var} = {arr}[0]{' != 0' if dt.is_bool else ''};")
        self.emit(f"{b};")

    def coop(self, stmts: list) -> None:
        """Run `stmts` with the whole work-group: parallel loops strided over the work-items,
        reductions strided then combined in shared memory, scalar stores by work-item 0, a
        barrier after every statement that writes memory."""
        b = self.t.barrier
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, L.Acc):
                self.stmt(s)
                nxt = stmts[i + 1] if i + 1 < len(stmts) else None
                if isinstance(nxt, L.Loop) and any(isinstance(u, L.SetAcc) and u.var == s.var for u in _walk([nxt])):
                    op = reduction_loop(nxt, s.var)
                    if op is not None:
                        self.strided(nxt)
                        self.tree_reduce(s.var, s.dtype, op)
                    else:
                        self.coop([nxt])
                    i += 2
                    continue
            elif isinstance(s, L.SetAcc):
                self.stmt(s)
            elif isinstance(s, L.Store):
                self.open("if (lid == 0)")
                self.stmt(s)
                self.close()
                self.emit(f"{b};")
            elif isinstance(s, L.Loop):
                if parallel_ok(s, set(self.rebase)):
                    self.strided(s)
                    if any(isinstance(u, L.Store) for u in _walk([s])):
                        self.emit(f"{b};")
                else:
                    ext = self.v(s.extent)
                    self.open(f"for (i64 v_{s.var} = 0; v_{s.var} < {ext}; v_{s.var}++)")
                    self.coop(s.body)
                    self.close()
            else:
                self.stmt(s)
            i += 1


@dataclass
class DeviceKernel:
    name: str
    params: list[L.BufParam]
    dims: list[str]
    mode: str  # "items": one work-item per grid iteration; "groups": one work-group per iteration
    count: Dim  # grid iterations (work-items or work-groups)
    local: int  # work-group size
    source: str = ""

    def global_size(self, env: dict[str, int]) -> int:
        n = eval_dim(self.count, env)
        return n * self.local if self.mode == "groups" else -(-n // self.local) * self.local

    def launch_info(self) -> dict:
        args = [{"kind": "buffer", "name": p.name, "dtype": p.dtype.name,
                 "access": "read" if p.role == "in" else "readwrite"} for p in self.params]
        args += [{"kind": "dim", "name": d, "type": "i64"} for d in self.dims]
        count = dim_py(self.count)
        groups = count if self.mode == "groups" else f"(({count}) + {self.local - 1}) // {self.local}"
        return {"kernel": self.name, "args": args, "mode": self.mode, "count": count, "local_size": self.local,
                "num_groups": groups, "global_size": f"({groups}) * {self.local}"}


def device_kernels(k: L.Kernel, outer: int, local_bufs: dict[str, Dim], target: Target, defines: dict[str, Dim],
                   used: set[str], local: int, coop: bool, chunk: int = 1) -> tuple[list[DeviceKernel], dict[str, Dim]]:
    """Map one loop-IR kernel to device kernels. `local_bufs`: kernel-local slice buffers and
    their slice sizes; returns the kernels and the element counts those buffers need.
    `chunk` > 1 (CPUs): in "items" mode a work-item runs `chunk` iterations of the innermost
    grid loop as a plain loop, which the device compiler vectorizes."""
    kbody = expand(k.body)
    roots = [kbody]
    if len(kbody) > 1 and all(isinstance(s, L.Loop) for s in kbody) and not local_bufs:
        roots = [[s] for s in kbody]  # independent top-level nests: one launch each, in order
    out: list[DeviceKernel] = []
    sizes: dict[str, Dim] = {}
    rebased = set(local_bufs)
    for ri, root in enumerate(roots):
        name = k.name if len(roots) == 1 else f"{k.name}_{ri}"
        chain: list[L.Loop] = []
        body = root
        while len(body) == 1 and isinstance(body[0], L.Loop) and parallel_ok(body[0], rebased):
            chain.append(body[0])
            body = body[0].body
        exts = [_extent(lp.extent) for lp in chain]
        groups = coop and local > 1 and any(isinstance(s, L.Loop) for s in body) and coop_ok(body, rebased)
        small = isinstance(exts[-1], int) and exts[-1] <= chunk // 4 if chain else True
        chunked = chunk > 1 and not groups and not local_bufs and not small
        count = D.prod(exts) if not chunked else \
            D.mul(D.prod(exts[:-1]), D.floordiv(D.add(exts[-1], chunk - 1), chunk))
        nouter = min(outer, len(chain))
        rebase: dict[str, str] = {}
        for b, slice_elems in local_bufs.items():
            rebase[b] = f"rb_{b}"
            sizes[b] = D.mul(D.prod(exts[:nouter]), slice_elems)
        fn = DeviceFn(target, k.dims, defines, used, rebase, local=local if groups else 1)
        fn.emit(f"const i64 g = {target.grp if groups else target.gid};")
        if groups:
            fn.emit(f"const i32 lid = {target.lid};")
        else:
            fn.emit(f"if (g >= {fn.dimval(count)}) return;")
        rest = "g"
        if chunked:
            e = fn.v(chain[-1].extent)
            nchunks = fn.tmp("const i64", f"({e} + {chunk - 1}) / {chunk}")
            fn.emit(f"const i64 c0 = ({rest} % {nchunks}) * {chunk};")
            fn.emit(f"const i64 c1 = c0 + {chunk} < {e} ? c0 + {chunk} : {e};")
            rest = fn.tmp("const i64", f"{rest} / {nchunks}")
        for j in range(len(chain) - 1, -1, -1):
            lp = chain[j]
            if chunked and j == len(chain) - 1:
                continue
            if j == 0:
                fn.emit(f"const i64 v_{lp.var} = {rest};")
            else:
                e = fn.v(lp.extent)
                fn.emit(f"const i64 v_{lp.var} = {rest} % {e};")
                fn.n += 1
                nxt = f"t{fn.n}"
                fn.emit(f"const i64 {nxt} = {rest} / {e};")
                rest = nxt
        if local_bufs:
            lin = "0"
            for lp in chain[:nouter]:
                lin = f"({lin} * {fn.v(lp.extent)} + v_{lp.var})"
            for b, slice_elems in local_bufs.items():
                fn.emit(f"const i64 rb_{b} = {lin} * {fn.dimval(slice_elems)};")
        if groups:
            fn.coop(body)
        elif chunked:
            fn.open(f"for (i64 v_{chain[-1].var} = c0; v_{chain[-1].var} < c1; v_{chain[-1].var}++)")
            fn.stmts(body)
            fn.close()
        else:
            fn.stmts(body)
        kp = L.Kernel(name, k.params, k.dims, [])
        head = target.kernel + (f" __launch_bounds__({fn.L if groups else local})" if target.name == "cuda" else "")
        src = f"{head} {name}({params(kp, target)}) {{\n{fn.body()}\n}}"
        dk = DeviceKernel(name, k.params, list(k.dims), "groups" if groups else "items", count,
                          fn.L if groups else local, src)
        dk.uses_f64 = fn.uses_f64  # type: ignore[attr-defined]
        out.append(dk)
    return out, sizes


# whole programs -----------------------------------------------------------------------------------
@dataclass
class DeviceBuffer:
    name: str
    dtype: DType
    role: str  # "in" | "out" | "temp"
    index: int  # position among inputs or outputs; -1 for temps
    elems: Dim

    @property
    def nbytes(self) -> Dim:
        return D.mul(self.elems, self.dtype.itemsize)


@dataclass
class DeviceProgram:
    program: object
    name: str
    kernels: list[DeviceKernel]
    buffers: dict[str, DeviceBuffer]
    uses_f64: bool = False
    launches: list[DeviceKernel] = field(default_factory=list)

    def manifest(self) -> dict:
        p = self.program
        return {
            "name": p.name, "symbol": self.name,
            "inputs": [{"name": s.name, "dtype": s.dtype.name, "shape": [dim_py(d) for d in s.shape]}
                       for s in p.inputs],
            "outputs": [{"name": s.name, "dtype": s.dtype.name, "shape": [dim_py(d) for d in s.shape]}
                        for s in p.outputs],
            "dims": list(p.dims), "defines": dict(p.defines),
            "derived": {k: dim_py(v) for k, v in p.derived.items()},
            "constraints": [f"{dim_py(c.lhs)} == {dim_py(c.rhs)}" for c in p.constraints],
            "buffers": [{"name": b.name, "role": b.role, "index": b.index, "dtype": b.dtype.name,
                         "storage": stype(b.dtype), "elems": dim_py(b.elems), "bytes": dim_py(b.nbytes)}
                        for b in self.buffers.values()],
            "launches": [k.launch_info() for k in self.kernels],
        }


def device_program(program, target: Target, local: int = 256, coop: bool = True,
                   name: str | None = None, chunk: int = 1, check_bounds: bool = False) -> DeviceProgram:
    """schedule -> lower -> device kernels of one program (names prefixed by `name`); with
    `check_bounds`, every kernel also takes the error record `oob` (caten.lower.bounds)."""
    from caten.lower import check_group, lower
    from caten.schedule import schedule

    name = name or c_symbol(program.name)
    sched = schedule(program, check=check_group)
    for i, k in enumerate(sched.kernels):
        k.name = f"{name}__k{i}"
    lkernels = lower(sched)
    table = None
    if check_bounds:
        from caten.lower.bounds import DEVICE_BUF, SLOTS, device_instrument

        lkernels, table = device_instrument(lkernels, sched)
    defines = program.dim_defines()
    buffers: dict[str, DeviceBuffer] = {}
    if table is not None:
        buffers[DEVICE_BUF] = DeviceBuffer(DEVICE_BUF, T.i64, DEVICE_BUF, -1, SLOTS)
    for b in sched.buffers.values():
        if b.role != "temp" or b.local < 0:
            buffers[b.name] = DeviceBuffer(b.name, b.dtype, b.role, b.index, D.prod(b.shape))
    used: set[str] = set()
    dks: list[DeviceKernel] = []
    for sk, lk in zip(sched.kernels, lkernels):
        local_bufs = {p.name: D.prod(sched.buffers[p.name].shape[sched.buffers[p.name].local:])
                      for p in lk.params if p.name in sched.buffers and sched.buffers[p.name].role == "temp"
                      and sched.buffers[p.name].local >= 0}
        ks, sizes = device_kernels(lk, sk.outer, local_bufs, target, defines, used, local, coop, chunk)
        for b, n in sizes.items():
            sb = sched.buffers[b]
            buffers[b] = DeviceBuffer(b, sb.dtype, "temp", -1, n)
        dks += ks
    dp = DeviceProgram(program, name, dks, buffers)
    dp.bounds = table  # type: ignore[attr-defined]
    dp.uses_f64 = any(getattr(k, "uses_f64", False) for k in dks) or any(
        b.dtype == T.f64 for b in buffers.values())
    dp.used = used  # type: ignore[attr-defined]
    return dp


def device_source(dps: Sequence[DeviceProgram], target: Target, header: str = "") -> str:
    """One source file holding the kernels of several device programs."""
    used: set[str] = set()
    for dp in dps:
        used |= dp.used  # type: ignore[attr-defined]
    parts = [header] if header else []
    parts.append(target.prelude)
    hs = helper_source(target, used)
    if hs:
        parts.append(hs)
    if any(getattr(dp, "bounds", None) for dp in dps):
        from caten.lower.bounds import c_recorder

        parts.append(c_recorder(target.func, target.gptr))
    for dp in dps:
        parts += [k.source for k in dp.kernels]
    return "\n".join(parts) + "\n"


def manifest(dps: Sequence[DeviceProgram], runtime: str, source_name: str, extra: dict | None = None) -> dict:
    out = {"format": "caten-device-manifest/1", "runtime": runtime, "source": source_name,
           "notes": "sizes are Python expressions over the dims; launch kernels in order; "
                    "f16/bf16 buffers hold their 16-bit patterns, bool buffers one byte per element",
           "programs": [dp.manifest() for dp in dps]}
    out.update(extra or {})
    return out
