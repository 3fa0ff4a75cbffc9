"""A slice of a concatenation that lies in one piece reads that piece (caten.ir.build._piece): the
graph holds the piece itself, not a chain of masked selects over every piece (DDP's parameters
cut back out of their flat bucket read through all of them). Checked against numpy on random
pieces and slices, 2-D concatenations along either axis, on numpy, llvm and c."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.ir.ops import Op


def test_an_exact_piece_is_the_piece_itself():
    m = caten.loads("(composite f ((A{f32}[4]) (B{f32}[3]) (C{f32}[5]) -> (Y{f32}[3]))\n"
                    "  (return (slice (concat A B C :axis 0) [4 7])))", runtime="numpy")
    prog = m.f.elaborate({})
    assert prog.nodes[0].op is Op.BUFFER and prog.nodes[0].arg[2] == "B"


@pytest.mark.parametrize("seed", range(6))
def test_random_slices_of_concatenations(seed):
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 6, int(rng.integers(2, 5)))]
    axis = int(rng.integers(0, 2))
    other = int(rng.integers(1, 4))
    shapes = [(s, other) if axis == 0 else (other, s) for s in sizes]
    total = sum(sizes)
    cuts = sorted({(int(a), int(b)) for a, b in (sorted(rng.integers(0, total + 1, 2)) for _ in range(4)) if a < b})
    names = [chr(65 + i) for i in range(len(shapes))]
    params = " ".join(f"({n}{{f32}}[{s[0]}, {s[1]}])" for n, s in zip(names, shapes))
    outs, rets = [], []
    for k, (a, b) in enumerate(cuts):
        shape = f"{b - a}, {other}" if axis == 0 else f"{other}, {b - a}"
        outs.append(f"(Y{k}{{f32}}[{shape}])")
        rets.append(f"(slice flat [{a} {b}])" if axis == 0 else f"(slice flat [0 {other}] [{a} {b}])")
    src = (f"(composite f ({params} -> {' '.join(outs)})\n"
           f"  (setf flat (concat {' '.join(names)} :axis {axis}))\n  (return {' '.join(rets)}))\n")
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    flat = np.concatenate(xs, axis=axis)
    for rt in ("numpy", "llvm", "c"):
        got = caten.loads(src, runtime=rt).f(*xs)
        got = got if isinstance(got, tuple) else (got,)
        for (a, b), g in zip(cuts, got):
            np.testing.assert_array_equal(g, flat[a:b] if axis == 0 else flat[:, a:b], err_msg=f"{rt}\n{src}")
