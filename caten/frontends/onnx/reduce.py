"""ONNX lowerings of reductions (Reduce*, ArgMax/ArgMin) and of the softmax family."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, ax_list, dims, handler

_RED = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
        "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sumsq", "ReduceLogSum": "logsum",
        "ReduceLogSumExp": "logsumexp"}


@handler(*_RED)
def _reduce(n: N) -> str:
    kind = _RED[n.op]
    axes = n.ints(1, "axes")
    keep = "true" if n.a("keepdims", 1) else "false"
    x = n.x(0)
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and n.a("noop_with_empty_axes", 0):
        return f"(contiguous {x})"
    ax = "nil" if axes is None else ax_list(axes)
    if 0 in n.shape() and kind in ("max", "min"):
        raise n.fail("max/min over an empty tensor")
    kw = f":axis {ax} :keepdims {keep}"
    if kind in ("sum", "mean", "max", "min", "prod"):
        if n.dt() == "bool" and kind in ("sum", "prod"):
            raise n.fail("sum of bool")
        return f"({kind} {x} {kw})"
    if kind == "l1":
        return f"(sum (abs {x}) {kw})"
    if kind == "l2":
        return f"(sqrt (sum (* {x} {x}) {kw}))" if n.is_float() else \
            f"(cast (sqrt (cast (sum (* {x} {x}) {kw}) f64)) {n.dt()})"
    if kind == "sumsq":
        return f"(sum (* {x} {x}) {kw})"
    if kind == "logsum":
        return f"(log (sum {x} {kw}))"
    m = n.let(f"(max {x} :axis {ax} :keepdims true)")
    s = f"(+ (log (sum (exp (- {x} {m})) :axis {ax} :keepdims true)) {m})"
    return s if keep == "true" else f"(squeeze {s} {ax if axes is not None else ax_list(range(n.rank()))})"


@handler("ArgMax", "ArgMin")
def _argmax(n: N) -> str:
    f = "argmax" if n.op == "ArgMax" else "argmin"
    ax = n.a("axis", 0)
    keep = "true" if n.a("keepdims", 1) else "false"
    x = n.x(0)
    if n.a("select_last_index", 0):
        d = n.shape()[ax]
        i = n.let(f"({f} (flip {x} :axis {ax}) :axis {ax} :keepdims {keep})")
        return f"(- {d - 1} {i})"
    return f"({f} {x} :axis {ax} :keepdims {keep})"


def _softmax_like(n: N, f: str) -> str:
    r = n.rank()
    if not n.opset_lt(13):
        return f"({f} {n.x(0)} :axis {n.a('axis', -1)})"
    # before opset 13 the input is coerced to 2-D at :axis
    a = n.a("axis", 1) % max(r, 1)
    s = n.int_shape()
    left, right = int(np.prod(s[:a])), int(np.prod(s[a:]))
    return f"(reshape ({f} (reshape {n.x(0)} [{left} {right}]) :axis 1) {dims(s)})"


@handler("Softmax")
def _softmax(n: N) -> str:
    return _softmax_like(n, "softmax")


@handler("LogSoftmax")
def _log_softmax(n: N) -> str:
    return _softmax_like(n, "log-softmax")


@handler("Hardmax")
def _hardmax(n: N) -> str:
    r = n.rank()
    x = n.x(0)
    if n.opset_lt(13):
        a = n.a("axis", 1) % max(r, 1)
        s = n.int_shape()
        left, right = int(np.prod(s[:a])), int(np.prod(s[a:]))
        x2 = n.let(f"(reshape {x} [{left} {right}])")
        i = n.let(f"(argmax {x2} :axis 1 :keepdims true)")
        return f"(reshape (cast (= (arange {right}) {i}) {n.dt()}) {dims(s)})"
    a = n.a("axis", -1) % r
    i = n.let(f"(argmax {x} :axis {a} :keepdims true)")
    shp = [1] * r
    shp[a] = n.shape()[a]
    return f"(cast (= (reshape (arange {shp[a]}) {dims(shp)}) {i}) {n.dt()})"
