"""torch.nn.functional's convolutions (1-, 2-, 3-D, transposed), im2col (unfold/fold) and 2-D
pooling over caten Tensors, with torch's names, keywords and argument order.

Every convolution is one computation: the (zero-)padded input read as sliding windows without
a copy (a strided view), multiplied by the weights and summed over channels and kernel taps. 1-
and 2-D run through the library's `conv2d` composite (whose VJP is itself a convolution); 3-D
builds the same windows with `strided-view`, its gradients from autodiff through the view. A
transposed convolution is the convolution of the stride-dilated input with the flipped kernel
whose in and out channels trade places within each group (exactly torch's definition)."""

from __future__ import annotations

import math
from typing import Any

from caten.errors import Error
from caten.tensor.tensor import Tensor

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "unfold", "fold", "max_pool2d", "avg_pool2d"]

FLOATS = ("f16", "bf16", "f32", "f64")


def _tup(v: Any, n: int, what: str, name: str) -> list[int]:
    """torch's _single/_pair/_triple: an int repeated n times, or n ints."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return [int(v[0])] * n
        if len(v) != n:
            raise Error(f"{name}: {what} {list(v)} must be one int or {n} ints")
        return [int(e) for e in v]
    return [int(v)] * n


def _pad_crop(x: Tensor, pairs: list[tuple[int, int]]) -> Tensor:
    """x's trailing len(pairs) axes padded with zeros by positive amounts, cropped by negative ones."""
    lead = x.ndim - len(pairs)
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        idx = [slice(None)] * lead + [slice(max(-lo, 0), x.shape[lead + i] - max(-hi, 0))
                                      for i, (lo, hi) in enumerate(pairs)]
        x = x[tuple(idx)]
    if any(lo > 0 or hi > 0 for lo, hi in pairs):
        x = x.pad([[0, 0]] * lead + [[max(lo, 0), max(hi, 0)] for lo, hi in pairs], value=0)
    return x


def _padding(name: str, padding: Any, nd: int, k: list[int], s: list[int], d: list[int]) -> list[tuple[int, int]]:
    """(left, right) per spatial axis: ints as given, 'valid' none, 'same' torch's (the odd one on the right)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding != "same":
            raise Error(f"{name}: invalid padding string {padding!r}", hint="'same', 'valid', an int or a tuple")
        if any(e != 1 for e in s):
            raise Error(f"{name}: padding='same' is not supported for strided convolutions")
        return [(dd * (kk - 1) // 2, dd * (kk - 1) - dd * (kk - 1) // 2) for kk, dd in zip(k, d)]
    p = _tup(padding, nd, "padding", name)
    if any(e < 0 for e in p):
        raise Error(f"{name}: negative padding is not supported (got {p})")
    return [(e, e) for e in p]


def _check(name: str, nd: int, x: Tensor, w: Tensor, bias: Tensor | None) -> None:
    if x.ndim not in (nd + 1, nd + 2):
        raise Error(f"{name}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input, "
                    f"got shape {list(x.shape)}")
    if w.ndim != nd + 2:
        raise Error(f"{name}: expected a {nd + 2}-D weight, got shape {list(w.shape)}")
    if x.dtype not in FLOATS or w.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise Error(f"{name}: input, weight and bias must share one floating dtype (got {x.dtype}, {w.dtype}"
                    + (f", {bias.dtype})" if bias is not None else ")"),
                    hint="cast them with .to(dtype) first, as torch requires")


def _windows(x: Tensor, k: list[int], s: list[int], d: list[int], groups: int, out: list[int]) -> Tensor:
    """[N, C, P...] read as [N, groups, C/groups, O..., K...] windows (a view, no copy)."""
    n, c, sp = x.shape[0], x.shape[1], list(x.shape[2:])
    st = [math.prod(sp[i + 1:]) for i in range(len(sp))]
    size = [n, groups, c // groups] + out + k
    strides = [c * math.prod(sp), c // groups * math.prod(sp), math.prod(sp)] + \
        [a * b for a, b in zip(s, st)] + [a * b for a, b in zip(d, st)]
    return x.strided_view(size=size, stride=strides, offset=0)


def _conv(name: str, nd: int, x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any,
          dilation: Any, groups: int) -> Tensor:
    _check(name, nd, x, w, bias)
    if x.ndim == nd + 1:
        return _conv(name, nd, x.unsqueeze(0), w, bias, stride, padding, dilation, groups)[0]
    k = [int(e) for e in w.shape[2:]]
    s, d = _tup(stride, nd, "stride", name), _tup(dilation, nd, "dilation", name)
    if any(e <= 0 for e in s + d):
        raise Error(f"{name}: stride {s} and dilation {d} must be positive")
    if 0 in w.shape[:2]:  # torch refuses no output channels and gives a channel-less result for no input ones
        raise Error(f"{name}: weight {list(w.shape)} has no input or output channels")
    if groups <= 0 or w.shape[0] % groups:
        raise Error(f"{name}: {w.shape[0]} output channels are not divisible by groups={groups}")
    if x.shape[1] != w.shape[1] * groups:
        raise Error(f"{name}: the input has {x.shape[1]} channels; weight {list(w.shape)} with groups={groups} "
                    f"expects {w.shape[1] * groups}")
    if bias is not None and list(bias.shape) != [w.shape[0]]:
        raise Error(f"{name}: bias of shape {list(bias.shape)}; expected [{w.shape[0]}]")
    pads = _padding(name, padding, nd, k, s, d)
    sp = [int(e) + lo + hi for e, (lo, hi) in zip(x.shape[2:], pads)]
    out = [(p - dd * (kk - 1) - 1) // ss + 1 for p, kk, ss, dd in zip(sp, k, s, d)]
    if any(p < dd * (kk - 1) + 1 for p, kk, dd in zip(sp, k, d)):
        raise Error(f"{name}: the (padded) input {sp} is smaller than the dilated kernel "
                    f"{[dd * (kk - 1) + 1 for kk, dd in zip(k, d)]}", hint="a smaller kernel or more padding")
    if nd <= 2:
        sym = all(lo == hi for lo, hi in pads)
        xp = x if sym else _pad_crop(x, pads)
        p2 = [lo if sym else 0 for lo, _ in pads]
        if nd == 1:
            xp, w = xp.unsqueeze(2), w.unsqueeze(2)
            s, d, p2 = [1] + s, [1] + d, [0] + p2
        args = [xp, w] + ([bias] if bias is not None else [])
        y = Tensor.conv2d(*args, stride=s, padding=p2, dilation=d, groups=groups)
        return y.squeeze(2) if nd == 1 else y
    xp = _pad_crop(x, pads)
    win = _windows(xp, k, s, d, groups, out)                       # [N, G, CG, O..., K...]
    o, cg = int(w.shape[0]), int(w.shape[1])
    wt = w.reshape([1, groups, o // groups, cg] + [1] * nd + k)
    y = (win.unsqueeze(2) * wt).sum(dim=[3] + list(range(4 + nd, 4 + 2 * nd)))  # [N, G, OG, O...]
    y = y.reshape([int(x.shape[0]), o] + out)
    return y + bias.reshape([1, o] + [1] * nd) if bias is not None else y


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


# transposed ------------------------------------------------------------------------------------
def _spread(x: Tensor, s: list[int]) -> Tensor:
    """x's trailing len(s) axes with s-1 zeros between neighbours (the stride undone)."""
    nd, lead = len(s), x.ndim - len(s)
    for i, ss in enumerate(s):
        if ss == 1 or x.shape[lead + i] == 0:
            continue
        a = lead + i
        n = int(x.shape[a])
        y = x.unsqueeze(a + 1).pad([[0, 0]] * (a + 1) + [[0, ss - 1]] + [[0, 0]] * (nd - i - 1), value=0)
        y = y.reshape(list(x.shape[:a]) + [n * ss] + list(x.shape[a + 1:]))
        x = y[tuple([slice(None)] * a + [slice(0, (n - 1) * ss + 1)])]
    return x


def _conv_transpose(name: str, nd: int, x: Tensor, w: Tensor, bias: Tensor | None, stride: Any, padding: Any,
                    output_padding: Any, groups: int, dilation: Any) -> Tensor:
    _check(name, nd, x, w, bias)
    if x.ndim == nd + 1:
        return _conv_transpose(name, nd, x.unsqueeze(0), w, bias, stride, padding, output_padding, groups,
                               dilation)[0]
    if isinstance(padding, str):
        raise Error(f"{name}: padding must be ints, not {padding!r} (as torch's)")
    k = [int(e) for e in w.shape[2:]]
    s, d = _tup(stride, nd, "stride", name), _tup(dilation, nd, "dilation", name)
    p, op = _tup(padding, nd, "padding", name), _tup(output_padding, nd, "output_padding", name)
    if any(e <= 0 for e in s + d) or any(e < 0 for e in p + op):
        raise Error(f"{name}: stride {s} and dilation {d} must be positive, padding {p} and "
                    f"output_padding {op} non-negative")
    if any(o >= ss and o >= dd for o, ss, dd in zip(op, s, d)):
        raise Error(f"{name}: output padding {op} must be smaller than either stride {s} or dilation {d}")
    cin = int(w.shape[0])
    if groups <= 0 or cin % groups or x.shape[1] != cin:
        raise Error(f"{name}: the input has {x.shape[1]} channels; weight {list(w.shape)} with groups={groups} "
                    f"expects {cin} (divisible by groups)")
    og = int(w.shape[1])
    if bias is not None and list(bias.shape) != [og * groups]:
        raise Error(f"{name}: bias of shape {list(bias.shape)}; expected [{og * groups}]")
    out = [(int(n) - 1) * ss - 2 * pp + dd * (kk - 1) + o + 1
           for n, ss, pp, dd, kk, o in zip(x.shape[2:], s, p, d, k, op)]
    if any(e <= 0 for e in out):
        raise Error(f"{name}: the output size {out} is not positive for input {list(x.shape)}")
    xs = _spread(x, s)
    q = [dd * (kk - 1) - pp for dd, kk, pp in zip(d, k, p)]
    xs = _pad_crop(xs, [(a, a + o) for a, o in zip(q, op)])
    wt = w.reshape([groups, cin // groups, og] + k).permute(0, 2, 1, *range(3, 3 + nd))
    wt = wt.reshape([groups * og, cin // groups] + k).flip(*range(2, 2 + nd))
    return _conv(name, nd, xs, wt, bias, 1, 0, d, groups)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


# im2col ----------------------------------------------------------------------------------------
def _blocks(name: str, sp: list[int], k: list[int], d: list[int], p: list[int], s: list[int]) -> list[int]:
    if any(e <= 0 for e in k + d + s) or any(e < 0 for e in p):
        raise Error(f"{name}: kernel_size {k}, dilation {d} and stride {s} must be positive, padding {p} "
                    f"non-negative")
    out = [(n + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for n, kk, dd, pp, ss in zip(sp, k, d, p, s)]
    if any(n + 2 * pp < dd * (kk - 1) + 1 for n, kk, dd, pp in zip(sp, k, d, p)):
        raise Error(f"{name}: the (padded) size {[n + 2 * pp for n, pp in zip(sp, p)]} is smaller than the "
                    f"dilated kernel {[dd * (kk - 1) + 1 for kk, dd in zip(k, d)]}")
    return out


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1) -> Tensor:
    """im2col: [N, C, H, W] -> [N, C*kh*kw, L], the blocks' elements channel-major as torch's."""
    if input.ndim not in (3, 4):
        raise Error(f"unfold: expected a 3-D or 4-D input, got shape {list(input.shape)}")
    if input.ndim == 3:
        return unfold(input.unsqueeze(0), kernel_size, dilation, padding, stride)[0]
    k, d = _tup(kernel_size, 2, "kernel_size", "unfold"), _tup(dilation, 2, "dilation", "unfold")
    p, s = _tup(padding, 2, "padding", "unfold"), _tup(stride, 2, "stride", "unfold")
    out = _blocks("unfold", [int(e) for e in input.shape[2:]], k, d, p, s)
    n, c = int(input.shape[0]), int(input.shape[1])
    win = _windows(_pad_crop(input, [(e, e) for e in p]), k, s, d, 1, out)   # [N, 1, C, OH, OW, KH, KW]
    return win.reshape([n, c] + out + k).permute(0, 1, 4, 5, 2, 3).reshape([n, c * k[0] * k[1], out[0] * out[1]])


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Tensor:
    """col2im: [N, C*kh*kw, L] -> [N, C, H, W], overlapping block elements summed (unfold's adjoint)."""
    if input.ndim not in (2, 3):
        raise Error(f"fold: expected a 2-D or 3-D input, got shape {list(input.shape)}")
    if input.ndim == 2:
        return fold(input.unsqueeze(0), output_size, kernel_size, dilation, padding, stride)[0]
    sz = _tup(output_size, 2, "output_size", "fold")
    k, d = _tup(kernel_size, 2, "kernel_size", "fold"), _tup(dilation, 2, "dilation", "fold")
    p, s = _tup(padding, 2, "padding", "fold"), _tup(stride, 2, "stride", "fold")
    out = _blocks("fold", sz, k, d, p, s)
    n, ck, length = (int(e) for e in input.shape)
    if ck % (k[0] * k[1]):
        raise Error(f"fold: input dim 1 ({ck}) is not divisible by the kernel's {k[0] * k[1]} elements")
    if length != out[0] * out[1]:
        raise Error(f"fold: {length} blocks given; output_size {sz}, kernel_size {k}, dilation {d}, padding {p} "
                    f"and stride {s} make {out[0] * out[1]}")
    c = ck // (k[0] * k[1])
    cols = input.reshape([n, c, k[0], k[1], out[0], out[1]])
    ph, pw = sz[0] + 2 * p[0], sz[1] + 2 * p[1]
    total = None
    for i in range(k[0]):
        for j in range(k[1]):
            piece = _spread(cols[:, :, i, j], s)                   # [N, C, (OH-1)sh+1, (OW-1)sw+1]
            hi = [ph - i * d[0] - int(piece.shape[2]), pw - j * d[1] - int(piece.shape[3])]
            placed = _pad_crop(piece, [(i * d[0], hi[0]), (j * d[1], hi[1])])
            total = placed if total is None else total + placed
    assert total is not None
    return _pad_crop(total, [(-p[0], -p[0]), (-p[1], -p[1])])


# 2-D pooling -------------------------------------------------------------------------------------
def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """torch's max_pool2d through the N-d pooling of `pooling`: its gradient goes to the first maximum
    of each window (torch's index), where the `max-pool2d` composite's splits it among ties."""
    from caten.tensor.nn import pooling

    k = _tup(kernel_size, 2, "kernel_size", "max_pool2d")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        _tup(stride, 2, "stride", "max_pool2d")
    return pooling._max_pool("max_pool2d", 2, input, k, s, _tup(padding, 2, "padding", "max_pool2d"), dilation,
                             ceil_mode, return_indices)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """torch's avg_pool2d; ceil_mode, count_include_pad=False and divisor_override run through `pooling`."""
    k = _tup(kernel_size, 2, "kernel_size", "avg_pool2d")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        _tup(stride, 2, "stride", "avg_pool2d")
    p = _tup(padding, 2, "padding", "avg_pool2d")
    if ceil_mode or not count_include_pad or divisor_override is not None or input.ndim != 4:
        from caten.tensor.nn import pooling
        return pooling.avg_pool("avg_pool2d", 2, input, k, s, p, ceil_mode, count_include_pad, divisor_override)
    _pool_check("avg_pool2d", input, k, s, p)
    if input.dtype not in FLOATS:
        raise Error(f"avg_pool2d: not implemented for {input.dtype} (torch's CPU kernel takes floating inputs)",
                    hint="cast the input to a float dtype first")
    return input.avg_pool2d(kernel=k, stride=s, padding=p)


def _pool_check(name: str, x: Tensor, k: list[int], s: list[int], p: list[int]) -> None:
    """torch's pool2d_shape_check: positive kernel and stride, padding at most half the kernel, nonzero
    pooled dims and a positive output."""
    if any(e <= 0 for e in k + s):
        raise Error(f"{name}: kernel_size {k} and stride {s} must be positive")
    if any(pp < 0 or pp > kk // 2 for pp, kk in zip(p, k)):
        raise Error(f"{name}: pad should be at most half of the effective kernel size, got padding={p} "
                    f"for kernel_size={k}")
    if any(int(n) == 0 for n in x.shape[2:]):
        raise Error(f"{name}: the pooled dims {list(x.shape[2:])} must be nonzero")
    _blocks(name, [int(e) for e in x.shape[2:]], k, [1, 1], p, s)
