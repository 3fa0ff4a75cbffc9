"""torch.nn's recurrent layers RNN, LSTM and GRU: torch's parameter names and layouts
(`weight_ih_l0`, `bias_hh_l1_reverse`, `weight_hr_l0` for LSTM's proj_size; gates stacked
i,f,g,o for LSTM and r,z,n for GRU), so a torch state_dict loads as is.

Each layer and direction is ONE `caten.scan` over time (a loop in the program, not one cell per
step): the input projection x W_ih^T + b_ih of every step is one matrix product before the
loop, the body does the recurrent product and the gates. `lstm`, `gru` and `rnn` take ATen's
flat arguments (`aten.lstm.input`), so the torch importer lowers those calls through them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state as _state
from caten.tensor.control import scan
from caten.tensor.lazy import np_dtype
from caten.tensor.nn import functional as F
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor

__all__ = ["RNN", "LSTM", "GRU", "lstm", "gru", "rnn"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _mm(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    y = x @ w.T
    return y + b if b is not None else y


def _chunks(t: Tensor, k: int) -> list[Tensor]:
    h = t.shape[-1] // k
    return [t[..., i * h:(i + 1) * h] for i in range(k)]


def _direction(mode: str, x: Tensor, h0: Tensor, c0: Tensor | None, p: Sequence[Any],
               reverse: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """One layer, one direction over x [T, N, I]: (ys [T, N, H'], h_T, c_T), one scan."""
    w_ih, w_hh, b_ih, b_hh, w_hr = p
    steps, n = x.shape[0], x.shape[1]
    gx = _mm(x.reshape([steps * n, x.shape[2]]), w_ih, b_ih).reshape([steps, n, w_ih.shape[0]])

    def cell(carry: Any, g: Tensor) -> Any:
        if mode == "LSTM":
            h, c = carry
            i, f, gg, o = _chunks(g + _mm(h, w_hh, b_hh), 4)
            c2 = f.sigmoid() * c + i.sigmoid() * gg.tanh()
            h2 = o.sigmoid() * c2.tanh()
            h2 = h2 @ w_hr.T if w_hr is not None else h2
            return (h2, c2), h2
        if mode == "GRU":
            xr, xz, xn = _chunks(g, 3)
            hr, hz, hn = _chunks(_mm(carry, w_hh, b_hh), 3)
            r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
            nn_ = (xn + r * hn).tanh()
            h2 = (1 - z) * nn_ + z * carry
            return h2, h2
        a = g + _mm(carry, w_hh, b_hh)
        h2 = a.tanh() if mode == "RNN_TANH" else a.relu()
        return h2, h2

    if mode == "LSTM":
        (h, c), ys = scan(cell, (h0, c0), gx, reverse=reverse)
        return ys, h, c
    h, ys = scan(cell, h0, gx, reverse=reverse)
    return ys, h, None


def _run(mode: str, x: Tensor, hx: Sequence[Tensor | None], params: Sequence[Tensor], has_biases: bool,
         num_layers: int, dropout: float, train: bool, bidirectional: bool,
         batch_first: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """ATen's recurrent ops: x [T, N, I] (batch_first: [N, T, I]), hx as (h0, c0) of
    [L*D, N, H]; params flat per layer and direction: w_ih, w_hh, (b_ih, b_hh), (w_hr)."""
    d = 1 + bool(bidirectional)
    per = len(params) // (num_layers * d)
    if per * num_layers * d != len(params) or per not in (2 + 2 * has_biases, 3 + 2 * has_biases):
        raise Error(f"{mode.lower()}: {len(params)} weights for {num_layers} layer(s) x {d} direction(s)")
    proj = per == 3 + 2 * has_biases
    if batch_first:
        x = x.permute([1, 0, 2])
    hs, cs = [], []
    seq = x
    for layer in range(num_layers):
        outs = []
        for j in range(d):
            k = layer * d + j
            p = list(params[k * per:(k + 1) * per])
            w = p[:2] + (p[2:4] if has_biases else [None, None]) + ([p[-1]] if proj else [None])
            c0 = hx[1][k] if mode == "LSTM" else None
            ys, h, c = _direction(mode, seq, hx[0][k], c0, w, reverse=j == 1)
            outs.append(ys)
            hs.append(h)
            cs.append(c)
        seq = outs[0] if d == 1 else F.concat(outs, -1)
        if dropout and train and layer < num_layers - 1:
            seq = F.dropout(seq, dropout)
    out = seq.permute([1, 0, 2]) if batch_first else seq
    h_n = F.concat([h.reshape([1] + list(h.shape)) for h in hs], 0)
    c_n = F.concat([c.reshape([1] + list(c.shape)) for c in cs], 0) if mode == "LSTM" else None
    return out, h_n, c_n


def lstm(input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor], has_biases: bool, num_layers: int,
         dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """`aten.lstm.input`: (output, h_n, c_n)."""
    out, h, c = _run("LSTM", input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    assert c is not None
    return out, h, c


def gru(input: Tensor, hx: Tensor, params: Sequence[Tensor], has_biases: bool, num_layers: int,
        dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
    """`aten.gru.input`: (output, h_n)."""
    out, h, _ = _run("GRU", input, (hx,), params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return out, h


def rnn(input: Tensor, hx: Tensor, params: Sequence[Tensor], has_biases: bool, num_layers: int,
        dropout: float, train: bool, bidirectional: bool, batch_first: bool,
        nonlinearity: str = "tanh") -> tuple[Tensor, Tensor]:
    """`aten.rnn_tanh.input` / `aten.rnn_relu.input`: (output, h_n)."""
    mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
    out, h, _ = _run(mode, input, (hx,), params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return out, h


class _RNNBase(Module):
    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0):
        name = type(self).__name__
        if proj_size and self.mode != "LSTM":
            raise Error(f"{name}: proj_size is an LSTM argument", hint="torch's RNN and GRU have no projection")
        if proj_size < 0 or proj_size >= hidden_size and proj_size:
            raise Error(f"{name}: proj_size must be in [0, hidden_size), got {proj_size}")
        if not 0 <= dropout <= 1:
            raise Error(f"{name}: dropout must be a probability in [0, 1], got {dropout}")
        self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
        self.batch_first, self.dropout, self.bidirectional = batch_first, float(dropout), bidirectional
        self.proj_size = proj_size
        g, k = _GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
        h_out = proj_size or hidden_size
        rng = _state.np_rng()
        for layer in range(num_layers):
            for sfx in ("", "_reverse")[: 1 + bidirectional]:
                n_in = input_size if layer == 0 else h_out * (1 + bidirectional)
                shapes = [("weight_ih", (g, n_in)), ("weight_hh", (g, h_out))]
                shapes += [("bias_ih", (g,)), ("bias_hh", (g,))] if bias else []
                shapes += [("weight_hr", (proj_size, hidden_size))] if proj_size else []
                for name, shape in shapes:
                    setattr(self, f"{name}_l{layer}{sfx}", Parameter(rng.uniform(-k, k, shape).astype(np.float32)))

    def _params(self) -> list[Tensor]:
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        names += ["weight_hr"] if self.proj_size else []
        return [getattr(self, f"{w}_l{layer}{sfx}") for layer in range(self.num_layers)
                for sfx in ("", "_reverse")[: 1 + self.bidirectional] for w in names]

    def forward(self, x: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        name, lstm_ = type(self).__name__, self.mode == "LSTM"
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise Error(f"{name}: input {list(x.shape)}; it takes [L, N, {self.input_size}] "
                        f"(batch_first: [N, L, {self.input_size}]) or [L, {self.input_size}]")
        unbatched = x.ndim == 2
        if unbatched:
            x = x.reshape([x.shape[0], 1, x.shape[1]])
        n = x.shape[1] if unbatched or not self.batch_first else x.shape[0]
        layers = self.num_layers * (1 + self.bidirectional)
        h_out = self.proj_size or self.hidden_size
        want = [(layers, n, h_out)] + ([(layers, n, self.hidden_size)] if lstm_ else [])
        if hx is None:
            states = [Tensor(np.zeros(s, np_dtype(x.dtype)), runtime=x.runtime) for s in want]
        else:
            states = list(hx) if lstm_ else [hx]
            if len(states) != len(want):
                raise Error(f"{name}: hx must be {'a pair (h_0, c_0)' if lstm_ else 'one tensor h_0'}")
            if unbatched:
                states = [s.reshape([s.shape[0], 1, s.shape[-1]]) if s.ndim == 2 else s for s in states]
            for s, w in zip(states, want):
                if tuple(s.shape) != w:
                    raise Error(f"{name}: an initial state of shape {list(s.shape)}, expected {list(w)}")
        out, h_n, c_n = _run(self.mode, x, states, self._params(), self.bias, self.num_layers, self.dropout,
                             self.training, self.bidirectional, self.batch_first and not unbatched)
        if unbatched:
            out, h_n = out.reshape([out.shape[0], -1]), h_n.reshape([h_n.shape[0], -1])
            c_n = c_n.reshape([c_n.shape[0], -1]) if c_n is not None else None
        return out, ((h_n, c_n) if lstm_ else h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += f", batch_first={self.batch_first}"
        if self.dropout:
            s += f", dropout={self.dropout}"
        return s + (f", bidirectional={self.bidirectional}" if self.bidirectional else "")


class RNN(_RNNBase):
    """h' = tanh (or relu) of (x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(self, *args: Any, nonlinearity: str = "tanh", **kwargs: Any):
        if nonlinearity not in ("tanh", "relu"):
            raise Error(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(*args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(_RNNBase):
    """Gates i, f, g, o: c' = f c + i g, h' = o tanh(c') (times W_hr^T with proj_size)."""

    mode = "LSTM"


class GRU(_RNNBase):
    """Gates r, z, n: n = tanh(x W_in + b_in + r (h W_hn + b_hn)), h' = (1 - z) n + z h."""

    mode = "GRU"
