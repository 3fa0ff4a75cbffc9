"""torch.export's control flow and recurrent layers, imported as caten loops (LANGUAGE.md 14).

The higher-order ops `torch.cond`, `while_loop` and `scan` hold their bodies as fx subgraphs:
each subgraph is lowered by the same ATen lowerings as the main graph, into the body of the
language's `if` / `while` / `scan` form (so a symbolic scan length stays one loop, one program for
every length). `aten.lstm.input` / `aten.gru.input` / `aten.rnn_*.input` (kept whole by the
importer's decomposition table) go through `caten.nn`'s functional forms: one scan per layer and
direction instead of the chain of cells torch's decomposition unrolls.
"""

from __future__ import annotations

import operator
from typing import Any

from caten.errors import Error
from caten.frontends.text import sym
from caten.frontends.torch.bridge import refuse, via
from caten.frontends.torch.context import ATEN, Ctx, aten, lst, meta

KEEP = ("aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input")


def lower_call(c: Ctx, node: Any) -> None:
    """One call_function node of a graph into `c` (its value in `c.vals`)."""
    val = meta(node)
    if val is not None and hasattr(val, "node") and hasattr(val.node, "expr"):
        c.vals[node.name] = c.dim(val)  # size arithmetic: a dim expression of the input sizes
        return
    if node.target is operator.getitem:
        c.vals[node.name] = c.vals[node.args[0].name][node.args[1]]
        return
    fn = ATEN.get(str(node.target))
    if fn is None:
        from caten.frontends.torch.refused import why

        raise Error(f"ATen op `{node.target}` (node `{node.name}`) not supported by caten's importer: "
                    f"{why(str(node.target))}", None, "docs/import.md lists the supported ATen ops")
    res = fn(c, node)
    if isinstance(res, list):
        c.vals[node.name] = [r if r is None or r in c.bound else c.emit(f"{node.name}_{i}", r)
                             for i, r in enumerate(res)]
    elif isinstance(res, str) and res in c.bound:
        c.vals[node.name] = res  # a var the lowering already bound
    elif isinstance(res, str) and not hasattr(meta(node), "shape"):
        c.vals[node.name] = res  # a size computed from sizes: dim text
    else:
        c.vals[node.name] = c.emit(node.name, res)


def _subgraph(n: Any, a: Any) -> Any:
    """The GraphModule a get_attr argument of a higher-order op names."""
    return getattr(n.graph.owning_module, a.target)


def body(c: Ctx, gm: Any, inputs: list[str]) -> tuple[list[str], list[str]]:
    """(setf lines, result texts) of the subgraph `gm` with its placeholders bound to `inputs`."""
    saved_vals, saved_lines = c.vals, c.lines
    c.vals, c.lines = {}, []
    try:
        phs = [x for x in gm.graph.nodes if x.op == "placeholder"]
        if len(phs) != len(inputs):
            raise Error(f"a torch subgraph takes {len(phs)} inputs, the op gives {len(inputs)}")
        for p, v in zip(phs, inputs):
            c.vals[p.name] = v
        outs: list[str] = []
        for x in gm.graph.nodes:
            if x.op == "call_function":
                lower_call(c, x)
            elif x.op == "output":
                res = x.args[0]
                res = list(res) if isinstance(res, (list, tuple)) else [res]
                outs = [c.arg(r) for r in res]
        return c.lines, outs
    finally:
        c.vals, c.lines = saved_vals, saved_lines


def _progn(lines: list[str], last: str) -> str:
    return f"(progn {' '.join(lines)} {last})" if lines else last


def _lst(xs: list[str]) -> str:
    return "(list " + " ".join(xs) + ")"


def _tensors(c: Ctx, n: Any, xs: Any, what: str) -> list[str]:
    import torch.fx

    out = []
    for x in xs:
        if not isinstance(x, torch.fx.Node) or not hasattr(meta(x), "shape"):
            raise refuse(n, f"{what} must be tensors (got {x!r})")
        out.append(c.arg(x))
    return out


@aten("scan")
def _scan(c: Ctx, n: Any) -> list[str]:
    """torch's scan HOP (combine_graph, init, xs, additional_inputs): the wrapper already moved
    the scanned dim to 0 and flipped for `reverse`; results are the carries, then the ys."""
    a = list(n.args) + [()] * (4 - len(n.args))
    gm, init, xs, extra = _subgraph(n, a[0]), list(a[1]), list(a[2]), list(a[3])
    init_v, xs_v = _tensors(c, n, init, "scan's init"), _tensors(c, n, xs, "scan's xs")
    cl, xl = sym("carry", c.taken), sym("xs", c.taken)
    pc = [sym(f"carry{j}", c.taken) for j in range(len(init))]
    px = [sym(f"x{j}", c.taken) for j in range(len(xs))]
    unpack = [f"(setf {p} (nth {cl} {j}))" for j, p in enumerate(pc)] + [f"(setf {p} (nth {xl} {j}))"
                                                                        for j, p in enumerate(px)]
    lines, outs = body(c, gm, pc + px + [c.arg(e) for e in extra])
    nc = len(init)
    lam = f"(lambda ({cl} {xl}) {' '.join(unpack + lines)} (next {_lst(outs[:nc])} {_lst(outs[nc:])}))"
    r = c.emit(n.name, f"(scan {lam} {_lst(init_v)} {_lst(xs_v)})")
    return [f"(nth (nth {r} 0) {j})" for j in range(nc)] + [f"(nth (nth {r} 1) {j})" for j in range(len(outs) - nc)]


@aten("while_loop")
def _while(c: Ctx, n: Any) -> list[str]:
    """torch's while_loop HOP (cond_graph, body_graph, carried_inputs, additional_inputs)."""
    a = list(n.args) + [()] * (4 - len(n.args))
    cg, bg, carried, extra = _subgraph(n, a[0]), _subgraph(n, a[1]), list(a[2]), list(a[3])
    init = _tensors(c, n, carried, "while_loop's carried inputs")
    names = [sym(f"state{j}", c.taken) for j in range(len(init))]
    ex = [c.arg(e) for e in extra]
    clines, (cout,) = body(c, cg, names + ex)
    blines, bouts = body(c, bg, names + ex)
    binds = " ".join(f"({nm} {v})" for nm, v in zip(names, init))
    r = c.emit(n.name, f"(while ({binds}) {_progn(clines, cout)} {' '.join(blines)} (next {' '.join(bouts)}))")
    return [r] if len(init) == 1 else [f"(nth {r} {j})" for j in range(len(init))]


@aten("cond")
def _cond(c: Ctx, n: Any) -> list[str]:
    """torch.cond's HOP (pred, true_graph, false_graph, operands): only the taken branch runs."""
    pred, tg, fg, ops = n.args[0], _subgraph(n, n.args[1]), _subgraph(n, n.args[2]), list(n.args[3])
    ov = [c.arg(o) for o in ops]
    if isinstance(pred, bool):  # torch decided it while tracing
        lines, outs = body(c, tg if pred else fg, ov)
        c.lines.extend(lines)
        return outs
    tl, to = body(c, tg, ov)
    fl, fo = body(c, fg, ov)
    r = c.emit(n.name, f"(if {c.arg(pred)} {_progn(tl, _lst(to))} {_progn(fl, _lst(fo))})")
    return [f"(nth {r} {j})" for j in range(len(to))]


@aten("aten.flip.default")
def _flip(c: Ctx, n: Any) -> str:
    """Written as text, not through caten.Tensor, so that it takes symbolic sizes: torch's scan
    with `reverse=True` flips its xs and ys around the loop along the (dynamic) scanned dim."""
    x, dims = n.args[0], n.args[1]
    r = max(meta(x).dim(), 1)
    return f"(flip {c.arg(x)} :axis {lst(sorted({d % r for d in dims}))})" if dims else c.arg(x)


def _recurrent(kind: str) -> Any:
    @via
    def lower(b: Any, n: Any) -> Any:
        from caten.tensor.nn import recurrent as R

        x, hx, params, has_biases, layers, dropout, train, bidir, batch_first = n.args[:9]
        if dropout and train:
            raise refuse(n, "dropout between recurrent layers in training mode draws from torch's random stream")
        args = (b.t(x), b.t(hx), b.t(params), has_biases, layers, 0.0, False, bidir, batch_first)
        if kind == "lstm":
            return list(R.lstm(*args))
        if kind == "gru":
            return list(R.gru(*args))
        return list(R.rnn(*args, nonlinearity=kind.removeprefix("rnn_")))
    return lower


for _k in KEEP:
    aten(_k)(_recurrent(_k.split(".")[1]))


# nn.LSTM / GRU / RNN over a dynamic length --------------------------------------------------------
class recurrent_as_scan:
    """While torch.export captures a module, its nn.LSTM / GRU / RNN layers run as torch's own
    `scan` (the same cell, torch's numerics): torch's recurrent kernels unroll while tracing and
    so pin the sequence length, the scan keeps it a symbol (imported as one loop above)."""

    def __init__(self, module: Any) -> None:
        import torch

        self.layers = [m for m in module.modules() if type(m) in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)]

    def __enter__(self) -> recurrent_as_scan:
        for m in self.layers:
            m.forward = _scan_forward(m)
        return self

    def __exit__(self, *exc: Any) -> None:
        for m in self.layers:
            del m.forward


def _scan_forward(m: Any) -> Any:
    import torch
    import torch.nn.functional as TF
    from torch._higher_order_ops.scan import scan as tscan

    mode = {"LSTM": "LSTM", "GRU": "GRU"}.get(type(m).__name__) or ("RNN_" + m.nonlinearity.upper())
    d, hid = 1 + m.bidirectional, m.hidden_size
    h_out = getattr(m, "proj_size", 0) or hid

    def weights(layer: int, j: int) -> list[Any]:
        sfx = "_reverse" if j else ""
        return [getattr(m, f"{w}_l{layer}{sfx}", None) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                                                  "weight_hr")]

    def direction(seq: Any, h0: Any, c0: Any, p: list[Any], reverse: bool) -> tuple[Any, Any, Any]:
        w_ih, w_hh, b_ih, b_hh, w_hr = p
        gx = TF.linear(seq, w_ih, b_ih)

        def cell(carry: Any, g: Any) -> Any:
            if mode == "LSTM":
                h, c = carry
                i, f, gg, o = (g + TF.linear(h, w_hh, b_hh)).chunk(4, -1)
                c2 = f.sigmoid() * c + i.sigmoid() * gg.tanh()
                h2 = o.sigmoid() * c2.tanh()
                h2 = TF.linear(h2, w_hr) if w_hr is not None else h2
                return (h2, c2), h2.clone()
            h = carry[0]
            if mode == "GRU":
                xr, xz, xn = g.chunk(3, -1)
                hr, hz, hn = TF.linear(h, w_hh, b_hh).chunk(3, -1)
                r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
                h2 = (1 - z) * (xn + r * hn).tanh() + z * h
            else:
                a = g + TF.linear(h, w_hh, b_hh)
                h2 = a.tanh() if mode == "RNN_TANH" else a.relu()
            return (h2,), h2.clone()

        init = (h0.clone(), c0.clone()) if mode == "LSTM" else (h0.clone(),)
        fin, ys = tscan(cell, init, gx, reverse=reverse)
        return ys, fin[0], fin[1] if mode == "LSTM" else None

    def forward(input: Any, hx: Any = None) -> Any:
        if m.dropout and m.training and m.num_layers > 1:
            raise Error(f"{type(m).__name__}: dropout between layers in training mode cannot be imported",
                        hint="export the model in eval mode (model.eval())")
        unbatched = input.dim() == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if m.batch_first else input)
        n = x.shape[1]
        if hx is None:
            h0 = x.new_zeros(m.num_layers * d, n, h_out)
            c0 = x.new_zeros(m.num_layers * d, n, hid)
        else:
            h0, c0 = hx if mode == "LSTM" else (hx, None)
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1) if c0 is not None else None
        hs, cs, seq = [], [], x
        for layer in range(m.num_layers):
            outs = []
            for j in range(d):
                k = layer * d + j
                ys, h, c = direction(seq, h0[k], c0[k] if c0 is not None else None, weights(layer, j), j == 1)
                outs.append(ys)
                hs.append(h)
                cs.append(c)
            seq = outs[0] if d == 1 else torch.cat(outs, -1)
        out = seq.squeeze(1) if unbatched else (seq.transpose(0, 1) if m.batch_first else seq)
        h_n = torch.stack(hs)
        h_n = h_n.squeeze(1) if unbatched else h_n
        if mode != "LSTM":
            return out, h_n
        c_n = torch.stack(cs)
        return out, (h_n, c_n.squeeze(1) if unbatched else c_n)

    return forward
