"""How a reduction runs, decided once per REDUCE stage by the schedule: in a register, through
memory, or register-tiled (a packed GEMM when `plan.gemm_plan` has one), and where a float sum's
loops are cut into blocks. The lowering only reads the recorded `ReducePlan`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from caten.ir import dtypes as T
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node
from caten.ir.ops import Op
from caten.schedule.plan import LOWP, GemmPlan, gemm_plan, gemm_shaped, on_gpu

BLOCK = 2048  # elements per first-level block of a float sum (caten.lower.reduce says why)


def tiled(n: Node) -> bool:
    """A reduction whose innermost source axis is kept (matmul, column sums) or a GEMM-like
    contraction: run as a register-tiled loop nest."""
    src = n.src[0]
    if n.op is Op.REDUCE and gemm_plan(n) is not None:
        return True
    return (n.op is Op.REDUCE and src.rank >= 2 and src.rank - 1 not in n.arg[1]
            and n.dtype.name not in LOWP and not n.dtype.is_bool)


def max_outer(n: Node) -> int:
    if n.op is Op.REDUCE:
        plan = gemm_plan(n)
        if plan is not None:
            return plan.lead
        return 0 if tiled(n) else min(n.arg[1])
    if n.op in (Op.SCATTER, Op.SORT, Op.LOOP, Op.IF):  # a kernel of its own (stores land anywhere; a loop)
        return 0
    return n.rank


def reduce_mode(n: Node, outer: int) -> str:
    axes = n.arg[1]
    inner = range(outer, n.src[0].rank)
    if all(a in axes for a in inner):
        return "register"
    plan = gemm_plan(n)
    if plan is not None and outer <= plan.lead:
        return "tiled"
    if outer == 0 and tiled(n):
        return "tiled"
    last = n.src[0].rank - 1
    if last not in axes and n.dtype.name not in LOWP:
        return "memory"
    return "register"


def block_plan(rop: str, acc_dt: DType, extents: Sequence[Dim]) -> tuple[int, int] | None:
    """Where to cut the reduced loops (extents outermost first): (q, c) splits loop q into
    blocks of c iterations, the loops after q running whole inside a block; None when the
    reduction is not a float sum or provably fits in one block."""
    if rop != "add" or not acc_dt.is_float or not extents or 0 in extents:
        return None  # (an empty reduced loop: nothing to block; fuzz seed 1002684 divided by it)
    inner, q = 1, len(extents)
    while q > 0 and isinstance(extents[q - 1], int) and inner * extents[q - 1] <= BLOCK:
        inner *= extents[q - 1]
        q -= 1
    if q == 0:
        return None
    return q - 1, max(1, BLOCK // inner)


@dataclass(frozen=True)
class ReducePlan:
    """How one REDUCE stage inside `outer` shared loops runs: recorded on its schedule stage,
    read by the lowering (which decides nothing about it)."""
    mode: str  # "register" | "memory" | "tiled"
    gemm: GemmPlan | None = None  # tiled: as a packed GEMM
    tile: tuple[int, int] = (0, 0)  # tiled without a GEMM plan: the register micro-tile mr x nr
    block: tuple[int, int] | None = None  # register: where its reduced loops are cut (block_plan)


def plan_reduce(n: Node, outer: int, packable: bool = True) -> ReducePlan:
    """The plan of REDUCE n inside `outer` shared loops, for the current target. `packable`: the
    packed GEMM may read the operands of n's MUL -- not when another kernel stores that MUL (its
    operands may be values no buffer holds, such as a register reduction of that kernel)."""
    mode = reduce_mode(n, outer)  # never "memory" or "tiled" for f16/bf16: their accumulator is f32
    src, (rop, axes) = n.src[0], n.arg
    if mode == "tiled":
        g = gemm_plan(n)
        if g is not None and outer <= g.lead and packable:
            return ReducePlan(mode, gemm=g)
        nonred = [a for a in range(src.rank) if a not in axes]
        return ReducePlan(mode, tile=(6 if len(nonred) >= 2 else 1, max(16, 256 // n.dtype.itemsize)))
    if mode == "register":
        acc_dt = T.f32 if n.dtype.name in LOWP else n.dtype
        if on_gpu() and gemm_shaped(n):
            return ReducePlan(mode)  # a GPU's tiled GEMM sums K in registers, as cuBLAS does
        return ReducePlan(mode, block=block_plan(rop, acc_dt, [src.shape[a] for a in range(outer, src.rank)
                                                                if a in axes]))
    return ReducePlan(mode)
