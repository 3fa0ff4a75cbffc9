"""torch.autograd as a second oracle for the gradient cases, where torch is installed.

A variant's expression (a call of the row's op on parameters, literals and VIEWs) is evaluated
with torch by a small interpreter; `OPS` maps an op or composite name to its torch counterpart
(a row without one has no torch check, so a new composite needs no entry here). The counterpart
must compute the same function: `grads` returns [] (a failure) where torch's f64 loss differs
from the reference's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from caten.read.reader import read
from caten.read.sexpr import Kw, Num, SList, Str, Sym

# torch's f64 loss must match the reference's to this (relative to 1 + |loss|): the same function
TORCH_RTOL = 1e-7


def available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _axes(axis: Any, rank: int) -> list[int]:
    if axis is None:
        return list(range(rank))
    return [a % max(rank, 1) for a in (axis if isinstance(axis, list) else [axis])]


def _reduce(fn: str) -> Callable[..., Any]:
    def go(x: Any, axis: Any = None, keepdims: Any = False) -> Any:
        import torch

        axes = _axes(axis, x.dim())
        if fn == "prod":
            for a in sorted(axes, reverse=True):
                x = torch.prod(x, a, keepdim=True)
            return x if keepdims else x.reshape([d for i, d in enumerate(x.shape) if i not in axes])
        if not axes:
            return x
        return getattr(torch, fn)(x, dim=axes, keepdim=bool(keepdims))
    return go


def _view(x: Any, **kw: Any) -> Any:
    import torch

    for k, v in kw.items():
        if k == "permute":
            x = x.permute(*v)
        elif k == "reshape":
            x = x.reshape(v)
        elif k == "expand":
            x = x.expand(*v)
        elif k == "unsqueeze":
            x = x.unsqueeze(v)
        elif k == "flip":
            x = torch.flip(x, _axes(v, x.dim()))
        elif k == "slice":
            x = x[tuple(slice(*s) for s in v)]
        elif k == "shrink":  # fewer bounds than axes: the view reads the first element of the rest
            x = x[tuple(slice(*s) for s in v) + (0,) * (x.dim() - len(v))]
        elif k == "pad":
            flat = [w for lo, hi in reversed(v) for w in (lo, hi)]
            x = torch.nn.functional.pad(x, [0, 0] * (x.dim() - len(v)) + flat)
        else:
            raise KeyError(k)
    return x


def _ops() -> dict[str, Callable[..., Any]]:
    import torch

    F = torch.nn.functional

    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else tuple(v)

    def maxf(a: Any, b: Any = None, axis: Any = None, keepdims: Any = False) -> Any:
        return _reduce("amax")(a, axis, keepdims) if b is None else torch.maximum(a, b)

    def minf(a: Any, b: Any = None, axis: Any = None, keepdims: Any = False) -> Any:
        return _reduce("amin")(a, axis, keepdims) if b is None else torch.minimum(a, b)

    def layernorm(x: Any, g: Any, b: Any, axis: int = -1, eps: float = 1e-5) -> Any:
        mu = x.mean(axis, keepdim=True)
        var = ((x - mu) ** 2).mean(axis, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * g + b

    def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Any:
        return _scan(torch.cumsum, x, axis, exclusive, reverse, 0.0)

    def cumprod(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Any:
        return _scan(torch.cumprod, x, axis, exclusive, reverse, 1.0)

    def _scan(fn: Any, x: Any, axis: int, exclusive: bool, reverse: bool, ident: float) -> Any:
        if reverse:
            x = torch.flip(x, [axis])
        y = fn(x, axis)
        if exclusive:
            y = torch.cat([torch.full_like(y.narrow(axis, 0, 1), ident), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
        return torch.flip(y, [axis]) if reverse else y

    return {
        "NEG": torch.neg, "RECIP": torch.reciprocal, "SQRT": torch.sqrt, "EXP2": torch.exp2, "LOG2": torch.log2,
        "SIN": torch.sin, "ADD": torch.add, "MUL": torch.mul, "FDIV": torch.div, "MOD": torch.remainder,
        "MAX": torch.maximum, "COPY": torch.clone, "CAST": lambda x, d: x.double(),
        "WHERE": lambda c, a, b: torch.where(c != 0, a, b),
        "REDUCE": lambda x, op, axis=None, keepdims=False: _reduce({"add": "sum", "mul": "prod", "max": "amax"}[op])(
            x, axis, keepdims),
        "EXTERN": lambda name, a, b, shape=None: a @ b,
        "+": torch.add, "*": torch.mul, "-": lambda a, b=None: -a if b is None else a - b, "/": torch.div,
        "neg": torch.neg, "recip": torch.reciprocal, "mod": torch.remainder, "max": maxf, "min": minf,
        "abs": torch.abs, "pow": torch.pow, "exp": torch.exp, "log": torch.log, "exp2": torch.exp2,
        "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos,
        "tan": torch.tan, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "silu": F.silu,
        "elu": F.elu, "selu": F.selu, "log1p": torch.log1p, "softplus": F.softplus, "erf": torch.erf,
        "gelu": F.gelu, "atan": torch.atan, "asin": torch.asin, "acos": torch.acos,
        "where": lambda c, a, b: torch.where(c != 0, a, b),
        "reshape": lambda x, s: x.reshape(s), "permute": lambda x, a: x.permute(*a),
        "transpose": lambda x: x.transpose(-1, -2), "expand": lambda x, s: x.expand(*s),
        "squeeze": lambda x, a: x.squeeze(a), "unsqueeze": lambda x, a: x.unsqueeze(a),
        "flip": lambda x, axis=None: torch.flip(x, _axes(axis, x.dim())),
        "pad": lambda x, w, value=0: F.pad(x, [0, 0] * (x.dim() - len(w)) + [v for lo, hi in reversed(w)
                                                                             for v in (lo, hi)], value=value),
        "contiguous": torch.clone, "concat": lambda *xs, axis=0: torch.cat(xs, axis),
        "matmul": torch.matmul, "linear": lambda x, w, b: x @ w + b,
        "softmax": lambda x, axis=-1: torch.softmax(x, axis),
        "log-softmax": lambda x, axis=-1: torch.log_softmax(x, axis),
        "layernorm": layernorm,
        "rmsnorm": lambda x, g, axis=-1, eps=1e-6: x * torch.rsqrt((x * x).mean(axis, keepdim=True) + eps) * g,
        "conv2d": lambda x, w, b=None, stride=1, padding=0, dilation=1, groups=1: F.conv2d(
            x, w, b, pair(stride), pair(padding), pair(dilation), groups),
        "max-pool2d": lambda x, kernel=2, stride=None, padding=0: F.max_pool2d(
            x, pair(kernel), pair(stride if stride is not None else kernel), pair(padding)),
        "avg-pool2d": lambda x, kernel=2, stride=None, padding=0: F.avg_pool2d(
            x, pair(kernel), pair(stride if stride is not None else kernel), pair(padding)),
        "cross-entropy": lambda z, y: -(y * torch.log_softmax(z, -1)).sum(-1).mean(),
        "mse": lambda a, b: ((a - b) ** 2).mean(),
        "sum": _reduce("sum"), "prod": _reduce("prod"), "mean": _reduce("mean"),
        "cumsum": cumsum, "cumprod": cumprod,
        "triu": lambda x, k=0: torch.triu(x, k), "tril": lambda x, k=0: torch.tril(x, k),
        "slice": lambda x, *specs: x[tuple(slice(*sp) for sp in specs)], "sign": torch.sign,
        "cast": lambda x, d: x.double() if d == "f64" else x.to(getattr(torch, d)),
        "horner": lambda s, *cs: _horner(s, cs),
    }


def _horner(s: Any, cs: tuple) -> Any:
    acc = cs[-1] + 0 * s
    for c in reversed(cs[:-1]):
        acc = c + s * acc
    return acc


class _Missing(Exception):
    """The expression uses something without a torch counterpart."""


def _eval(f: Any, env: dict[str, Any], ops: dict[str, Callable[..., Any]]) -> Any:
    if isinstance(f, Num):
        return f.value
    if isinstance(f, Str):
        return f.value
    if isinstance(f, Sym):
        if f.name in env:
            return env[f.name]
        if f.name in ("true", "false"):
            return f.name == "true"
        if f.name == "nil":
            return None
        return f.name  # a dtype name (CAST) or an op name
    if isinstance(f, SList) and f.bracket:
        return [_eval(x, env, ops) for x in f.items]
    if isinstance(f, SList) and f.items and isinstance(f.items[0], Sym):
        name = f.items[0].name
        args, kw = [], {}
        items = f.items[1:]
        i = 0
        while i < len(items):
            if isinstance(items[i], Kw):
                kw[items[i].name] = _eval(items[i + 1], env, ops)
                i += 2
            else:
                args.append(_eval(items[i], env, ops))
                i += 1
        if name == "VIEW":
            return _view(args[0], **kw)
        if name not in ops:
            raise _Missing(name)
        try:
            return ops[name](*args, **kw)
        except TypeError as e:  # a keyword the counterpart does not take
            raise _Missing(f"{name}: {e}") from None
    raise _Missing(repr(f))


def grads(gv: Any, arrays: dict[str, np.ndarray], sizes: dict[str, int], loss_ref: float) -> list[np.ndarray] | None:
    """torch's f64 gradients of the variant's loss w.r.t. its wrt parameters at `arrays`;
    None without a counterpart, [] when torch's loss is not the reference's."""
    import torch

    from caten.conformance import gradcases as G

    env: dict[str, Any] = {k: v for k, v in sizes.items()}
    leaves = {}
    for p in gv.v.params:
        a = arrays[p.name]
        t = torch.tensor(a, dtype=torch.float64 if a.dtype.kind == "f" else None,
                         requires_grad=any(w.name == p.name for w in gv.wrt))
        env[p.name] = leaves[p.name] = t
    try:
        y = _eval(read(gv.v.expr, "<torch>")[0], env, _ops())
    except _Missing:
        return None
    ys = list(y) if isinstance(y, (tuple, list)) else [y]
    loss = sum((ys[j].double() * torch.tensor(arrays[G.r_name(gv, k)])).sum() for k, j in enumerate(gv.outs))
    if not abs(float(loss.detach()) - loss_ref) <= TORCH_RTOL * (1 + abs(loss_ref)):
        return []
    try:
        gs = torch.autograd.grad(loss, [leaves[p.name] for p in gv.wrt], allow_unused=True)
    except RuntimeError:  # torch does not differentiate it (floor_divide): no counterpart
        return None
    return [np.zeros(arrays[p.name].shape) if g is None else g.numpy() for p, g in zip(gv.wrt, gs)]

