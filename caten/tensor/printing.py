"""`print(t)` as torch prints: `tensor([[1., 2.], [3., 4.]])`, realizing the tensor.

torch's rules (torch/_tensor_str.py, default print options): 4 decimals, or scientific when the
nonzero finite magnitudes span more than 1000x, exceed 1e8 or fall below 1e-4; floats that are
all integers print as `1.`; every element padded to one width, rows wrapped at 80 columns; over
1000 elements, 3 items each end around `...`. The dtype is named unless it is f32, i64 or bool
(as `caten.float64`: caten has the same names), then `requires_grad=True`. Also `np.asarray(t)`
(`__array__`) and `format(t, ".2f")` of a one-element tensor.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.tensor import FLOATS, Tensor
from caten.tensor.torchnames import DTYPES

TORCH_DTYPES = {v: k for k, v in DTYPES.items()}
PRECISION, THRESHOLD, EDGE, WIDTH = 4, 1000, 3, 80


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool):
        self.floating, self.int_mode, self.sci, self.width = floating, True, False, 1
        flat = values.reshape(-1)
        if not floating:
            self.width = max([len(str(v)) for v in flat.tolist()] + [1])
            return
        nz = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if nz.size == 0:
            return
        a = np.abs(nz)
        lo, hi = float(a.min()), float(a.max())
        self.int_mode = bool((nz == np.ceil(nz)).all())
        if self.int_mode:
            self.sci = hi / lo > 1000.0 or hi > 1.0e8
            fmt = (lambda v: f"{v:.{PRECISION}e}") if self.sci else (lambda v: f"{v:.0f}.")
        else:
            self.sci = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
            fmt = (lambda v: f"{v:.{PRECISION}e}") if self.sci else (lambda v: f"{v:.{PRECISION}f}")
        self.width = max(len(fmt(v)) for v in nz.tolist())

    def format(self, v: Any) -> str:
        if not self.floating:
            s = str(v)
        elif self.sci:
            s = f"{v:{self.width}.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRECISION}f}"
        return " " * (self.width - len(s)) + s


def _summary(a: np.ndarray) -> np.ndarray:
    """The elements torch's formatter sees when it summarizes: EDGE items at each end of each dim."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGE:
        a = np.concatenate([a[:EDGE], a[-EDGE:]])
    return np.stack([_summary(x) for x in a]) if a.ndim > 1 else a


def _vector(a: np.ndarray, indent: int, summarize: bool, f: _Formatter) -> str:
    per_line = max(1, int(math.floor((WIDTH - indent) / (f.width + 2))))
    if summarize and a.shape[0] > 2 * EDGE:
        data = [f.format(v) for v in a[:EDGE].tolist()] + [" ..."] + [f.format(v) for v in a[-EDGE:].tolist()]
    else:
        data = [f.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a: np.ndarray, indent: int, summarize: bool, f: _Formatter) -> str:
    if a.ndim == 0:
        return f.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarize, f)
    n = a.shape[0]
    rows = list(range(EDGE)) + [-1] + list(range(n - EDGE, n)) if summarize and n > 2 * EDGE else list(range(n))
    parts = ["..." if i < 0 else _nested(a[i], indent + 1, summarize, f) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def text(t: Tensor) -> str:
    """torch's `repr` of the tensor's value (computed now, unless inside a trace)."""
    suffixes = []
    if state.trace() is not None:
        body = f"<traced {t.dtype}{list(t.shape)}>"
    elif t.numel() == 0:
        body = "[]"
        if t.ndim != 1:
            suffixes.append(f"size={tuple(t.shape)}")
    else:
        try:
            v = t.numpy()
        except Error as e:  # a placeholder of a trace read after it: say so, a repr must not raise
            return f"tensor(<{t.dtype}{list(t.shape)}: {e.message}>)"
        if t.dtype in ("f16", "bf16") or t.dtype.startswith("f8"):
            v = v.astype(np.float32)
        summarize = v.size > THRESHOLD
        f = _Formatter(_summary(v) if summarize else v, t.dtype in FLOATS)
        body = _nested(v, len("tensor("), summarize, f)
    if t.dtype not in ("f32", "i64", "bool") or (t.numel() == 0 and t.dtype != "f32"):
        suffixes.append(f"dtype=caten.{TORCH_DTYPES[t.dtype]}")
    if t.requires_grad:
        suffixes.append("requires_grad=True")
    out = "tensor(" + body
    last = len(out) - out.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > WIDTH:
            out += ",\n" + " " * len("tensor(") + s
            last = len("tensor(") + len(s)
        else:
            out += ", " + s
            last += len(s) + 2
    return out + ")"


def array(t: Tensor, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """numpy's `__array__`: the value (read-only unless copied), cast to `dtype` if given;
    copy=False is refused where a cast needs a copy, as numpy 2 asks."""
    v = t.numpy()
    if dtype is not None and np.dtype(dtype) != v.dtype:
        if copy is False:
            raise ValueError(f"a {t.dtype} tensor as {np.dtype(dtype)} needs a copy, and copy=False was asked")
        return v.astype(dtype)
    return np.array(v, copy=True) if copy else v


def format_(t: Tensor, spec: str) -> str:
    if not spec:
        return text(t)
    if t.numel() != 1:
        raise TypeError(f"format spec {spec!r} needs a one-element tensor, this one has shape {list(t.shape)}")
    return format(t.item(), spec)


def install() -> None:
    Tensor.__repr__ = Tensor.__str__ = text
    Tensor.__array__ = array
    Tensor.__format__ = format_
