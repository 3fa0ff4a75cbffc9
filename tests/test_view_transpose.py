"""Property: the VJP of every view is its adjoint. A view is linear, so for any x and cotangent c,
<view(x), c> == <x, transpose(c)> exactly (up to float64 rounding). Random chains of movement ops
(reshape, permute, expand, shrink, pad, flip, step, sliding windows) on random shapes, evaluated
by the reference interpreter; a wrong stride, offset or mask in caten/autodiff/views.py breaks
the identity for some x."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st

from caten.autodiff import vjp
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.graph import dump
from caten.ir.interpret import evaluate


@st.composite
def chains(draw):
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    x = B.buffer(T.f64, tuple(shape), 0, "x")
    n = x
    for _ in range(draw(st.integers(1, 4))):
        s = list(n.shape)
        kind = draw(st.sampled_from(["permute", "reshape", "expand", "shrink", "pad", "flip", "step", "windows"]))
        if kind == "permute":
            n = B.permute(n, draw(st.permutations(range(len(s)))))
        elif kind == "reshape":
            total = int(np.prod(s))
            divs = [d for d in range(1, total + 1) if total % d == 0]
            a = draw(st.sampled_from(divs))
            new = [a, total // a] if draw(st.booleans()) else [total]
            if draw(st.booleans()):
                new.insert(draw(st.integers(0, len(new))), 1)
            n = B.reshape(n, new)
        elif kind == "expand":
            ones = [i for i, d in enumerate(s) if d == 1]
            new = [draw(st.integers(1, 3)) if i in ones else d for i, d in enumerate(s)]
            if draw(st.booleans()):
                new = [2] + new
            n = B.expand(n, new)
        elif kind == "shrink":
            bounds = []
            for d in s:
                lo = draw(st.integers(0, d - 1))
                bounds.append((lo, draw(st.integers(lo + 1, d))))
            n = B.shrink(n, bounds)
        elif kind == "pad":
            n = B.pad(n, [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in s])
        elif kind == "flip":
            n = B.flip(n, sorted(set(draw(st.lists(st.integers(0, len(s) - 1), max_size=len(s))))))
        elif kind == "step":
            n = B.step(n, [draw(st.integers(1, 3)) for _ in s])
        else:  # overlapping sliding windows along the last axis, stacked on whatever came before
            d = s[-1]
            k = draw(st.integers(1, d))
            stride, dil = draw(st.integers(1, 2)), draw(st.integers(1, 2))
            if dil * (k - 1) >= d:
                continue
            out = (d - dil * (k - 1) - 1) // stride + 1
            rest = int(np.prod(s[:-1]))
            from caten.ir.graph import Node
            from caten.ir.ops import Op
            from caten.ir.view import View
            flat = B.reshape(n, [rest, d])
            v = View((rest, out, k), (d, stride, dil), 0)
            n = Node.make(Op.VIEW, flat.dtype, v.shape, (flat,), v)
    return x, n


@settings(max_examples=1500, deadline=None, derandomize=False)
@given(chains(), st.integers(0, 2 ** 31))
def test_the_view_vjp_is_the_adjoint(case, seed):
    x, y = case
    note(dump([y]))
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal([int(d) for d in x.shape])
    cv = rng.standard_normal([int(d) for d in y.shape])
    c = B.buffer(T.f64, y.shape, 1, "c")
    g, = vjp([y], [c], [x])
    yv, gv = evaluate([y, g], [xv, cv], {})
    assert gv.shape == xv.shape
    np.testing.assert_allclose(float(np.sum(yv * cv)), float(np.sum(xv * gv)), rtol=1e-9, atol=1e-9)
