"""ONNX lowerings that order or reverse elements along an axis: TopK by stable ranks, ReverseSequence."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, dims, handler


@handler("TopK")
def _topk(n: N) -> list[str]:
    """The k first elements in the reference's order: by value (NaN above every number, as numpy's
    lexsort), ties to the lower index. Each element's rank is the count of elements before it
    (an [n, n] comparison along the axis); output p takes the element whose rank is p."""
    s = n.int_shape()
    r = len(s)
    ax = n.a("axis", -1) % r
    k = int(np.asarray(n.c(1, "k")).reshape(-1)[0]) if not n.opset_lt(10) else int(n.a("k"))
    largest = n.a("largest", 1)
    if n.a("sorted", 1) == 0:
        raise n.fail("sorted=0 leaves the order of the k elements to the implementation")
    d = s[ax]
    x = n.x(0)
    xi, xj = n.let(f"(unsqueeze {x} {ax + 1})"), n.let(f"(unsqueeze {x} {ax})")  # i: this, j: the other
    if n.is_float():
        ni, nj = n.let(f"(!= {xi} {xi})"), n.let(f"(!= {xj} {xj})")
        above = f"(or (< {xi} {xj}) (and {nj} (not {ni})))"  # x_j ranks above x_i (largest first)
        below = f"(or (< {xj} {xi}) (and {ni} (not {nj})))"
        same = f"(or (= {xi} {xj}) (and {ni} {nj}))"
    else:
        above, below, same = f"(< {xi} {xj})", f"(< {xj} {xi})", f"(= {xi} {xj})"
    shp_i = [1] * (r + 1)
    shp_i[ax] = d
    shp_j = [1] * (r + 1)
    shp_j[ax + 1] = d
    earlier = f"(< (reshape (arange {d}) {dims(shp_j)}) (reshape (arange {d}) {dims(shp_i)}))"
    first = above if largest else below
    rank = n.let(f"(sum (cast (or {first} (and {same} {earlier})) i64) :axis {ax + 1})")
    # idx[p] = the i whose rank is p: sum over i of i * (rank_i == p)
    shp_p = [1] * (r + 1)
    shp_p[ax + 1] = k
    hit = f"(= (unsqueeze {rank} {ax + 1}) (reshape (arange {k}) {dims(shp_p)}))"
    pos = f"(reshape (arange {d}) {dims(shp_i)})"
    idx = n.let(f"(sum (where {hit} {pos} 0) :axis {ax})")
    return [f"(take-along-axis {x} {idx} :axis {ax})", f"(contiguous {idx})"]


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
