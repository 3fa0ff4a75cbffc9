"""torch.nn.functional's pooling beyond 2-D max/avg: 1-D and 3-D max/avg (ceil_mode, dilation,
count_include_pad, divisor_override, return_indices), adaptive avg/max and lp pooling.

Every pool is one shape of computation: the windows are gathered by constant indices along each
pooled axis (`take`, whose gradient accumulates overlaps), laid side by side in a last axis, then
reduced. The indices and divisors are computed here, host-side, exactly as torch's index math, so
ceil_mode and padding need no special case in any renderer. A slot outside the input (padding, a
ceil_mode overhang, a short adaptive window) repeats the window's first real element: it changes
no max and no argmax (torch starts from that element), and a sum masks it to zero.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor, apply

__all__ = ["max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
           "lp_pool1d", "lp_pool2d", "lp_pool3d", "max_pool2d_with_indices", "max_pool1d_with_indices",
           "max_pool3d_with_indices", "max_unpool1d", "max_unpool2d", "max_unpool3d"]

FLOATS = ("f16", "bf16", "f32", "f64")


def tup(v: Any, n: int, what: str = "argument") -> list[int]:
    """torch's _single/_pair/_triple: an int repeated n times, or a sequence of n ints."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return [int(v[0])] * n
        if len(v) != n:
            raise Error(f"{what} {list(v)} must be a single int or {n} ints")
        return [int(e) for e in v]
    return [int(v)] * n


def opmath(x: Tensor) -> Tensor:
    """f16 and bf16 computed at f32 and rounded once at the end, as torch's CPU kernels (opmath_t)."""
    return x.cast("f32") if x.dtype in ("f16", "bf16") else x


def const(x: Tensor, a: np.ndarray, dtype: Any = None) -> Tensor:
    """A host-computed constant on x's runtime (at x's dtype unless told)."""
    return Tensor(np.asarray(a, dtype=np_dtype(x.dtype) if dtype is None else dtype), runtime=x.runtime)


def take_axis(x: Tensor, axis: int, idx: np.ndarray) -> Tensor:
    """x with `axis` replaced by the shape of the constant index array idx."""
    y = apply("take", [x, const(x, idx.reshape(-1), np.int64)], {"axis": axis})
    if idx.ndim == 1:
        return y
    return y.reshape(list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:]))


def windows(x: Tensor, pos: list[np.ndarray], valid: list[np.ndarray]) -> tuple[Tensor, np.ndarray, np.ndarray]:
    """The windows of the last len(pos) axes: pos[d] [L_d, K_d] are positions along axis d, each in
    range. Returns (x [..., L_1.., K_1*K_2*...], the window's flat input positions [L.., K], its mask)."""
    n = len(pos)
    lead = x.ndim - n
    y = x
    for d in range(n):  # axis lead + 2d holds L_d after the earlier axes were split in two
        y = take_axis(y, lead + 2 * d, pos[d])
    order = list(range(lead)) + [lead + 2 * d for d in range(n)] + [lead + 2 * d + 1 for d in range(n)]
    ls = [p.shape[0] for p in pos]
    ks = [p.shape[1] for p in pos]
    y = y.permute(*order).reshape(list(x.shape[:lead]) + ls + [int(np.prod(ks))])
    flat = np.zeros([1] * (2 * n), np.int64)
    mask = np.ones([1] * (2 * n), bool)
    stride = 1
    for d in reversed(range(n)):
        flat = flat + _spread(pos[d] * stride, n, d)
        mask = mask & _spread(valid[d], n, d)
        stride *= int(x.shape[lead + d])
    k = int(np.prod(ks))
    return y, np.broadcast_to(flat, ls + ks).reshape(ls + [k]), np.broadcast_to(mask, ls + ks).reshape(ls + [k])


def _spread(a: np.ndarray, n: int, d: int) -> np.ndarray:
    """a [L_d, K_d] placed at axes d and n + d of a rank-2n array."""
    shape = [1] * (2 * n)
    shape[d], shape[n + d] = a.shape
    return a.reshape(shape)


def _clamp_to_first(pos: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Positions outside the input replaced by the window's first real one."""
    first = np.where(ok.any(1), np.argmax(ok, 1), 0)
    return np.where(ok, pos, pos[np.arange(pos.shape[0]), first][:, None]).clip(0)


def _pool_len(n: int, k: int, s: int, p: int, d: int, ceil: bool, name: str) -> int:
    """torch's pooling_output_shape."""
    if s <= 0 or k <= 0 or d <= 0:
        raise Error(f"{name}: kernel, stride and dilation must be positive (got {k}, {s}, {d})")
    if p < 0 or p > k // 2:
        raise Error(f"{name}: pad should be at most half of the effective kernel size, got padding={p} "
                    f"for kernel_size={k}")
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    out = num // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    if out <= 0:
        raise Error(f"{name}: the output size is {out} for an input of size {n}", hint="a smaller kernel or padding")
    return out


def _window_axis(n: int, k: int, s: int, p: int, d: int, ceil: bool, name: str) -> tuple[np.ndarray, np.ndarray]:
    L = _pool_len(n, k, s, p, d, ceil, name)
    pos = np.arange(L)[:, None] * s - p + np.arange(k)[None, :] * d
    ok = (pos >= 0) & (pos < n)
    return _clamp_to_first(pos, ok), ok


def _spatial(name: str, x: Tensor, nd: int) -> None:
    if x.ndim not in (nd + 1, nd + 2):
        raise Error(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got shape {list(x.shape)}")
    if any(n == 0 for n in x.shape[1:]) or (x.ndim == nd + 1 and x.shape[0] == 0):
        raise Error(f"{name}: the non-batch dims of {list(x.shape)} must be nonzero (as torch's)")


def _max(x: Tensor, nd: int, pos: list[np.ndarray], valid: list[np.ndarray], return_indices: bool) -> Any:
    w, flat, _ = windows(x, pos, valid)
    if 0 in w.shape:  # an empty batch: nothing to compare, torch's empty result
        empty = const(x, np.zeros(w.shape[:-1], np.int64), np.int64)
        return (w[..., 0], empty) if return_indices else w[..., 0]
    r = w.max(dim=-1)
    if not return_indices:
        return r.values
    table = const(x, flat, np.int64).expand(*w.shape)
    return r.values, table.gather(-1, r.indices.unsqueeze(-1)).squeeze(-1)


def _max_pool(name: str, nd: int, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool, return_indices: bool) -> Any:
    _spatial(name, x, nd)
    k = tup(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else tup(stride, nd, "stride")
    p, dl = tup(padding, nd, "padding"), tup(dilation, nd, "dilation")
    axes = [_window_axis(int(x.shape[x.ndim - nd + i]), k[i], s[i], p[i], dl[i], ceil_mode, name) for i in range(nd)]
    return _max(x, nd, [a[0] for a in axes], [a[1] for a in axes], return_indices)


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = True) -> Any:
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = True) -> Any:
    """2-D max pooling with every torch keyword (F.max_pool2d of conv_functional takes the basic ones)."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = True) -> Any:
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _float(name: str, x: Tensor) -> None:
    if x.dtype not in FLOATS:
        raise Error(f"{name}: not implemented for {x.dtype} (torch's CPU kernel takes floating inputs)",
                    hint="cast the input to a float dtype first")


def _masked_sum(x: Tensor, pos: list[np.ndarray], valid: list[np.ndarray]) -> Tensor:
    w, _, mask = windows(x, pos, valid)
    if not mask.all():
        w = Tensor.where(const(x, mask, bool), w, const(x, np.zeros((), np_dtype(x.dtype))))
    return w.sum(dim=-1)


def avg_pool(name: str, nd: int, x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
             ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """torch's avg_poolNd: the window sum over the divisor torch uses (its pool_size clipped to the
    padded input, or the real elements alone without count_include_pad, or divisor_override)."""
    _spatial(name, x, nd)
    _float(name, x)
    k = tup(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else tup(stride, nd, "stride")
    p = tup(padding, nd, "padding")
    if divisor_override is not None and int(divisor_override) == 0:
        raise Error(f"{name}: divisor must be not zero")
    pos, valid, div = [], [], np.ones([1] * nd, np.float64)
    for i in range(nd):
        n = int(x.shape[x.ndim - nd + i])
        a, ok = _window_axis(n, k[i], s[i], p[i], 1, ceil_mode, name)
        start = np.arange(a.shape[0]) * s[i] - p[i]
        end = np.minimum(start + k[i], n + p[i])
        cnt = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        pos.append(a)
        valid.append(ok)
        shape = [1] * nd
        shape[i] = -1
        div = div * cnt.reshape(shape)
    xf = opmath(x)
    total = _masked_sum(xf, pos, valid)
    if divisor_override is not None:
        return (total / const(xf, np.asarray(int(divisor_override)))).cast(x.dtype)
    return (total / const(xf, div)).cast(x.dtype)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    return avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    return avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                    divisor_override)


def _adaptive_axes(name: str, x: Tensor, nd: int, output_size: Any) -> tuple[list[np.ndarray], list[np.ndarray],
                                                                             np.ndarray]:
    """torch's adaptive windows: [floor(i n / L), ceil((i + 1) n / L)) along each axis."""
    if x.ndim not in (nd + 1, nd + 2):
        raise Error(f"{name}: expected a {nd + 1}-D or {nd + 2}-D input, got shape {list(x.shape)}")
    outs = list(output_size) if isinstance(output_size, (list, tuple)) else [output_size] * nd
    if len(outs) != nd:
        raise Error(f"{name}: output_size {outs} must be a single int or {nd} ints")
    sizes = [int(n) for n in x.shape[x.ndim - nd:]]
    outs = [sizes[i] if o is None else int(o) for i, o in enumerate(outs)]  # None keeps the input's size
    pos, valid, cnt = [], [], np.ones([1] * nd, np.float64)
    for i, (n, L) in enumerate(zip(sizes, outs)):
        if L < 0 or (n == 0 and L > 0):
            raise Error(f"{name}: output size {L} for a pooled dim of size {n}")
        start = (np.arange(L) * n) // L if L else np.zeros(0, np.int64)
        end = -((-(np.arange(L) + 1) * n) // L) if L else np.zeros(0, np.int64)
        k = int((end - start).max()) if L else 1
        p = start[:, None] + np.arange(k)[None, :]
        ok = p < end[:, None]
        pos.append(np.where(ok, p, start[:, None]).reshape(L, k))
        valid.append(ok.reshape(L, k))
        shape = [1] * nd
        shape[i] = -1
        cnt = cnt * (end - start).reshape(shape)
    return pos, valid, cnt


def _adaptive_avg(name: str, nd: int, x: Tensor, output_size: Any) -> Tensor:
    _float(name, x)
    pos, valid, cnt = _adaptive_axes(name, x, nd, output_size)
    xf = opmath(x)
    return (_masked_sum(xf, pos, valid) / const(xf, cnt)).cast(x.dtype)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    return _adaptive_avg("adaptive_avg_pool3d", 3, input, output_size)


def _adaptive_max(name: str, nd: int, x: Tensor, output_size: Any, return_indices: bool) -> Any:
    pos, valid, _ = _adaptive_axes(name, x, nd, output_size)
    if any(n == 0 for n in x.shape[x.ndim - nd:]):
        raise Error(f"{name}: the pooled dims {list(x.shape[x.ndim - nd:])} must be nonzero")
    return _max(x, nd, pos, valid, return_indices)


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    return _adaptive_max("adaptive_max_pool1d", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    return _adaptive_max("adaptive_max_pool2d", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    return _adaptive_max("adaptive_max_pool3d", 3, input, output_size, return_indices)


def _lp_pool(name: str, nd: int, x: Tensor, norm_type: float, kernel_size: Any, stride: Any,
             ceil_mode: bool) -> Tensor:
    """torch's lp_poolNd, its formula: (sign(a) relu(|a|) * prod(kernel)) ** (1/p), a the average of x**p."""
    k = tup(kernel_size, nd, "kernel_size")
    p = float(norm_type)
    a = avg_pool(name, nd, x.pow(p) if p != 1 else x, k, stride, 0, ceil_mode)
    y = (a.sign() * a.abs().relu()) * float(math.prod(k))
    return y.pow(1.0 / p) if p != 1 else y


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False) -> Tensor:
    return _lp_pool("lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False) -> Tensor:
    return _lp_pool("lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False) -> Tensor:
    return _lp_pool("lp_pool3d", 3, input, norm_type, kernel_size, stride, ceil_mode)


def _unpool_size(x: Tensor, k: list[int], s: list[int], p: list[int], output_size: Any) -> list[int]:
    """torch's _unpool_output_size: (n - 1) * stride + kernel - 2 * padding, or output_size (its last
    nd entries) strictly within a stride of that."""
    nd = len(k)
    default = [(int(x.shape[x.ndim - nd + d]) - 1) * s[d] + k[d] - 2 * p[d] for d in range(nd)]
    if output_size is None:
        return default
    out = [int(o) for o in output_size]
    if len(out) == nd + 2:
        out = out[2:]
    if len(out) != nd:
        raise Error(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has a "
                    f"length of '{len(out)}'")
    for d in range(nd):
        lo, hi = default[d] - s[d], default[d] + s[d]
        if not lo < out[d] < hi:
            raise Error(f'invalid output_size "{tuple(output_size)}" (dim {d} must be between {lo} and {hi})')
    return out


def _max_unpool(name: str, nd: int, x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, padding: Any,
                output_size: Any) -> Tensor:
    """torch's max_unpoolNd: zeros of the output size, each input value scattered to its flat index in
    its plane (of repeated indices the last wins, as torch's CPU loop); the gradient gathers back."""
    if x.ndim not in (nd + 1, nd + 2):
        raise Error(f"Input to max_unpooling{nd}d should be a {nd + 1}d or {nd + 2}d Tensor, but got a tensor "
                    f"with {x.ndim} dimensions.")
    if indices.dtype != "i64":
        raise Error(f"elements in indices should be type int64 but got: {indices.dtype}")
    if list(indices.shape) != list(x.shape):
        raise Error(f"Expected shape of indices to be same as that of the input tensor ({list(x.shape)}) but "
                    f"got indices tensor with shape: {list(indices.shape)}")
    _float(name, x)
    k = tup(kernel_size, nd, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else tup(stride, nd, "stride")
    out = _unpool_size(x, k, s, tup(padding, nd, "padding"), output_size)
    plane = int(np.prod(out))
    lead = list(x.shape[:x.ndim - nd])
    flat_idx, flat_x = indices.reshape(lead + [-1]), x.reshape(lead + [-1])
    if flat_idx.numel():
        v = indices.numpy()  # torch's check of every index (eager)
        bad = v[(v < 0) | (v >= plane)]
        if bad.size:
            raise Error(f"Found an invalid max index: {int(bad.reshape(-1)[0])} (output volumes are of size "
                        f"{'x'.join(str(o) for o in out)})")
    zeros = const(x, np.zeros(lead + [plane], np_dtype(x.dtype)))
    if flat_idx.numel() == 0:
        return zeros.reshape(lead + out)
    ax = len(lead)
    y = apply("scatter", [zeros, flat_idx, flat_x], {"axis": ax})
    planes = int(np.prod(lead))
    rows = np.arange(v.size) // (v.size // planes)
    hits = np.bincount(rows * plane + v.reshape(-1), minlength=planes * plane).reshape(lead + [plane])
    if x.requires_grad and (hits > 1).any():
        # torch's gradient gathers: every input of a repeated index gets the output's gradient, where
        # the scatter's goes to the last alone. Its value (the last) plus a scatter-add minus itself
        # (exactly 0 where finite) carries that gradient.
        xd = flat_x.detach()
        added, same = (apply("scatter-add", [zeros, flat_idx, t], {"axis": ax}) for t in (flat_x, xd))
        ok = const(x, hits > 1, bool) & same.isfinite()
        y = Tensor.where(ok, apply("scatter", [zeros, flat_idx, xd], {"axis": ax}) + (added - same), y)
    return y.reshape(lead + out)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> Tensor:
    return _max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)
