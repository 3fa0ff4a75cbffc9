"""The target tables of the C-style renderer (plain C, OpenCL C, CUDA C: type names, qualifiers,
bit casts, math function names, thread indices, shared memory, barriers) and the spellings that
depend only on a dtype: register and storage types, integer literals, dims as infix expressions."""

from __future__ import annotations

from dataclasses import dataclass

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType

_TYPEDEFS = {"i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t", "u8": "uint8_t",
             "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "i4": "int8_t", "u4": "uint8_t"}


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
    shuffle: str = ""  # a lane's value of variable {x} from lane (this one xor {o}) of its warp, if any
    launch_bounds: str = ""  # a kernel's qualifier declaring its {} work-items a group, if any


# SQRT and the primitives of the decompose pass (caten.render.cstyle.prims) that are libm calls
_MATH = ("sqrt", "floor", "rint", "fma", "fmod", "exp2")
_CMATH = {n: (n + "f", n) for n in _MATH}

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
    ("caten_bits_f2u", "caten_bits_u2f", "caten_bits_d2u", "caten_bits_u2d"), _CMATH, False)

OPENCL = Target(
    "opencl",
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "typedef char i8;\ntypedef short i16;\ntypedef int i32;\ntypedef long i64;\ntypedef char i4;\ntypedef uchar u4;\n"
    "typedef uchar u8;\ntypedef ushort u16;\ntypedef uint u32;\ntypedef ulong u64;\ntypedef float f32;\n"
    "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\ntypedef double f64;\ntypedef double fw;\n"
    "#else\ntypedef float fw;\n#endif\n",
    "__kernel void", "static inline", "__global ", "restrict", "__local",
    "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)",
    "(i64)get_global_id(0)", "(i64)get_group_id(0)", "(i32)get_local_id(0)",
    ("as_uint", "as_float", "as_ulong", "as_double"),
    {n: (n, n) for n in _MATH}, True)

CUDA = Target(
    "cuda",
    "typedef signed char i8;\ntypedef short i16;\ntypedef int i32;\ntypedef long long i64;\n"
    "typedef signed char i4;\ntypedef unsigned char u4;\n"  # (i4/u4: 8-bit registers, wrapped by the pass)
    "typedef unsigned char u8;\ntypedef unsigned short u16;\ntypedef unsigned int u32;\n"
    "typedef unsigned long long u64;\ntypedef float f32;\ntypedef double f64;\ntypedef double fw;\n"
    # __longlong_as_double takes a signed long long: bits above 2**63 (-inf, negative nans) warned
    # (unused by f32-only programs: the attribute keeps nvcc from warning about it)
    "static __device__ __forceinline__ __attribute__((unused)) f64 caten_bits_u2d(u64 u) "
    "{ return __longlong_as_double((i64)u); }\n",
    'extern "C" __global__ void', "static __device__ __forceinline__", "", "__restrict__", "__shared__",
    "__syncthreads()",
    "((i64)blockIdx.x * (i64)blockDim.x + (i64)threadIdx.x)", "((i64)blockIdx.x)", "((i32)threadIdx.x)",
    ("__float_as_uint", "__uint_as_float", "(u64)__double_as_longlong", "caten_bits_u2d"), _CMATH, True,
    shuffle="__shfl_xor_sync(0xffffffffU, {x}, {o})", launch_bounds="__launch_bounds__({})")

TARGETS = {"c": C, "opencl": OPENCL, "cuda": CUDA}


def kernel_head(t: Target, local: int) -> str:
    """A device kernel's qualifiers, for work-groups of `local` work-items."""
    return t.kernel + (" " + t.launch_bounds.format(local) if t.launch_bounds else "")


def ctype(dt: DType) -> str:
    """The register type of a dtype (f16/bf16/float8 live in f32)."""
    if dt.is_bool:
        return "bool"
    if dt.is_float:
        return "f64" if dt.bits == 64 else "f32"
    return dt.name


def stype(dt: DType) -> str:
    """The storage type of a dtype (bool as u8, f16/bf16 as their u16 bits, float8 as u8 bits)."""
    if dt.is_bool or (dt.is_float and dt.bits == 8):
        return "u8"
    if dt.name in ("f16", "bf16"):
        return "u16"
    return ctype(dt)


def uty(dt: DType) -> str:
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
    if v == -(1 << 63):  # `-9223372036854775808L` negates a literal too large for a long (cc warns)
        return "(-9223372036854775807L - 1L)"
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

