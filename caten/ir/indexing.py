"""The numerics of the ops that read or write at data-dependent places or reinterpret bits: BITCAST,
GATHER, SCATTER and SORT (their dtype rules and numpy references; the op table in caten.ir.ops holds
them with the rest of each op's facts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.ir import dtypes as T
from caten.ir.dtypes import DType, DTypeError


def _bitcast_dtype(ins: Sequence[DType], arg: Any) -> DType:
    """Same width only; a bool is a byte 0/1 (so it reinterprets as u8/i8, nothing reinterprets as it),
    and the 16-bit floats are refused: caten's registers may hold them widened (their bits are not
    the stored bits on every runtime), and so are the float8 ones."""
    src, dst = ins[0], arg
    if src == dst:
        return dst
    for d in (src, dst):
        if d in T.NARROW:
            raise DTypeError(f"BITCAST of {d.name} is not supported (floats narrower than f32 may be held widened)")
        if d in T.INT4:
            raise DTypeError(f"BITCAST of {d.name} is not supported (a 4-bit integer is held widened to i32)")
    if dst.is_bool and not src.is_bool:
        raise DTypeError("BITCAST to bool is not supported (a byte other than 0 or 1 is not a bool)")
    if max(src.bits, 8) != max(dst.bits, 8):
        raise DTypeError(f"BITCAST needs the same width: {src.name} has {src.bits} bits, {dst.name} {dst.bits}")
    return dst


def _bitcast_ref(x: np.ndarray, dt: DType) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x.astype(dt.np)
    return np.ascontiguousarray(x).reshape(-1).view(dt.np).reshape(x.shape)  # (a 0-d array has no view)


def _gather_dtype(ins: Sequence[DType], arg: Any) -> DType:
    if not ins[1].is_int:
        raise DTypeError(f"GATHER's index must be an integer tensor, not {ins[1].name}")
    return ins[0]


SCATTER_OPS = ("add", "mul", "max", "min", "set")


def _scatter_dtype(ins: Sequence[DType], arg: Any) -> DType:
    x, i, s = ins
    if not i.is_int:
        raise DTypeError(f"SCATTER's index must be an integer tensor, not {i.name}")
    if s != x:
        raise DTypeError(f"SCATTER's source must have the data's dtype {x.name}, not {s.name}")
    if arg[1] in ("add", "mul") and x.is_bool:
        raise DTypeError(f"SCATTER :op {arg[1]} needs a numeric tensor, not bool")
    return x


def _scatter_ref(ctx: Any, x: np.ndarray, i: np.ndarray, s: np.ndarray) -> np.ndarray:
    """x, then for every position p of i in row-major order y[p with :axis replaced by i[p]] =
    op(that, s[p]); an index outside [-n, n), or a position past x's other axes, is skipped."""
    ax, op = ctx.arg
    y = x.copy()
    n = x.shape[ax]
    ii = i.astype(np.int64)
    ii = np.where(ii < 0, ii + n, ii)
    ok = (ii >= 0) & (ii < n)
    pos = np.indices(i.shape).reshape(i.ndim, -1)
    for d in range(i.ndim):
        if d != ax:
            ok &= (pos[d] < x.shape[d]).reshape(i.shape)
    pos[ax] = ii.reshape(-1)
    keep = ok.reshape(-1)
    tgt = np.ravel_multi_index(tuple(p[keep] for p in pos), x.shape) if x.size else np.zeros(0, np.int64)
    src, flat = s.reshape(-1)[keep], y.reshape(-1)
    if op == "set":  # the last in row-major order wins
        last = len(tgt) - 1 - np.unique(tgt[::-1], return_index=True)[1]
        flat[tgt[last]] = src[last]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op]
        with np.errstate(all="ignore"):
            if x.dtype == np.bool_:
                ufunc = np.logical_or if op == "max" else np.logical_and
            ufunc.at(flat, tgt, src)
    return flat.reshape(x.shape)


def _sort_dtype(ins: Sequence[DType], arg: Any) -> DType:
    return T.i64


def _sort_ref(ctx: Any, x: np.ndarray) -> np.ndarray:
    """The stable order along the axis (ties keep their order; nan last ascending, first descending)."""
    ax, descending = ctx.arg
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if T.is_np_float(x.dtype):
        v = x.astype(np.float64)
        nan = np.isnan(v)
        v = np.where(nan, 0.0, v)
        return _lex(~nan, -v, ax) if descending else _lex(nan, v, ax)
    # NOT reverses the order of every integer dtype and of bool exactly
    return np.argsort(~x if descending else x, axis=ax, kind="stable").astype(np.int64)


def _lex(first: np.ndarray, then: np.ndarray, ax: int) -> np.ndarray:
    """The stable order by `first` (False before True), then by `then`, along ax."""
    o = np.argsort(then, axis=ax, kind="stable")
    f = np.take_along_axis(first, o, axis=ax)
    return np.take_along_axis(o, np.argsort(f, axis=ax, kind="stable"), axis=ax).astype(np.int64)


def _gather_ref(ctx: Any, x: np.ndarray, i: np.ndarray) -> np.ndarray:
    """x at the index along the axis; a negative index counts from the end; one outside [-n, n), or a
    position past x's other axes, reads 0."""
    ax, n = ctx.arg, x.shape[ctx.arg]
    ii = i.astype(np.int64)
    ii = np.where(ii < 0, ii + n, ii)
    ok = (ii >= 0) & (ii < n)
    if n == 0 or i.size == 0:
        return np.zeros(i.shape, x.dtype)
    fit = np.zeros(tuple(n if d == ax else m for d, m in enumerate(i.shape)), x.dtype)  # x on i's other axes
    common = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, fit.shape))
    fit[common] = x[common]
    return np.where(ok, np.take_along_axis(fit, np.where(ok, ii, 0), axis=ax), _zero_of(x.dtype)).astype(x.dtype)


def _zero_of(dt: np.dtype) -> Any:
    return False if dt == np.bool_ else 0
