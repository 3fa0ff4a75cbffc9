"""torch.nn.MultiheadAttention: torch's parameters (`in_proj_weight` [3E, E], `in_proj_bias`,
`out_proj`), layouts ([L, N, E], or [N, L, E] with batch_first) and masks (a bool mask marks
what may NOT be attended; a float mask is added to the scores)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.nn import functional as F
from caten.tensor.nn import init
from caten.tensor.nn.layers import Linear
from caten.tensor.nn.module import Module, Parameter
from caten.tensor.tensor import Tensor


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for the output projection (so `repr` matches)."""


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False):
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or (vdim not in (None, embed_dim)):
            raise Error("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim other than embed_dim "
                        "are not supported")
        if embed_dim % num_heads:
            raise Error(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = init.xavier_uniform_(Parameter(np.zeros((3 * embed_dim, embed_dim), np.float32)))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, np.float32)) if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        if query.ndim != 3:
            raise Error(f"MultiheadAttention: query of rank {query.ndim}; it takes [L, N, E] (or [N, L, E] "
                        "with batch_first)")
        if not self.batch_first:
            query, key, value = (t.permute([1, 0, 2]) for t in (query, key, value))
        n, lq, e = query.shape
        ls, h, d = key.shape[1], self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        q, k, v = (F.linear(t, w[i * e:(i + 1) * e], None if b is None else b[i * e:(i + 1) * e])
                   for i, t in enumerate((query, key, value)))
        q, k, v = (t.reshape([n, t.shape[1], h, d]).permute([0, 2, 1, 3]) for t in (q, k, v))
        scores = (q * math.sqrt(1.0 / d)) @ k.permute([0, 1, 3, 2])  # [N, h, L, S]
        if attn_mask is None and is_causal:
            attn_mask = Tensor(np.triu(np.ones((lq, ls), bool), 1), runtime=query.runtime)
        if attn_mask is not None:
            scores = _masked(scores, attn_mask, [1, 1, lq, ls] if attn_mask.ndim == 2 else [n, h, lq, ls])
        if key_padding_mask is not None:
            scores = _masked(scores, key_padding_mask, [n, 1, 1, ls])
        weights = scores.softmax(axis=-1)
        if self.dropout and self.training:
            weights = F.dropout(weights, self.dropout)
        out = (weights @ v).permute([0, 2, 1, 3]).reshape([n, lq, e])
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.permute([1, 0, 2])
        if not need_weights:
            return out, None
        return out, (weights.mean(axis=1) if average_attn_weights else weights)

    def extra_repr(self) -> str:
        return ""


def _masked(scores: Tensor, mask: Any, shape: list[int]) -> Tensor:
    """A bool mask (True: not attended) as -inf, a float mask added, broadcast as `shape`."""
    m = mask if isinstance(mask, Tensor) else Tensor(np.asarray(mask), runtime=scores.runtime)
    m = m.reshape(shape)
    if m.dtype == "bool":
        return Tensor.where(m, -math.inf, scores)
    return scores + m
