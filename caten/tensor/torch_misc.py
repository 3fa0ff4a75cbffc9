"""torch's elementwise, conversion and selection habits on Tensor: `clamp(min=, max=)`,
`masked_fill`, `caten.where`, `to(dtype)`/`float()`..., `mm`/`bmm`, `eq`..., `gather`,
`masked_select`, `nonzero`, each the library's call (the in-place ones are in torch_inplace)."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state
from caten.tensor.lazy import dtype_name
from caten.tensor.promote import _promote, result_type
from caten.tensor.tensor import FLOATS, Tensor, _dt, apply
from caten.tensor.torch_elementwise import pair
from caten.tensor.torch_reduce import axes
from caten.tensor.torch_shape import _dim
from caten.tensor.torchnames import DTYPES, ArgError, torch_name

_CASTS = {"float": "f32", "double": "f64", "half": "f16", "bfloat16": "bf16", "int": "i32", "long": "i64",
          "short": "i16", "char": "i8", "byte": "u8", "bool": "bool"}


def _cast(t: Tensor, dt: str) -> Tensor:
    return t if t.dtype == dt else t.cast(dt)


def _tensor(x: Any, like: Tensor) -> Any:
    return Tensor(x, runtime=like.runtime) if isinstance(x, (np.ndarray, list)) else x


def _make_cast(name: str, dt: str) -> None:
    def cast(self: Tensor) -> Tensor:
        return _cast(self, dt)
    cast.__name__ = name
    torch_name(name, f"`(cast x {dt})`", "elementwise")(cast)


for _n, _d in _CASTS.items():
    _make_cast(_n, _d)


@torch_name("to", "`(cast x dtype)`; a device \"cpu\" keeps the runtime, a runtime's name moves the tensor",
            "elementwise", example="t.to(caten.float64)")
def to(self: Tensor, *args: Any, dtype: Any = None, device: Any = None, copy: bool = False,
       non_blocking: bool = False) -> Tensor:
    out = self
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.runtime
        elif _dtype_or_none(a) is not None:
            dtype = a
        elif isinstance(a, str):
            device = a
        else:
            raise ArgError(f"to(): cannot move a tensor to {a!r}", hint="t.to(caten.float64) or t.to('cpu')")
    if device is not None and str(device) not in ("cpu", out.runtime):
        out = Tensor(out.numpy(), runtime=str(device))
    if dtype is not None:
        out = _cast(out, _dt(dtype))
    return apply("contiguous", [out], {}) if copy and out is self else out


def _dtype_or_none(a: Any) -> Any:
    if type(a).__module__ == "torch":  # torch.float32, torch.float8_e4m3fn: by name, as Tensor(dtype=) takes them
        a = DTYPES.get(str(a).removeprefix("torch."), a)
    return dtype_name(a) if not isinstance(a, Tensor) else None


_TYPE_NAMES = {"f16": "HalfTensor", "bf16": "BFloat16Tensor", "f32": "FloatTensor", "f64": "DoubleTensor",
               "i8": "CharTensor", "u8": "ByteTensor", "i16": "ShortTensor", "i32": "IntTensor", "i64": "LongTensor",
               "bool": "BoolTensor"}


@torch_name("type", "no dtype: torch's type string (`torch.FloatTensor`...); a dtype: `(cast x dtype)`",
            "elementwise", example="t.type(caten.int32)")
def type_(self: Tensor, dtype: Any = None, non_blocking: bool = False) -> Any:
    if dtype is None:
        return "torch." + _TYPE_NAMES.get(str(self.dtype), f"{self.dtype}Tensor")
    return _cast(self, _dt(dtype))


@torch_name("type_as", "`(cast x (dtype other))`", "elementwise")
def type_as(self: Tensor, other: Tensor) -> Tensor:
    return _cast(self, other.dtype)


@torch_name("cpu", "the tensor itself", "elementwise")
def cpu(self: Tensor) -> Tensor:
    return self


@torch_name("device", "the tensor's runtime", "printing and reading", kind="property")
def device(self: Tensor) -> str:
    return self.runtime


@torch_name("clamp", "`(where (> y max) max y)` with `y = (where (< x min) min x)`: nan stays, "
            "the gradient passes where min <= x <= max", "elementwise", example="t.clamp(min=0.0)")
def clamp(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    if min is None and max is None:
        raise ArgError("clamp() needs min= or max= (or both)", hint="t.clamp(min=0.0, max=1.0)")
    min, max = _tensor(min, self), _tensor(max, self)
    bounds = [b for b in (min, max) if b is not None]
    tens = [self] + [b for b in bounds if isinstance(b, Tensor)]
    scalars = [b for b in bounds if not isinstance(b, Tensor)]
    dt = result_type(tens, scalars[0] if scalars else None)
    if len(scalars) == 2:
        dt = result_type(tens, max if isinstance(max, float) else min)
    x = _cast(self, dt)

    def lit(b: Any) -> Any:
        return _cast(b, dt) if isinstance(b, Tensor) else (float(b) if dt in FLOATS else int(b))
    if any(isinstance(b, Tensor) for b in bounds):
        # tensor bounds are torch's maximum then minimum: at a tie the gradient is split in halves
        y = maximum(x, lit(min)) if min is not None else x
        y = minimum(y, lit(max)) if max is not None else y
        return apply("where", [x != x, x, y], {})  # a nan x passes its gradient whole, as torch's
    # scalar bounds: the value at a bound is x itself (-0.0 stays), the gradient there 0 (torch
    # >= 2.14: it flows only strictly inside the bounds); nan passes through
    if min is not None:
        x = apply("where", [x < lit(min), lit(min), apply("where", [x > lit(min), x, x.detach()], {})], {})
    if max is not None:
        x = apply("where", [x > lit(max), lit(max), apply("where", [x < lit(max), x, x.detach()], {})], {})
    return x


@torch_name("clip", "`clamp`", "elementwise", example="t.clip(0.0, 1.0)")
def clip(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return clamp(self, min, max)


@torch_name("clamp_min", "`clamp(min=...)`", "elementwise")
def clamp_min(self: Tensor, min: Any) -> Tensor:  # noqa: A002
    return clamp(self, min=min)


@torch_name("clamp_max", "`clamp(max=...)`", "elementwise")
def clamp_max(self: Tensor, max: Any) -> Tensor:  # noqa: A002
    return clamp(self, max=max)


def _bool_mask(mask: Any, like: Tensor, what: str) -> Tensor:
    m = mask if isinstance(mask, Tensor) else Tensor(np.asarray(mask), runtime=like.runtime)
    if m.dtype != "bool":
        raise Error(f"{what}: the mask must be a bool tensor, this one is {m.dtype}", hint="compare: t > 0")
    return m


@torch_name("where", "`(where cond x y)`, x and y at torch's common dtype", "elementwise", kind="function",
            example="caten.where(t > 0, t, 0.0)")
def where(condition: Any, input: Any = None, other: Any = None) -> Tensor:  # noqa: A002
    if input is None or other is None:
        raise ArgError("where(condition) alone gives indices whose number depends on the values, which a lazy "
                       "tensor cannot have", hint="caten.where(cond, x, y)")
    first = next((v for v in (input, other, condition) if isinstance(v, Tensor)), None)
    if first is None:
        first = Tensor(np.asarray(input))
    c = _bool_mask(condition, first, "where")
    input, other = _tensor(input, first), _tensor(other, first)
    tens = [v for v in (input, other) if isinstance(v, Tensor)]
    scal = [v for v in (input, other) if not isinstance(v, Tensor)]
    if not tens:
        dt = "f32" if any(isinstance(v, float) for v in scal) else "i64"
    else:
        dt = result_type(tens, next((v for v in scal if isinstance(v, float)), scal[0] if scal else None))

    def arg(v: Any) -> Any:
        return _cast(v, dt) if isinstance(v, Tensor) else (float(v) if dt in FLOATS else v)
    out = apply("where", [c, arg(input), arg(other)], {})
    return out if tens else _cast(out, dt)


@torch_name("masked_fill", "`(where mask value x)`", "elementwise", example="t.masked_fill(t < 0, 0.0)")
def masked_fill(self: Tensor, mask: Any, value: Any) -> Tensor:
    m = _bool_mask(mask, self, "masked_fill")
    if isinstance(value, Tensor):
        if value.ndim:
            raise Error("masked_fill: the value must be a number or a 0-d tensor")
        value = _cast(value, self.dtype)
    else:
        value = float(value) if self.dtype in FLOATS else (bool(value) if self.dtype == "bool" else int(value))
    return apply("where", [m, value, self], {})


@torch_name("maximum", "`(max a b)` at the common dtype (nan propagates)", "elementwise")
def maximum(self: Tensor, other: Any) -> Tensor:
    a, b = _promote(self, other)
    return apply("max", [a, b], {})


@torch_name("minimum", "`(min a b)` at the common dtype (nan propagates)", "elementwise")
def minimum(self: Tensor, other: Any) -> Tensor:
    a, b = _promote(self, other)
    return apply("min", [a, b], {})


def _operator(name: str, dunder: str, what: str) -> None:
    def op(self: Tensor, other: Any) -> Tensor:
        out = getattr(self, dunder)(other)
        if out is NotImplemented:
            raise ArgError(f"{name}(): cannot combine a tensor with {type(other).__name__}")
        return out
    op.__name__ = name
    torch_name(name, what, "elementwise")(op)


for _n, _du, _w in [("eq", "__eq__", "`(= a b)`"), ("ne", "__ne__", "`(!= a b)`"), ("gt", "__gt__", "`(> a b)`"),
                    ("lt", "__lt__", "`(< a b)`"), ("ge", "__ge__", "`(>= a b)`"), ("le", "__le__", "`(<= a b)`"),
                    ("mul", "__mul__", "`(* a b)`"), ("multiply", "__mul__", "`(* a b)`"),
                    ("true_divide", "__truediv__", "`(/ a b)`, integers in f32"),
                    ("floor_divide", "__floordiv__", "`(idiv a b)`"), ("remainder", "__mod__", "`(remainder a b)`"),
                    ("pow", "__pow__", "`(pow a b)`; `x ** 2` is `(* x x)`"),
                    ("logical_and", "__and__", "`(and a b)`"), ("logical_or", "__or__", "`(or a b)`"),
                    ("logical_xor", "__xor__", "`(xor a b)`"), ("greater", "__gt__", "`(> a b)`"),
                    ("less", "__lt__", "`(< a b)`"), ("greater_equal", "__ge__", "`(>= a b)`"),
                    ("less_equal", "__le__", "`(<= a b)`"), ("not_equal", "__ne__", "`(!= a b)`")]:
    _operator(_n, _du, _w)


@torch_name("add", "`(+ a (* alpha b))`", "elementwise", example="t.add(u, alpha=2)")
def add(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return self + (other if alpha == 1 else other * alpha)


@torch_name("sub", "`(- a (* alpha b))`", "elementwise", example="t.sub(u, alpha=2)")
def sub(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return self - (other if alpha == 1 else other * alpha)


@torch_name("subtract", "`sub`", "elementwise", example="t.subtract(u, alpha=2)")
def subtract(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return sub(self, other, alpha=alpha)


@torch_name("div", "`(/ a b)`; rounding_mode 'trunc' is `(trunc (/ a b))` (C's integer division), 'floor' "
            "`(idiv a b)`", "elementwise", example="t.div(u, rounding_mode='floor')")
def div(self: Any, other: Any, *, rounding_mode: Any = None) -> Tensor:
    if rounding_mode is None:
        return self / other if isinstance(self, Tensor) else pair(self, other, "div")[0] / other
    if rounding_mode not in ("trunc", "floor"):
        raise Error(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    a, b = pair(self, other, "div")
    if rounding_mode == "floor":
        return apply("idiv", [a, b], {})
    if a.dtype in FLOATS:
        return apply("trunc", [a / b], {})
    if a.dtype == "bool":
        raise Error("div(rounding_mode='trunc') of bool tensors", hint="cast to an integer dtype")
    q, r = apply("idiv", [a, b], {}), apply("mod", [a, b], {})
    return apply("where", [(r != 0) & ((a < 0) != (b < 0)), q + 1, q], {})


@torch_name("divide", "`div`", "elementwise", example="t.divide(u, rounding_mode='trunc')")
def divide(self: Any, other: Any, *, rounding_mode: Any = None) -> Tensor:
    return div(self, other, rounding_mode=rounding_mode)


@torch_name("square", "`(* x x)`", "elementwise")
def square(self: Tensor) -> Tensor:
    return self * self


@torch_name("reciprocal", "`(recip x)`", "elementwise")
def reciprocal(self: Tensor) -> Tensor:
    return apply("recip", [self if self.dtype in FLOATS else self.cast("f32")], {})


@torch_name("logical_not", "`(not (!= x 0))`", "elementwise")
def logical_not(self: Tensor) -> Tensor:
    return apply("not", [self if self.dtype == "bool" else self != 0], {})


@torch_name("isnan", "`(!= x x)`", "elementwise")
def isnan(self: Tensor) -> Tensor:
    return self != self


@torch_name("isinf", "`(= (abs x) inf)`", "elementwise")
def isinf(self: Tensor) -> Tensor:
    return (apply("abs", [self], {}) == float("inf")) if self.dtype in FLOATS else self != self


@torch_name("isfinite", "`(< (abs x) inf)`: not nan, not infinite", "elementwise")
def isfinite(self: Tensor) -> Tensor:
    return (apply("abs", [self], {}) < float("inf")) if self.dtype in FLOATS else self == self


@torch_name("equal", "`(min (= a b))` read as a Python bool, False for different shapes", "elementwise")
def equal(self: Tensor, other: Tensor) -> bool:
    return self.shape == other.shape and bool(apply("min", [self == other], {}).item())


@torch_name("isclose", "`(<= (abs (- a b)) (+ atol (* rtol (abs b))))`, nan equal only with equal_nan",
            "elementwise", example="t.isclose(u, rtol=1e-5, atol=1e-8)")
def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    a, b = _promote(self, other)
    if a.dtype not in FLOATS:
        return a == b
    b = b if isinstance(b, Tensor) else Tensor(b, dtype=a.dtype, runtime=a.runtime)
    finite = (apply("abs", [a], {}) < float("inf")) & (apply("abs", [b], {}) < float("inf"))  # an inf: only itself
    close = (a == b) | (finite & (apply("abs", [a - b], {}) <= atol + rtol * apply("abs", [b], {})))
    return close | (isnan(a) & isnan(b)) if equal_nan else close


@torch_name("allclose", "`(min (isclose a b))` read as a Python bool", "elementwise",
            example="t.allclose(u, atol=1e-6)")
def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(apply("min", [isclose(self, other, rtol, atol, equal_nan)], {}).item())


@torch_name("is_floating_point", "whether the dtype is f16, bf16, f32, f64 or a float8", "elementwise")
def is_floating_point(self: Tensor) -> bool:
    return self.dtype in FLOATS


def _rank(name: str, t: Tensor, want: int) -> None:
    if t.ndim != want:
        raise Error(f"{name} expects tensors of rank {want}, got rank {t.ndim} (shape {list(t.shape)})",
                    hint="t.matmul(u) (or @) broadcasts batches")


@torch_name("mm", "`(matmul a b)` of two matrices", "elementwise", example="a.mm(b)")
def mm(self: Tensor, mat2: Tensor) -> Tensor:
    _rank("mm", self, 2)
    _rank("mm", mat2, 2)
    return self @ mat2


@torch_name("bmm", "`(matmul a b)` of two batches of matrices", "elementwise", example="a.bmm(b)")
def bmm(self: Tensor, mat2: Tensor) -> Tensor:
    _rank("bmm", self, 3)
    _rank("bmm", mat2, 3)
    return self @ mat2


@torch_name("mv", "`(matmul a v)` of a matrix and a vector", "elementwise")
def mv(self: Tensor, vec: Tensor) -> Tensor:
    _rank("mv", self, 2)
    _rank("mv", vec, 1)
    return self @ vec


@torch_name("dot", "`(matmul a b)` of two vectors", "elementwise")
def dot(self: Tensor, other: Tensor) -> Tensor:
    _rank("dot", self, 1)
    _rank("dot", other, 1)
    return self @ other


@torch_name("outer", "`(* (reshape a [n 1]) b)`", "elementwise")
def outer(self: Tensor, vec2: Tensor) -> Tensor:
    _rank("outer", self, 1)
    _rank("outer", vec2, 1)
    return self.reshape(-1, 1) * vec2


@torch_name("gather", "`(take-along-axis (slice x ...) index :axis dim)`", "indexing",
            example="t.gather(1, idx)")
def gather(self: Tensor, dim: int, index: Any) -> Tensor:
    idx = index if isinstance(index, Tensor) else Tensor(np.asarray(index), runtime=self.runtime)
    d = _dim(self, dim)
    if idx.ndim != self.ndim or any(i > n for j, (i, n) in enumerate(zip(idx.shape, self.shape)) if j != d):
        raise Error(f"gather: an index of shape {list(idx.shape)} for a tensor of shape {list(self.shape)}",
                    hint="the index has the tensor's rank and is no larger along the other dims")
    x = self
    if any(i != n for j, (i, n) in enumerate(zip(idx.shape, self.shape)) if j != d):
        x = apply("slice", [self] + [[0, n if j == d else i, 1] for j, (i, n) in
                                     enumerate(zip(idx.shape, self.shape))], {})
    return apply("take-along-axis", [x, idx], {"axis": d})


@torch_name("index_select", "`(take x index :axis dim)`", "indexing", example="t.index_select(0, idx)")
def index_select(self: Tensor, dim: int, index: Any) -> Tensor:
    idx = index if isinstance(index, Tensor) else Tensor(np.asarray(index, dtype=np.int64), runtime=self.runtime)
    if idx.ndim > 1:
        raise Error("index_select: the index must be a vector")
    return apply("take", [self, idx.reshape(-1)], {"axis": _dim(self, dim)})


@torch_name("masked_select", "`(take (reshape x [-1]) positions)`, the mask computed first: the result's "
            "length depends on it (not inside caten.jit)", "indexing", example="t.masked_select(t > 0)")
def masked_select(self: Tensor, mask: Any) -> Tensor:
    m = _bool_mask(mask, self, "masked_select")
    shape = list(np.broadcast_shapes(self.shape, m.shape))
    x = self.expand(*shape) if tuple(shape) != self.shape else self
    m = m.expand(*shape) if tuple(shape) != m.shape else m
    return x.reshape(-1)[m.reshape(-1)]


@torch_name("nonzero", "the positions of nonzero elements, computed now (their number depends on the values; "
            "not inside caten.jit)", "indexing", example="t.nonzero()")
def nonzero(self: Tensor, *, as_tuple: bool = False) -> Any:
    if state.trace() is not None:
        raise Error("nonzero() inside caten.jit: the result's shape depends on the values")
    v = np.asarray(self.numpy())
    pos = np.nonzero(v.reshape(1) if v.ndim == 0 else v)  # torch's 0-d: one element, no coordinate
    if as_tuple:
        return tuple(Tensor(p.astype(np.int64), runtime=self.runtime) for p in pos)
    rows = np.stack(pos, axis=1)[:, :self.ndim].astype(np.int64)
    return Tensor(rows.reshape(len(pos[0]), self.ndim), runtime=self.runtime)


@torch_name("argwhere", "`nonzero()`", "indexing")
def argwhere(self: Tensor) -> Tensor:
    return nonzero(self)


@torch_name("count_nonzero", "`(sum (cast (!= x 0) i64) :axis dim)`", "reduction", example="t.count_nonzero(dim=0)")
def count_nonzero(self: Tensor, dim: Any = None) -> Tensor:
    nz = (self if self.dtype == "bool" else self != 0).cast("i64")
    return apply("sum", [nz], {"axis": axes(self, dim), "keepdims": False})


@torch_name("addmm", "`(+ (* beta input) (* alpha (matmul m1 m2)))`", "elementwise", kind="function",
            example="caten.addmm(b, x, w)")
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    prod = mat1 @ mat2
    prod = prod if alpha == 1 else prod * alpha
    if beta == 0:  # torch ignores the input then (a nan or inf in it does not reach the result)
        shape = np.broadcast_shapes(tuple(input.shape), tuple(prod.shape))
        return prod.expand(*shape) if tuple(prod.shape) != shape else prod
    return (input if beta == 1 else input * beta) + prod


@torch_name("is_tensor", "whether it is a caten.Tensor", "elementwise", kind="function")
def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


@torch_name("unique", "the sorted distinct values (and inverse, counts), computed now on the host: their number "
            "depends on the values (not inside caten.jit; no gradient, as torch's)", "indexing",
            example="t.unique()")
def unique(self: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: Any = None) -> Any:
    if state.trace() is not None:
        raise Error("unique() inside caten.jit: the result's shape depends on the values")
    if dim is not None:
        raise Error("unique(dim=...) is not supported", hint="t.unique() of the flattened tensor")
    vals, inv, counts = np.unique(np.asarray(self.numpy()), return_inverse=True, return_counts=True)
    out = [Tensor(vals, runtime=self.runtime)]
    if return_inverse:
        out.append(Tensor(inv.reshape(self.shape).astype(np.int64), runtime=self.runtime))
    if return_counts:
        out.append(Tensor(counts.astype(np.int64), runtime=self.runtime))
    return out[0] if len(out) == 1 else tuple(out)
