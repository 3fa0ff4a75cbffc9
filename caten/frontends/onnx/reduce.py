"""ONNX lowerings of reductions (Reduce*, ArgMax/ArgMin) and of the softmax family."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, ax_list, dims, handler
from caten.frontends.text import lit

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
    kw = f":axis {ax} :keepdims {keep}"
    red = sorted({a % n.rank() for a in (axes if axes is not None else range(n.rank()))})
    if kind in ("max", "min", "logsumexp") and any(n.shape()[a] == 0 for a in red):
        return _empty_reduction(n, kind, red, keep == "true")
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


def _empty_reduction(n: N, kind: str, red: list[int], keep: bool) -> str:
    """A max/min/logsumexp over an empty set is its identity, as the reference: -inf/+inf (the
    dtype's lowest/highest integer; false/true for bool) and log(0) = -inf."""
    s = n.int_shape()
    out = [1 if i in red else d for i, d in enumerate(s) if keep or i not in red]
    dt = n.dt()
    if dt == "bool":
        v: object = kind == "min"
    elif dt.startswith(("i", "u")):
        info = np.iinfo(np.dtype({"i": "int", "u": "uint"}[dt[0]] + dt[1:]))
        v = info.max if kind == "min" else info.min
    else:
        v = float("inf") if kind == "min" else float("-inf")
    return f"(full {dims(out)} {lit(v, dt)} :dtype {dt})"


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


def _half_softmax(n: N, x: str, ax: int) -> str:
    """Softmax of f16 as onnx's reference (numpy) computes it: each step rounded to f16; numpy sums
    a contiguous (innermost) axis in f32, another axis row by row in f16 (as caten's f16 sum)."""
    dt = n.dt()
    x = n.let(x)
    e = n.let(f"(cast (exp (cast (- {x} (max {x} :axis {ax} :keepdims true)) f32)) {dt})")
    s = n.shape()
    a = ax % len(s)
    inner = all(d == 1 for d in s[a + 1:])
    if not isinstance(s[a], int) or s[a] > (1024 if inner else 64):
        # (a long axis is summed by caten's own f32 sum: within an ulp of numpy's)
        return f"(/ {e} (cast (sum (cast {e} f32) :axis {ax} :keepdims true) {dt}))"
    rows = [f"(slice {e} " + " ".join(f"[{i} {i + 1} 1]" if k == a else f"[0 {n.d(0, k)} 1]"
                                      for k in range(len(s))) + ")" for i in range(s[a])]
    if inner:  # numpy's pairwise f32 sum, term by term: the same bits on every CPU
        return f"(/ {e} (cast {_pairwise(n, [n.let(f'(cast {r} f32)') for r in rows])} {dt}))"
    acc = rows[0]
    for row in rows[1:]:
        acc = n.let(f"(+ {acc} {row})")
    return f"(/ {e} {acc})"


def _pairwise(n: N, terms: list[str]) -> str:
    """The sum of `terms` in numpy's pairwise order (umath's pairwise_sum: in turn below 8 terms,
    8 running sums up to 128 then combined in a tree, halves of a multiple of 8 beyond)."""
    k = len(terms)
    if k > 128:
        h = k // 2 - (k // 2) % 8
        return n.let(f"(+ {_pairwise(n, terms[:h])} {_pairwise(n, terms[h:])})")
    if k < 8:
        acc = terms[0]
        for t in terms[1:]:
            acc = n.let(f"(+ {acc} {t})")
        return acc
    r = list(terms[:8])
    i = 8
    while i < k - k % 8:
        r = [n.let(f"(+ {r[j]} {terms[i + j]})") for j in range(8)]
        i += 8
    acc = n.let(f"(+ (+ (+ {r[0]} {r[1]}) (+ {r[2]} {r[3]})) (+ (+ {r[4]} {r[5]}) (+ {r[6]} {r[7]})))")
    for t in terms[i:]:
        acc = n.let(f"(+ {acc} {t})")
    return acc


def _softmax_like(n: N, f: str) -> str:
    r = n.rank()
    if not n.opset_lt(13):
        if f == "softmax" and n.dt() == "f16" and 0 not in n.shape():
            return _half_softmax(n, n.x(0), n.a("axis", -1))
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
