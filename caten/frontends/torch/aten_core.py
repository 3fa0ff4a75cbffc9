"""Core ATen ops lowered through `caten.Tensor` (see `bridge`): elementwise math, reductions,
sorting, scatters and shape ops whose torch semantics the Tensor library already implements.
A Tensor method another part of caten has not added yet leaves its op unsupported (listed
by `caten import --list-ops` and the importer's one Error), never half-lowered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caten.frontends.text import lit
from caten.frontends.torch.bridge import via
from caten.frontends.torch.context import ATEN, aten, dtype_of, meta


def _tensor_has(name: str) -> Callable[[], bool]:
    def ok() -> bool:
        from caten.tensor.tensor import Tensor

        return hasattr(Tensor, name)
    return ok


def method(target: str, name: str, *, nargs: int = 99, kw: tuple[str, ...] = ()) -> None:
    """aten `target`(x, a, b, ...) as x.name(a, b, ...) (the first `nargs` positional args after x;
    `kw` the keyword arguments passed on)."""

    def fn(b: Any, n: Any) -> Any:
        args = [b.t(a) for a in n.args[1:1 + nargs]]
        kws = {k: b.t(n.kwargs[k]) for k in kw if k in n.kwargs}
        out = getattr(b.t(n.args[0]), name)(*args, **kws)
        return list(out) if isinstance(out, tuple) else out

    lower = via(fn)
    lower.available = _tensor_has(name)  # type: ignore[attr-defined]
    aten(target)(lower)


for _op in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "expm1", "log10", "log1p",
            "log2", "ceil", "floor", "trunc", "isinf", "isnan", "exp2", "erfc", "erfinv", "lgamma", "digamma",
            "frac", "sgn", "signbit", "isfinite", "logit", "i0", "deg2rad", "rad2deg", "hardswish", "hardsigmoid",
            "mish", "softplus", "relu6", "log_sigmoid"):
    method(f"aten.{_op}.default", _op)
for _op, _name in (("atan2", "atan2"), ("bitwise_xor", "bitwise_xor"), ("fmod", "fmod"), ("hypot", "hypot"),
                   ("copysign", "copysign"), ("bitwise_left_shift", "bitwise_left_shift"),
                   ("bitwise_right_shift", "bitwise_right_shift"), ("nextafter", "nextafter"),
                   ("floor_divide", "floor_divide"), ("xlogy", "xlogy"), ("fmax", "fmax"), ("fmin", "fmin")):
    for _ov in ("Tensor", "Scalar", "default"):
        method(f"aten.{_op}.{_ov}", _name)
method("aten.logical_xor.default", "logical_xor")
method("aten.atan2.out", "atan2", nargs=1)  # the out= form: its value is the functional one
method("aten.round.default", "round")
method("aten.round.decimals", "round", kw=("decimals",))
method("aten.div.Tensor_mode", "div", nargs=1, kw=("rounding_mode",))
method("aten.div.Scalar_mode", "div", nargs=1, kw=("rounding_mode",))
method("aten.clamp.Tensor", "clamp")
method("aten.repeat.default", "repeat")
method("aten.index_select.default", "index_select")
method("aten.argmin.default", "argmin")
method("aten.max.dim", "max")
method("aten.min.dim", "min")
method("aten.max.default", "max")
method("aten.min.default", "min")
method("aten.any.default", "any")
method("aten.all.default", "all")
method("aten.all.dim", "all")
method("aten.all.dims", "all")
method("aten.mean.default", "mean", nargs=0, kw=("dtype",))
method("aten.sum.default", "sum", nargs=0, kw=("dtype",))
method("aten.prod.default", "prod", nargs=0, kw=("dtype",))
method("aten.var.correction", "var", nargs=1, kw=("correction", "keepdim"))
method("aten.var.dim", "var")
method("aten.std.correction", "std", nargs=1, kw=("correction", "keepdim"))
method("aten.cumprod.default", "cumprod", kw=("dtype",))
method("aten.logcumsumexp.default", "logcumsumexp")
method("aten.cummax.default", "cummax")
method("aten.cummin.default", "cummin")
method("aten.scatter.src", "scatter")
method("aten.scatter.value", "scatter")
method("aten.scatter.reduce", "scatter", nargs=3, kw=("reduce",))
method("aten.scatter_add.default", "scatter_add")
method("aten.scatter_reduce.two", "scatter_reduce", nargs=4, kw=("include_self",))
method("aten.index_add.default", "index_add", kw=("alpha",))
method("aten.index_fill.int_Scalar", "index_fill")
method("aten.index_copy.default", "index_copy")
method("aten.masked_fill.Scalar", "masked_fill")
method("aten.masked_fill.Tensor", "masked_fill")
method("aten.searchsorted.Tensor", "searchsorted", nargs=1, kw=("out_int32", "right", "side", "sorter"))
method("aten.bucketize.Tensor", "bucketize", nargs=1, kw=("out_int32", "right"))
method("aten.roll.default", "roll")
method("aten.logsumexp.default", "logsumexp")
method("aten.linalg_vector_norm.default", "norm", nargs=0)


@aten("aten.diagonal.default")
@via
def _diagonal(b: Any, n: Any) -> Any:
    """The offset-th diagonal of the (dim1, dim2) planes, as the last axis (torch's layout): the two
    axes moved last and merged, then the diagonal's flat positions taken."""
    import numpy as np

    from caten.tensor.tensor import Tensor

    x = b.t(n.args[0])
    a = list(n.args) + [0, 0, 1][len(n.args) - 1:]
    off, d1, d2 = a[1], a[2] % x.ndim, a[3] % x.ndim
    rest = [i for i in range(x.ndim) if i not in (d1, d2)]
    r, c = x.shape[d1], x.shape[d2]
    k = max(0, min(r, c - off) if off >= 0 else min(r + off, c))
    rows = np.arange(k) + max(0, -off)
    pos = Tensor((rows * c + rows + off).astype(np.int64))
    y = x.permute(rest + [d1, d2]).reshape(*[x.shape[i] for i in rest], r * c)
    return y.index_select(-1, pos)


@aten("aten.index_put.default")
@via
def _index_put(b: Any, n: Any) -> Any:
    """x[indices] = values (or +=): index tensors after whole axes (None) are moved to the front,
    where Tensor.index_put takes them, and the values' index dims with them (torch places those
    where the first index was when the indexed axes are consecutive, first otherwise)."""
    import numpy as np

    x, indices, values = b.t(n.args[0]), list(n.args[1]), b.t(n.args[2])
    acc = n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False)
    ks = [k for k, t in enumerate(indices) if t is not None]
    if ks == [0] and meta(indices[0]).dtype == torch_bool() and values.numel() == 1:
        from caten.tensor.torch_misc import where  # x[mask] = v: a where, no positions needed

        m = b.t(indices[0])
        m = m.reshape(*m.shape, *[1] * (x.ndim - m.ndim))
        v = values.reshape(()).to(x.dtype)
        return where(m, x + v if acc else v, x)
    if len(ks) == 1 and meta(indices[ks[0]]).dtype != torch_bool() and meta(indices[ks[0]]).dim() == 1 and ks[0]:
        # one vector of positions along an inner axis (a KV cache's x[:, :, pos] = k): index_copy
        # along it, so that the scatter writes the tensor itself, not a permuted copy of it
        from caten.tensor.torch_misc import where

        d, i = ks[0], b.t(indices[ks[0]]).cast("i64")
        i = where(i < 0, i + x.shape[d], i)
        full = list(x.shape[:d]) + [i.shape[0]] + list(x.shape[d + 1:])
        v = values.cast(x.dtype) if values.dtype != x.dtype else values
        v = v.expand(*full) if list(v.shape) != full else v
        return x.index_add(d, i, v) if acc else x.index_copy(d, i, v)
    if ks == list(range(len(ks))):
        return x.index_put(tuple(b.t(t) for t in indices[:len(ks)]), values, acc)
    idx = [b.t(indices[k]) for k in ks]
    others = [k for k in range(x.ndim) if k not in ks]
    perm = ks + others
    if ks == list(range(ks[0], ks[0] + len(ks))):  # consecutive: the index dims sit at ks[0] in values
        bshape = list(np.broadcast_shapes(*[tuple(t.shape) for t in idx]))
        k0, nb = ks[0], len(bshape)
        full = list(x.shape[:k0]) + bshape + list(x.shape[k0 + len(ks):])
        v = values.expand(*full) if list(values.shape) != full else values
        values = v.permute(list(range(k0, k0 + nb)) + list(range(k0)) + list(range(k0 + nb, len(full))))
    y = x.permute(perm).index_put(tuple(idx), values, acc)
    return y.permute([perm.index(k) for k in range(x.ndim)])


@aten("aten.masked_scatter.default")
@via
def _masked_scatter(b: Any, n: Any) -> Any:
    """torch.masked_scatter: the k-th True position (row-major) takes source.flatten()[k]; k is the
    running count of the mask, so no value needs to be known while importing."""
    from caten.tensor.torch_misc import where

    x, m, src = b.t(n.args[0]), b.t(n.args[1]), b.t(n.args[2])
    shape = list(meta(n).shape)
    mb = m.expand(*shape) if list(m.shape) != shape else m
    k = (mb.reshape(-1).to("i64").cumsum(0) - 1).clamp(0, None)
    flat = src.reshape(-1)
    vals = flat.index_select(0, k.clamp(None, max(flat.shape[0] - 1, 0))).reshape(*shape)
    return where(mb, vals, x.expand(*shape) if list(x.shape) != shape else x)


def _place(x: Any, src: Any, dim: int, positions: list[int]) -> Any:
    """x with x[.., positions[k], ..] (on `dim`) = src[.., k, ..]: a where over a constant mask,
    src gathered by a constant map (the slice is known while importing, its values are not)."""
    import numpy as np

    from caten.tensor.tensor import Tensor
    from caten.tensor.torch_misc import where

    size = x.shape[dim]
    mask, kmap = np.zeros(size, bool), np.zeros(size, np.int64)
    mask[positions], kmap[positions] = True, np.arange(len(positions))
    view = [1] * x.ndim
    view[dim] = size
    if not positions:
        return x.contiguous()
    return where(Tensor(mask).reshape(*view), src.to(x.dtype).index_select(dim, Tensor(kmap)), x)


@aten("aten.slice_scatter.default")
@via
def _slice_scatter(b: Any, n: Any) -> Any:
    """x with x[.., start:end:step, ..] (on `dim`) replaced by src."""
    x, src = b.t(n.args[0]), b.t(n.args[1])
    a = list(n.args) + [None] * 5
    dim = (a[2] if a[2] is not None else n.kwargs.get("dim", 0)) % x.ndim
    start = a[3] if a[3] is not None else n.kwargs.get("start")
    end = a[4] if a[4] is not None else n.kwargs.get("end")
    step = a[5] if a[5] is not None else n.kwargs.get("step", 1)
    return _place(x, src, dim, list(range(x.shape[dim]))[slice(start, end, step)])


@aten("aten.select_scatter.default")
@via
def _select_scatter(b: Any, n: Any) -> Any:
    """x with x[.., index, ..] (on `dim`) replaced by src."""
    x, src, dim, index = b.t(n.args[0]), b.t(n.args[1]), n.args[2], n.args[3]
    dim %= x.ndim
    return _place(x, src.unsqueeze(dim), dim, [index % x.shape[dim]])


@aten("aten.copy.default")
@via
def _copy(b: Any, n: Any) -> Any:
    """src broadcast to the destination's shape, in its dtype (the destination's values unread)."""
    x, src = b.t(n.args[0]), b.t(n.args[1])
    from caten.tensor.tensor import Tensor

    s = src if isinstance(src, Tensor) else Tensor(src).to(x.dtype)
    return s.to(x.dtype).expand(*x.shape).contiguous()


@aten("aten.fill.Scalar")
def _fill(c: Any, n: Any) -> str:
    dt = dtype_of(meta(n).dtype)
    return f"(full (shape {c.arg(n.args[0])}) {lit(n.args[1], dt)} :dtype {dt})"


def torch_bool() -> Any:
    import torch

    return torch.bool


def available(target: str) -> bool:
    """Whether the importer can lower `target` now (a Tensor method it needs may be missing)."""
    fn = ATEN.get(target)
    return fn is not None and getattr(fn, "available", lambda: True)()

