"""ONNX lowerings of sequences and optionals, which exist only at conversion time.

A sequence value is the list of its elements' value names (`Graph.seqs`), an optional the name
of its value or None (`Graph.opts`): their structure (a length, a presence) is known when the
graph is converted (from the fed values: the backend specializes on them), so every sequence op
is list bookkeeping, and only the tensors they hold become caten. SequenceMap's body is lowered
once per element (`Graph.inline`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.onnx.node import N, handler


def _seq(n: N, i: int) -> list[str]:
    name = n.node.input[i]
    if name not in n.g.seqs:
        raise n.fail(f"input {i} (`{name}`) must be a sequence")
    return n.g.seqs[name]


def _pos(n: N, i: int, size: int, default: int) -> int:
    """A position operand (negative counts from the back) checked against the sequence's bounds."""
    p = int(np.asarray(n.c(i, "position")).reshape(-1)[0]) if n.has(i) else default
    if not -size <= p < size + (n.op == "SequenceInsert"):
        raise n.fail(f"position {p} is out of bounds for a sequence of {size}")
    return p + size if p < 0 else p


def _new(n: N, expr: str, dt: str, shape: list, base: str | None = None) -> str:
    """Emit a tensor the importer makes up (an element, a result of a sequence op), with its type."""
    name = base if base is not None else n.g.synth(n.node.output[0])
    n.g.emit(expr, name)
    n.g.types[name] = (dt, list(shape))
    return name


def _set(n: N, k: int, elems: list[str]) -> list:
    n.g.seqs[n.node.output[k]] = list(elems)
    return []


@handler("SequenceConstruct")
def _construct(n: N) -> list:
    return _set(n, 0, [n.node.input[i] for i in range(n.nin)])


@handler("SequenceEmpty")
def _empty(n: N) -> list:
    return _set(n, 0, [])


@handler("SequenceLength")
def _length(n: N) -> list:
    n.g.consts[n.node.output[0]] = np.array(len(_seq(n, 0)), np.int64)
    return []


@handler("SequenceAt")
def _at(n: N) -> list:
    s = _seq(n, 0)
    n.g.bind(n.node.output[0], s[_pos(n, 1, len(s), 0)])
    return []


@handler("SequenceInsert")
def _insert(n: N) -> list:
    s = list(_seq(n, 0))
    s.insert(_pos(n, 2, len(s), len(s)), n.node.input[1])
    return _set(n, 0, s)


@handler("SequenceErase")
def _erase(n: N) -> list:
    s = list(_seq(n, 0))
    if not s:
        raise n.fail("erasing from an empty sequence")
    del s[_pos(n, 1, len(s), len(s) - 1)]
    return _set(n, 0, s)


@handler("ConcatFromSequence")
def _concat(n: N) -> list:
    s = _seq(n, 0)
    if not s:
        raise n.fail("concatenating an empty sequence (its result has no type)")
    g = n.g
    dts = {g.dtype(e) for e in s}
    shapes = [g.shape(e) for e in s]
    if len(dts) != 1 or None in dts or any(sh is None for sh in shapes):
        raise n.fail("its elements need one known dtype and known shapes")
    new_axis = bool(n.a("new_axis", 0))
    r = len(shapes[0]) + new_axis
    ax = n.a("axis")
    if not -r <= ax < r:
        raise n.fail(f"axis {ax} is out of range for rank {r}")
    ax %= r
    if new_axis:
        xs = [f"(unsqueeze {g.tensor(e)} {ax})" for e in s]
        shape = shapes[0][:ax] + [len(s)] + shapes[0][ax:]
    else:
        xs = [g.tensor(e) for e in s]
        shape = list(shapes[0])
        sizes = [sh[ax] for sh in shapes]
        if not all(isinstance(d, int) for d in sizes):
            raise n.fail("concatenating along a symbolic dim is not supported")
        shape[ax] = sum(sizes)
        kept = [x for x, d in zip(xs, sizes) if d]
        xs = kept or xs[:1]
    expr = xs[0] if len(xs) == 1 else f"(concat {' '.join(xs)} :axis {ax})"
    _new(n, f"(contiguous {expr})", dts.pop(), shape, n.node.output[0])
    return []


@handler("SplitToSequence")
def _split(n: N) -> list:
    shape = n.int_shape(0)
    r = len(shape)
    ax = n.a("axis", 0)
    if not -r <= ax < r:
        raise n.fail(f"axis {ax} is out of range for rank {r}")
    ax %= r
    d = shape[ax]
    squeeze = False
    if not n.has(1):
        sizes, squeeze = [1] * d, not n.a("keepdims", 1)
    else:
        sp = np.asarray(n.c(1, "split")).astype(np.int64)
        if sp.ndim == 0:
            if sp <= 0:
                raise n.fail(f"split {int(sp)} must be positive")
            k = int(sp)
            sizes = [min(k, d - i) for i in range(0, d, k)]
        else:
            sizes = [int(v) for v in sp]
            if sum(sizes) != d or any(v < 0 for v in sizes):
                raise n.fail(f"split {sizes} does not add up to the axis's {d}")
    x, dt, elems, off = n.x(0), n.dt(0), [], 0
    pre = " ".join(f"[0 {dd} 1]" for dd in shape[:ax])
    for sz in sizes:
        part = f"(slice {x} {pre} [{off} {off + sz} 1])"
        eshape = shape[:ax] + [sz] + shape[ax + 1:]
        if squeeze:
            part, eshape = f"(squeeze {part} {ax})", shape[:ax] + shape[ax + 1:]
        elems.append(_new(n, f"(contiguous {part})", dt, eshape))
        off += sz
    return _set(n, 0, elems)


@handler("SequenceMap")
def _map(n: N) -> list:
    g = n.g
    body = n.a("body")
    lens = {len(g.seqs[i]) for i in n.node.input if i in g.seqs}
    if n.node.input[0] not in g.seqs:
        raise n.fail("input 0 must be a sequence")
    if len(lens) != 1:
        raise n.fail(f"its sequences differ in length ({sorted(lens)})")
    results: list[list[str]] = [[] for _ in n.node.output]
    for k in range(lens.pop()):
        bind = {vi.name: (g.seqs[x][k] if x in g.seqs else x) for vi, x in zip(body.input, n.node.input)}
        for out, v in zip(results, g.inline(body, bind)):
            out.append(v)
    for k, elems in enumerate(results):
        _set(n, k, elems)
    return []


@handler("Optional")
def _optional(n: N) -> list:
    n.g.opts[n.node.output[0]] = n.node.input[0] if n.has(0) else None
    return []


@handler("OptionalHasElement")
def _has(n: N) -> list:
    name = n.node.input[0] if n.has(0) else None
    has = name is not None and (name not in n.g.opts or n.g.opts[name] is not None)
    n.g.consts[n.node.output[0]] = np.array(has)
    return []


@handler("OptionalGetElement")
def _get(n: N) -> list:
    name = n.node.input[0]
    if name in n.g.opts:
        inner = n.g.opts[name]
        if inner is None:
            raise n.fail("the optional is empty (ONNX makes this an error)")
        name = inner
    n.g.bind(n.node.output[0], name)
    return []


def passthrough(n: N) -> Any:
    """Identity of a sequence or optional (a new name for the same value); None for a tensor."""
    name = n.node.input[0]
    if name in n.g.seqs or name in n.g.opts:
        n.g.bind(n.node.output[0], name)
        return []
    return None
