"""ONNX lowerings of the `ai.onnx.ml` ops on numbers: Binarizer, ArrayFeatureExtractor, TreeEnsemble.

A tree ensemble's structure is attributes, so each tree becomes, per leaf, the conjunction of the
comparisons on its path (exactly one leaf of a tree holds for a row) and the ensemble the
reference's accumulation over trees, one rounding to the input's dtype per tree as it does."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, handler
from caten.frontends.onnx.types import np_dtype
from caten.frontends.text import lit


@handler("Binarizer")
def _binarizer(n: N) -> str:
    _typed(n, n.dt(), n.shape())
    return f"(cast (> {n.x(0)} {n.lit(n.a('threshold', 0.0))}) {n.dt()})"


@handler("ArrayFeatureExtractor")
def _feature_extractor(n: N) -> str:
    """data[..., indices] with the indices flattened into the last axis (a vector gives one row),
    as onnxruntime and the reference do; the indices are specialized at conversion."""
    shape = n.int_shape(0)
    idx = [int(v) for v in np.asarray(n.c(1, "indices")).reshape(-1)]
    last = shape[-1]
    if not idx or any(not 0 <= i < last for i in idx):
        raise n.fail(f"indices {idx} are empty or out of range for a last axis of {last}")
    x = n.x(0)
    pre = " ".join(f"[0 {d} 1]" for d in shape[:-1])
    parts = [f"(slice {x} {pre} [{i} {i + 1} 1])" for i in idx]
    y = parts[0] if len(parts) == 1 else f"(concat {' '.join(parts)} :axis {len(shape) - 1})"
    if len(shape) == 1:
        y = f"(reshape {y} [1 {len(idx)}])"
    _typed(n, n.dt(), [*shape[:-1], len(idx)] if len(shape) > 1 else [1, len(idx)])
    return f"(contiguous {y})"


def _typed(n: N, dt: str, shape: list) -> None:
    """The output's type, which onnx's shape inference does not give for these ops."""
    n.g.types[n.node.output[0]] = (dt, list(shape))


_CMP = {0: "<=", 1: "<", 2: ">=", 3: ">", 4: "=", 5: "!="}


def _arr(n: N, name: str) -> list:
    v = n.a(name)
    if v is None:
        return []
    from onnx import numpy_helper

    return numpy_helper.to_array(v).tolist() if hasattr(v, "dims") else list(v)


@handler("TreeEnsemble")
def _tree_ensemble(n: N) -> str:
    if n.a("post_transform", 0) != 0:
        raise n.fail("post_transform other than NONE is not supported")
    agg = n.a("aggregate_function", 1)
    if agg not in (0, 1, 2, 3):
        raise n.fail(f"aggregate_function {agg} is not one of AVERAGE, SUM, MIN, MAX")
    shape, dt = n.int_shape(0), n.dt(0)
    if len(shape) != 2 or dt not in ("f16", "f32", "f64"):
        raise n.fail("X must be a 2-D float tensor")
    rows = shape[0]
    splits, feats, modes = _arr(n, "nodes_splits"), _arr(n, "nodes_featureids"), _arr(n, "nodes_modes")
    t_ids, f_ids = _arr(n, "nodes_truenodeids"), _arr(n, "nodes_falsenodeids")
    t_leaf, f_leaf = _arr(n, "nodes_trueleafs"), _arr(n, "nodes_falseleafs")
    l_tgt, l_w = _arr(n, "leaf_targetids"), _arr(n, "leaf_weights")
    missing = _arr(n, "nodes_missing_value_tracks_true") or [0] * len(modes)
    members = iter(_arr(n, "membership_values"))
    n_targets, roots = n.a("n_targets"), _arr(n, "tree_roots")
    # the comparisons run in f64, as the reference compares Python floats
    x64 = n.let(f"(cast {n.x(0)} f64)")
    for r in roots:
        if t_leaf[r] and f_leaf[r] and t_ids[r] == f_ids[r] and t_ids[r] != r:
            raise n.fail(f"tree {r} is one leaf: the spec takes leaf {t_ids[r]}, onnx's reference leaf {r}")
    order: list[int] = []  # member nodes in the reference's reading order: trees, depth first, true first
    stack = [r for r in reversed(roots) if not (t_leaf[r] and f_leaf[r] and t_ids[r] == f_ids[r])]
    while stack:
        i = stack.pop()
        order += [i] if modes[i] == 6 else []
        stack += [j for j, leaf in ((f_ids[i], f_leaf[i]), (t_ids[i], t_leaf[i])) if not leaf]
    if order != sorted(order):
        raise n.fail("its membership sets are listed in node order (the spec) but read in tree order by onnx's "
                     "reference, which differ here")
    sets: dict[int, list[float]] = {}
    for i, m in enumerate(modes):  # membership values come in node order, each set ended by a NaN
        if m == 6:
            vals: list[float] = []
            for v in members:
                if np.isnan(v):
                    break
                if v == 0:
                    raise n.fail("a membership value 0 ends its set early in onnx's reference")
                vals.append(v)
            sets[i] = vals
        elif m not in _CMP:
            raise n.fail(f"node mode {m} is not a known comparison")

    def test(i: int) -> str:
        col = n.let(f"(slice {x64} [0 {rows} 1] [{feats[i]} {feats[i] + 1} 1])")
        if modes[i] == 6:
            if not sets[i]:
                raise n.fail(f"node {i} tests membership of an empty set")
            cond = f"(= {col} {lit(sets[i][0], 'f64')})"
            for v in sets[i][1:]:
                cond = f"(or {cond} (= {col} {lit(v, 'f64')}))"
        else:
            cond = f"({_CMP[modes[i]]} {col} {lit(splits[i], 'f64')})"
        return n.let(f"(or {cond} (!= {col} {col}))") if missing[i] else n.let(cond)

    def leaves(i: int, is_leaf: bool, path: str | None, out: list[tuple[int, str | None]]) -> None:
        if is_leaf:
            out.append((i, path))
            return
        c = test(i)
        both = (lambda a: a if path is None else n.let(f"(and {path} {a})"))
        leaves(t_ids[i], bool(t_leaf[i]), both(c), out)
        leaves(f_ids[i], bool(f_leaf[i]), both(n.let(f"(not {c})")), out)

    big = float(np.finfo(np_dtype(dt)).max)
    init = {0: 0.0, 1: 0.0, 2: big, 3: -big}[agg]
    acc = [n.let(f"(full [{rows} 1] {lit(init, 'f64')} :dtype f64)") for _ in range(n_targets)]
    for r in roots:
        degenerate = t_leaf[r] and f_leaf[r] and t_ids[r] == f_ids[r]
        found: list[tuple[int, str | None]] = []
        leaves(t_ids[r] if degenerate else r, bool(degenerate), None, found)
        for k in range(n_targets):
            hit = [(leaf, p) for leaf, p in found if l_tgt[leaf] == k]
            if not hit:
                continue
            on: str | None = None  # where the tree reaches a leaf of target k (None: the tree is one leaf)
            if hit[0][1] is None:
                w = n.let(f"(full [{rows} 1] {lit(l_w[hit[0][0]], 'f64')} :dtype f64)")
            else:
                w = n.let(f"(full [{rows} 1] {lit(0.0, 'f64')} :dtype f64)")
                for leaf, p in hit:  # at most one leaf of the tree holds
                    w = n.let(f"(where {p} {lit(l_w[leaf], 'f64')} {w})")
                    on = p if on is None else n.let(f"(or {on} {p})")
            if agg == 1:
                new = f"(+ {acc[k]} {w})"
            elif agg == 0:
                new = f"(+ {acc[k]} (/ {w} {lit(float(len(roots)), 'f64')}))"
            else:
                best = f"({'min' if agg == 2 else 'max'} {acc[k]} {w})"
                new = best if on is None else f"(where {on} {best} {acc[k]})"
            acc[k] = n.let(new if dt == "f64" else f"(cast (cast {new} {dt}) f64)")
    y = acc[0] if n_targets == 1 else f"(concat {' '.join(acc)} :axis 1)"
    _typed(n, dt, [rows, n_targets])
    return f"(cast {y} {dt})"


@handler("TfIdfVectorizer")
def _tfidf(n: N) -> str:
    """Each pool n-gram's count is, per skip distance d, the number of starts s where every X[s + j*d]
    equals its item (a unigram only at d = 1, as onnx's reference counts it); counts of n-grams that
    share an output column add up, then the mode weighs them."""
    if n.a("pool_strings") is not None or n.dt() not in ("i32", "i64"):
        raise n.fail("only integer pools and inputs are supported (caten has no strings)")
    shape = n.int_shape(0)
    if len(shape) not in (1, 2):
        raise n.fail("X must be [C] or [B, C]")
    mode = n.a("mode")
    lo, hi, skip = n.a("min_gram_length"), n.a("max_gram_length"), n.a("max_skip_count")
    pool, counts, out_of = _arr(n, "pool_int64s"), _arr(n, "ngram_counts"), _arr(n, "ngram_indexes")
    weights = _arr(n, "weights")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise n.fail(f"mode {mode} is not TF, IDF or TFIDF")
    grams: list[tuple[int, ...]] = []  # every pool n-gram in order, their positions index ngram_indexes
    for k, start in enumerate(counts, 1):
        end = counts[k] if k < len(counts) else len(pool)
        grams += [tuple(pool[i:i + k]) for i in range(start, end - k + 1, k)]
    if len(grams) != len(out_of) or len(set(grams)) != len(grams):
        raise n.fail("ngram_indexes must name one output per distinct pool n-gram")
    width = max(out_of) + 1
    if weights and len(weights) != width:
        raise n.fail(f"{len(weights)} weights for {width} outputs")
    c, ax = shape[-1], len(shape) - 1
    info = np.iinfo(np.int32 if n.dt() == "i32" else np.int64)
    x, pre = n.x(0), " ".join(f"[0 {d} 1]" for d in shape[:-1])
    cols: dict[int, list[str]] = {}
    for g, o in zip(grams, out_of):
        if not lo <= len(g) <= hi or any(not info.min <= v <= info.max for v in g):
            continue  # a size not counted, or an item X cannot hold: its count is 0
        for d in range(1, (skip + 1 if len(g) > 1 else 1) + 1):
            span = c - (len(g) - 1) * d
            if span <= 0:
                continue
            match = f"(= (slice {x} {pre} [0 {span} 1]) {g[0]})"
            for j, v in enumerate(g[1:], 1):
                match = f"(and {match} (= (slice {x} {pre} [{j * d} {j * d + span} 1]) {v}))"
            cols.setdefault(o, []).append(n.let(f"(sum (cast {match} i64) :axis {ax} :keepdims true)"))
    one = "[" + " ".join(str(v) for v in [*shape[:-1], 1]) + "]"
    parts = []
    for o in range(width):
        f = f"(full {one} 0 :dtype i64)"
        for t in cols.get(o, []):
            f = f"(+ {f} {t})"
        f = n.let(f"(cast {f} f32)")
        w = lit(weights[o] if weights else 1.0, "f32")
        if mode == "IDF":
            f = n.let(f"(where (> {f} 0.0) (full {one} {w} :dtype f32) 0.0)")
        elif mode == "TFIDF" and weights:
            f = n.let(f"(* {f} {w})")
        parts.append(f)
    _typed(n, "f32", [*shape[:-1], width])
    return f"(contiguous {parts[0] if width == 1 else '(concat ' + ' '.join(parts) + f' :axis {ax})'})"
