"""QDQ fusion: what exporters and onnxruntime's quantizer write for a quantized layer,

    DequantizeLinear(x_q) , DequantizeLinear(w_q) [, bias] -> MatMul | Gemm | Conv [-> Add bias]
    [-> Relu | Clip] -> QuantizeLinear

runs as an integer kernel: `matmul-int` / `conv2d-int` of the quantized tensors summed in i32, then a
requantize epilogue, as onnxruntime's fused kernels (QLinearMatMul, QLinearConv, QGemm) compute it:

- an i32 bias (DequantizeLinear of int32 with scale sx*sw, zero point 0: what quantizers write) is
  added to the i32 sum; the epilogue is f32(sum) * M rounded half to even, plus the output zero point,
  saturated, with M = (sx * sw) / sy in f32 per output channel (MLAS's MlasRequantizeOutput);
- a constant f32 bias (one per output channel) is that i32 bias, round(b / (sx * sw)), as
  onnxruntime's BiasQuantization transformer makes it before fusing (MatMul + Add become a Gemm);
- any other bias (a computed one, an int32 one whose scale is not sx*sw) is added
  in f32 to f32(sum) * (sx * sw), and the sum is quantized by the output's QuantizeLinear;
- a Relu or Clip (constant bounds: ReLU6) before the QuantizeLinear clamps the quantized result to
  its bounds quantized (a Relu's lower bound is the zero point): quantizing is monotone, so this
  is exact.

The float graph's semantics (dequantize, f32 matmul, quantize) round differently: results differ
from it by at most one quantum, where the f32 sum of products is not exact. A pattern the integer
path cannot compute exactly stays the float graph: non-8-bit or narrow (int4) types, scales that are
not f32 constants, a per-tensor input or output that is not, a weight quantized per channel along an
axis that is not the output channel's, blocked quantization, Gemm with transA/alpha/beta.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FUSE = True  # tests switch it off to run the float graph of the same model

_Q8 = ("u8", "i8")


@dataclass
class Match:
    """One fusable layer: the QuantizeLinear that ends it and what it computes."""

    q: Any
    core: Any  # the MatMul, Gemm or Conv
    xq: str  # ONNX names of the quantized input and weight
    wq: str
    zx: np.ndarray  # the input's zero point (scalar)
    zw: np.ndarray  # the weight's zero point: scalar or per output channel
    sxw: np.ndarray  # f32(sx * sw): scalar or per output channel
    sy: np.ndarray
    zy: np.ndarray
    nout: int  # output channels
    bias: str | None = None  # ONNX name of the bias
    int_bias: bool = False  # an i32 bias of scale sx*sw (added to the i32 sum), else an f32 one
    clamp: tuple = (None, None)  # a Relu's or Clip's bounds, quantized (None: none)
    replaced: list = field(default_factory=list)  # nodes whose only use is this layer
    dequantized: list = field(default_factory=list)  # the input's and weight's DequantizeLinear


def fused(g: Any, nodes: Iterable[Any]) -> Iterator[Any]:
    """The nodes to lower in order; each fusable layer is emitted here (as its QuantizeLinear's
    output) instead, and the nodes only it used are left out."""
    nodes = list(nodes)
    if not FUSE:
        yield from nodes
        return
    scan = _Scan(g, nodes)
    matches = _find(scan, nodes)
    skip = {id(n) for m in matches.values() for n in m.replaced}
    for m in matches.values():  # a DequantizeLinear whose every user is fused (a residual's input feeds two)
        for d in m.dequantized:
            if d.output[0] not in scan.outputs and all(id(u) in skip for u in scan.users.get(d.output[0], [])):
                skip.add(id(d))
    for node in nodes:
        m = matches.get(id(node))
        if m is not None:
            _emit(g, m)
        elif id(node) not in skip:
            yield node


# ---- matching -----------------------------------------------------------------------------------


class _Scan:
    """Producers, consumers and constant values of the graph's values."""

    def __init__(self, g: Any, nodes: list[Any]):
        self.g = g
        self.producer = {o: n for n in nodes for o in n.output if o}
        self.users: dict[str, list[Any]] = {}
        for n in nodes:
            for i in dict.fromkeys(list(n.input) + _captured(n)):
                self.users.setdefault(i, []).append(n)
        self.outputs = {vo.name for vo in g.model.graph.output}

    def value(self, name: str, depth: int = 0) -> np.ndarray | None:
        """A constant (initializer, Constant node, or folded: torch's exporter makes zero points
        with ConstantOfShape and Cast), else None."""
        from caten.frontends.onnx.fold import constant_value, fold_op

        if name in self.g.consts:
            return np.asarray(self.g.consts[name])
        p = self.producer.get(name)
        if p is None or p.domain not in ("", "ai.onnx") or depth > 8:
            return None
        try:
            if p.op_type == "Constant":
                return constant_value(p)
            xs = [self.value(i, depth + 1) if i else None for i in p.input]
            if any(x is None for x, i in zip(xs, p.input) if i) or any(x.size > 4096 for x in xs if x is not None):
                return None
            out = fold_op(p.op_type, p, xs)
        except Exception:  # what numpy cannot fold is no constant here
            return None
        return None if out is None else np.asarray(out[list(p.output).index(name)])

    def only_user(self, name: str, node: Any) -> bool:
        return name not in self.outputs and [id(u) for u in self.users.get(name, [])] == [id(node)]

    def made_by(self, name: str, op: str) -> Any:
        p = self.producer.get(name)
        return p if p is not None and p.op_type == op and p.domain in ("", "ai.onnx") else None


def _captured(node: Any) -> list[str]:
    """The names a node's subgraphs (If, Loop, Scan bodies) read, outer values among them."""
    names: list[str] = []
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for inner in sub.node:
                names += list(inner.input) + _captured(inner)
    return names


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _qparams(s: _Scan, node: Any, qname: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The f32 scale and the zero point (of the quantized value qname's dtype) of a Q or DQ node,
    when they are constants of an 8-bit, unblocked quantization."""
    g = s.g
    if _attr(node, "block_size", 0) or qname in g.narrow or g.dtype(qname) not in _Q8:
        return None
    scale = s.value(node.input[1])
    if scale is None or scale.dtype != np.float32:
        return None
    if len(node.input) > 2 and node.input[2]:
        zp = s.value(node.input[2])
        if zp is None or node.input[2] in g.narrow:
            return None
    else:
        zp = np.zeros((), {"u8": np.uint8, "i8": np.int8}[g.dtype(qname)])
    return scale, zp


def _per_channel(v: np.ndarray, axis: int, rank: int, out_axis: int, n: int) -> np.ndarray | None:
    """v as a scalar, or as a vector of the n output channels when it is one along out_axis."""
    if v.size == 1:
        return v.reshape(())
    if v.ndim == 1 and v.shape[0] == n and axis % rank == out_axis:
        return v
    return None


def _dq_input(s: _Scan, name: str) -> tuple[Any, str, np.ndarray, np.ndarray] | None:
    dq = s.made_by(name, "DequantizeLinear")
    if dq is None:
        return None
    qp = _qparams(s, dq, dq.input[0])
    if qp is None:
        return None
    q, cast = dq.input[0], s.made_by(dq.input[0], "Cast")
    if cast is not None and s.g.dtype(cast.input[0]) == s.g.dtype(q) and cast.input[0] not in s.g.narrow:
        q = cast.input[0]  # torch's exporter casts each quantized value to its own dtype
    return (dq, q, *qp)


def _core(s: _Scan, core: Any) -> tuple[int, int] | None:
    """For a MatMul/Gemm/Conv the weight's output-channel axis and count, or None if not fusable."""
    g = s.g
    ws, xs = g.shape(core.input[1]), g.shape(core.input[0])
    if ws is None or xs is None or not all(isinstance(d, int) for d in ws) or g.dtype(core.output[0]) != "f32":
        return None
    if core.op_type == "MatMul" and len(ws) == 2 and len(xs) >= 2:
        return 1, ws[1]
    if core.op_type == "Gemm" and len(ws) == 2 and len(xs) == 2 and not _attr(core, "transA", 0):
        if _attr(core, "alpha", 1.0) != 1.0 or _attr(core, "beta", 1.0) != 1.0:
            return None
        ax = 0 if _attr(core, "transB", 0) else 1
        return ax, ws[ax]
    if core.op_type == "Conv" and len(ws) >= 3:
        return 0, ws[0]
    return None


def _match(s: _Scan, q: Any) -> Match | None:
    g = s.g
    out = _qparams(s, q, q.output[0])
    if out is None or out[0].size != 1 or out[1].size != 1 or g.dtype(q.input[0]) != "f32":
        return None
    sy, zy = out[0].reshape(()), out[1].reshape(())
    replaced: list[Any] = []
    v, node = q.input[0], None
    clamp: tuple = (None, None)
    act = s.producer.get(v)
    if act is not None and act.op_type in ("Relu", "Clip") and act.domain in ("", "ai.onnx") and s.only_user(v, q):
        bounds = _bounds(s, act)
        if bounds is None:
            return None
        clamp = tuple(None if b is None else _quantized(b, sy, zy) for b in bounds)
        replaced.append(act)
        v, node = act.input[0], act
    nxt = node or q
    add, bias, bias_user = s.made_by(v, "Add"), None, None
    if add is not None and s.only_user(v, nxt):
        for k in (0, 1):
            mm = s.made_by(add.input[k], "MatMul")
            if mm is not None and s.only_user(add.input[k], add) and g.shape(add.output[0]) == g.shape(mm.output[0]):
                replaced.append(add)
                v, nxt, bias, bias_user = add.input[k], add, add.input[1 - k], add
                break
    core = s.producer.get(v)
    if core is None or core.op_type not in ("MatMul", "Gemm", "Conv") or not s.only_user(v, nxt):
        return None
    c = _core(s, core)
    x, w = _dq_input(s, core.input[0]), _dq_input(s, core.input[1])
    if c is None or x is None or w is None or x[2].size != 1 or x[3].size != 1:
        return None
    if len(core.input) > 2 and core.input[2]:
        if bias is not None:
            return None
        bias, bias_user = core.input[2], core
    out_axis, nout = c
    rank = len(g.shape(core.input[1]))
    dqw = w[0]
    sw = _per_channel(w[2], _attr(dqw, "axis", 1), rank, out_axis, nout)
    zw = _per_channel(w[3], _attr(dqw, "axis", 1), rank, out_axis, nout)
    if sw is None or zw is None:
        return None
    sx = x[2].reshape(())
    sxw = (sx * sw).astype(np.float32)  # f32 product, as onnxruntime's kernels
    m = Match(q, core, x[1], w[1], x[3].reshape(()), zw, sxw, sy, zy, nout, clamp=clamp,
              replaced=replaced + [core])
    if bias is not None and not _bias(s, m, bias, bias_user):
        return None
    m.dequantized = [x[0], w[0]]
    return m


def _bounds(s: _Scan, act: Any) -> tuple | None:
    """A Relu's or Clip's (min, max) as f32 numbers (None: unbounded), or None if not constants."""
    if act.op_type == "Relu":
        return np.float32(0), None
    if s.g.dtype(act.input[0]) != "f32":
        return None
    if s.g.opset < 11:
        lo, hi = _attr(act, "min"), _attr(act, "max")  # (defaults: the f32 range, i.e. none)
        return None if lo is None else np.float32(lo), None if hi is None else np.float32(hi)
    out = []
    for i in (1, 2):
        if len(act.input) <= i or not act.input[i]:
            out.append(None)
            continue
        v = s.value(act.input[i])
        if v is None or v.size != 1 or np.isnan(v).any():
            return None
        out.append(np.float32(v.reshape(())))
    return tuple(out)


def _quantized(b: np.float32, sy: np.ndarray, zy: np.ndarray) -> np.ndarray:
    """QuantizeLinear of one f32 number: rint(b / sy) (in f32) + zy, saturated, in zy's dtype."""
    info = np.iinfo(zy.dtype)
    q = float(np.rint(np.float32(b) / np.float32(sy))) + int(zy)
    return np.array(min(max(q, info.min), info.max), zy.dtype)


def _bias(s: _Scan, m: Match, name: str, user: Any) -> bool:
    """Record the bias: an i32 one of scale sx*sw (zero point 0, one per output channel) as an i32
    addend, else any f32 one of one value per output channel (or per tensor for Gemm/MatMul)."""
    g, nout = s.g, m.nout
    shape = g.shape(name)
    if shape is None:
        return False
    dq = s.made_by(name, "DequantizeLinear")
    if dq is not None and g.dtype(dq.input[0]) == "i32" and s.only_user(name, user):
        scale = s.value(dq.input[1])
        zp = s.value(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros((), np.int32)
        bshape = g.shape(dq.input[0])
        if (scale is not None and zp is not None and scale.dtype == np.float32 and not np.any(zp)
                and bshape == [nout] and not _attr(dq, "block_size", 0)
                and scale.size in (1, nout) and np.array_equal(np.broadcast_to(scale.reshape(-1), (nout,)),
                                                               np.broadcast_to(m.sxw.reshape(-1), (nout,)))):
            m.bias, m.int_bias = dq.input[0], True
            m.replaced.append(dq)
            return True
    if g.dtype(name) != "f32" or (m.core.op_type == "Conv" and shape != [nout]):
        return False
    b = s.value(name)
    if b is not None and shape == [nout]:
        # onnxruntime's BiasQuantization (after it makes MatMul + Add a Gemm): a constant f32 bias
        # becomes round(b / (sx * sw)) in i32
        bq = np.round(b.astype(np.float32) / m.sxw)
        if np.all(np.abs(bq) < 2.0 ** 31):
            m.bias, m.int_bias = g.synth("qdq_bias"), True
            g.set_const(m.bias, bq.astype(np.int32))
            return True
    m.bias = name
    return True


def _find(s: _Scan, nodes: list[Any]) -> dict[int, Match]:
    """The fusable layers, by the id of their QuantizeLinear."""
    found = {}
    for node in nodes:
        if node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx"):
            m = _match(s, node)
            if m is not None:
                found[id(node)] = m
    return found


# ---- emission -----------------------------------------------------------------------------------


def _const(g: Any, v: np.ndarray) -> str:
    """A constant computed here, as caten text (a literal for one value, else a weight)."""
    name = g.synth("qdq")
    g.set_const(name, np.array(v))
    return g.tensor(name)


def _channels(g: Any, m: Match, v: np.ndarray) -> str:
    """A scalar or per-output-channel constant as text broadcasting against the layer's result."""
    return _const(g, v if v.ndim == 0 or m.core.op_type != "Conv" else v.reshape(_conv_bias_shape(g, m)))


def _conv_bias_shape(g: Any, m: Match) -> list[int]:
    return [m.nout] + [1] * (len(g.shape(m.core.input[0])) - 2)


def _bias_text(g: Any, m: Match) -> str:
    b = g.tensor(m.bias)
    if m.core.op_type != "Conv":
        return b
    return f"(reshape {b} [{' '.join(map(str, _conv_bias_shape(g, m)))}])"


def _zp(g: Any, v: np.ndarray) -> str:
    return "" if not np.any(v) else _const(g, v)


def _acc(g: Any, m: Match) -> str:
    """The i32 sum of products of the centered quantized operands."""
    from caten.frontends.onnx.conv import spatial
    from caten.frontends.onnx.node import N
    from caten.frontends.onnx.pool_nd import _conv_pads
    from caten.frontends.onnx.quant import conv

    x, w, core = g.tensor(m.xq), g.tensor(m.wq), m.core
    zx = _zp(g, m.zx)
    if core.op_type in ("MatMul", "Gemm"):
        zw = _zp(g, m.zw)
        if _attr(core, "transB", 0):
            w = f"(transpose {w})"
        keys = (f" :a-zero-point {zx}" if zx else "") + (f" :b-zero-point {zw}" if zw else "")
        return g.emit(f"(matmul-int {x} {w}{keys})")
    n = N(g, core)
    s, ws = spatial(n), g.shape(core.input[1])
    k = len(s) - 2
    strides, dil = list(_attr(core, "strides", [1] * k)), list(_attr(core, "dilations", [1] * k))
    pads = _conv_pads(n, s[2:], ws[2:], strides, dil)
    if k in (1, 2):
        if k == 1:  # as 2-D over a unit height
            x, w = f"(unsqueeze {x} 2)", f"(unsqueeze {w} 2)"
            strides, dil, pads = [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
        if pads[:2] != pads[2:]:  # unequal ends: padded here with the zero point, which reads as 0
            x = f"(pad {x} [[0 0] [0 0] [{pads[0]} {pads[2]}] [{pads[1]} {pads[3]}]] :value {int(m.zx)})"
            pads = [0, 0, 0, 0]
        zw = _zp(g, m.zw)
        keys = (f" :x-zero-point {zx}" if zx else "") + (f" :w-zero-point {zw}" if zw else "")
        y = (f"(conv2d-int {x} {w}{keys} :stride [{strides[0]} {strides[1]}] :padding [{pads[0]} {pads[1]}] "
             f":dilation [{dil[0]} {dil[1]}] :groups {_attr(core, 'group', 1)})")
        return g.emit(f"(squeeze {y} 2)" if k == 1 else y)
    xc = f"(- (cast {x} i32) (cast {zx} i32))" if zx else f"(cast {x} i32)"
    wc = f"(cast {w} i32)"
    if np.any(m.zw):
        wc = f"(- {wc} (cast {_const(g, m.zw.reshape([-1] + [1] * (len(ws) - 1)) if m.zw.ndim else m.zw)} i32))"
    return conv(n, {0: (s, xc), 1: (ws, wc)}, "i32")


def _emit(g: Any, m: Match) -> None:
    """The layer as caten: the i32 sum, the requantize epilogue, the Relu as max with the zero point."""
    acc = _acc(g, m)
    zy = _const(g, m.zy)
    if m.bias is None or m.int_bias:
        if m.bias is not None:
            acc = g.emit(f"(+ {acc} {_bias_text(g, m)})")
        mult = (m.sxw / m.sy).astype(np.float32)  # (sx * sw) / sy in f32, per channel
        y = f"(* (cast {acc} f32) {_channels(g, m, mult)})"
        q = f"(quantize {y} (full [] 1.0 :dtype f32) :zero-point {zy})"
    else:
        y = f"(+ (* (cast {acc} f32) {_channels(g, m, m.sxw)}) {_bias_text(g, m)})"
        q = f"(quantize {y} {_const(g, m.sy)} :zero-point {zy})"
    lo, hi = m.clamp  # Relu/Clip: quantizing is monotone, so clamping the quantized result is exact
    if lo is not None:
        q = f"(max {g.emit(q)} {_const(g, lo)})"
    if hi is not None:
        q = f"(min {g.emit(q)} {_const(g, hi)})"
    g.emit(q, m.q.output[0])
