"""torch's linear-algebra names (einsum, tensordot, kron, baddbmm/addbmm/addmv/addr, cross, cdist,
trapezoid, vander). Each is composed of library calls already on Tensor (reshape, permute, matmul,
where, sum), so values and gradients follow from theirs; nothing here has numerics of its own.
The layout names (meshgrid, diag_embed, tensor_split...) live in torch_layout.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.promote import result_type
from caten.tensor.tensor import Tensor, apply
from caten.tensor.torch_shape import _dim
from caten.tensor.torchnames import ArgError, torch_name

FLOATS = ("f16", "bf16", "f32", "f64")


def _const(a: np.ndarray, like: Tensor) -> Tensor:
    return Tensor(a, runtime=like.runtime)


def _zeros(shape: Sequence[int], dtype: str, like: Tensor) -> Tensor:
    return _const(np.zeros(tuple(shape), np_dtype(dtype)), like)


def _seq(args: Sequence[Any]) -> list[Any]:
    """torch's `f(a, b)` or `f([a, b])`."""
    return list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)


def _sum(t: Tensor, dims: Sequence[int]) -> Tensor:
    return apply("sum", [t], {"axis": list(dims), "keepdims": False}) if dims else t


# ---------------------------------------------------------------- einsum

def _letters(spec: str, ndim: int, what: str) -> list[str]:
    """An operand's subscripts, its ellipsis spelled as one symbol per broadcast dim ('0', '1', ...
    counted from the right, so operands with fewer such dims align as torch's)."""
    if spec.count("...") > 1:
        raise Error(f"einsum: {what} has more than one ellipsis")
    if "..." in spec:
        head, tail = spec.split("...")
        k = ndim - len(head) - len(tail)
        if k < 0:
            raise Error(f"einsum: {what} '{spec}' names more dims than the operand's {ndim}")
        out = list(head) + [str(k - 1 - i) for i in range(k)] + list(tail)
    else:
        out = list(spec)
    if len(out) != ndim:
        raise Error(f"einsum: {what} '{spec}' has {len(out)} subscripts for an operand of rank {ndim}",
                    hint="one letter per dim, or '...' for the rest")
    for c in out:
        if not (c.isdigit() or c.isalpha()):
            raise Error(f"einsum: invalid subscript {c!r} in '{spec}'", hint="subscripts are letters a-z, A-Z")
    return out


def _diagonal(t: Tensor, subs: list[str]) -> tuple[Tensor, list[str]]:
    """A letter repeated on one operand takes that operand's diagonal (torch's `ii->i`): the two dims
    moved last, flattened, and every (n+1)-th element taken, so any dtype is exact."""
    while len(set(subs)) != len(subs):
        c = next(c for c in subs if subs.count(c) > 1)
        i, j = [k for k, s in enumerate(subs) if s == c][:2]
        n = t.shape[i]
        if t.shape[j] != n:
            raise Error(f"einsum: subscript {c} is repeated over dims of sizes {n} and {t.shape[j]}")
        rest = [k for k in range(t.ndim) if k not in (i, j)]
        t = t.permute(*(rest + [i, j])).reshape([t.shape[k] for k in rest] + [n * n])
        t = apply("take", [t, _const(np.arange(n, dtype=np.int64) * (n + 1), t)], {"axis": t.ndim - 1})
        subs = [subs[k] for k in rest] + [c]
    return t, subs


@torch_name("einsum", "each operand `(permute (reshape x ...))` onto all subscripts, `(*)`, then `(sum ...)` "
            "over those not in the output; a repeated subscript takes the diagonal", "reduction", kind="function",
            example="caten.einsum('ij,jk->ik', a, b)")
def einsum(equation: str, *operands: Any) -> Tensor:
    ops = _seq(operands)
    if not ops or not all(isinstance(o, Tensor) for o in ops):
        raise ArgError("einsum(equation, *operands): operands are caten Tensors",
                       hint="caten.einsum('ij,jk->ik', a, b)")
    dts = {o.dtype for o in ops}
    if len(dts) > 1:
        raise Error(f"einsum: operands have different dtypes {sorted(dts)} (torch requires one)",
                    hint="cast them to one dtype first")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(ops):
        raise Error(f"einsum: '{equation}' names {len(specs)} operands, {len(ops)} were given")
    subs, ts, raw = [], [], []
    for n, (spec, t) in enumerate(zip(specs, ops)):
        raw.append(_letters(spec, t.ndim, f"operand {n}"))
        t2, s = _diagonal(t, list(raw[-1]))
        subs.append(s)
        ts.append(t2)
    ell = sorted({c for s in subs for c in s if c.isdigit()}, key=int, reverse=True)
    if arrow:
        out = _letters(rhs, len(rhs.replace("...", "")) + (len(ell) if "..." in rhs else 0), "the output")
        if len(set(out)) != len(out):
            raise Error(f"einsum: the output '{rhs}' names a subscript twice")
        missing = [c for c in out if not any(c in s for s in subs)]
        if missing:
            raise Error(f"einsum: output subscript {missing[0]} appears in no operand")
    else:
        once = sorted(c for c in {c for s in subs for c in s if not c.isdigit()}
                      if sum(s.count(c) for s in raw) == 1)
        out = ell + once
    every = out + sorted({c for s in subs for c in s} - set(out))
    size: dict[str, int] = {}
    for s, t in zip(subs, ts):
        for c, d in zip(s, t.shape):
            if size.get(c, 1) != 1 and d != 1 and size[c] != d:
                raise Error(f"einsum: subscript {c} has sizes {size[c]} and {d}")
            size[c] = d if size.get(c, 1) == 1 else size[c]
    summed = list(range(len(out), len(every)))
    if ops[0].dtype == "bool" and len(ops) > 1 and summed:
        raise Error("einsum: a contraction of bool tensors (torch's bmm has no bool)", hint="cast to an int dtype")
    prod = None
    for s, t in zip(subs, ts):
        order = sorted(range(len(s)), key=lambda k: every.index(s[k]))
        if order != list(range(len(s))):
            t = t.permute(*order)
        ps = [s[k] for k in order]
        t = t.reshape([t.shape[ps.index(c)] if c in ps else 1 for c in every])
        prod = t if prod is None else (prod & t if t.dtype == "bool" else prod * t)
    assert prod is not None
    if len(ops) == 1 and summed and prod.dtype not in FLOATS:
        prod = prod.cast("i64")  # one operand is torch's sum: integers and bools as i64
    return _sum(prod, summed)


# ---------------------------------------------------------------- products

@torch_name("tensordot", "`(reshape (matmul (reshape (permute a ...)) (reshape (permute b ...))) ...)` over "
            "the dims paired by dims", "reduction", kind="function", example="caten.tensordot(a, b, dims=1)")
def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    if isinstance(dims, Tensor):
        dims = np.asarray(dims.numpy()).tolist()
    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise Error(f"tensordot: dims={dims} is out of range for ranks {a.ndim} and {b.ndim}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([x] if isinstance(x, int) else list(x) for x in dims)
        da, db = [_dim(a, d) for d in da], [_dim(b, d) for d in db]
    if len(da) != len(db):
        raise Error(f"tensordot: dims pair {len(da)} dims of a with {len(db)} of b")
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise Error(f"tensordot: contracted dims differ in size: {a.shape[i]} (a dim {i}) vs "
                        f"{b.shape[j]} (b dim {j})")
    if a.dtype != b.dtype:
        raise Error(f"tensordot: operands have different dtypes {a.dtype}, {b.dtype} (torch requires one)")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    am = a.permute(*(fa + da)).reshape(math.prod(a.shape[d] for d in fa), k) if a.ndim else a.reshape(1, 1)
    bm = b.permute(*(db + fb)).reshape(k, math.prod(b.shape[d] for d in fb)) if b.ndim else b.reshape(1, 1)
    return (am @ bm).reshape([a.shape[d] for d in fa] + [b.shape[d] for d in fb])


@torch_name("kron", "`(reshape (* (reshape a [m 1 n 1]) (reshape b [1 p 1 q])) [m*p n*q])`, ranks padded",
            "elementwise", example="a.kron(b)")
def kron(self: Tensor, other: Tensor) -> Tensor:
    a, b = _promoted(self, other)
    r = max(a.ndim, b.ndim)
    sa, sb = [1] * (r - a.ndim) + list(a.shape), [1] * (r - b.ndim) + list(b.shape)
    x = a.reshape([v for s in sa for v in (s, 1)]) * b.reshape([v for s in sb for v in (1, s)])
    return x.reshape([p * q for p, q in zip(sa, sb)])


def _promoted(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Two tensors at torch's common dtype."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise ArgError("expected two caten Tensors")
    dt = result_type([a, b])
    return (a if a.dtype == dt else a.cast(dt)), (b if b.dtype == dt else b.cast(dt))


def _scaled(input: Tensor, prod: Tensor, beta: Any, alpha: Any) -> Tensor:  # noqa: A002
    """torch's `beta * input + alpha * prod`; beta=0 ignores input (its nan and inf too)."""
    p = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return p
    return (input if beta == 1 else input * beta) + p


def _rank(name: str, t: Tensor, want: int, what: str) -> None:
    if t.ndim != want:
        raise Error(f"{name}: {what} must be a {want}-D tensor, got rank {t.ndim}")


@torch_name("baddbmm", "`(+ (* beta input) (* alpha (matmul b1 b2)))` of batches", "elementwise",
            example="t.baddbmm(b1, b2, beta=0.5)")
def baddbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    _rank("baddbmm", batch1, 3, "batch1")
    _rank("baddbmm", batch2, 3, "batch2")
    return _scaled(self, batch1 @ batch2, beta, alpha)


@torch_name("addbmm", "`(+ (* beta input) (* alpha (sum (matmul b1 b2) :axis 0)))`", "elementwise",
            example="t.addbmm(b1, b2)")
def addbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    _rank("addbmm", batch1, 3, "batch1")
    _rank("addbmm", batch2, 3, "batch2")
    return _scaled(self, _sum(batch1 @ batch2, [0]), beta, alpha)


@torch_name("addmv", "`(+ (* beta input) (* alpha (matmul mat vec)))`", "elementwise", example="t.addmv(m, v)")
def addmv(self: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    _rank("addmv", mat, 2, "mat")
    _rank("addmv", vec, 1, "vec")
    return _scaled(self, mat @ vec, beta, alpha)


@torch_name("addr", "`(+ (* beta input) (* alpha (outer v1 v2)))`", "elementwise", example="t.addr(u, v)")
def addr(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    _rank("addr", vec1, 1, "vec1")
    _rank("addr", vec2, 1, "vec2")
    return _scaled(self, vec1.reshape(-1, 1) * vec2.reshape(1, -1), beta, alpha)


@torch_name("cross", "`(- (* a1 b2) (* a2 b1))`... of the size-3 dim (default: the first of size 3, as "
            "torch.cross; linalg_cross: -1)", "elementwise", example="a.cross(b, dim=1)")
def cross(self: Tensor, other: Tensor, dim: Any = None) -> Tensor:
    if self.dtype != other.dtype:
        raise Error(f"cross: operands have different dtypes {self.dtype}, {other.dtype} (torch requires one)",
                    hint="cast one first")
    a, b = self, other
    shape = list(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    a, b = a.expand(shape), b.expand(shape)
    if dim is None:
        dim = next((d for d, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise Error(f"cross: no dim of size 3 in shape {shape}", hint="give dim=")
    d = _dim(a, dim)
    if shape[d] != 3:
        raise Error(f"cross: dim {dim} has size {shape[d]}, not 3")
    x = [a.narrow(d, i, 1) for i in range(3)]
    y = [b.narrow(d, i, 1) for i in range(3)]
    parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
    return apply("concat", parts, {"axis": d})


@torch_name("linalg_cross", "torch.linalg.cross: `cross` with dim=-1", "elementwise", kind="function",
            example="caten.linalg_cross(a, b)")
def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    return cross(input, other, dim)


@torch_name("vander", "columns `x**(N-1) ... x**0` by repeated `(*)`, as torch's cumprod", "elementwise",
            kind="function", example="caten.vander(x, N=3)")
def vander(x: Tensor, N: Any = None, increasing: bool = False) -> Tensor:  # noqa: N803
    if x.ndim != 1:
        raise Error(f"vander: x must be a 1-D tensor, got rank {x.ndim}")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise Error(f"vander: N must be non-negative, got {n}")
    dt = x.dtype if x.dtype in FLOATS else "i64"
    v = x if x.dtype == dt else x.cast(dt)
    cols = [Tensor(np.ones(x.shape[0], np_dtype(dt)), runtime=x.runtime)] if n else []
    for _ in range(1, n):
        cols.append(cols[-1] * v)
    if not cols:
        return _zeros([x.shape[0], 0], dt, x)
    if not increasing:
        cols = cols[::-1]
    return apply("concat", [c.reshape(-1, 1) for c in cols], {"axis": 1})


@torch_name("trapezoid", "`(* dx (- (sum y) (/ (+ y0 yn) 2)))`; with x: `(sum (/ (* (diff x) (+ y[1:] y[:-1])) 2))`",
            "reduction", kind="function", example="caten.trapezoid(y, dx=0.5)")
def trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    if x is not None and dx is not None:
        raise ArgError("trapezoid: give x or dx, not both")
    d = _dim(y, dim)
    n = y.shape[d]
    yf = y if y.dtype in FLOATS else y.cast("f32")
    if n == 0:
        return _zeros([s for i, s in enumerate(y.shape) if i != d], yf.dtype, y)
    if x is None:
        step = 1 if dx is None else dx
        ends = yf.narrow(d, 0, 1) + yf.narrow(d, n - 1, 1)
        return (_sum(yf, [d]) - _sum(ends, [d]) * 0.5) * step
    xt = x if isinstance(x, Tensor) else Tensor(np.asarray(x), runtime=y.runtime)
    if xt.ndim == 1:
        view = [1] * y.ndim
        view[d] = xt.shape[0]
        xt = xt.reshape(view)
    diff = xt.narrow(d, 1, n - 1) - xt.narrow(d, 0, n - 1)
    return _sum(diff * (yf.narrow(d, 1, n - 1) + yf.narrow(d, 0, n - 1)) / 2.0, [d])


@torch_name("cdist", "pairwise p-norm distances of the rows `(- (reshape x1 ...) (reshape x2 ...))`; p=2 over 25 rows "
            "by torch's matmul formula", "reduction", kind="function", example="caten.cdist(a, b, p=2.0)")
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    if x1.ndim < 2 or x2.ndim < 2:
        raise Error("cdist: x1 and x2 are at least 2-D (..., rows, features)")
    if x1.shape[-1] != x2.shape[-1]:
        raise Error(f"cdist: x1 and x2 have different feature sizes {x1.shape[-1]} and {x2.shape[-1]}")
    if x1.dtype not in FLOATS or x2.dtype not in FLOATS:
        raise Error("cdist only supports floating-point dtypes")
    if p < 0:
        raise Error(f"cdist: p must be non-negative, got {p}")
    r1, r2 = x1.shape[-2], x2.shape[-2]
    mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist"
                     or compute_mode == "use_mm_for_euclid_dist_if_necessary" and (r1 > 25 or r2 > 25))
    if mm:
        return _euclid_mm(x1, x2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    a = apply("abs", [diff], {})
    if p == 0:
        # torch's `min(ceil(|d|), 1)`: a nan coordinate makes the count nan
        return _sum(apply("where", [a != a, a, (a != 0).cast(x1.dtype)], {}), [diff.ndim - 1])
    if p == math.inf:
        # torch's max starts at 0 and skips nan coordinates (its `a < b ? b : a`), so nan counts as 0
        a = apply("where", [a != a, _zeros([], a.dtype, a), a], {})
        return _max_ties(a) if x1.shape[-1] else _sum(a, [diff.ndim - 1])
    if p == 1:
        return _sum(a, [diff.ndim - 1])
    s = _sum(a * a if p == 2 else a ** p, [diff.ndim - 1])
    zero = s == 0  # torch's gradient at a zero distance is 0
    safe = apply("where", [zero, _zeros([], s.dtype, s) + 1, s], {})
    root = apply("sqrt", [safe], {}) if p == 2 else safe ** (1.0 / p)
    return apply("where", [zero, _zeros([], s.dtype, s), root], {})


def _max_ties(a: Tensor) -> Tensor:
    """The max over the last dim, with torch's cdist gradient for p=inf: every coordinate at the max
    gets the whole gradient (not a share of it). The value is the max itself; `(- s (detach s))`
    adds 0 and carries the gradient of s, the sum of the coordinates at the max."""
    ax = [a.ndim - 1]
    m = apply("max", [a], {"axis": ax, "keepdims": True}).detach()
    s = _sum(apply("where", [a.detach() == m, a, _zeros([], a.dtype, a)], {}), ax)
    m = m.squeeze(-1)
    return apply("where", [apply("abs", [m], {}) < math.inf, m + (s - s.detach()), m], {})


def _euclid_mm(x1: Tensor, x2: Tensor) -> Tensor:
    """torch's `_euclidean_dist`: `(sqrt (max (matmul [-2x1 |x1|^2 1] [x2 1 |x2|^2]^T) 1e-30))`."""
    n1 = _sum(x1 * x1, [x1.ndim - 1]).unsqueeze(-1)
    n2 = _sum(x2 * x2, [x2.ndim - 1]).unsqueeze(-1)
    o1 = Tensor(np.ones(n1.shape, np_dtype(x1.dtype)), runtime=x1.runtime)
    o2 = Tensor(np.ones(n2.shape, np_dtype(x2.dtype)), runtime=x2.runtime)
    a = apply("concat", [x1 * -2.0, n1, o1], {"axis": x1.ndim - 1})
    b = apply("concat", [x2, o2, n2], {"axis": x2.ndim - 1})
    r = a @ b.transpose(-1, -2)
    return apply("sqrt", [r.clamp_min(1e-30)], {})


__all__ = ["einsum", "tensordot", "kron", "baddbmm", "addbmm", "addmv", "addr", "cross", "linalg_cross",
           "vander", "trapezoid", "cdist"]

