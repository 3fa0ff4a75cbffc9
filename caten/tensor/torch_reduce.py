"""torch's reductions on Tensor: `dim`/`keepdim` (or the library's `axis`/`keepdims`), torch's
result dtypes (integer and bool sums are i64), `max(dim)` as (values, indices), and the ones the
library lacks (var, std, logsumexp, norm, all, any) written with library calls, as torch defines
them: var divides by N - correction, logsumexp shifts by the max unless it is infinite."""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.promote import _promote
from caten.tensor.tensor import FLOATS, Tensor, _dt, apply
from caten.tensor.torchnames import ArgError, torch_name

# torch.return_types.max/min: a tuple with .values and .indices
ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def axes(t: Tensor, dim: Any) -> Any:
    """torch's `dim` (None, an int or a sequence of ints) as the library's `:axis`."""
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        out = [_one(t, d) for d in dim]
        if len(set(out)) != len(out):
            raise Error(f"dim {list(dim)} names an axis twice")
        return out
    return _one(t, dim)


def _one(t: Tensor, d: Any) -> int:
    if isinstance(d, bool) or not isinstance(d, int) and not hasattr(d, "__index__"):
        raise ArgError(f"dim must be an int or a tuple of ints, not {type(d).__name__}",
                       hint="e.g. t.sum(dim=1) or t.sum(dim=(0, 1))")
    d = int(d)
    n = max(t.ndim, 1)
    if not -n <= d < n:
        raise Error(f"dim {d} is out of range for a tensor of rank {t.ndim} (expected {-n}..{n - 1})")
    return d % n if t.ndim else 0


def _count(t: Tensor, ax: Any) -> int:
    if ax is None:
        return t.numel()
    return math.prod(t.shape[a] for a in (ax if isinstance(ax, list) else [ax])) if t.ndim else 1


def _at(t: Tensor, dtype: Any) -> Tensor:
    return t if dtype is None or _dt(dtype) == t.dtype else t.cast(_dt(dtype))


def _wide(t: Tensor, dtype: Any) -> Tensor:
    """torch's accumulation dtype: bools and integers become i64 unless a dtype is given."""
    if dtype is None and t.dtype not in FLOATS:
        return t.cast("i64") if t.dtype != "i64" else t
    return _at(t, dtype)


def _float_only(name: str, t: Tensor) -> None:
    if t.dtype not in FLOATS:
        raise Error(f"{name}() needs a floating-point tensor, this one is {t.dtype}",
                    hint=f"cast first: t.float().{name}(...)")


@torch_name("sum", "`(sum x :axis dim :keepdims keepdim)`; integers and bools sum as i64", "reduction",
            example="t.sum(dim=1)")
def sum_(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return apply("sum", [_wide(self, dtype)], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


@torch_name("prod", "`(prod x :axis dim :keepdims keepdim)`; integers and bools as i64", "reduction",
            example="t.prod(dim=1)")
def prod(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return apply("prod", [_wide(self, dtype)], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


@torch_name("mean", "`(mean x :axis dim :keepdims keepdim)`; floats only, as torch", "reduction",
            example="t.mean(dim=1, keepdim=True)")
def mean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    x = _at(self, dtype)
    _float_only("mean", x)
    return apply("mean", [x], {"axis": axes(x, dim), "keepdims": bool(keepdim)})


def _extreme(name: str, t: Tensor, dim: Any, keepdim: bool) -> Any:
    if isinstance(dim, (Tensor, float, np.ndarray)):  # torch.max(a, b), or a float bound: elementwise
        return apply(name, list(_promote(t, dim)), {})
    if t.numel() == 0:
        raise Error(f"{name}() of an empty tensor has no value")
    if dim is None:
        if keepdim:
            raise ArgError(f"{name}(keepdim=True) needs a dim", hint=f"t.{name}(dim=0, keepdim=True)")
        return apply(name, [t], {})
    if isinstance(dim, (list, tuple)):
        raise ArgError(f"{name}(dim) takes one dim and gives (values, indices)",
                       hint=f"for several dims use t.a{name}(dim=(0, 1))")
    ax = axes(t, dim)
    idx = apply("arg" + name, [t], {"axis": ax, "keepdims": True})
    # the value at the index picked, so the gradient goes to that element alone, as torch's
    vals = apply("take-along-axis", [t, idx], {"axis": ax})
    if not keepdim and t.ndim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return ValuesIndices(vals, idx)


@torch_name("max", "no dim: `(max x)`; with dim: (values, indices) from `argmax` and `take-along-axis`; "
            "a tensor: elementwise `(max a b)`", "reduction", example="t.max(dim=1).values")
def max_(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme("max", self, dim, keepdim)


@torch_name("min", "as `max`, with `min` and `argmin`", "reduction", example="t.min(dim=1).values")
def min_(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    return _extreme("min", self, dim, keepdim)


@torch_name("amax", "`(max x :axis dim :keepdims keepdim)`", "reduction", example="t.amax(dim=1)")
def amax(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return apply("max", [self], {"axis": axes(self, dim) if dim != () else None, "keepdims": bool(keepdim)})


@torch_name("amin", "`(min x :axis dim :keepdims keepdim)`", "reduction", example="t.amin(dim=1)")
def amin(self: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    return apply("min", [self], {"axis": axes(self, dim) if dim != () else None, "keepdims": bool(keepdim)})


@torch_name("argmax", "`(argmax x :axis dim :keepdims keepdim)`: the first maximum (a nan wins)", "reduction",
            example="t.argmax(dim=1)")
def argmax(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return apply("argmax", [self], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


@torch_name("argmin", "`(argmin x :axis dim :keepdims keepdim)`", "reduction", example="t.argmin(dim=1)")
def argmin(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return apply("argmin", [self], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


def _correction(unbiased: Any, correction: Any) -> float:
    if unbiased is not None and correction is not None:
        raise ArgError("give unbiased= or correction=, not both", hint="t.var(dim=1, correction=0)")
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


@torch_name("var", "`(/ (sum (* d d) :axis dim) (- N correction))` with `d = (- x (mean x :axis dim))`; "
            "`unbiased=False` is `correction=0`", "reduction", example="t.var(dim=1, correction=0)")
def var(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    if isinstance(dim, bool):  # torch's var(unbiased) overload
        dim, unbiased = None, dim
    _float_only("var", self)
    ax = axes(self, dim)
    c = _correction(unbiased, correction)
    d = self - apply("mean", [self], {"axis": ax, "keepdims": True})
    s = apply("sum", [d * d], {"axis": ax, "keepdims": bool(keepdim)})
    return s / max(0.0, _count(self, ax) - c)


@torch_name("std", "`(sqrt var)` with `var`'s dims and correction", "reduction",
            example="t.std(dim=1, unbiased=False)")
def std(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    return apply("sqrt", [var(self, dim, unbiased, keepdim, correction=correction)], {})


@torch_name("logsumexp", "`(+ (log (sum (exp (- x m)) :axis dim)) m)`, m the max (0 where infinite), "
            "held constant", "reduction", example="t.logsumexp(dim=1)")
def logsumexp(self: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    x = self if self.dtype in FLOATS else self.cast("f32")
    ax = axes(x, dim)
    m = apply("max", [x], {"axis": ax, "keepdims": True}).detach()
    m = apply("where", [apply("abs", [m], {}) == float("inf"), 0.0, m], {})
    s = apply("sum", [apply("exp", [x - m], {})], {"axis": ax, "keepdims": bool(keepdim)})
    mk = m if keepdim else m.reshape(list(s.shape))
    return apply("log", [s], {}) + mk


def _implicit(name: str, t: Tensor, dim: Any) -> Any:
    """No dim: the last, where torch's implicit dim (0 for rank 0, 1, 3; else 1) is the same axis."""
    if dim is not None:
        return dim
    if t.ndim > 2:
        raise ArgError(f"{name}() without dim on a tensor of rank {t.ndim}: torch's implicit dim would be "
                       f"{0 if t.ndim == 3 else 1}, the library's -1", hint=f"give it: t.{name}(dim=-1)")
    return -1


@torch_name("softmax", "`(softmax x :axis dim)`; no dim: -1 up to rank 2 (torch's implicit dim there)",
            "reduction", example="t.softmax(dim=-1)")
def softmax(self: Tensor, dim: Any = None, dtype: Any = None) -> Tensor:
    x = _at(self, dtype)
    _float_only("softmax", x)
    return apply("softmax", [x], {"axis": axes(x, _implicit("softmax", x, dim))})


@torch_name("log_softmax", "`(log-softmax x :axis dim)`; no dim as `softmax`", "reduction",
            example="t.log_softmax(dim=-1)")
def log_softmax(self: Tensor, dim: Any = None, dtype: Any = None) -> Tensor:
    x = _at(self, dtype)
    _float_only("log_softmax", x)
    return apply("log-softmax", [x], {"axis": axes(x, _implicit("log_softmax", x, dim))})


def _truth(t: Tensor) -> Tensor:
    return t if t.dtype == "bool" else t != 0


@torch_name("all", "`(min (!= x 0) :axis dim)` on bools", "reduction", example="t.all(dim=1)")
def all_(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    if self.numel() == 0 and dim is None:
        return Tensor(True, runtime=self.runtime)
    return apply("min", [_truth(self)], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


@torch_name("any", "`(max (!= x 0) :axis dim)` on bools", "reduction", example="t.any(dim=1)")
def any_(self: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    if self.numel() == 0 and dim is None:
        return Tensor(False, runtime=self.runtime)
    return apply("max", [_truth(self)], {"axis": axes(self, dim), "keepdims": bool(keepdim)})


@torch_name("norm", "p=2/'fro': `(sqrt (sum (* x x)))`; p=1: `(sum (abs x))`; p=inf/-inf: `(max (abs x))`/`min`; "
            "else `(pow (sum (pow (abs x) p)) (/ 1 p))`", "reduction", example="t.norm(p=2, dim=1)")
def norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    x = _at(self, dtype)
    _float_only("norm", x)
    ax, kd = axes(x, dim), {"keepdims": bool(keepdim)}
    if p in ("fro", 2, 2.0):
        return apply("sqrt", [apply("sum", [x * x], {"axis": ax, **kd})], {})
    if isinstance(p, str) or isinstance(p, bool) or not isinstance(p, (int, float)):
        raise Error(f"norm(p={p!r}) is not supported", hint="p is 'fro', a number, inf or -inf")
    a = apply("abs", [x], {})
    if p == 1:
        return apply("sum", [a], {"axis": ax, **kd})
    if p == float("inf"):
        return apply("max", [a], {"axis": ax, **kd})
    if p == float("-inf"):
        return apply("min", [a], {"axis": ax, **kd})
    if p == 0:
        return apply("sum", [(a != 0).cast(x.dtype)], {"axis": ax, **kd})
    return apply("sum", [a ** float(p)], {"axis": ax, **kd}) ** (1.0 / float(p))


@torch_name("cumsum", "`(cumsum x :axis dim)`; integers and bools as i64", "reduction", example="t.cumsum(dim=0)")
def cumsum(self: Tensor, dim: Any, *, dtype: Any = None) -> Tensor:
    if self.ndim == 0:  # a scalar is its own running sum (dim 0 or -1, as torch)
        axes(self.reshape(1), dim)
        return _wide(self, dtype).clone()
    return apply("cumsum", [_wide(self, dtype)], {"axis": axes(self, dim)})


@torch_name("cumprod", "`(cumprod x :axis dim)`; integers and bools as i64", "reduction",
            example="t.cumprod(dim=0)")
def cumprod(self: Tensor, dim: Any, *, dtype: Any = None) -> Tensor:
    if self.ndim == 0:  # a scalar is its own running product (dim 0 or -1, as torch)
        axes(self.reshape(1), dim)
        return _wide(self, dtype).clone()
    return apply("cumprod", [_wide(self, dtype)], {"axis": axes(self, dim)})


@torch_name("std_mean", "(`std`, `mean`) over the same dims", "reduction", kind="function",
            example="caten.std_mean(t, dim=1)")
def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    return (std(input, dim, unbiased, keepdim, correction=correction),
            apply("mean", [input], {"axis": axes(input, dim), "keepdims": bool(keepdim)}))


@torch_name("var_mean", "(`var`, `mean`) over the same dims", "reduction", kind="function",
            example="caten.var_mean(t, dim=1)")
def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    return (var(input, dim, unbiased, keepdim, correction=correction),
            apply("mean", [input], {"axis": axes(input, dim), "keepdims": bool(keepdim)}))


AminMax = namedtuple("AminMax", ["min", "max"])


@torch_name("aminmax", "(`amin`, `amax`) over one dim or all", "reduction", example="t.aminmax(dim=0)")
def aminmax(self: Tensor, *, dim: Any = None, keepdim: bool = False) -> AminMax:
    if self.numel() == 0:
        raise Error("aminmax() of an empty tensor has no value")
    if isinstance(dim, (list, tuple)):
        raise ArgError("aminmax(dim=) takes one dim", hint="t.aminmax(dim=0)")
    ax = None if dim is None else axes(self, dim)
    kw = {"axis": ax, "keepdims": bool(keepdim)}
    lo, hi = apply("min", [self], kw), apply("max", [self], kw)
    if ax is None and keepdim:  # torch keeps every dim as 1
        lo, hi = lo.reshape([1] * self.ndim), hi.reshape([1] * self.ndim)
    return AminMax(lo, hi)


def _nan_free(t: Tensor) -> Tensor:
    return apply("where", [t != t, 0.0, t], {}) if t.dtype in FLOATS else t


@torch_name("nansum", "`sum` with nan as 0: `(sum (where (!= x x) 0 x))`", "reduction", example="t.nansum(dim=1)")
def nansum(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    return sum_(_nan_free(self), dim, keepdim, dtype=dtype)


@torch_name("nanmean", "`(/ (nansum x) (count of non-nan))`: floats only, nan where all are nan",
            "reduction", example="t.nanmean(dim=1)")
def nanmean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    x = _at(self, dtype)
    _float_only("nanmean", x)
    n = sum_((x == x).cast(x.dtype), dim, keepdim)
    return nansum(x, dim, keepdim) / n


@torch_name("cov", "`(/ (matmul (* d w) (permute d [1 0])) (- sum(w) correction...))`, d = x less its weighted "
            "mean over the observations (columns), as torch.cov", "reduction", example="t.cov(correction=1)")
def cov(self: Tensor, *, correction: int = 1, fweights: Any = None, aweights: Any = None) -> Tensor:
    if self.ndim > 2:
        raise Error(f"cov: input has rank {self.ndim}, expected at most 2 (variables x observations)")
    x = self.reshape(1, -1) if self.ndim < 2 else self
    if x.dtype not in FLOATS:
        x = x.cast("f32")
    nobs = x.shape[1]
    w = None
    for name, wt in (("fweights", fweights), ("aweights", aweights)):
        if wt is None:
            continue
        if wt.ndim > 1 or wt.numel() != nobs:
            raise Error(f"cov: {name} must be 1-D with one weight per observation ({nobs}), got {list(wt.shape)}")
        if name == "fweights" and wt.dtype in FLOATS:
            raise Error("cov: fweights must be integers")
        if state.trace() is None and wt.numel() and float(np.asarray(wt.numpy()).min()) < 0:
            raise Error(f"cov: {name} cannot be negative (as torch's)")
        wt = wt.reshape(-1).cast(x.dtype)
        w = wt if w is None else w * wt
    if w is None:
        wsum = Tensor(np.asarray(nobs, np.int64), runtime=x.runtime).cast(x.dtype)
        avg = apply("mean", [x], {"axis": 1, "keepdims": True})
    else:
        wsum = sum_(w)
        avg = sum_(x * w, 1, True) / wsum
    if w is None or correction == 0:
        norm = wsum - correction
    elif aweights is None:
        norm = wsum - correction
    else:
        norm = wsum - correction * sum_(w * aweights.reshape(-1).cast(x.dtype)) / wsum
    norm = apply("where", [norm < 0, 0.0, norm], {})  # torch clamps a negative divisor to 0
    d = x - avg
    dw = d if w is None else d * w
    c = (dw @ d.transpose(0, 1)) / norm
    return c.reshape([]) if self.ndim < 2 else c


@torch_name("corrcoef", "`cov` divided by the outer product of its diagonal's roots, clipped to [-1, 1]",
            "reduction", example="t.corrcoef()")
def corrcoef(self: Tensor) -> Tensor:
    c = cov(self)
    if c.ndim == 0:
        return c / c
    n = c.shape[0]
    d = apply("take", [c.reshape(-1), Tensor(np.arange(n, dtype=np.int64) * (n + 1), runtime=c.runtime)], {"axis": 0})
    s = apply("sqrt", [d], {})
    c = c / s.reshape(-1, 1) / s.reshape(1, -1)
    return apply("where", [c < -1.0, -1.0, apply("where", [c > 1.0, 1.0, c], {})], {})
