"""The bounds-checked mode (caten.lower.bounds): every load and store of the generated code is
checked against its buffer's extent, and an access outside fails loudly with kernel, buffer,
index and extent; programs that stay in bounds give the reference's values unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten.cli.main import cli


def _have(rt: str) -> bool:
    from caten.run import runtime as R

    try:
        return R.get(rt).available()[0]
    except caten.Error:
        return False


NATIVE = ["llvm", "c"] + (["opencl"] if _have("opencl") else [])

# Two known out-of-bounds bugs (being fixed on another branch). These tests assert the LOUD
# failure the checked mode gives today; when the fixes land, flip them to assert the values
# (the expected arrays are computed below from numpy for that purpose).
SLICE_STORE = "(composite f ((x{f32}[1000]) -> (y{f32}[250])) (slice (* x 2) [0 250 1]))"
FLIP_RESHAPE = ("(composite g ((X{f32}[5, 3]) -> (Y{f32}[1, 15])) "
                "(flip (reshape (permute X [1 0]) [1 15]) :axis -1))")


@pytest.mark.parametrize("rt", NATIVE)
def test_known_bug_slice_store_is_caught(rt):  # KNOWN BUG: flip to a value check when fixed
    m = caten.loads(SLICE_STORE, runtime=rt, check_bounds=True)
    x = np.arange(1000, dtype=np.float32)
    assert np.array_equal(caten.loads(SLICE_STORE, runtime="numpy").f(x), x[:250] * 2)
    with pytest.raises(caten.Error, match=r"out-of-bounds: kernel \S+__k0, buffer out0, index 250, extent 250"):
        m.f(x)


@pytest.mark.parametrize("rt", NATIVE)
def test_known_bug_flip_reshape_is_caught(rt):  # KNOWN BUG: flip to a value check when fixed
    m = caten.loads(FLIP_RESHAPE, runtime=rt, check_bounds=True)
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    assert np.array_equal(caten.loads(FLIP_RESHAPE, runtime="numpy").g(x), np.flip(x.T.reshape(1, 15), -1))
    with pytest.raises(caten.Error, match=r"out-of-bounds: kernel \S+, buffer in0, index -?\d+, extent 15"):
        m.g(x)


IN_BOUNDS = """
(composite softmax-rows ((X{f32}[B, N]) -> (Y{f32}[B, N]))
  (setf e (exp (- X (max X :axis 1 :keepdims true))))
  (/ e (sum e :axis 1 :keepdims true)))
(composite mm ((A{f32}[M, K]) (B{f32}[K, N]) -> (C{f32}[M, N])) (matmul A B))
(composite moves ((X{f32}[N, M]) -> (Y{f32}[M, (+ N 3)])) (pad (flip (permute X [1 0]) :axis 0) [[0 0] [1 2]]))
(composite cat ((X{i32}[N]) (Y{i32}[K]) -> (Z{i32}[(+ N K)])) (concat (* X 3) Y :axis 0))
"""


@pytest.mark.parametrize("rt", NATIVE)
def test_in_bounds_programs_keep_their_values(rt):
    """Reductions, a GEMM (its packed tiles expanded and checked), movement chains and concat."""
    m = caten.loads(IN_BOUNDS, runtime=rt, check_bounds=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 33)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(m.softmax_rows(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    a, b = rng.standard_normal((70, 45)).astype(np.float32), rng.standard_normal((45, 37)).astype(np.float32)
    np.testing.assert_allclose(m.mm(a, b), a @ b, rtol=1e-4, atol=1e-4)
    y = rng.standard_normal((3, 5)).astype(np.float32)
    assert np.array_equal(m.moves(y), np.pad(np.flip(y.T, 0), [(0, 0), (1, 2)]))
    i, j = np.arange(4, dtype=np.int32), np.arange(9, dtype=np.int32) - 5
    assert np.array_equal(m.cat(i, j), np.concatenate([i * 3, j]))


@pytest.mark.parametrize("rt", NATIVE)
def test_checked_and_unchecked_code_are_cached_apart(rt):
    """The option is part of the compile key: the unchecked build of the same program runs no checks."""
    checked = caten.loads(SLICE_STORE, runtime=rt, check_bounds=True)
    plain = caten.loads(FLIP_RESHAPE.replace("[5, 3]", "[3, 5]").replace("[1 0]", "[0 1]"), runtime=rt)
    _, exe_c = checked.f.program({})
    _, exe_p = plain.g.program({})
    assert _table(exe_c) is not None and _table(exe_p) is None
    again = caten.loads(SLICE_STORE, runtime=rt, check_bounds=False)
    _, exe_a = again.f.program({})
    assert exe_a is not exe_c


def _table(exe):
    """The executable's bounds table (llvm keeps it, c on its schedule, opencl on its device program)."""
    for holder in (exe, getattr(exe, "sched", None), getattr(exe, "dp", None)):
        if getattr(holder, "bounds", None) is not None:
            return holder.bounds
    return None


def test_environment_variable_turns_it_on(monkeypatch):
    monkeypatch.setenv("CATEN_CHECK_BOUNDS", "1")
    with pytest.raises(caten.Error, match="out-of-bounds"):
        caten.loads(SLICE_STORE, runtime="c").f(np.ones(1000, np.float32))


def test_runtime_without_the_mode_says_so():
    with pytest.raises(caten.Error, match="runtime 'cuda' has no bounds-checked mode"):
        caten.loads(SLICE_STORE, runtime="cuda", check_bounds=True)


def test_cli_flag(tmp_path):
    src, x = tmp_path / "f.lisp", tmp_path / "x.npy"
    src.write_text(SLICE_STORE)
    np.save(x, np.ones(1000, np.float32))
    r = CliRunner().invoke(cli, ["run", str(src), f"x={x}", "-r", "c", "--check-bounds"])
    assert r.exit_code == 1, r.output
    assert "out-of-bounds: kernel f__k0, buffer out0, index 250, extent 250" in r.output
