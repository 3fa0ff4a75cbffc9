"""Tensor parallel layers (Megatron-LM's split of a linear layer over the ranks).

`ColumnParallelLinear` keeps rank r's rows of the weight (its share of the output features): the
input, the same on every rank, goes through `grad-all-reduce` sum (Megatron's f: the ranks'
shares of the input's gradient summed), and its output is this rank's slice of the features.
`RowParallelLinear` keeps rank r's columns (its share of the input features), takes the column-
parallel layer's slice, and sums the ranks' partial products with `all-reduce-replicated`
(Megatron's g: the gradient passes as it is, the loss being computed alike on every rank). A
column-parallel layer, an elementwise activation, then a row-parallel layer is Megatron's MLP:
one all-reduce forward, one backward. Each is built from the whole layer (`from_linear`), so a
model is made once and split, every rank taking its part.
"""

from __future__ import annotations

import numpy as np

from caten.distributed.tensor_ops import grad_all_reduce
from caten.errors import Error
from caten.ir import collective
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor, apply


def _part(n: int, what: str) -> slice:
    w, r = collective.world_size(), collective.rank()
    if n % w:
        raise Error(f"{what} of {n} features does not split into {w} equal parts",
                    hint="choose a feature count divisible by the world size")
    return slice(r * n // w, (r + 1) * n // w)


def _param(a: np.ndarray, like: Tensor) -> Parameter:
    p = Parameter(np.ascontiguousarray(a), requires_grad=like.requires_grad)
    p.runtime = like.runtime
    return p


class ColumnParallelLinear(Module):
    """y_r = x W_r^T + b_r: rank r's slice of a Linear's output features (torch's [out, in] layout)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        self.weight, self.bias = weight, bias

    @classmethod
    def from_linear(cls, linear: Module) -> ColumnParallelLinear:
        part = _part(linear.out_features, "a column-parallel layer's output")
        w = _param(linear.weight.numpy()[part], linear.weight)
        b = _param(linear.bias.numpy()[part], linear.bias) if linear.bias is not None else None
        return cls(w, b)

    def forward(self, x: Tensor) -> Tensor:
        y = grad_all_reduce(x, "sum") @ self.weight.T
        return y + self.bias if self.bias is not None else y


class RowParallelLinear(Module):
    """y = sum_r x_r W_r^T + b: rank r holds a Linear's input features slice r (x_r, its input, is
    a column-parallel layer's output); the sum is an all-reduce whose gradient passes as it is."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        self.weight, self.bias = weight, bias

    @classmethod
    def from_linear(cls, linear: Module) -> RowParallelLinear:
        part = _part(linear.in_features, "a row-parallel layer's input")
        w = _param(linear.weight.numpy()[:, part], linear.weight)
        b = _param(linear.bias.numpy(), linear.bias) if linear.bias is not None else None
        return cls(w, b)

    def forward(self, x: Tensor) -> Tensor:
        y = apply("all-reduce-replicated", [x @ self.weight.T], {})
        return y + self.bias if self.bias is not None else y


class ParallelSelfAttention(Module):
    """Multi-head self-attention split by heads (Megatron): the query, key and value projections
    are column-parallel (rank r computes heads r*H/w .. (r+1)*H/w - 1), attention runs on this
    rank's heads alone, and the output projection is row-parallel. x is [B, S, D] on every rank;
    `causal` masks future positions. One all-reduce forward (and one backward)."""

    def __init__(self, q: Module, k: Module, v: Module, out: Module, num_heads: int, causal: bool = False):
        w = collective.world_size()
        if num_heads % w:
            raise Error(f"{num_heads} heads do not split over {w} ranks", hint="choose a head count divisible by "
                        "the world size")
        self.q, self.k, self.v, self.out = q, k, v, out
        self.heads, self.causal = num_heads // w, causal

    @classmethod
    def from_linears(cls, q: Module, k: Module, v: Module, out: Module, num_heads: int,
                     causal: bool = False) -> ParallelSelfAttention:
        """From the whole model's four Linear layers (D -> D each, heads contiguous in the features)."""
        col = ColumnParallelLinear.from_linear
        return cls(col(q), col(k), col(v), RowParallelLinear.from_linear(out), num_heads, causal)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        h = self.heads

        def split(t: Tensor) -> Tensor:  # [B, S, h*d] -> [B, h, S, d]
            return t.reshape([b, s, h, t.shape[-1] // h]).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / float(np.sqrt(q.shape[-1])))
        if self.causal:
            mask = np.triu(np.full((s, s), -np.inf, np.float32), 1)
            scores = scores + Tensor(mask, dtype=scores.dtype, runtime=x.runtime)
        att = scores.softmax(-1) @ v  # [B, h, S, d]
        return self.out(att.permute(0, 2, 1, 3).reshape([b, s, h * q.shape[-1]]))
