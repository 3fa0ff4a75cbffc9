"""ONNX lowerings of convolution (plain and transposed) and pooling (max, average, global, Lp)
(NCHW; 1-D as 2-D over a unit height; 3-D and up in conv_nd / pool_nd)."""

from __future__ import annotations

from caten.frontends.onnx.conv_nd import conv_nd, conv_transpose_nd
from caten.frontends.onnx.node import N, ax_list, handler
from caten.frontends.onnx.pool_nd import _conv_pads, max_pool_with_indices, pool_nd
from caten.frontends.onnx.wide import in_f32


def spatial(n: N) -> list:
    """The input shape; the batch and channel dims may be symbolic, the spatial ones may not."""
    s = n.shape(0)
    if not all(isinstance(d, int) for d in s[2:]):
        raise n.fail(f"needs static spatial dims, got {s}")
    return s


@handler("Conv")
@in_f32
def _conv(n: N) -> str:
    s = spatial(n)
    w = n.int_shape(1)
    k = len(s) - 2
    if k not in (1, 2):
        return conv_nd(n, s)
    kernel = w[2:]
    strides = list(n.a("strides", [1] * k))
    dil = list(n.a("dilations", [1] * k))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    x, wt = n.x(0), n.x(1)
    if k == 1:
        x, wt = f"(unsqueeze {x} 2)", f"(unsqueeze {wt} 2)"
        strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = f"(pad {x} [[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])"
        pads = [0, 0, 0, 0]
    b = f" {n.x(2)}" if n.has(2) else ""
    y = (f"(conv2d {x} {wt}{b} :stride [{strides[0]} {strides[1]}] :padding [{pads[0]} {pads[1]}] "
         f":dilation [{dil[0]} {dil[1]}] :groups {n.a('group', 1)})")
    return f"(squeeze {y} 2)" if k == 1 else y


def _pool(n: N, kind: str) -> str:
    s = spatial(n)
    if len(s) == 3:
        return f"(squeeze {_pool2d(_as_2d(n), kind)} 2)"
    if len(s) != 4 or (kind == "max" and not n.is_float()):
        return pool_nd(n, kind)
    return _pool2d(n, kind)


class _Pool1d(N):
    """A 1-D pool seen as a 2-D one over [N C 1 W]."""

    def __init__(self, n: N):
        super().__init__(n.g, n.node)
        self._n = n
        self._x = n.let(f"(unsqueeze {n.x(0)} 2)")
        self._attrs = {k: ([1] + list(v) if isinstance(v, (list, tuple)) else v) for k, v in
                       ((k, n.a(k)) for k in ("kernel_shape", "strides", "dilations")) if v is not None}
        p = n.a("pads")
        if p is not None:
            self._attrs["pads"] = [0, p[0], 0, p[1]]

    def x(self, i: int) -> str:
        return self._x

    def dt(self, i: int = 0) -> str:
        return self._n.dt(i)

    def shape(self, i: int = 0) -> list:
        s = super().shape(i)
        return [s[0], s[1], 1, s[2]]

    def a(self, name: str, default=None):
        return self._attrs.get(name, super().a(name, default))


def _as_2d(n: N) -> N:
    return _Pool1d(n)


def _pool2d(n: N, kind: str) -> str:
    s = spatial(n)
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1, 1]))
    dil = list(n.a("dilations", [1, 1]))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    if n.a("ceil_mode", 0):
        for i in range(2):
            span = s[2 + i] + pads[i] + pads[i + 2] - ((kernel[i] - 1) * dil[i] + 1)
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= s[2 + i] + pads[i]:
                out -= 1
            extra = (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - (s[2 + i] + pads[i] + pads[i + 2])
            pads[i + 2] += max(0, extra)
    x = n.x(0)
    widths = f"[[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]]"
    win = f":kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] :dilation [{dil[0]} {dil[1]}]"
    if kind == "max":
        if not n.is_float():
            raise n.fail("max pooling of integers is not supported")
        if dil == [1, 1] and pads[0] == pads[2] and pads[1] == pads[3]:
            return (f"(max-pool2d {x} :kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] "
                    f":padding [{pads[0]} {pads[1]}])")
        xp = n.let(f"(pad {x} {widths} :value -inf)") if any(pads) else x
        return f"(squeeze (max (windows {xp} {win}) :axis [5 6]) 1)"
    xp = n.let(f"(pad {x} {widths})") if any(pads) else x
    total = n.let(f"(squeeze (sum (windows {xp} {win}) :axis [5 6]) 1)")
    if n.a("count_include_pad", 0):
        # padding counts, but not the extra cells ceil_mode adds past the explicit pads
        base = n.a("pads", [0] * 4) if n.a("auto_pad", "NOTSET") == "NOTSET" else pads
        h, w = s[2] + base[0] + base[2], s[3] + base[1] + base[3]
        cnt = (f"(pad (full [1 1 {h} {w}] 1 :dtype {n.dt()}) "
               f"[[0 0] [0 0] [0 {pads[0] + pads[2] + s[2] - h}] [0 {pads[1] + pads[3] + s[3] - w}]])")
    else:
        cnt = (f"(pad (full [1 1 {s[2]} {s[3]}] 1 :dtype {n.dt()}) "
               f"[[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])")
    c = n.let(f"(squeeze (sum (windows {cnt} {win}) :axis [5 6]) 1)")
    return f"(/ {total} {c})"


@handler("MaxPool")
def _maxpool(n: N) -> list[str]:
    if len(n.node.output) > 1 and n.node.output[1]:
        return max_pool_with_indices(n)
    if n.a("storage_order", 0):
        raise n.fail("storage_order is not supported")
    return [_pool(n, "max")]


@handler("AveragePool")
@in_f32
def _avgpool(n: N) -> str:
    return _pool(n, "avg")


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: N) -> str:
    axes = ax_list(range(2, n.rank()))
    f = "mean" if n.op == "GlobalAveragePool" else "max"
    return f"({f} {n.x(0)} :axis {axes} :keepdims true)"


@handler("ConvTranspose")
@in_f32
def _conv_transpose(n: N) -> str:
    """A strided transposed convolution as a stride-1 convolution of the zero-dilated input with the
    flipped, transposed kernel (padded by d*(k-1) - pad on each side)."""
    s = spatial(n)
    if len(s) != 4:
        return conv_transpose_nd(n, s)
    w = n.int_shape(1)
    g = n.a("group", 1)
    k = w[2:]
    st = list(n.a("strides", [1, 1]))
    dl = list(n.a("dilations", [1, 1]))
    op = list(n.a("output_padding", [0, 0]))
    pads = list(n.a("pads", [0, 0, 0, 0]))
    out_shape = n.a("output_shape")
    auto = n.a("auto_pad", "NOTSET")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = list(out_shape)[-2:] if out_shape is not None else [s[2] * st[0], s[3] * st[1]]
        for i in range(2):
            total = st[i] * (s[2 + i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - outs[i]
            if auto == "SAME_UPPER":
                pads[i], pads[i + 2] = total // 2, total - total // 2
            else:
                pads[i], pads[i + 2] = total - total // 2, total // 2
    x = n.x(0)
    h, wd = s[2], s[3]
    if st != [1, 1]:
        x6 = f"(reshape {x} [{s[0]} {s[1]} {h} 1 {wd} 1])"
        up = f"(pad {x6} [[0 0] [0 0] [0 0] [0 {st[0] - 1}] [0 0] [0 {st[1] - 1}]])"
        x = n.let(f"(slice (reshape {up} [{s[0]} {s[1]} {h * st[0]} {wd * st[1]}]) "
                  f"[0 {s[0]} 1] [0 {s[1]} 1] [0 {(h - 1) * st[0] + 1} 1] [0 {(wd - 1) * st[1] + 1} 1])")
    lo = [dl[i] * (k[i] - 1) - pads[i] for i in range(2)]
    hi = [dl[i] * (k[i] - 1) - pads[i + 2] + op[i] for i in range(2)]
    if any(v > 0 for v in lo + hi):
        x = n.let(f"(pad {x} [[0 0] [0 0] [{max(lo[0], 0)} {max(hi[0], 0)}] [{max(lo[1], 0)} {max(hi[1], 0)}]])")
    if any(v < 0 for v in lo + hi):
        hh = (h - 1) * st[0] + 1 + max(lo[0], 0) + max(hi[0], 0)
        ww = (wd - 1) * st[1] + 1 + max(lo[1], 0) + max(hi[1], 0)
        x = n.let(f"(slice {x} [0 {s[0]} 1] [0 {s[1]} 1] [{-min(lo[0], 0)} {hh + min(hi[0], 0)} 1] "
                  f"[{-min(lo[1], 0)} {ww + min(hi[1], 0)} 1])")
    c, og = w[0], w[1]
    wt = n.let(f"(flip (reshape (permute (reshape {n.x(1)} [{g} {c // g} {og} {k[0]} {k[1]}]) [0 2 1 3 4]) "
               f"[{g * og} {c // g} {k[0]} {k[1]}]) :axis [2 3])")
    b = f" {n.x(2)}" if n.has(2) else ""
    return f"(conv2d {x} (contiguous {wt}){b} :dilation [{dl[0]} {dl[1]}] :groups {g})"


@handler("LpPool")
def _lppool(n: N) -> str:
    s = spatial(n)
    if len(s) == 3:
        return f"(squeeze {_lppool2d(_as_2d(n))} 2)"
    if len(s) != 4:
        p = n.a("p", 2)
        x = n.x(0)
        total = pool_nd(n, "sum", f"(* {x} {x})" if p == 2 else f"(pow (abs {x}) {n.lit(float(p))})")
        return f"(sqrt {total})" if p == 2 else f"(pow {total} {n.lit(1.0 / p)})"
    return _lppool2d(n)


def _lppool2d(n: N) -> str:
    s = spatial(n)
    kernel = list(n.a("kernel_shape"))
    strides = list(n.a("strides", [1, 1]))
    dil = list(n.a("dilations", [1, 1]))
    pads = _conv_pads(n, s[2:], kernel, strides, dil)
    p = n.a("p", 2)
    x = n.x(0)
    powed = f"(* {x} {x})" if p == 2 else f"(pow (abs {x}) {n.lit(float(p))})"
    xp = n.let(f"(pad {powed} [[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]])" if any(pads) else powed)
    win = f":kernel [{kernel[0]} {kernel[1]}] :stride [{strides[0]} {strides[1]}] :dilation [{dil[0]} {dil[1]}]"
    total = n.let(f"(squeeze (sum (windows {xp} {win}) :axis [5 6]) 1)")
    return f"(sqrt {total})" if p == 2 else f"(pow {total} {n.lit(1.0 / p)})"
