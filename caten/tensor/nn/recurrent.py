"""torch.nn's recurrent layers RNN, LSTM and GRU: torch's parameter names and layouts
(`weight_ih_l0`, `bias_hh_l1_reverse`, gates stacked i,f,g,o for LSTM and r,z,n for GRU), so a
torch state_dict loads as is. The time loop is unrolled into the lazy graph, one cell a step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import state as _state
from caten.tensor.nn import functional as F
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}


class _RNNBase(Module):
    cell_state = False  # LSTM's c beside h

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0):
        if proj_size:
            raise Error(f"{type(self).__name__}: proj_size is not supported")
        self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
        self.batch_first, self.dropout, self.bidirectional = batch_first, dropout, bidirectional
        g, k = _GATES[type(self).__name__] * hidden_size, 1 / math.sqrt(hidden_size)
        rng = _state.np_rng()
        for layer in range(num_layers):
            for sfx in ("", "_reverse")[: 1 + bidirectional]:
                n_in = input_size if layer == 0 else hidden_size * (1 + bidirectional)
                shapes = [("weight_ih", (g, n_in)), ("weight_hh", (g, hidden_size))]
                shapes += [("bias_ih", (g,)), ("bias_hh", (g,))] if bias else []
                for name, shape in shapes:
                    setattr(self, f"{name}_l{layer}{sfx}", Parameter(rng.uniform(-k, k, shape).astype(np.float32)))

    def _cell(self, x: Tensor, h: Tensor, c: Tensor | None, p: list[Any]) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    def forward(self, x: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        name, lstm = type(self).__name__, self.cell_state
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise Error(f"{name}: input {list(x.shape)}; it takes [L, N, {self.input_size}] "
                        f"(batch_first: [N, L, {self.input_size}]) or [L, {self.input_size}]")
        unbatched = x.ndim == 2
        if unbatched:
            x = x.reshape([x.shape[0], 1, x.shape[1]])
        elif self.batch_first:
            x = x.permute([1, 0, 2])
        steps, n, d = x.shape[0], x.shape[1], 1 + self.bidirectional
        h0, c0 = (hx if lstm else (hx, None)) if hx is not None else (None, None)
        if unbatched and h0 is not None:
            h0, c0 = h0.reshape([h0.shape[0], 1, -1]), None if c0 is None else c0.reshape([c0.shape[0], 1, -1])
        zeros = Tensor(np.zeros((n, self.hidden_size), np.float32), runtime=x.runtime)
        hs, cs = [], []
        seq = [x[t] for t in range(steps)]
        for layer in range(self.num_layers):
            outs = []
            for j, sfx in enumerate(("", "_reverse")[:d]):
                i = layer * d + j
                p = [getattr(self, f"{w}_l{layer}{sfx}", None)
                     for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
                h = h0[i] if h0 is not None else zeros
                c = (c0[i] if c0 is not None else zeros) if lstm else None
                order = range(steps - 1, -1, -1) if sfx else range(steps)
                ys: list[Tensor | None] = [None] * steps
                for t in order:
                    h, c = self._cell(seq[t], h, c, p)
                    ys[t] = h
                outs.append(ys)
                hs.append(h)
                cs.append(c)
            seq = [o[0] if d == 1 else F.concat([o[0], o[1]], -1) for o in zip(*outs)]
            if self.dropout and self.training and layer < self.num_layers - 1:
                seq = [F.dropout(s, self.dropout) for s in seq]
        out = F.concat([s.reshape([1] + list(s.shape)) for s in seq], 0)
        h_n = F.concat([h.reshape([1] + list(h.shape)) for h in hs], 0)
        c_n = F.concat([c.reshape([1] + list(c.shape)) for c in cs], 0) if lstm else None
        if unbatched:
            out, h_n = out.reshape([steps, -1]), h_n.reshape([h_n.shape[0], -1])
            c_n = c_n.reshape([c_n.shape[0], -1]) if lstm else None
        elif self.batch_first:
            out = out.permute([1, 0, 2])
        return out, ((h_n, c_n) if lstm else h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += f", batch_first={self.batch_first}"
        if self.dropout:
            s += f", dropout={self.dropout}"
        return s + (f", bidirectional={self.bidirectional}" if self.bidirectional else "")


def _affine(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    y = x @ w.T
    return y + b if b is not None else y


def _chunks(t: Tensor, k: int) -> list[Tensor]:
    h = t.shape[-1] // k
    return [t[:, i * h:(i + 1) * h] for i in range(k)]


class RNN(_RNNBase):
    """h' = tanh (or relu) of (x W_ih^T + b_ih + h W_hh^T + b_hh)."""

    def __init__(self, *args: Any, nonlinearity: str = "tanh", **kwargs: Any):
        if nonlinearity not in ("tanh", "relu"):
            raise Error(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(*args, **kwargs)
        self.nonlinearity = nonlinearity

    def _cell(self, x: Tensor, h: Tensor, c: Tensor | None, p: list[Any]) -> tuple[Tensor, Tensor | None]:
        a = _affine(x, p[0], p[2]) + _affine(h, p[1], p[3])
        return (a.tanh() if self.nonlinearity == "tanh" else a.relu()), None


class LSTM(_RNNBase):
    """Gates i, f, g, o: c' = f c + i g, h' = o tanh(c')."""

    cell_state = True

    def _cell(self, x: Tensor, h: Tensor, c: Tensor | None, p: list[Any]) -> tuple[Tensor, Tensor | None]:
        i, f, g, o = _chunks(_affine(x, p[0], p[2]) + _affine(h, p[1], p[3]), 4)
        c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c2.tanh(), c2


class GRU(_RNNBase):
    """Gates r, z, n: n = tanh(x W_in + b_in + r (h W_hn + b_hn)), h' = (1 - z) n + z h."""

    def _cell(self, x: Tensor, h: Tensor, c: Tensor | None, p: list[Any]) -> tuple[Tensor, Tensor | None]:
        xr, xz, xn = _chunks(_affine(x, p[0], p[2]), 3)
        hr, hz, hn = _chunks(_affine(h, p[1], p[3]), 3)
        r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        return (1 - z) * n + z * h, None
