"""torch.nn.functional.scaled_dot_product_attention, composed of Tensor ops (matmul, where,
softmax) so its gradient comes from the library's VJP rules; torch's semantics, its safe softmax
(a row that attends nothing is 0) and its error messages."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor

__all__ = ["scaled_dot_product_attention"]

FLOATS = ("f16", "bf16", "f32", "f64")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
                                 enable_gqa: bool = False) -> Tensor:
    """torch's F.scaled_dot_product_attention: softmax(q k^T * scale + bias) v over the last two
    dims, batch dims broadcast. A bool mask marks what MAY be attended (True), a float mask is
    added; is_causal keeps the lower triangle, aligned top-left. A row that attends nothing is 0
    (torch's safe softmax), with a 0 gradient. f16/bf16 are computed at f32 (torch's CPU kernel)."""
    if dropout_p != 0:
        raise Error(f"scaled_dot_product_attention: dropout_p={dropout_p} is not supported (torch's dropout "
                    "draws from its own generator)", hint="use dropout_p=0.0, or F.dropout on the weights "
                    "of an explicit softmax(q @ k.transpose(-2, -1) * scale) @ v")
    qkv = (query, key, value)
    if any(t.ndim < 2 for t in qkv):
        raise Error("Expected query, key, and value to all be at least 2 dimensional, but got query.dim: "
                    f"{query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead.")
    if len({t.dtype for t in qkv}) > 1:
        raise Error(f"Expected query, key, and value to have the same dtype, but got query.dtype: {query.dtype} "
                    f"key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if query.dtype not in FLOATS:
        raise Error(f"scaled_dot_product_attention: not implemented for {query.dtype} (torch's takes floats)")
    if is_causal and attn_mask is not None:
        raise Error("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if enable_gqa:
        key, value = (_gqa(query, t, name) for t, name in ((key, "key"), (value, "value")))
    dt = query.dtype
    q, k, v = (t.cast("f32") if dt in ("f16", "bf16") else t for t in (query, key, value))
    lq, ls, e = query.shape[-2], key.shape[-2], query.shape[-1]
    sc = (1.0 / math.sqrt(e) if e else math.inf) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * sc
    allowed = None
    if is_causal:
        allowed = Tensor(np.tril(np.ones((lq, ls), bool)), runtime=query.runtime)
    if attn_mask is not None:
        m = attn_mask if isinstance(attn_mask, Tensor) else Tensor(np.asarray(attn_mask), runtime=query.runtime)
        if m.dtype == "bool":
            allowed = m
        elif m.dtype in ("f32", dt):
            scores = scores + m.cast(scores.dtype)
        else:
            raise Error("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                        f"attn_mask.dtype: {m.dtype} and query.dtype: {dt} instead.")
    if allowed is not None:
        scores = Tensor.where(allowed, scores, -math.inf)
    if ls == 0:  # no key: every row attends nothing, torch's zeros (a matmul over the empty dim)
        return (scores @ v).cast(dt)
    dead = (scores == -math.inf).all(dim=-1, keepdim=True)  # torch's _safe_softmax: such a row is 0
    zero = Tensor(np.zeros((), np.float32 if dt in ("f16", "bf16") else np_dtype(dt)), runtime=query.runtime)
    weights = Tensor.where(dead, zero, Tensor.where(dead, zero, scores).softmax(-1))
    return (weights @ v).cast(dt)


def _gqa(query: Tensor, t: Tensor, name: str) -> Tensor:
    """key/value heads (dim -3) repeated to the query's, each head `hq // hk` times in a row."""
    if query.ndim < 3 or t.ndim < 3:
        return t
    hq, hk = query.shape[-3], t.shape[-3]
    if hk == 0 or hq % hk:
        raise Error(f"Number of heads in key and value must divide the number of heads in query "
                    f"({name} has {hk}, query {hq})")
    return t if hq == hk else t.repeat_interleave(hq // hk, dim=-3)
