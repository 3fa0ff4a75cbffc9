"""Which integer contractions run as GEMMs over pairs of 16-bit values (`GemmPlan.pairs`): the
i32 product-sums of narrow integers (a quantized matmul's (a - za) * (b - zb), u8/i8 operands
widened) whose operands provably fit 16 bits. Their panels hold two consecutive k values per i32
word, and the micro-kernel multiplies pairs and adds them (the pattern x86's vpmaddwd computes,
vpdpwssd with VNNI): 16 products per 256-bit instruction against 8 for f32 FMAs, and exact,
since every pair sum of 16-bit products fits i32 but the one of two (-32768)^2, which wraps to
the same i32 the plain sum wraps to."""

from __future__ import annotations

from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import Op

I16 = (-32768, 32767)
_DEPTH = 24  # (operands are short chains: casts, zero points, views)


def int_range(n: Node, depth: int = _DEPTH) -> tuple[int, int] | None:
    """Bounds [lo, hi] every value of integer node n lies in, or None where unknown."""
    if depth == 0 or not (n.dtype.is_int or n.dtype.is_bool):
        return None
    if n.op is Op.CONST:
        return (int(n.arg), int(n.arg)) if isinstance(n.arg, (int, bool)) else None
    if n.op is Op.CAST:
        s = n.src[0]
        if s.dtype.is_bool:
            return (0, 1)
        a, b = s.dtype, n.dtype
        if (a.kind == b.kind and a.bits <= b.bits) or (a.kind == "uint" and b.kind == "int" and a.bits < b.bits):
            return _bounds(a)  # widened: every value kept
        return None
    if n.op is Op.BUFFER or n.op is Op.RAND:
        return _bounds(n.dtype) if n.dtype.bits <= 16 else None
    if n.op in (Op.VIEW, Op.COPY):
        return int_range(n.src[0], depth - 1)
    rs = [int_range(s, depth - 1) for s in n.src if s.dtype == n.dtype]
    if any(r is None for r in rs):
        return None
    if n.op is Op.NEG:
        return (-rs[0][1], -rs[0][0])
    if n.op is Op.ADD:
        return (rs[0][0] + rs[1][0], rs[0][1] + rs[1][1])
    if n.op is Op.MUL:
        ps = [a * b for a in rs[0] for b in rs[1]]
        return (min(ps), max(ps))
    if n.op is Op.MAX:
        return (max(rs[0][0], rs[1][0]), max(rs[0][1], rs[1][1]))
    if n.op is Op.WHERE and len(rs) == 2:
        return (min(rs[0][0], rs[1][0]), max(rs[0][1], rs[1][1]))
    return None


def fits16(n: Node) -> bool:
    """Whether every value of n fits a signed 16-bit integer."""
    r = int_range(n)
    return r is not None and I16[0] <= r[0] and r[1] <= I16[1]


def pair_gemm(reduce: Node) -> bool:
    """Whether a REDUCE-add runs as a GEMM over 16-bit pairs: an i32 sum of a product whose two
    operands fit 16 bits."""
    src = reduce.src[0]
    return reduce.dtype.name == "i32" and src.op is Op.MUL and all(fits16(s) for s in src.src)


def _bounds(dt: DType) -> tuple[int, int]:
    if dt.kind == "bool":
        return (0, 1)
    if dt.kind == "uint":
        return (0, (1 << dt.bits) - 1)
    return (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1)
