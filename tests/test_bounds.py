"""The bounds-checked mode (caten.lower.bounds): every load and store of the generated code is
checked against its buffer's extent, and an access outside fails loudly with kernel, buffer,
index and extent; programs that stay in bounds give the reference's values unchanged."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from click.testing import CliRunner

import caten
from caten.cli.main import cli


def _have(rt: str) -> bool:
    from caten import plugin as R

    try:
        return R.get(rt).available()[0]
    except caten.Error:
        return False


NATIVE = ["llvm", "c"] + (["opencl"] if _have("opencl") else [])

# The trust issue's two out-of-bounds reproducers (a slice of a computed tensor as the output,
# a flip of a reshaped permute). Before their fixes the checked mode reported exactly these
# accesses (`buffer out0, index 250, extent 250`; `buffer in0, index -1, extent 15`); now the
# checked code must give numpy's values without a report.
SLICE_STORE = "(composite f ((x{f32}[1000]) -> (y{f32}[250])) (slice (* x 2) [0 250 1]))"
FLIP_RESHAPE = ("(composite g ((X{f32}[5, 3]) -> (Y{f32}[1, 15])) "
                "(flip (reshape (permute X [1 0]) [1 15]) :axis -1))")


@pytest.mark.parametrize("rt", NATIVE)
def test_slice_store_reproducer_is_in_bounds(rt):
    x = np.arange(1000, dtype=np.float32)
    got = caten.loads(SLICE_STORE, runtime=rt, check_bounds=True).f(x)
    assert np.array_equal(got, x[:250] * 2)


@pytest.mark.parametrize("rt", NATIVE)
def test_flip_reshape_reproducer_is_in_bounds(rt):
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    got = caten.loads(FLIP_RESHAPE, runtime=rt, check_bounds=True).g(x)
    assert np.array_equal(got, np.flip(x.T.reshape(1, 15), -1))


def _inject(monkeypatch, buf: str = "out0", delta: int = 1, loads: bool = False) -> None:
    """Make the lowering buggy for this test: accesses of `buf` moved by `delta`."""
    import caten.lower.kernel_lowerer as lower_mod

    real = lower_mod.lower

    def buggy(sched):
        return [dataclasses.replace(k, body=_shift_accesses(k.body, buf, delta, loads)) for k in real(sched)]

    monkeypatch.setattr(lower_mod, "lower", buggy)


def _shift_accesses(stmts: list, buf: str, delta: int, loads: bool) -> list:
    """A lowering bug on purpose: every store into `buf` (or every load from it) moved by `delta`."""
    from caten import loopir as L

    def expr(e):
        if not isinstance(e, L.X):
            return e
        src = tuple(expr(a) for a in e.src)
        if loads and e.op == "load" and e.arg == buf:
            return L.X.make("load", e.dtype, (L.iadd(src[0], L.const(delta)),), e.arg)
        return e if src == e.src else L.X.make(e.op, e.dtype, src, e.arg)

    out = []
    for st in stmts:
        if isinstance(st, L.Loop):
            st = dataclasses.replace(st, body=_shift_accesses(st.body, buf, delta, loads))
        elif isinstance(st, L.Store):
            idx = L.iadd(st.idx, L.const(delta)) if (st.buf == buf and not loads) else expr(st.idx)
            st = L.Store(st.buf, idx, expr(st.value))
        out.append(st)
    return out


@pytest.mark.parametrize("rt", NATIVE)
@pytest.mark.parametrize("buf,delta,loads", [("out0", 1, False), ("in0", -1, True)])
def test_an_injected_out_of_bounds_access_is_reported(rt, buf, delta, loads, monkeypatch):
    """The checked mode catches an access past either end that a (simulated) lowering bug makes,
    names kernel, buffer, index and extent, and touches no memory outside the buffers."""
    _inject(monkeypatch, buf, delta, loads)
    # a structure of its own per case: the in-process compile memo must not hand back another case's code
    src = f"(composite h ((X{{f32}}[N]) -> (Y{{f32}}[N])) (* (+ X {3 + delta + 10 * loads}) 2))"
    m = caten.loads(src, runtime=rt, check_bounds=True, use_cache=False)
    index = r"\d+" if delta > 0 else "-1"
    with pytest.raises(caten.Error, match=rf"out-of-bounds: kernel \S+, buffer {buf}, index {index}, extent 9"):
        m.h(np.arange(9, dtype=np.float32))


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
    _inject(monkeypatch)
    with pytest.raises(caten.Error, match="out-of-bounds"):
        caten.loads("(composite e ((X{f32}[N]) -> (Y{f32}[N])) (* X 7))", runtime="c",
                    use_cache=False).e(np.ones(100, np.float32))


def test_runtime_without_the_mode_says_so():
    """A plugin runtime that does not declare `checks_bounds` refuses the option."""
    from caten import plugin as R

    rt = R.load_plugin(os.path.join(os.path.dirname(__file__), "plugins", "broken_add.py"))
    assert not rt.checks_bounds
    with pytest.raises(caten.Error, match="runtime 'broken-add' has no bounds-checked mode"):
        caten.loads(SLICE_STORE, runtime="broken-add", check_bounds=True)


def test_cuda_checked_code_assembles():
    """CUDA has the mode through the shared C-style renderer and device host: the checked kernel
    records into the error buffer and its PTX assembles (ptxas; no GPU is needed to compile)."""
    import shutil

    from caten.runtimes import cuda_rt

    if shutil.which("ptxas") is None or (cuda_rt.nvrtc_version() is None and shutil.which("nvcc") is None):
        pytest.skip("needs ptxas and NVRTC or nvcc (the cuda extra)")
    m = caten.loads(SLICE_STORE, runtime="cuda", check_bounds=True, use_cache=False)
    prog, exe = m.f.program({})
    assert _table(exe) is not None
    from caten import pipeline
    from caten.plugin import Options

    src = pipeline.emit(cuda_rt.RUNTIME, prog, "source", Options(runtime="cuda", check_bounds=True))[".cu"]
    assert "caten_bcheck(" in src, src[:2000]


def test_cli_flag(tmp_path, monkeypatch):
    src, x = tmp_path / "f.lisp", tmp_path / "x.npy"
    src.write_text("(composite f ((x{f32}[N]) -> (y{f32}[N])) (* x 11))")
    np.save(x, np.ones(250, np.float32))
    _inject(monkeypatch)
    r = CliRunner().invoke(cli, ["run", str(src), f"x={x}", "-r", "c", "--check-bounds", "--no-cache"])
    assert r.exit_code == 1, r.output
    assert "out-of-bounds: kernel f__k0, buffer out0, index 250, extent 250" in r.output


@pytest.mark.parametrize("rt", NATIVE)
def test_gather_from_an_empty_axis_reads_nothing(rt):
    """Fuzz seed 50099: GATHER from data with an empty axis clamped its out-of-range indices to
    element 0 and read it (then discarded the value): a read past an empty buffer. Now nothing is
    read and every position gives 0."""
    src = ("(composite fz ((X1{f32}[N, 1]) -> (Y0{f32}[5, 1]))"
           " (GATHER X1 (- (mod (+ (INDEX [5 1] :axis 0) 1) (+ (dim X1 0) 3)) 1) :axis 0))")
    m = caten.loads(src, runtime=rt, check_bounds=True)
    np.testing.assert_array_equal(m.fz(np.zeros((0, 1), np.float32)), np.zeros((5, 1), np.float32))
    x = np.arange(3, dtype=np.float32).reshape(3, 1) + 1
    want = caten.loads(src, runtime="numpy").fz(x)
    np.testing.assert_array_equal(m.fz(x), want)
