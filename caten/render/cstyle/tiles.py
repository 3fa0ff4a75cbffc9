"""The C runtime's register tile: a `TileMM` (rows x cols of a packed-panel GEMM) as a helper
that keeps the whole tile in vector registers through GCC/Clang vector extensions, one per
tile shape. `expand()`'s plain loops sum each output element over k with strided loads, which
no compiler vectorizes (a 1024^3 matmul ran at 2 GF/s). Device targets keep `expand()`."""

from __future__ import annotations

from caten import loopir as L
from caten.ir.dtypes import DType

TILE_PREFIX = "caten_tile_"


def tile_name(s: L.TileMM) -> str:
    return f"{TILE_PREFIX}{s.dtype.name}{'p' if s.pairs else ''}_{s.rows}x{s.cols}"


def tile_source(name: str) -> str:
    """The helper `name` (tile_name): acc[r][j] vectors of `w` lanes, w = a row's cols over 2
    registers (over 4 for a single-row tile), as the GEMM plan shapes its tiles."""
    dt, shape = name[len(TILE_PREFIX):].split("_")
    rows, cols = map(int, shape.split("x"))
    if dt == "i32p":
        return _pairs_source(name, rows, cols)
    item = 4 if dt == "f32" else 8
    w = max(1, cols // (2 if rows > 1 else 4))
    nv = cols // w
    return f"""static void {name}(const {dt} *restrict a, const {dt} *restrict b, {dt} *restrict o, i64 kext,
    i64 os, i64 rv, i64 cv, int beta) {{
  typedef {dt} vec __attribute__((vector_size({w * item})));
  vec acc[{rows}][{nv}];
  for (int r = 0; r < {rows}; r++)
    for (int j = 0; j < {nv}; j++) acc[r][j] = (vec){{0}};
  for (i64 k = 0; k < kext; k++) {{
    vec bv[{nv}];
    for (int j = 0; j < {nv}; j++) memcpy(&bv[j], b + k * {cols} + j * {w}, sizeof(vec));
    for (int r = 0; r < {rows}; r++) {{
      {dt} av = a[k * {rows} + r];
      for (int j = 0; j < {nv}; j++) acc[r][j] += av * bv[j];
    }}
  }}
  {dt} t[{rows}][{cols}];
  memcpy(t, acc, sizeof(t));
  for (i64 r = 0; r < rv; r++)
    for (i64 c = 0; c < cv; c++) o[r * os + c] = (beta ? o[r * os + c] : ({dt})0) + t[r][c];
}}"""


def _pairs_source(name: str, rows: int, cols: int) -> str:
    """The tile of a GEMM over 16-bit pairs (`TileMM.pairs`): each word's halves multiplied and
    summed, in unsigned arithmetic (an i32 sum that overflows wraps, as the plain sum does; signed
    overflow is undefined in C). Compilers turn the inner loop into pmaddwd."""
    return f"""static void {name}(const i32 *restrict a, const i32 *restrict b, i32 *restrict o, i64 kext,
    i64 os, i64 rv, i64 cv, int beta) {{
  u32 t[{rows}][{cols}];
  memset(t, 0, sizeof(t));
  for (i64 k = 0; k < kext; k++) {{
    i32 bl[{cols}], bh[{cols}];
    for (int c = 0; c < {cols}; c++) {{
      u32 w = (u32)b[k * {cols} + c];
      bl[c] = (i16)(w & 0xFFFFu);
      bh[c] = (i16)(w >> 16);
    }}
    for (int r = 0; r < {rows}; r++) {{
      u32 w = (u32)a[k * {rows} + r];
      i32 al = (i16)(w & 0xFFFFu), ah = (i16)(w >> 16);
      for (int c = 0; c < {cols}; c++) t[r][c] += (u32)(al * bl[c]) + (u32)(ah * bh[c]);
    }}
  }}
  for (i64 r = 0; r < rv; r++)
    for (i64 c = 0; c < cv; c++) o[r * os + c] = (i32)((beta ? (u32)o[r * os + c] : 0u) + t[r][c]);
}}"""


def tile_call(f, s: L.TileMM) -> str:
    """The call of the helper for statement s in C-style function f (caten.render.cstyle.fn.Fn)."""
    name = f.helper(tile_name(s))
    args = [f"b_{s.a} + {f.v(s.aoff)}", f"b_{s.b} + {f.v(s.boff)}", f"b_{s.out} + {f.v(s.ooff)}",
            f.v(s.kext), f.v(s.ostride), f.v(s.rvalid), f.v(s.cvalid), f"(int)({f.v(s.beta)})"]
    return f"{name}({', '.join(args)});"


def supports(dtype: DType) -> bool:
    return dtype.name in ("f32", "f64", "i32")
