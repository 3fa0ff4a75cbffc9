"""`dropout` (LANGUAGE.md section 11) and the runtime seed of RAND under it.

RAND's key may come from a rank-0 u32/i64 tensor (XORed into the static seed), so a compiled
program draws a new mask per call or per loop step. Checked on the numpy, llvm and c runtimes
against the op table's threefry reference and against the mask's definition (24 random bits a
draw, dropped when below p); the bits of a static seed are pinned to what they always were.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys

import numpy as np
import pytest

import caten
from caten.ir import dtypes as T
from caten.ir.graph import Node
from caten.ir.ops import Op, _rand_ref, threefry2x32
from caten.ir.verify import node_problems

RUNTIMES = ["numpy", "llvm", "c"]
M, N = 64, 96

SRC = f"""
(composite drop ((X{{f32}}[{M} {N}] s{{i64}}) -> (Y{{f32}}[{M} {N}])) (dropout X 0.3 :seed s))
(composite drop-u32 ((X{{f32}}[{M} {N}] s{{u32}}) -> (Y{{f32}}[{M} {N}])) (dropout X 0.3 :seed s))
(composite drop-lit ((X{{f32}}[{M} {N}]) -> (Y{{f32}}[{M} {N}])) (dropout X 0.3 :seed 11))
(composite drop-f64 ((X{{f64}}[K]) -> (Y{{f64}}[K])) (dropout X 0.75 :seed 5))
(composite drop-zero ((X{{f32}}[K] s{{i64}}) -> (Y{{f32}}[K])) (dropout X 0 :seed s))
(composite drop-loop ((X{{f32}}[K] s{{i64}}) -> (Y{{f32}}[3 K]))
  (setf outs [])
  (dotimes (i 3) (setf outs (append outs (list (VIEW (dropout X 0.5 :seed (+ s i)) :unsqueeze 0)))))
  (concat (nth outs 0) (nth outs 1) (nth outs 2) :axis 0))
(composite bits-i64 ((s{{i64}}) -> (Y{{u32}}[3 33])) (RAND [3 33] :seed s))
(composite bits-u32 ((s{{u32}}) -> (Y{{u32}}[70])) (RAND [70] :seed s))
(composite bits-mixed ((s{{i32}}) -> (Y{{u32}}[70])) (RAND [70] :seed (+ (cast s i64) 1099511627776)))
(composite bits-i32 ((s{{i32}}) -> (Y{{u32}}[70])) (RAND [70] :seed s))
(composite bits-static ((x{{f32}}[K]) -> (Y{{u32}}[K])) (RAND [K] :seed 1099511627779))
(composite uniform ((s{{i64}}) -> (Y{{f32}}[50])) (rand [50] :seed s))
"""


@functools.cache
def _mod(rt: str):
    return caten.loads(SRC, runtime=rt)


def _x(shape=(M, N), dt=np.float32) -> np.ndarray:
    return np.random.default_rng(0).uniform(0.5, 2.0, shape).astype(dt)


def _keep(shape, seed: int, p: float) -> np.ndarray:
    """The mask's definition: keep where the 24-bit uniform draw of threefry is not below p."""
    u = (_rand_ref(tuple(shape), seed) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return u >= np.float32(p)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_dropout_mask_fraction_scale_and_definition(rt):
    x, p = _x(), 0.3
    y = _mod(rt).drop(x, np.array(42, np.int64))
    assert y.dtype == np.float32 and y.shape == (M, N)
    kept = y != 0
    n = x.size
    assert abs((1 - kept.mean()) - p) < 5 * np.sqrt(p * (1 - p) / n)  # a binomial bound, 5 sigma
    scale = np.float32(1 / (1 - p))
    assert np.array_equal(y[kept], x[kept] * scale)  # exactly x * f32(1/(1-p))
    assert np.array_equal(kept, _keep((M, N), 42, p))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_dropout_same_seed_same_mask_other_seed_other_mask(rt):
    m, x = _mod(rt), _x()
    a = m.drop(x, np.array(7, np.int64))
    assert np.array_equal(a, m.drop(x, np.array(7, np.int64)))
    b = m.drop(x, np.array(8, np.int64))
    assert (a != 0).tolist() != (b != 0).tolist()
    assert 0.3 < np.mean((a != 0) != (b != 0))  # independent masks differ in about 2 p (1 - p) of places
    # a tensor seed of value s gives the literal seed s's mask, as u32 or i64
    assert np.array_equal(m.drop(x, np.array(11, np.int64)), m.drop_lit(x))
    assert np.array_equal(m.drop_u32(x, np.array(11, np.uint32)), m.drop_lit(x))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_dropout_masks_agree_across_runtimes(rt):
    x = _x()
    assert np.array_equal(_mod(rt).drop(x, np.array(-3, np.int64)), _mod("numpy").drop(x, np.array(-3, np.int64)))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_dropout_p_zero_is_the_identity_and_f64_works(rt):
    x = np.array([1.5, -0.0, np.inf, np.nan, -2.0, 3e-41], np.float32)
    y = _mod(rt).drop_zero(x, np.array(1, np.int64))
    assert y.tobytes() == x.tobytes()
    x64 = _x((301,), np.float64)
    y64 = _mod(rt).drop_f64(x64)
    keep = _keep((301,), 5, 0.75)
    assert np.array_equal(y64, np.where(keep, x64 * 4.0, 0.0))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_dropout_seed_changes_per_dotimes_step(rt):
    x = _x((257,))
    y = _mod(rt).drop_loop(x, np.array(100, np.int64))
    for i in range(3):
        assert np.array_equal(y[i], np.where(_keep((257,), 100 + i, 0.5), x * np.float32(2), 0))
    assert not np.array_equal(y[0] != 0, y[1] != 0)


# ----------------------------------------------------------------------------- RAND's runtime seed
@pytest.mark.parametrize("rt", RUNTIMES)
def test_rand_tensor_seed_keys_threefry_like_a_literal(rt):
    m = _mod(rt)
    for s in (0, 1, -1, 2 ** 40 + 3, -(2 ** 63)):
        assert np.array_equal(m.bits_i64(np.array(s, np.int64)), _rand_ref((3, 33), s)), s
    for s in (0, 9, 2 ** 32 - 1):
        assert np.array_equal(m.bits_u32(np.array(s, np.uint32)), _rand_ref((70,), s)), s
    # an i32 seed is widened to i64 (sign-extended), as its cast would be
    assert np.array_equal(m.bits_i32(np.array(-5, np.int32)), _rand_ref((70,), -5))
    # an i32 seed cast to i64 is sign-extended; the sum reaches the high key word
    assert np.array_equal(m.bits_mixed(np.array(-5, np.int32)), _rand_ref((70,), 2 ** 40 - 5))
    u = m.uniform(np.array(9, np.int64))
    assert np.array_equal(u, (_rand_ref((50,), 9) >> np.uint32(8)).astype(np.float32) * np.float32(2 ** -24))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_rand_static_seed_bits_are_unchanged(rt):
    """Threefry2x32-20 of key (3, 256), counters 0.. (Random123's algorithm, computed here)."""
    ctr = np.arange(9, dtype=np.uint32)
    with np.errstate(over="ignore"):
        want = threefry2x32((3, 256), ctr, np.zeros(9, np.uint32))[0]
    assert np.array_equal(_mod(rt).bits_static(np.zeros(9, np.float32)), want)
    # Random123's known-answer vector for threefry2x32-20: key = ctr = 0
    z = np.zeros(1, np.uint32)
    with np.errstate(over="ignore"):
        x0, x1 = threefry2x32((0, 0), z, z)
    assert (int(x0[0]), int(x1[0])) == (0x6B200159, 0x99BA4EFE)


def test_rand_seed_operand_is_checked():
    ok = Node.make(Op.RAND, T.u32, (4,), (Node.make(Op.CONST, T.i64, (), (), 3),), (T.u32, 0))
    assert node_problems(ok) == []
    bad = Node.make(Op.RAND, T.u32, (4,), (Node.make(Op.CONST, T.f32, (), (), 3.0),), (T.u32, 0))
    assert any("u32 or i64 scalar" in p for p in node_problems(bad))
    two = Node.make(Op.RAND, T.u32, (4,), (ok.src[0], ok.src[0]), (T.u32, 0))
    assert any("0 or 1 operands" in p for p in node_problems(two))
    with pytest.raises(caten.Error, match="integer scalar tensor") as e:
        caten.loads("(composite f ((s{f32}) -> (Y{u32}[4])) (RAND [4] :seed s))", runtime="numpy").f(np.float32(1))
    assert e.value.line == 1
    with pytest.raises(caten.Error, match="integer scalar tensor"):
        caten.loads("(composite f ((s{i64}[2]) -> (Y{u32}[4])) (RAND [4] :seed s))", runtime="numpy").f(
            np.zeros(2, np.int64))


def test_dropout_p_out_of_range_is_a_diagnostic():
    with pytest.raises(caten.Error, match=r"p must lie in \[0, 1\]"):
        caten.loads("(composite f ((X{f32}[3]) -> (Y{f32}[3])) (dropout X 1.5))", runtime="numpy").f(
            np.zeros(3, np.float32))


def test_tensor_seed_compiles_for_cuda(tmp_path):
    """CUDA has no device here: the kernel with a runtime seed must still compile to PTX."""
    from caten.runtimes import cuda_rt

    if cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None:
        pytest.skip("neither NVRTC nor nvcc is available")
    src = tmp_path / "d.lisp"
    src.write_text("(composite d ((X{f32}[N] s{i64}) -> (Y{f32}[N])) (dropout X 0.5 :seed s))\n")
    p = subprocess.run([sys.executable, "-m", "caten", "-r", "cuda", "--emit", "asm", str(src), "-o", "d.ptx"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    text = (tmp_path / "d.ptx").read_text()
    assert ".entry" in text and ".param .u64" in text
