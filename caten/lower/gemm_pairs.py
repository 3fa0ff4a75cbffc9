"""Panels of a GEMM over 16-bit pairs (`GemmPlan.pairs`, caten.schedule.pairs): each panel
value is an i32 word holding two consecutive k values (k even in the low half), zero-padded
past the valid rows/columns and, for an odd K block, past its last k. The tiles then sum the
pairs' products (`TileMM.pairs`)."""

from __future__ import annotations

from collections.abc import Callable

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.loopir import X
from caten.lower.panels import panel_rows


def word(lo: X, hi: X | None) -> X:
    """Two 16-bit values (in i32) as one i32 word, `lo` in the low half; None: a zero high half."""
    low = L.alu(Op.AND, T.i32, lo, L.const(0xFFFF, T.i32))
    return low if hi is None else L.alu(Op.ADD, T.i32, low, L.alu(Op.MUL, T.i32, hi, L.const(65536, T.i32)))


def halves(klen: X) -> tuple[X, X]:
    """(whole pairs, 1 if a half pair ends the block else 0) of a K block of klen."""
    return X.make("idiv", L.IDX, (klen, L.const(2))), X.make("imod", L.IDX, (klen, L.const(2)))


def panel(newvar: Callable[[str, int], X], value: Callable[[X, X], X], buf: str, base: X, width: int,
          valid: X, klen: X, tag: str, half: int) -> list:
    """One panel of `width` lanes (`valid` of them read, the rest zeros) by klen k values as
    words: `value(k, lane)` is the operand at k (a K-block offset) and a lane; `base` the panel's
    first word, each pair a row of `width` words; `half`: the pairs of a whole K block."""
    pairs, odd = halves(klen)
    kp, kt = newvar(f"{tag}p", half), newvar(f"{tag}t", 1)
    c, z, tc, tz = (newvar(f"{tag}{x}", width) for x in ("c", "z", "tc", "tz"))
    two = L.imul(kp, L.const(2))
    row = L.iadd(base, L.imul(kp, L.const(width)))
    pair = word(value(two, c), value(L.iadd(two, L.const(1)), c))
    body = panel_rows(c, z, valid, width, L.Store(buf, L.iadd(row, c), pair),
                      L.Store(buf, L.iadd(row, L.iadd(valid, z)), L.const(0, T.i32)))
    last = L.iadd(base, L.imul(pairs, L.const(width)))
    lone = word(value(L.isub(klen, L.const(1)), tc), None)
    tail = panel_rows(tc, tz, valid, width, L.Store(buf, L.iadd(last, tc), lone),
                      L.Store(buf, L.iadd(last, L.iadd(valid, tz)), L.const(0, T.i32)))
    return [L.Loop(kp.arg, pairs, body), L.Loop(kt.arg, odd, tail, "cold")]
