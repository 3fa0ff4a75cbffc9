"""torch.nn.functional's activations and losses over caten Tensors, each with torch's keywords,
defaults and reductions; the modules of `activations.py` and `loss.py` call these.

Built from Tensor ops: a class index becomes a one-hot row (the target compared with
`arange(C)`) and picking a class is a one-hot multiply-sum, so the gradients come from the
library's VJP rules. What torch defines and caten cannot compute the same way is an Error.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.lazy import np_dtype
from caten.tensor.tensor import Tensor, apply

FLOATS = ("f16", "bf16", "f32", "f64")
REDUCTIONS = ("mean", "sum", "none")


def concat(xs: list[Tensor], axis: int) -> Tensor:
    """The library's `concat` (one spelling, whatever the Tensor method's torch-style signature)."""
    return xs[0] if len(xs) == 1 else apply("concat", list(xs), {"axis": axis})


# activations --------------------------------------------------------------------------------
def relu(x: Tensor) -> Tensor:
    return x.relu()


def relu6(x: Tensor) -> Tensor:
    return hardtanh(x, 0.0, 6.0)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """The value clamped; the gradient 0 at and beyond the bounds and whole elsewhere, nan included
    (torch's hardtanh_backward)."""
    edge = (x <= min_val) | (x >= max_val)
    return Tensor.where(x < min_val, min_val, Tensor.where(x > max_val, max_val, Tensor.where(edge, x.detach(), x)))


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return Tensor.where(x > 0, x, x * negative_slope)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "none":
        return x.gelu()
    if approximate != "tanh":
        raise Error(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return Tensor.where(x > 0, x, alpha * (x.exp() - 1))


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + e**(beta x)) / beta, and x itself where beta x > threshold (torch's)."""
    bx = x * beta if beta != 1 else x
    sp = bx.softplus() if beta == 1 else bx.softplus() / beta
    return Tensor.where(bx > threshold, x, sp)


def hardsigmoid(x: Tensor) -> Tensor:
    return relu6(x + 3) / 6


def hardswish(x: Tensor) -> Tensor:
    return x * relu6(x + 3) / 6


def mish(x: Tensor) -> Tensor:
    return x * x.softplus().tanh()


def selu(x: Tensor) -> Tensor:
    return x.selu()


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return Tensor.where(x > 0, x, alpha * ((x / alpha).exp() - 1))


def logsigmoid(x: Tensor) -> Tensor:
    return -(-x).softplus()


def softsign(x: Tensor) -> Tensor:
    return x / (1 + x.abs())


def tanhshrink(x: Tensor) -> Tensor:
    return x - x.tanh()


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """x outside [-lambd, lambd], else 0; nan passes through with gradient 1, as torch's."""
    return Tensor.where((x >= -lambd) & (x <= lambd), 0.0, x)


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    """x shrunk toward 0 by lambd, x * 0 within the band
    (torch's scalar loop's -0.0); nan passes through with gradient 1 (torch's formula)."""
    return Tensor.where((x >= -lambd) & (x <= lambd), x * 0, Tensor.where(x > lambd, x - lambd, x + lambd))


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """x where positive, else weight * x, one weight a channel (axis 1) or one for all."""
    w = weight if weight.shape[0] == 1 or x.ndim < 2 else weight.reshape([weight.shape[0]] + [1] * (x.ndim - 2))
    return Tensor.where(x > 0, x, w * x)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b) for the two halves a, b of axis `dim`."""
    d = dim % x.ndim
    if x.shape[d] % 2:
        raise Error(f"glu: axis {dim} has odd size {x.shape[d]}; it is halved")
    h = x.shape[d] // 2
    lo, hi = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    lo[d], hi[d] = slice(0, h), slice(h, 2 * h)
    return x[tuple(lo)] * x[tuple(hi)].sigmoid()


def silu(x: Tensor) -> Tensor:
    return x.silu()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def _softmax_dim(dim: int | None, ndim: int) -> int:
    """torch's implicit dim for softmax(dim=None): 0 for ranks 0, 1 and 3, else 1."""
    return (0 if ndim in (0, 1, 3) else 1) if dim is None else dim


def softmax(x: Tensor, dim: int | None = None) -> Tensor:
    return x.softmax(axis=_softmax_dim(dim, x.ndim))


def log_softmax(x: Tensor, dim: int | None = None) -> Tensor:
    return x.log_softmax(axis=_softmax_dim(dim, x.ndim))


def softmin(x: Tensor, dim: int | None = None) -> Tensor:
    return (-x).softmax(axis=_softmax_dim(dim, x.ndim))


# losses -------------------------------------------------------------------------------------
def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise Error(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def _pair(name: str, a: Tensor, b: Any) -> tuple[Tensor, Tensor]:
    """Input and target of a pointwise loss: the same shape (torch broadcasts with a warning;
    a silent broadcast is the classic wrong loss, so caten refuses it)."""
    b = b if isinstance(b, Tensor) else Tensor(np.asarray(b, np.float32), runtime=a.runtime)
    if a.shape != b.shape:
        raise Error(f"{name}: input {list(a.shape)} and target {list(b.shape)} differ in shape",
                    hint="reshape the target to the input's shape (torch would broadcast them)")
    return a, b


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    a, b = _pair("mse_loss", input, target)
    d = a - b
    return _reduce(d * d, reduction)


def l1_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    a, b = _pair("l1_loss", input, target)
    return _reduce((a - b).abs(), reduction)


def huber_loss(input: Tensor, target: Any, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    a, b = _pair("huber_loss", input, target)
    d = (a - b).abs()
    return _reduce(Tensor.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def smooth_l1_loss(input: Tensor, target: Any, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    a, b = _pair("smooth_l1_loss", input, target)
    d = (a - b).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(Tensor.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def binary_cross_entropy(input: Tensor, target: Any, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """-(y log x + (1-y) log(1-x)), each log clamped at -100 as torch's."""
    x, y = _pair("binary_cross_entropy", input, target)
    floor = Tensor(np.asarray(-100, np_dtype(x.dtype)), runtime=x.runtime)
    loss = -(y * x.log().max(floor) + (1 - y) * (1 - x).log().max(floor))
    return _reduce(loss * weight if weight is not None else loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Any, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """torch's stable form: (1-y) z + (1 + (pw-1) y) (log1p(e**-|z|) + max(-z, 0))."""
    z, y = _pair("binary_cross_entropy_with_logits", input, target)
    soft = (-z.abs()).exp().log1p() + (-z).relu()
    if pos_weight is None:
        loss = (1 - y) * z + soft
    else:
        loss = (1 - y) * z + (1 + (pos_weight - 1) * y) * soft
    return _reduce(loss * weight if weight is not None else loss, reduction)


def kl_div(input: Tensor, target: Any, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """target (log target - input) pointwise, 0 where target is 0; 'batchmean' divides the sum
    by the batch size (torch's 'mean' divides by every element)."""
    x, t = _pair("kl_div", input, target)
    if log_target:
        loss = t.exp() * (t - x)
    else:
        safe = Tensor.where(t > 0, t, 1.0)
        loss = Tensor.where(t > 0, t * safe.log(), 0.0) - t * x
    if reduction == "batchmean":
        return loss.sum() / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)


def _class_last(x: Tensor) -> Tensor:
    """Input [N, C, d...] (or [C]) with the class axis moved last, where the one-hot rows lie."""
    if x.ndim <= 2:
        return x
    return x.permute([0] + list(range(2, x.ndim)) + [1])


def _targets(name: str, x: Tensor, target: Any, ignore_index: int) -> tuple[Tensor, Tensor]:
    """(one-hot rows [..., C] of the class indices, the mask of targets not ignored)."""
    t = target if isinstance(target, Tensor) else Tensor(np.asarray(target), runtime=x.runtime)
    c = x.shape[1] if x.ndim >= 2 else x.shape[0]
    want = ((x.shape[0],) + x.shape[2:]) if x.ndim >= 2 else ()
    if t.dtype in FLOATS or t.dtype == "bool":
        raise Error(f"{name}: class-index targets must be integers, got {t.dtype}",
                    hint="give int64 class indices, or probabilities of the input's shape (cross_entropy)")
    if t.shape != want:
        raise Error(f"{name}: target of shape {list(t.shape)} for input {list(x.shape)}",
                    hint=f"class indices of shape {list(want)} (the input less its class axis 1)")
    v = t.node.value
    if v is not None:
        bad = (v != ignore_index) & ((v < 0) | (v >= c))
        if bad.any():
            raise Error(f"{name}: target {int(v[bad].flat[0])} is out of bounds for {c} classes")
    classes = Tensor.arange(c, dtype=t.dtype, runtime=x.runtime)
    keep = (t != ignore_index).cast(x.dtype)
    onehot = (t.reshape(list(t.shape) + [1]) == classes).cast(x.dtype) * keep.reshape(list(t.shape) + [1])
    return onehot, keep


def _weights(weight: Tensor | None, onehot: Tensor, keep: Tensor, c: int) -> Tensor:
    """Each target's class weight (0 where ignored)."""
    if weight is None:
        return keep
    if weight.shape != (c,):
        raise Error(f"a class weight has one entry a class: shape [{c}], got {list(weight.shape)}")
    return (onehot * weight).sum(axis=-1)


def nll_loss(input: Tensor, target: Any, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-w[t] input[t] per target; 'mean' divides by the sum of the targets' weights (torch's)."""
    onehot, keep = _targets("nll_loss", input, target, ignore_index)
    w = _weights(weight, onehot, keep, onehot.shape[-1])
    loss = -(onehot * _class_last(input)).sum(axis=-1) * (w if weight is not None else 1.0)
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def cross_entropy(input: Tensor, target: Any, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch's cross_entropy: class indices (integers, the input less its class axis 1) or
    class probabilities (floats of the input's shape), weight, ignore_index, label_smoothing."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise Error(f"cross_entropy: label_smoothing must lie in [0, 1], got {label_smoothing}")
    if reduction not in REDUCTIONS:
        raise Error(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    cdim = 1 if input.ndim >= 2 else 0
    c = input.shape[cdim]
    logp = _class_last(input.log_softmax(axis=cdim))
    t = target if isinstance(target, Tensor) else Tensor(np.asarray(target), runtime=input.runtime)
    if t.shape == input.shape:
        return _prob_cross_entropy(logp, t, weight, ignore_index, reduction, label_smoothing, c)
    onehot, keep = _targets("cross_entropy", input, t, ignore_index)
    w = _weights(weight, onehot, keep, c)
    nll = -(onehot * logp).sum(axis=-1) * (w if weight is not None else 1.0)
    nll = nll.sum() / w.sum() if reduction == "mean" else _reduce(nll, reduction)
    if label_smoothing == 0:
        return nll
    smooth = -(logp * weight).sum(axis=-1) if weight is not None else -logp.sum(axis=-1)
    smooth = smooth * keep
    smooth = smooth.sum() / w.sum() if reduction == "mean" else _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / c)


def _prob_cross_entropy(logp: Tensor, t: Tensor, weight: Tensor | None, ignore_index: int, reduction: str,
                        label_smoothing: float, c: int) -> Tensor:
    if t.dtype not in FLOATS:
        raise Error(f"cross_entropy: a target of the input's shape holds probabilities, got {t.dtype}",
                    hint="give class indices of shape [N] or float probabilities of shape [N, C]")
    if ignore_index >= 0:
        raise Error("cross_entropy: ignore_index is not supported for probability targets (as torch's)")
    t = _class_last(t)
    if label_smoothing > 0:
        t = t * (1 - label_smoothing) + label_smoothing / c
    if weight is not None:
        if weight.shape != (c,):
            raise Error(f"a class weight has one entry a class: shape [{c}], got {list(weight.shape)}")
        t = t * weight
    loss = -(logp * t).sum(axis=-1)
    if reduction == "mean":
        return loss.mean()  # the sum over (numel / C) targets, torch's
    return _reduce(loss, reduction)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch's F.linear: x W^T + b with W [out, in]."""
    y = x @ weight.T
    return y + bias if bias is not None else y


# layers as functions: convolutions, pooling, padding and resizing live in conv_functional
from caten.tensor.nn.conv_functional import *  # noqa: E402, F401, F403 (its __all__)
from caten.tensor.nn.pooling import *  # noqa: E402, F401, F403 (each module's __all__)
from caten.tensor.nn.resample import *  # noqa: E402, F401, F403
from caten.tensor.nn.sdpa import *  # noqa: E402, F401, F403


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if list(input.shape[input.ndim - len(shape):]) != shape:
        raise Error(f"layer_norm: input of shape {list(input.shape)} does not end in {shape}")
    w = weight if weight is not None else Tensor(np.ones(shape, np_dtype(input.dtype)), runtime=input.runtime)
    b = bias if bias is not None else Tensor(np.zeros(shape, np_dtype(input.dtype)), runtime=input.runtime)
    return input.layernorm(w, b, axis=-1 if len(shape) == 1 else list(range(-len(shape), 0)), eps=eps)


def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p), drawing a fresh
    mask from the seed stream; the identity when not training."""
    if not 0 <= p <= 1:
        raise Error(f"dropout: p must lie in [0, 1], got {p}")
    if not training or p == 0:
        return input
    from caten.tensor.tensor import _seed

    return input.dropout(p, seed=Tensor(_seed(None), runtime=input.runtime))


def embedding(input: Any, weight: Tensor) -> Tensor:
    idx = input if isinstance(input, Tensor) else Tensor(np.asarray(input, np.int64), runtime=weight.runtime)
    return apply("take", [weight, idx], {"axis": 0})  # the library's rows by index (torch's take is flat)


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """int64 rows with a 1 at each index; num_classes -1 is the largest index + 1 (torch's)."""
    t = tensor if isinstance(tensor, Tensor) else Tensor(np.asarray(tensor, np.int64))
    if t.dtype in FLOATS or t.dtype == "bool":
        raise Error(f"one_hot: class indices must be integers, got {t.dtype}")
    v = t.numpy()
    if num_classes < 0:
        num_classes = int(v.max()) + 1 if v.size else 0
    if v.size and (v.min() < 0 or v.max() >= num_classes):
        raise Error(f"one_hot: class values must lie in [0, {num_classes}), got {v.min()} to {v.max()}")
    classes = Tensor.arange(num_classes, dtype=t.dtype, runtime=t.runtime)
    return (t.reshape(list(t.shape) + [1]) == classes).cast("i64")


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """input / max(||input||_p along dim, eps), the norm as torch's vector_norm (p=0 counts the
    nonzeros, +-inf the largest/smallest magnitude); a zero vector's gradient is 0, not nan."""
    if p == 2:
        s = (input * input).sum(axis=dim, keepdims=True)
        nz = s != 0  # sqrt's gradient at 0 is infinite: torch's norm backward masks it to 0
        norm = Tensor.where(nz, Tensor.where(nz, s, 1.0).sqrt(), 0.0)
    else:
        norm = input.norm(p, dim, keepdim=True)
    return input / norm.max(Tensor(np.asarray(eps, np_dtype(input.dtype)), runtime=input.runtime))
