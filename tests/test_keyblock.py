"""Key blocks (caten.schedule.keyblock, rowblock._key_split): attention's backward sums dK and dV
over the query rows, so those cones are split along the keys, the block count moved in front
([head, key blocks, queries, keys of a block]); the row statistics they read come from the
row-blocked forward values. Checked: values against the reference interpreter and torch on llvm
and c with bounds checks, random variants with tiny blocks, the arena (linear in the tokens),
and the layout math itself (a re-strided view reads what the original read)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten
from caten.ir.view import View

GRAD = """
(composite att ((Q{f32}[H, S, D]) (K{f32}[H, L, D]) (V{f32}[H, L, E]) (B{f32}[S, L]) -> (O{f32}[H, S, E]))
  (setf sc SCORES)
  (return (matmul (softmax sc :axis -1) V)))
(composite att-grad ((Q{f32}[H, S, D]) (K{f32}[H, L, D]) (V{f32}[H, L, E]) (B{f32}[S, L]) (G{f32}[H, S, E])
                     -> OUTS)
  (setf g (vjp att Q K V B :wrt WRT :cotangent G))
  (return RET))
"""

FORMS = {"scale": "(* s 0.5)",
         "bias": "(+ s B)",
         "mask": "(where (<= (reshape (arange L) [1 L]) (reshape (arange S) [S 1])) s -inf)",
         "gate": "(* s (sigmoid B))"}


def _program(picks: list[str], wrt: list[str]) -> str:
    expr = "(matmul Q (transpose K))"
    for p in picks:
        expr = FORMS[p].replace(" s ", f" {expr} ") if p == "mask" else FORMS[p].replace("s", expr, 1)
    shapes = {"Q": "[H, S, D]", "K": "[H, L, D]", "V": "[H, L, E]"}
    outs = " ".join(f"(d{w}{{f32}}{shapes[w]})" for w in wrt)
    ret = " ".join(f"(nth g {k})" for k in range(len(wrt)))
    return GRAD.replace("SCORES", expr).replace("OUTS", outs).replace("WRT", f"[{' '.join(wrt)}]") \
        .replace("RET", ret)


def _keyed(src: str, defines: dict) -> bool:
    from caten.schedule import scheduler
    from caten.schedule.rowblock import row_blocks

    m = caten.loads(src, runtime="numpy", defines=defines)
    prog = m.att_grad.elaborate(dict(m.att_grad.module.types))
    nodes = scheduler.CF.materialize(scheduler.orient(scheduler.outward(list(prog.nodes))))
    return bool(row_blocks(nodes)[2])


def _torch_grads(q, k, v, b, g, picks, wrt):
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    tb = torch.tensor(b, dtype=torch.float64)
    s = tq @ tk.transpose(-1, -2)
    S, L = b.shape
    for p in picks:
        s = {"scale": lambda s: s * 0.5, "bias": lambda s: s + tb,
             "mask": lambda s: torch.where(torch.arange(L)[None] <= torch.arange(S)[:, None], s, -torch.inf),
             "gate": lambda s: s * torch.sigmoid(tb)}[p](s)
    o = torch.softmax(s, -1) @ tv
    want = torch.autograd.grad(o, [{"Q": tq, "K": tk, "V": tv}[w] for w in wrt], torch.tensor(g, dtype=torch.float64))
    return [w.numpy() for w in want]


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("seed", range(8))
def test_random_attention_gradients_with_tiny_key_blocks(seed, monkeypatch):
    """A property test: with the thresholds lowered (blocks of 4), the gradients of random
    attention-shaped programs (scaled, biased, masked by position, gated; any subset of Q, K, V)
    are split into key blocks and agree with torch (f64) on llvm and c with bounds checks."""
    from caten.schedule import rowblock

    monkeypatch.setattr(rowblock, "MIN_ROWS", 8)
    monkeypatch.setattr(rowblock, "MIN_SCORES", 64)
    monkeypatch.setattr(rowblock, "BLOCKS", (4, 3))
    rng = np.random.default_rng(seed)
    H, S, L = int(rng.integers(1, 3)), int(rng.choice([8, 12, 24])), int(rng.choice([8, 12, 16]))
    D, E = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    picks = list(rng.choice(list(FORMS), size=int(rng.integers(0, 4)), replace=False))
    if "mask" in picks:
        L = S  # (every row keeps a key)
    wrt = [w for w in "QKV" if rng.integers(0, 2)] or ["K"]
    if "K" not in wrt and "V" not in wrt:
        wrt.append("V")
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((H, S, D), (H, L, D), (H, L, E)))
    b, g = rng.standard_normal((S, L)).astype(np.float32), rng.standard_normal((H, S, E)).astype(np.float32)
    src = _program(picks, wrt)
    defines = {"H": H, "S": S, "L": L, "D": D, "E": E}
    assert _keyed(src, defines), src
    want = _torch_grads(q, k, v, b, g, picks, wrt)
    for runtime in ("llvm", "c"):
        got = caten.loads(src, runtime=runtime, defines=defines, use_cache=False, check_bounds=True) \
            .att_grad(q, k, v, b, g)
        got = [got] if len(wrt) == 1 else list(got)
        for w, x, y in zip(wrt, got, want):
            np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5, err_msg=f"d{w} {picks} {runtime}\n{src}")


CAUSAL = _program(["scale", "mask"], ["Q", "K", "V"])


def _arena(defines: dict) -> int:
    from caten import pipeline
    from caten.plugin import get

    m = caten.loads(CAUSAL, runtime="llvm", defines=defines)
    text = pipeline.emit(get("llvm"), m.att_grad.elaborate({}), "schedule")[".txt"]
    return int(re.search(r"arena (\d+) bytes", text).group(1))


def test_attention_backward_scratch_is_linear_in_the_tokens():
    """The causal attention's gradient (12 heads x 64) plans blocks of rows for dQ and of keys for
    dK and dV: doubling the tokens doubles the arena, and at 4k it is far below one head's S²
    scores (64 MiB; 941 MB before the key blocks)."""
    d = {"H": 12, "D": 64, "E": 64}
    a2, a4 = _arena({**d, "S": 2048, "L": 2048}), _arena({**d, "S": 4096, "L": 4096})
    assert a4 < 2.2 * a2
    assert a4 < 4096 * 4096 * 4 // 2


def test_causal_attention_gradient_at_real_block_size():
    """768 tokens, 2 heads (blocks of 128 rows and keys, the default thresholds): the key-blocked
    gradient equals the reference interpreter's within f32 summation error."""
    rng = np.random.default_rng(0)
    d = {"H": 2, "S": 768, "L": 768, "D": 32, "E": 16}
    assert _keyed(CAUSAL, d)
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((2, 768, 32), (2, 768, 32), (2, 768, 16)))
    b, g = np.zeros((768, 768), np.float32), rng.standard_normal((2, 768, 16)).astype(np.float32)
    want = caten.loads(CAUSAL, runtime="numpy", defines=d).att_grad(q, k, v, b, g)
    got = caten.loads(CAUSAL, runtime="llvm", defines=d).att_grad(q, k, v, b, g)
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(40))
def test_moved_views_read_what_the_original_read(seed):
    """The layout math: a random view (permuted, broadcast, sliced, stepped) of a source whose
    axis b it walks whole along its axis i, re-strided over the source split with the block count
    moved to p, reads the same elements as the original view split in place."""
    from caten.schedule import keyblock

    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    src = tuple(int(x) for x in rng.integers(1, 4, rank))
    b = int(rng.integers(1, rank))
    rows, block = 6, int(rng.choice([2, 3]))
    src = src[:b] + (rows,) + src[b + 1:]
    v = View.of(src)
    perm = [int(x) for x in rng.permutation(rank)]
    v = v.permute(perm)
    i = perm.index(b)
    for k, d in enumerate(v.shape):  # slices and steps of the other axes
        if k != i and d > 1 and rng.integers(0, 2):
            lo = int(rng.integers(0, d - 1))
            v = v.shrink([(lo, d) if a == k else (0, e) for a, e in enumerate(v.shape)])
            v = View(v.shape, v.strides, v.offset)  # (a shrink's mask is all-true)
    p = int(rng.integers(0, min(i, b) + 1))
    x = np.arange(int(np.prod(src))).reshape(src)
    moved = x.reshape(src[:b] + (rows // block, block) + src[b + 1:])
    moved = np.moveaxis(moved, b, p).ravel()
    nv = keyblock.moved_view(v, src, b, i, p, rows, block, moved=b > p)
    got = np.lib.stride_tricks.as_strided(moved[nv.offset:], nv.shape, [s * moved.itemsize for s in nv.strides])
    want = v.apply(x.ravel(), {})
    want = want.reshape(v.shape[:i] + (rows // block, block) + v.shape[i + 1:])
    want = np.moveaxis(want, i, p)
    np.testing.assert_array_equal(got, want)


def test_moved_views_refuse_a_walk_across_source_axes():
    """A view merging two source axes into one walk (a reshape's flat stride) cannot be re-strided
    when the block count moves between them: refused, and the graph kept."""
    from caten.schedule import keyblock

    src = (2, 3, 6, 2)  # b = 2 (6 rows); view axis 0 walks axes 0 and 1 together (6 = 2 x 3)
    v = View((6, 6, 2), (12, 2, 1))
    with pytest.raises(keyblock.Unmovable):
        keyblock.moved_view(v, src, 2, 1, 1, 6, 3, moved=True)
