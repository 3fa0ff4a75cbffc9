"""Lowerings of ATen core-IR calls to caten library expressions (for `caten.from_torch`)."""

from __future__ import annotations

from typing import Any

from caten.errors import Error
from caten.frontends.text import cast_float8, lit
from caten.frontends.torch.context import Ctx, affine, aten, dtype_of, lst, meta

_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
        "ge": ">=", "maximum": "max", "minimum": "min",
        "bitwise_and": "and", "bitwise_or": "or", "remainder": "mod", "pow": "pow"}
_UN = {"relu": "relu", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
       "sigmoid": "sigmoid", "neg": "neg", "abs": "abs", "sin": "sin", "cos": "cos", "erf": "erf",
       "bitwise_not": "not", "reciprocal": "recip", "sign": "sign", "clone": "contiguous",
       "alias": "contiguous", "silu": "silu"}


def _rank(node: Any) -> int:
    return meta(node).dim()


def _is_tensor(a: Any) -> bool:
    return hasattr(a, "meta") and hasattr(meta(a), "dtype")


def _as(c: Ctx, a: Any, dt: str) -> str:
    """Operand `a` in dtype `dt`: a tensor cast where it differs, a Python number as a literal."""
    if _is_tensor(a):
        x = c.arg(a)
        return x if dtype_of(meta(a).dtype) == dt else f"(cast {x} {dt})"
    return c.arg(a) if hasattr(a, "meta") else lit(a, dt)  # a size (dim text) or a number


def _binary(op: str):
    """torch's type promotion first (an i64 tensor times 0.5 is f32, an f64 tensor times an f32
    0-d one f64; true division of integers is float), then the op in that dtype."""
    def h(c: Ctx, n: Any) -> str:
        import torch

        a, b = n.args[0], n.args[1]
        ct = torch.result_type(*(meta(v) if _is_tensor(v) else (1 if hasattr(v, "meta") else v) for v in (a, b)))
        if op == "/":
            if n.kwargs.get("rounding_mode"):
                raise Error(f"torch.export node `{n.name}`: division with rounding_mode is not supported")
            ct = meta(n).dtype
        dt = dtype_of(ct)
        x, y = _as(c, a, dt), _as(c, b, dt)
        alpha = n.kwargs.get("alpha", 1)
        if alpha != 1:
            y = f"(* {y} {lit(alpha, dt)})"
        return f"({op} {x} {y})"
    return h


def _truth(c: Ctx, a: Any) -> str:
    """An operand of a logical op as bool: nonzero is true (nan too), as torch reads it."""
    if not hasattr(a, "meta"):
        return "true" if a else "false"
    x = c.arg(a)
    dt = dtype_of(meta(a).dtype)
    return x if dt == "bool" else f"(!= {x} {lit(0, dt)})"


def _logical(op: str):
    def h(c: Ctx, n: Any) -> str:
        return f"({op} {_truth(c, n.args[0])} {_truth(c, n.args[1])})"
    return h


aten("aten.logical_not.default")(lambda c, n: f"(not {_truth(c, n.args[0])})")
for _k, _v in (("logical_and", "and"), ("logical_or", "or")):
    for _ov in ("Tensor", "Scalar", "default", "Tensor_Scalar", "Tensor_Tensor"):
        aten(f"aten.{_k}.{_ov}")(_logical(_v))
for _k, _v in _BIN.items():
    for _ov in ("Tensor", "Scalar", "default", "Tensor_Scalar", "Tensor_Tensor"):
        aten(f"aten.{_k}.{_ov}")(_binary(_v))

# ATen's CPU kernel for a float tensor to these constant powers is this formula, not pow (x**3 is
# x*x*x, rounded twice): the same rounding, and no transcendental where the GELU of GPT-2 has one
_POW_FORMULA = {2: "(* {x} {x})", 3: "(* (* {x} {x}) {x})", -1: "(recip {x})", -2: "(recip (* {x} {x}))"}
_pow_general = _binary("pow")


@aten("aten.pow.Tensor_Scalar")
def _pow_scalar(c: Ctx, n: Any) -> str:
    x, e = n.args[0], n.args[1]
    formula = _POW_FORMULA.get(e) if isinstance(e, (int, float)) and not isinstance(e, bool) else None
    # (f32 and f64 only: for f16 ATen computes in f32 and rounds once, which the general pow matches)
    if formula is None or not _is_tensor(x) or dtype_of(meta(x).dtype) not in ("f32", "f64"):
        return _pow_general(c, n)
    return formula.format(x=c.arg(x))


def _unary(op: str):
    def h(c: Ctx, n: Any) -> str:
        return f"({op} {c.arg(n.args[0])})"
    return h


for _k, _v in _UN.items():
    aten(f"aten.{_k}.default")(_unary(_v))


@aten("aten.gelu.default")
def _gelu(c: Ctx, n: Any) -> str:
    x = c.arg(n.args[0])
    if n.kwargs.get("approximate", "none") == "tanh":
        return f"(* 0.5 {x} (+ 1 (tanh (* 0.7978845608028654 (+ {x} (* 0.044715 {x} {x} {x}))))))"
    return f"(gelu {x})"


@aten("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(c: Ctx, n: Any) -> str:
    return f"(reshape {c.arg(n.args[0])} {lst(c.arg(n.args[1]))})"


@aten("aten.permute.default")
def _permute(c: Ctx, n: Any) -> str:
    return f"(permute {c.arg(n.args[0])} {lst(n.args[1])})"


@aten("aten.t.default")
def _t(c: Ctx, n: Any) -> str:
    return f"(transpose {c.arg(n.args[0])})" if _rank(n.args[0]) == 2 else c.arg(n.args[0])


@aten("aten.transpose.int")
def _transpose(c: Ctx, n: Any) -> str:
    r = _rank(n.args[0])
    perm = list(range(r))
    a, b = n.args[1] % r, n.args[2] % r
    perm[a], perm[b] = perm[b], perm[a]
    return f"(permute {c.arg(n.args[0])} {lst(perm)})"


@aten("aten.expand.default")
def _expand(c: Ctx, n: Any) -> str:
    x = n.args[0]
    shape = c.arg(n.args[1])
    r, src = len(shape), list(meta(x).shape)
    out = [c.dim(src[i - (r - len(src))]) if str(d) == "-1" else d for i, d in enumerate(shape)]
    return f"(expand {c.arg(x)} {lst(out)})"


@aten("aten.unsqueeze.default")
def _unsqueeze(c: Ctx, n: Any) -> str:
    return f"(unsqueeze {c.arg(n.args[0])} {n.args[1]})"


@aten("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(c: Ctx, n: Any) -> str:
    shape = list(meta(n.args[0]).shape)
    dims = n.args[1] if len(n.args) > 1 else list(range(len(shape)))
    dims = [dims] if isinstance(dims, int) else list(dims)
    dims = [d % len(shape) for d in dims if shape[d] == 1]
    return f"(squeeze {c.arg(n.args[0])} {lst(dims)})" if dims else f"(contiguous {c.arg(n.args[0])})"


@aten("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(c: Ctx, n: Any) -> str:
    return f"(matmul {c.arg(n.args[0])} {c.arg(n.args[1])})"


@aten("aten.addmm.default")
def _addmm(c: Ctx, n: Any) -> str:
    b, x, w = (c.arg(a) for a in n.args[:3])
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    dt = dtype_of(meta(n).dtype)
    prod = f"(matmul {x} {w})" if alpha == 1 else f"(* (matmul {x} {w}) {lit(alpha, dt)})"
    if beta == 0:  # torch ignores the input then (its nan and inf too)
        return prod
    return f"(+ {prod} {b if beta == 1 else f'(* {b} {lit(beta, dt)})'})"


@aten("aten.convolution.default")
def _conv(c: Ctx, n: Any) -> str:
    x, w, b, stride, padding, dilation, transposed, _, groups = n.args
    if transposed or _rank(x) != 4:
        from caten.frontends.torch.aten_nn_core import convolution

        return convolution(c, n)
    bias = f" {c.arg(b)}" if b is not None else ""
    return (f"(conv2d {c.arg(x)} {c.arg(w)}{bias} :stride {lst(stride)} :padding {lst(padding)} "
            f":dilation {lst(dilation)} :groups {groups})")


@aten("aten.max_pool2d_with_indices.default")
def _maxpool(c: Ctx, n: Any) -> list:
    args = list(n.args) + [None] * 6
    x, k, s, p, d, ceil = args[:6]
    if (d and any(v != 1 for v in d)) or ceil or any(u.args[1] == 1 and u.users for u in n.users):
        from caten.frontends.torch.aten_nn_core import max_pool2d  # dilation, ceil_mode, or the indices read

        return max_pool2d(c, n)
    s = s or k
    p = p or [0, 0]
    return [f"(max-pool2d {c.arg(x)} :kernel {lst(k)} :stride {lst(s)} :padding {lst(p)})", None]


@aten("aten.avg_pool2d.default")
def _avgpool(c: Ctx, n: Any) -> str:
    args = list(n.args) + [None] * 6
    x, k, s, p, ceil, include_pad, divisor = args[:7]
    if ceil or divisor is not None or (include_pad is False and p and any(p)):
        from caten.frontends.torch.aten_nn_core import avg_pool2d

        return avg_pool2d(c, n)
    return f"(avg-pool2d {c.arg(x)} :kernel {lst(k)} :stride {lst(s or k)} :padding {lst(p or [0, 0])})"


@aten("aten._softmax.default", "aten.softmax.int")
def _softmax(c: Ctx, n: Any) -> str:
    return f"(softmax {c.arg(n.args[0])} :axis {n.args[1]})"


@aten("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(c: Ctx, n: Any) -> str:
    return f"(log-softmax {c.arg(n.args[0])} :axis {n.args[1]})"


@aten("aten.native_layer_norm.default")
def _layer_norm(c: Ctx, n: Any) -> list:
    x, shape, w, b, eps = n.args
    r = _rank(x)
    axes = lst(range(r - len(shape), r))
    xv = c.arg(x)
    mu = c.emit(n.name + "_mean", f"(mean {xv} :axis {axes} :keepdims true)")
    d = c.emit(n.name + "_d", f"(- {xv} {mu})")
    rstd = c.emit(n.name + "_rstd", f"(rsqrt (+ (mean (* {d} {d}) :axis {axes} :keepdims true) {eps!r}))")
    y = affine(f"(* {d} {rstd})", c.arg(w) if w is not None else None, c.arg(b) if b is not None else None)
    return [y, mu, rstd]


def _reduce(f: str):
    def h(c: Ctx, n: Any) -> str:
        x = n.args[0]
        dims = n.args[1] if len(n.args) > 1 and n.args[1] is not None else None
        keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        axis = "nil" if dims is None or dims == [] else lst([dims] if isinstance(dims, int) else dims)
        if n.target.__name__.startswith("any"):
            v = _truth(c, x)  # any of numbers: whether one is nonzero
        elif f in ("sum", "prod", "mean"):  # torch's result dtype: i64 for bool and ints, or dtype=
            v = _as(c, x, dtype_of(meta(n).dtype))
        else:
            v = c.arg(x)
        return f"({f} {v} :axis {axis} :keepdims {'true' if keep else 'false'})"
    return h


for _name, _f in (("mean.dim", "mean"), ("sum.dim_IntList", "sum"), ("amax.default", "max"),
                  ("amin.default", "min"), ("any.dim", "max"), ("any.dims", "max"), ("argmax.default", "argmax"),
                  ("prod.dim_int", "prod")):
    aten(f"aten.{_name}")(_reduce(_f))


@aten("aten.where.self")
def _where(c: Ctx, n: Any) -> str:
    cond, a, b = n.args
    dt = dtype_of(meta(n).dtype)  # torch's promoted dtype of the two branches
    return f"(where {c.arg(cond)} {_as(c, a, dt)} {_as(c, b, dt)})"


def _dt_kw(n: Any, default: str) -> str:
    d = n.kwargs.get("dtype")
    return dtype_of(d) if d is not None else default


@aten("aten.full.default")
def _full(c: Ctx, n: Any) -> str:
    dt = dtype_of(meta(n).dtype)
    return f"(full {lst(c.arg(n.args[0]))} {lit(n.args[1], dt)} :dtype {dt})"


@aten("aten.scalar_tensor.default")
def _scalar_tensor(c: Ctx, n: Any) -> str:
    dt = dtype_of(meta(n).dtype)
    return f"(full [] {lit(n.args[0], dt)} :dtype {dt})"


@aten("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def _full_like(c: Ctx, n: Any) -> str:
    dt = dtype_of(meta(n).dtype)
    v = n.args[1] if len(n.args) > 1 else (0 if "zeros" in str(n.target) else 1)
    return f"(full (shape {c.arg(n.args[0])}) {lit(v, dt)} :dtype {dt})"


@aten("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(c: Ctx, n: Any) -> str:
    a = list(n.args)
    start, end, step = (0, a[0], 1) if len(a) == 1 else (a[0], a[1], a[2] if len(a) > 2 else 1)
    if not all(isinstance(v, (int, float)) and float(v).is_integer() for v in (start, end, step)):
        raise Error(f"torch.export node `{n.name}`: arange needs constant whole-number bounds")
    start, end, step = int(start), int(end), int(step)  # whole numbers: each value exact in any dtype
    cnt = max(0, -(-(end - start) // step))
    dt = dtype_of(meta(n).dtype)
    return f"(+ (* (arange {cnt} :dtype {dt}) {lit(step, dt)}) {lit(start, dt)})"


@aten("aten._to_copy.default")
def _to_copy(c: Ctx, n: Any) -> str:
    src, dst = dtype_of(meta(n.args[0]).dtype), dtype_of(meta(n).dtype)
    x = c.arg(n.args[0])
    if dst.startswith("f8"):  # torch saturates to e4m3fn only; the others overflow as ml_dtypes does
        return cast_float8(x, src, dst, dst == "f8e4m3")
    return f"(contiguous {x})" if src == dst else f"(cast {x} {dst})"


@aten("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(c: Ctx, n: Any) -> list:
    x, sizes = n.args[0], n.args[1]
    dim = (n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)) % _rank(x)
    total = meta(x).shape[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, total - i) for i in range(0, total, sizes)]
    out, off = [], 0
    for s in sizes:
        specs = " ".join(f"[0 {c.dim(d)} 1]" for d in meta(x).shape[:dim])
        out.append(f"(slice {c.arg(x)} {specs} [{off} {off + s} 1])")
        off += s
    return out


@aten("aten.slice.Tensor")
def _slice(c: Ctx, n: Any) -> str:
    x = n.args[0]
    a = list(n.args) + [None] * 5
    dim, start, end, step = (a[1] or 0) % _rank(x), a[2] or 0, a[3], a[4] or 1
    shape = meta(x).shape
    end = shape[dim] if end is None or (isinstance(end, int) and end > 2**62) else end
    specs = " ".join(f"[0 {c.dim(d)} 1]" for d in shape[:dim])
    return f"(slice {c.arg(x)} {specs} [{c.arg(start)} {c.arg(end)} {step}])"


@aten("aten.select.int")
def _select(c: Ctx, n: Any) -> str:
    x, dim, i = n.args
    r = _rank(x)
    dim %= r
    specs = " ".join(f"[0 {c.dim(d)} 1]" for d in meta(x).shape[:dim])
    i = i if i >= 0 else f"(+ {c.dim(meta(x).shape[dim])} {i})"
    return f"(squeeze (slice {c.arg(x)} {specs} [{i} (+ {i} 1) 1]) {dim})"


@aten("aten.cat.default")
def _cat(c: Ctx, n: Any) -> str:
    xs = [c.arg(x) for x in n.args[0]]
    dim = n.args[1] if len(n.args) > 1 else 0
    return f"(concat {' '.join(xs)} :axis {dim})"


@aten("aten.embedding.default")
def _embedding(c: Ctx, n: Any) -> str:
    return f"(take {c.arg(n.args[0])} {c.arg(n.args[1])} :axis 0)"


@aten("aten.sym_size.int")
def _sym_size(c: Ctx, n: Any) -> str:
    return c.dim(meta(n))


@aten("aten.triu.default", "aten.tril.default")
def _tri(c: Ctx, n: Any) -> str:
    f = "triu" if "triu" in str(n.target) else "tril"
    k = n.args[1] if len(n.args) > 1 else 0
    return f"({f} {c.arg(n.args[0])} :k {k})"


@aten("aten.clamp.default")
def _clamp(c: Ctx, n: Any) -> str:
    dt = dtype_of(meta(n).dtype)  # an integer tensor clamped to a float bound is float, as torch
    y = _as(c, n.args[0], dt)
    lo = n.args[1] if len(n.args) > 1 else None
    hi = n.args[2] if len(n.args) > 2 else None
    if lo is not None:
        y = f"(max {y} {_as(c, lo, dt)})"
    if hi is not None:
        y = f"(min {y} {_as(c, hi, dt)})"
    return y
