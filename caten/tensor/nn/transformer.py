"""torch.nn.TransformerEncoderLayer and TransformerEncoder: torch's sub-module names (self_attn,
linear1, linear2, norm1, norm2, dropouts), post-norm by default or `norm_first`."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from caten.errors import Error
from caten.tensor.nn import functional as F
from caten.tensor.nn.attention import MultiheadAttention
from caten.tensor.nn.layers import Dropout, Linear
from caten.tensor.nn.module import Module, ModuleList
from caten.tensor.nn.norms import LayerNorm
from caten.tensor.tensor import Tensor

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True):
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise Error(f"TransformerEncoderLayer: activation {activation!r} is not 'relu' or 'gelu'")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self._activation = _ACTIVATIONS[activation] if isinstance(activation, str) else activation

    def _sa(self, x: Tensor, mask: Any, pad: Any, causal: bool) -> Tensor:
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False,
                                            is_causal=causal)[0])

    def _ff(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self._activation(self.linear1(x)))))

    def forward(self, src: Tensor, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff(x))


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` (torch's deep copies), then `norm` if given; torch's
    fast-path switches (`enable_nested_tensor`, `mask_check`) are accepted and change no value."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 **kwargs: Any):
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x
