"""ONNX lowerings of the scatters and of GatherND, onto caten's scatter/gather composites
(ops/index.lisp): an N-d index tuple becomes one linear index into the flattened leading axes."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler

_REDUCE = {"none": "scatter", "add": "scatter-add", "mul": "scatter-mul", "max": "scatter-max",
           "min": "scatter-min"}


def _scatter_fn(n: N) -> str:
    red = n.a("reduction", "none")
    if red not in _REDUCE:
        raise n.fail(f"reduction `{red}` is not supported")
    return _REDUCE[red]


@handler("ScatterElements", "Scatter")
def _scatter_elements(n: N) -> str:
    return f"({_scatter_fn(n)} {n.x(0)} {n.x(1)} {n.x(2)} :axis {n.a('axis', 0)})"


def _linear_index(n: N, idx_in: int, lead: list[int]) -> str:
    """The index tuples of input idx_in (last axis: one coordinate per axis of `lead`, negatives
    counting from the end) as one row-major index into those axes flattened."""
    ishape = n.int_shape(idx_in)
    k = ishape[-1]
    if k != len(lead):
        raise n.fail(f"index tuples of length {k} for {len(lead)} axes")
    if k == 0:
        return f"(full {dims(ishape[:-1])} 0 :dtype i64)"
    ii = n.let(f"(cast {n.x(idx_in)} i64)")
    pre = " ".join(f"[0 {d} 1]" for d in ishape[:-1])
    acc, stride = None, 1
    for j in reversed(range(k)):
        c = n.let(f"(reshape (slice {ii} {pre} [{j} {j + 1} 1]) {dims(ishape[:-1])})")
        c = f"(where (< {c} 0) (+ {c} {lead[j]}) {c})"
        term = c if stride == 1 else f"(* {c} {stride})"
        acc = term if acc is None else f"(+ {acc} {term})"
        stride *= lead[j]
    return n.let(acc)


@handler("GatherND")
def _gather_nd(n: N) -> str:
    s, ishape = n.int_shape(0), n.int_shape(1)
    b = n.a("batch_dims", 0)
    k = ishape[-1]
    lead, rest = s[b:b + k], s[b + k:]
    bt, p = int(np.prod(s[:b], dtype=np.int64)), int(np.prod(lead, dtype=np.int64))
    lin = _linear_index(n, 1, lead)
    if b:
        boff = [1] * (len(ishape) - 1)
        boff[:b] = s[:b]
        lin = n.let(f"(+ {lin} (* (reshape (arange {bt}) {dims(boff)}) {p}))")
    flat = n.let(f"(reshape {n.x(0)} {dims([bt * p] + rest)})")
    return f"(take {flat} {lin} :axis 0)"


@handler("ScatterND")
def _scatter_nd(n: N) -> str:
    s, ishape = n.int_shape(0), n.int_shape(1)
    k = ishape[-1]
    lead, rest = s[:k], s[k:]
    p = int(np.prod(lead, dtype=np.int64))
    m = int(np.prod(ishape[:-1], dtype=np.int64))
    lin = _linear_index(n, 1, lead)
    li = n.let(f"(expand (reshape {lin} {dims([m] + [1] * len(rest))}) {dims([m] + rest)})")
    flat = n.let(f"(reshape {n.x(0)} {dims([p] + rest)})")
    upd = n.let(f"(reshape {n.x(2)} {dims([m] + rest)})")
    return f"(reshape ({_scatter_fn(n)} {flat} {li} {upd} :axis 0) {dims(s)})"


@handler("TensorScatter")
def _tensor_scatter(n: N) -> str:
    """The KV-cache write: along :axis, cache position p of batch b takes update[p - w[b]] where
    0 <= p - w[b] < L (circular: (p - w[b]) mod S), else keeps the cache; w (write_indices) may be
    a run-time tensor, so each position's source index is computed rather than scattered."""
    s, u = n.int_shape(0), n.int_shape(1)
    r = len(s)
    ax = n.a("axis", -2) % r
    mode = n.a("mode", "linear")
    if mode not in ("linear", "circular"):
        raise n.fail(f"mode `{mode}` is not supported")
    if ax == 0 or len(u) != r or any(u[i] != s[i] for i in range(r) if i != ax) or u[ax] > s[ax]:
        raise n.fail(f"an update of shape {u} into a cache of shape {s} along axis {ax}")
    big, length = s[ax], u[ax]
    shp = [1] * r
    shp[0], shp[ax] = s[0], big
    w = f"(cast {n.x(2)} i64)" if n.has(2) else f"(full [{s[0]}] 0 :dtype i64)"
    t = n.let(f"(- (reshape (arange {big}) [1 {big}]) (reshape {w} [{s[0]} 1]))")
    if mode == "circular":
        t = n.let(f"(remainder {t} {big})")
    ok = n.let(f"(reshape (and (<= 0 {t}) (< {t} {length})) {dims(shp)})")
    src = n.let(f"(reshape (where (and (<= 0 {t}) (< {t} {length})) {t} 0) {dims(shp)})")
    return f"(where {ok} (take-along-axis {n.x(1)} {src} :axis {ax}) {n.x(0)})"
