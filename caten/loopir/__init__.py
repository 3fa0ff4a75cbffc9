"""The loop IR: what a kernel is after lowering, shared by every renderer (LLVM, C-like).

A package of its own below caten.lower and caten.render, so that a renderer or runtime reading
loop IR does not load the lowerer. `expr` holds the expressions, `stmts` the statements.

Expressions (`X`) are hash-consed trees; statements are plain objects. Index arithmetic is
i64. Values of f16/bf16 live in registers as f32 and are rounded after every op, as the
reference does.

Expression ops (`X.op`):
  "const" arg=value | "dim" arg=Dim (i64) | "var" arg=name | "load" arg=buffer, src=(idx,)
  "dim" arg=Dim src=(value,): after the decompose pass, every dim but a dynamic one (a bare
    symbol: the function's argument), its value written in primitives (caten.lower.dimx);
    renderers spell the value, sizes read the Dim
  "masked" src=(cond, value): value if cond else 0, value evaluated only under cond
  "rand" arg=seed src=(ctr i64,) or (ctr i64, key u64: a runtime seed XORed into the key) -> u32
  | an `Op` (ALU, CAST, WHERE)
  "idiv"/"imod" src=(a, b): truncating (C) division and remainder in the dtype of a, signed or
    unsigned by that dtype; b is never 0, nor -1 with a the minimum (index math: a >= 0, b > 0).
  An `Op.ADD/MUL/MAX` with arg "acc" is a reduction update that may be reassociated.
The primitives the decompose pass (caten.lower.decompose) writes EXP2, LOG2, SIN, IDIV, MOD,
NaN-propagating MAX, "rand", f16/bf16 rounding and float->int casts in, for renderers that lack
those ops natively:
  "bitcast" src=(x,): x's bits read as another dtype of the same width (exponent and mantissa
    fields for exp2/log2/Payne-Hanek; fabs and copysign are bit masks through it); u32 to
    f16/bf16 reads the bits of the f32 register such a value lives in (a rounded value)
  "shl"/"shr" src=(a, n): shift by 0 <= n < bits, n of a's dtype; "shr" is arithmetic for signed
    dtypes, logical for unsigned ones (exponent fields, 32-bit limbs, threefry's rotations)
  "floor"/"rint" src=(x,): round down / to nearest, ties to even (exp2's and sin's range
    reductions, float floor division); both are single instructions on CPUs and GPUs
  "fma" src=(a, b, c): a*b + c rounded once (Cody-Waite and double-double steps need the exact
    product; polynomials use it so results do not depend on whether a CPU fuses)
  "fmod" src=(a, b): C's fmod, exact (float IDIV/MOD start from it; it is a long loop otherwise)
  "lut" arg=tuple of ints src=(idx i64,): entry idx of a constant table (the bits of 1/pi)
Statements: Loop(var, extent, body) and its Parallel form (iterations may run on threads),
  Store(buf, idx, value), Acc(var, dtype, init),
  SetAcc(var, value), TileMM (a GEMM micro-kernel over packed panels), MacroMM (the
  tiles of a packed block), DirectMM (a convolution's tiles reading its image in place),
  PackT (a transposing copy: a row panel packed from a row-major matrix) and PackN (a straight
  copy of a panel whose lanes are contiguous); their `expand()` gives the same computation in the other
  statements, for renderers without a register-tile path.
"""

from caten.loopir.expr import (
    IDX,
    X,
    alu,
    const,
    dim,
    iadd,
    icmplt,
    imax,
    imin,
    imul,
    isub,
    land,
    load,
    nodes,
    register,
    subst,
    var,
)
from caten.loopir.stmts import (
    Acc,
    BufParam,
    DirectMM,
    Kernel,
    Loop,
    MacroMM,
    PackN,
    PackT,
    PanelCopy,
    Parallel,
    SetAcc,
    Store,
    TileMM,
    stmt_vars,
    walk_stmts,
)

__all__ = ["IDX", "X", "alu", "const", "dim", "iadd", "icmplt", "imax", "imin", "imul", "isub", "land", "load", "nodes",
           "register", "subst", "var", "Acc", "BufParam", "DirectMM", "Kernel", "Loop", "MacroMM", "PackN", "PackT",
           "PanelCopy", "Parallel", "SetAcc", "Store", "TileMM", "stmt_vars", "walk_stmts"]
