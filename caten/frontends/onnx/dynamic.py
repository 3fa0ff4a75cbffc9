"""ONNX lowerings whose output shape depends on values: Compress (a constant condition picks the
slices, the data stays a run-time tensor), NonZero and Unique (of a constant or specialized input,
computed here as the reference defines them; a run-time input is refused by `N.c`)."""

from __future__ import annotations

import numpy as np

from caten.frontends.onnx.node import N, handler


def _weight(n: N, v: np.ndarray, tag: str) -> str:
    name = f"__{tag}_{len(n.g.consts)}"
    n.g.consts[name] = v
    return n.g.tensor(name)


@handler("Compress")
def _compress(n: N) -> str:
    cond = np.asarray(n.c(1, "condition")).reshape(-1).astype(bool)
    ax = n.a("axis")
    x = n.x(0)
    if ax is None:
        x, ax, d = f"(reshape {x} [-1])", 0, int(np.prod(n.int_shape(0), dtype=np.int64))
    else:
        ax %= n.rank()
        d = n.int_shape(0)[ax]
    idx = np.nonzero(cond[:d])[0].astype(np.int64)
    return f"(take {x} {_weight(n, idx, 'compress')} :axis {ax})"


def _bind(n: N, values: list[np.ndarray]) -> list[None]:
    """Outputs known here become constants under their own names (so their shapes are known too)."""
    for name, v in zip(n.node.output, values):
        if name:
            n.g.consts[name] = np.ascontiguousarray(v)
    return [None] * len(n.node.output)


@handler("NonZero")
def _nonzero(n: N) -> list[None]:
    v = np.asarray(n.c(0, "input (NonZero's output shape depends on its values)"))
    return _bind(n, [np.array(np.nonzero(v), np.int64).reshape(v.ndim, -1)])


@handler("Unique")
def _unique(n: N) -> list[None]:
    """numpy.unique, reordered by first occurrence when sorted=0 (as the reference)."""
    x = np.asarray(n.c(0, "input (Unique's output shape depends on its values)"))
    ax = n.a("axis")
    if ax is None:
        y, idx, inv, cnt = np.unique(x.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
    else:
        y, idx, inv, cnt = np.unique(x, axis=ax, return_index=True, return_inverse=True, return_counts=True)
    if not n.a("sorted", 1):
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if ax is None else ax)
        idx, cnt, inv = idx[order], cnt[order], rank[inv.reshape(-1)]
    return _bind(n, [y.astype(x.dtype)] + [o.reshape(-1).astype(np.int64) for o in (idx, inv, cnt)])
