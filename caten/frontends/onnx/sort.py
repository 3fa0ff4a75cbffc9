"""ONNX lowerings that order or reverse elements along an axis: TopK by the library's stable sort, ReverseSequence."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler


@handler("TopK")
def _topk(n: N) -> list[str]:
    """The k first elements in the reference's order: by value (NaN above every number, as numpy's
    lexsort), ties to the lower index: the library's `topk`, a stable SORT (nan first descending,
    last ascending) and a GATHER, O(n log n) along the axis."""
    r = n.rank()
    ax = n.a("axis", -1) % r
    k = int(np.asarray(n.c(1, "k")).reshape(-1)[0]) if not n.opset_lt(10) else int(n.a("k"))
    if n.a("sorted", 1) == 0:
        raise n.fail("sorted=0 leaves the order of the k elements to the implementation")
    both = n.let(f"(topk {n.x(0)} {k} :axis {ax} :largest {'true' if n.a('largest', 1) else 'false'})")
    return [f"(nth {both} 0)", f"(nth {both} 1)"]


@handler("ReverseSequence")
def _reverse_sequence(n: N) -> str:
    """Each batch entry's first seq_lens[b] steps reversed, the rest kept: a gather along time."""
    s = n.int_shape()
    r = len(s)
    t_ax, b_ax = n.a("time_axis", 0), n.a("batch_axis", 1)
    shp_t = [1] * r
    shp_t[t_ax] = s[t_ax]
    shp_b = [1] * r
    shp_b[b_ax] = s[b_ax]
    t = n.let(f"(reshape (arange {s[t_ax]}) {dims(shp_t)})")
    ln = n.let(f"(reshape (cast {n.x(1)} i64) {dims(shp_b)})")
    idx = f"(expand (where (< {t} {ln}) (- (- {ln} 1) {t}) {t}) {dims(s)})"
    return f"(take-along-axis {n.x(0)} {idx} :axis {t_ax})"
