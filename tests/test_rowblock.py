"""Row blocks (caten.schedule.rowblock): a softmax over long rows -- attention -- runs a block of
query rows at a time, so its scratch is linear in the rows. Checked against numpy on the
variants a user writes (causal mask, additive bias, ALiBi from iotas, GQA's shared heads,
cross-attention, a plain row softmax), on numpy, llvm and c, with bounds checks; and the
schedule's arena is measured: it must not hold S² scores."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten

CAUSAL = """
(composite att ((Q{T}[H, S, 64]) (K{T}[H, S, 64]) (V{T}[H, S, 64]) -> (O{T}[H, S, 64]))
  (setf s (* (matmul Q (transpose K)) 0.125))
  (setf i (reshape (arange S) [S 1]))
  (setf j (reshape (arange S) [1 S]))
  (return (matmul (softmax (where (<= j i) s -inf) :axis -1) V)))
"""

BIAS = """
(composite att ((Q{f32}[H, S, 16]) (K{f32}[H, L, 16]) (V{f32}[H, L, 8]) (B{f32}[S, L]) -> (O{f32}[H, S, 8]))
  (return (matmul (softmax (+ (* (matmul Q (transpose K)) 0.25) B) :axis -1) V)))
"""

ALIBI = """
(composite att ((Q{f32}[H, S, 16]) (K{f32}[H, S, 16]) (V{f32}[H, S, 16]) (slope{f32}[H, 1, 1]) -> (O{f32}[H, S, 16]))
  (setf d (cast (- (reshape (arange S) [1 S]) (reshape (arange S) [S 1])) f32))
  (return (matmul (softmax (+ (matmul Q (transpose K)) (* slope d)) :axis -1) V)))
"""

GQA = """
(composite att ((Q{f32}[2, 4, S, 16]) (K{f32}[2, 1, S, 16]) (V{f32}[2, 1, S, 16]) -> (O{f32}[2, 4, S, 16]))
  (setf k (expand K [2 4 S 16]))
  (setf v (expand V [2 4 S 16]))
  (return (matmul (softmax (* (matmul Q (transpose k)) 0.25) :axis -1) v)))
"""

SOFTMAX = """
(composite sm ((X{f32}[H, S, L]) -> (Y{f32}[H, S, L]))
  (return (softmax X :axis -1)))
"""


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _arena(src: str, defines: dict) -> int:
    from caten import pipeline
    from caten.plugin import get

    m = caten.loads(src, runtime="llvm", defines=defines)
    comp = getattr(m, m.names[0])
    prog = comp.elaborate(dict(comp.module.types))
    text = pipeline.emit(get("llvm"), prog, "schedule")[".txt"]
    return int(re.search(r"arena (\d+) bytes", text).group(1))


def row_blocks_fire(src: str, defines: dict | None = None) -> bool:
    from caten.schedule.rowblock import row_blocks

    m = caten.loads(src, runtime="numpy", defines=defines or {})
    comp = getattr(m, m.names[0])
    prog = comp.elaborate(dict(comp.module.types))
    return row_blocks(list(prog.nodes))[0] is not prog.nodes[0]


@pytest.mark.parametrize("runtime,dtype", [("llvm", "f32"), ("c", "f32"), ("llvm", "f64")])
def test_causal_attention(runtime, dtype):
    S, H = 1024, 1
    assert row_blocks_fire(CAUSAL, {"T": dtype, "H": H, "S": S})
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((H, S, 64)).astype(dtype.replace("f", "float")) for _ in range(3))
    m = caten.loads(CAUSAL, runtime=runtime, defines={"T": dtype})
    s = q @ k.transpose(0, 2, 1) * 0.125
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    want = _softmax(s) @ v
    np.testing.assert_allclose(m.att(q, k, v), want, rtol=1e-4 if dtype == "f32" else 1e-12,
                               atol=1e-5 if dtype == "f32" else 1e-12)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_bias_cross_attention(runtime):
    H, S, L = 3, 384, 1500  # 384 query rows in 3 blocks of 128, 1500 keys
    assert row_blocks_fire(BIAS, {"H": H, "S": S, "L": L})
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((H, S, 16)).astype(np.float32), rng.standard_normal((H, L, 16)).astype(np.float32)
    v, b = rng.standard_normal((H, L, 8)).astype(np.float32), rng.standard_normal((S, L)).astype(np.float32)
    want = _softmax(q @ k.transpose(0, 2, 1) * 0.25 + b) @ v
    got = caten.loads(BIAS, runtime=runtime).att(q, k, v, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_alibi_and_gqa_under_bounds_checks(runtime):
    rng = np.random.default_rng(2)
    S = 1024
    q, k, v = (rng.standard_normal((2, S, 16)).astype(np.float32) for _ in range(3))
    slope = np.array([0.5, 0.125], np.float32).reshape(2, 1, 1)
    d = (np.arange(S)[None, :] - np.arange(S)[:, None]).astype(np.float32)
    want = _softmax(q @ k.transpose(0, 2, 1) + slope * d) @ v
    assert row_blocks_fire(ALIBI, {"H": 2, "S": S})
    got = caten.loads(ALIBI, runtime=runtime, check_bounds=True).att(q, k, v, slope)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    S = 768
    q = rng.standard_normal((2, 4, S, 16)).astype(np.float32)
    k, v = (rng.standard_normal((2, 1, S, 16)).astype(np.float32) for _ in range(2))
    want = _softmax(q @ k.transpose(0, 1, 3, 2) * 0.25) @ v
    assert row_blocks_fire(GQA, {"S": S})
    got = caten.loads(GQA, runtime=runtime, check_bounds=True).att(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_plain_row_softmax(runtime):
    assert row_blocks_fire(SOFTMAX, {"H": 2, "S": 1000, "L": 1100})
    x = np.random.default_rng(3).standard_normal((2, 1000, 1100)).astype(np.float32)
    np.testing.assert_allclose(caten.loads(SOFTMAX, runtime=runtime).sm(x), _softmax(x), rtol=1e-5, atol=1e-7)


def test_attention_scratch_is_linear_in_the_tokens():
    """Doubling the tokens doubles the arena (a block of rows by S), never quadruples it; at
    16k tokens it is far below one head's 16k² scores (1 GiB)."""
    a4, a8 = _arena(CAUSAL, {"T": "f32", "H": 12, "S": 4096}), _arena(CAUSAL, {"T": "f32", "H": 12, "S": 8192})
    assert a8 < 2.2 * a4
    assert _arena(CAUSAL, {"T": "f32", "H": 12, "S": 16384}) < (16384 * 16384 * 4) // 8


def test_short_rows_keep_their_schedule():
    """A softmax over short rows (GPT-2's 512 tokens) is not blocked: the pass leaves the graph."""
    from caten.ir.graph import toposort
    from caten.schedule.rowblock import row_blocks

    m = caten.loads(CAUSAL, runtime="numpy", defines={"T": "f32", "H": 12, "S": 512})
    prog = m.att.elaborate(dict(m.att.module.types))
    assert row_blocks(list(prog.nodes))[0][0] is prog.nodes[0]
    m = caten.loads(CAUSAL, runtime="numpy", defines={"T": "f32", "H": 12, "S": 2048})
    prog = m.att.elaborate(dict(m.att.module.types))
    out = row_blocks(list(prog.nodes))[0][0]
    assert out is not prog.nodes[0] and any(len(n.shape) == 4 and n.shape[1:3] == (16, 128) for n in toposort([out]))


@pytest.mark.parametrize("seed", range(8))
def test_random_attention_variants_with_tiny_blocks(seed, monkeypatch):
    """A property test: with the thresholds lowered (blocks of 4 rows), random attention-shaped
    programs (scores scaled, biased, masked by position, through a sigmoid gate or a cast; a
    second output reading the scores; heads broadcast) agree with numpy on llvm and c."""
    from caten.schedule import rowblock

    monkeypatch.setattr(rowblock, "MIN_ROWS", 8)
    monkeypatch.setattr(rowblock, "MIN_SCORES", 64)
    monkeypatch.setattr(rowblock, "BLOCKS", (4, 3))
    rng = np.random.default_rng(seed)
    H, S = int(rng.integers(1, 3)), int(rng.choice([8, 12, 24]))
    L, E = int(rng.integers(8, 20)), int(rng.integers(1, 6))
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in ((H, S, 4), (H, L, 4), (H, L, E)))
    b = rng.standard_normal((S, L)).astype(np.float32)
    forms = {"scale": ("(* s 0.5)", lambda s: s * 0.5),
             "bias": ("(+ s B)", lambda s: s + b),
             "mask": ("(where (<= (reshape (arange L) [1 L]) (reshape (arange S) [S 1])) s -inf)",
                      lambda s: np.where(np.arange(L)[None] <= np.arange(S)[:, None], s, -np.inf)),
             "gate": ("(* s (sigmoid B))", lambda s: s / (1 + np.exp(-b)))}
    picks = list(rng.choice(list(forms), size=int(rng.integers(1, 4)), replace=False))
    expr, ref = "(matmul Q (transpose K))", q @ k.transpose(0, 2, 1)
    for p in picks:
        expr = forms[p][0].replace("s", expr, 1) if not forms[p][0].startswith("(where") else \
            forms[p][0].replace(" s ", f" {expr} ")
        ref = forms[p][1](ref)
    second = bool(rng.integers(0, 2))
    outs = "(O{f32}[H, S, E])" + (" (M{f32}[H, S, 1])" if second else "")
    ret = "(matmul (softmax sc :axis -1) V)" + (" (max sc :axis -1 :keepdims true)" if second else "")
    src = (f"(composite att ((Q{{f32}}[H, S, 4]) (K{{f32}}[H, L, 4]) (V{{f32}}[H, L, E]) (B{{f32}}[S, L]) -> {outs})\n"
           f"  (setf sc {expr})\n  (return {ret}))\n")
    assert row_blocks_fire(src, {"H": H, "S": S, "L": L, "E": E})
    with np.errstate(all="ignore"):
        want = [_softmax(ref) @ v] + ([ref.max(-1, keepdims=True)] if second else [])
    for runtime in ("llvm", "c"):
        got = caten.loads(src, runtime=runtime, use_cache=False).att(q, k, v, b)
        got = [got] if not second else list(got)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{picks} {runtime}\n{src}")
