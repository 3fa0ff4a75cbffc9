"""Hangs, crashes and tracebacks that must be right answers or diagnostics.

Hang-prone reproducers run in a subprocess under a wall-clock limit, so a regression fails
the test instead of stalling the suite. Values are checked against numpy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import caten

RUNTIMES = ["numpy", "llvm", "c"]


def run_py(code: str, limit: float = 120) -> subprocess.CompletedProcess:
    """Python code in a fresh process, killed after `limit` seconds (a hang is a failure)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=limit, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {limit} s:\n{code}")


def caten_cli(*args: str, limit: float = 120, cwd: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "caten", *args], capture_output=True, text=True,
                              timeout=limit, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"caten {' '.join(args)} did not finish in {limit} s")


# 9: integer pow of a dim ------------------------------------------------------------------
@pytest.mark.parametrize("rt", RUNTIMES)
def test_pow_of_dim_terminates(rt):
    r = run_py(f"""
        import caten, numpy as np
        m = caten.loads('''
        (composite sq ((X{{f32}}[N]) -> (Y{{i64}})) (pow N 2))
        (composite one ((X{{f32}}[N]) -> (Y{{i64}})) (pow N 1))
        (composite cube ((X{{f32}}[N]) -> (Y{{i64}})) (pow N 3))''', runtime={rt!r})
        for n in (1, 5, 7):
            x = np.zeros(n, np.float32)
            print(int(m.sq(x)), int(m.one(x)), int(m.cube(x)))
        """, limit=240)
    assert r.returncode == 0, r.stderr
    got = [tuple(map(int, line.split())) for line in r.stdout.split("\n") if line]
    assert got == [(n ** 2, n, n ** 3) for n in (1, 5, 7)]


def test_dim_polynomials_stay_bounded():
    from caten.ir import dims as D

    n = D.sym("N")
    big = n
    for _ in range(5):
        big = D.mul(big, big)  # degree 32
    assert not D.small(big) and D.small(D.mul(n, n))
    assert not D.small(D.mul(n, 2 ** 64))


def test_dotimes_count_is_bounded():
    """A dotimes of 10^12 trips whose state keeps its shape is one loop (compiled at once, issue
    #40); one that must unroll (its value grows each trip) is refused past 100,000 trips, at
    once, never a hang."""
    r = run_py("""
        import caten
        caten.loads('(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf y X) (dotimes (i 1000000000000) '
                    '(setf y (+ y 1.0))) y)', runtime='numpy')
        print('LOOP')
        try:
            caten.loads('(composite g ((X{f32}[N]) -> (Y{f32}[N])) (setf y X) (dotimes (i 1000000000000) '
                        '(setf y (concat y y :axis 0))) y)', runtime='numpy')
        except caten.Error as e:
            print('ERR', e.line, e.message)
        """, limit=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("LOOP\nERR 1 ") and "dotimes" in r.stdout and "100000" in r.stdout, r.stdout


# 10: derived output dims (where H = (/ N 2)) ---------------------------------------------
HALF = """
(composite half ((X{f32}[N]) -> (Y{f32}[H]) where H = (/ N 2))
  (slice X [0 H]))
(composite net ((X{f32}[B, C, H, W] Wt{f32}[O, C, 3, 3]) -> (Y{f32}[B, O, P, Q]) where P = (/ H 2), Q = (/ W 2))
  (max-pool2d (conv2d X Wt :padding 1) :kernel 2))
"""


def _conv_pool(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    b, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((b, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("bchw,oc->bohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return y.reshape(b, w.shape[0], h // 2, 2, wd // 2, 2).max(axis=(3, 5))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_where_derived_output_dims(rt):
    m = caten.loads(HALF, runtime=rt)
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(m.half(x), x[:5])
    with pytest.raises(caten.Error, match="divisible"):
        m.half(np.arange(7, dtype=np.float32))
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((2, 3, 6, 8)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = m.net(xs, ws)
    assert y.shape == (2, 4, 3, 4)
    np.testing.assert_allclose(y, _conv_pool(xs, ws), rtol=1e-4, atol=1e-4)


# 11: long programs ------------------------------------------------------------------------
def _chain(n: int) -> str:
    body = "\n".join(f"  (setf y (+ (* y 0.5) {(i % 7) * 0.25}))" for i in range(n))
    return f"(composite f ((X{{f32}}[N]) -> (Y{{f32}}[N]))\n  (setf y X)\n{body}\n  y)\n"


def _chain_ref(x: np.ndarray, n: int) -> np.ndarray:
    y = x.astype(np.float32)
    for i in range(n):
        y = (y * np.float32(0.5) + np.float32((i % 7) * 0.25)).astype(np.float32)
    return y


@pytest.mark.parametrize("rt", RUNTIMES)
def test_thousand_setf_lines(rt):
    x = np.linspace(-3, 3, 11).astype(np.float32)
    m = caten.loads(_chain(1000), runtime=rt)
    np.testing.assert_allclose(m.f(x), _chain_ref(x, 1000), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_long_dotimes(rt):
    src = ("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (setf y X)"
           " (dotimes (i 200) (setf y (+ (* y 0.5) 1.5))) y)")
    x = np.linspace(-3, 3, 11).astype(np.float32)
    ref = x.copy()
    for _ in range(200):
        ref = ref * np.float32(0.5) + np.float32(1.5)
    np.testing.assert_allclose(caten.loads(src, runtime=rt).f(x), ref, rtol=1e-6)


def test_long_program_cli(tmp_path):
    p = tmp_path / "long.lisp"
    p.write_text(_chain(1000))
    for rt in ("llvm", "c"):
        r = caten_cli("-r", rt, "-S", str(p), "-o", str(tmp_path / f"out.{rt}"), limit=300)
        assert r.returncode == 0, r.stderr


# 12: environment problems are diagnostics ---------------------------------------------------
def test_missing_optional_dependency(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    r = run_py(f"""
        import sys
        sys.modules['pyopencl'] = None  # as if `pip install caten[opencl]` had not been run
        sys.argv = ['caten', 'run', '-r', 'opencl', {os.path.abspath('examples/softmax.lisp')!r},
                    'X={tmp_path / "x.npy"}', '-o', '{tmp_path / "y.npy"}']
        from caten.cli.main import main
        main()
        """)
    assert r.returncode == 1, r.stderr
    assert "pip install 'caten[opencl]'" in r.stderr and "internal" not in r.stderr


def test_output_into_missing_folder(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    missing = tmp_path / "nope" / "y.npy"
    r = caten_cli("run", os.path.abspath("examples/softmax.lisp"), f"X={tmp_path / 'x.npy'}", "-o", str(missing))
    assert r.returncode == 1 and "internal" not in r.stderr
    assert str(missing) in r.stderr and "mkdir -p" in r.stderr


def test_plugin_that_raises(tmp_path):
    plug = tmp_path / "plug.py"
    plug.write_text("import os\n\nraise RuntimeError('boom')\n")
    r = caten_cli("--plugin", str(plug), "-S", os.path.abspath("examples/softmax.lisp"), "-o", str(tmp_path / "k.ll"))
    assert r.returncode == 1 and "internal" not in r.stderr
    assert f"{plug}:3:1: error:" in r.stderr and "boom" in r.stderr


# 13: declared output dims that hold for some sizes -----------------------------------------
SOME_SIZES = """
(composite conv ((X{f32}[N, C, H, W] Wt{f32}[O, C, 3, 3]) -> (Y{f32}[N, O, 6, 5]))
  (conv2d X Wt))
(composite inner ((X{f32}[M]) -> (Y{f32}[(- M 2)]))
  (slice X [1 -1]))
"""


@pytest.mark.parametrize("rt", RUNTIMES)
def test_declared_dims_checked_at_call(rt):
    m = caten.loads(SOME_SIZES, runtime=rt)
    x = np.arange(9, dtype=np.float32)
    np.testing.assert_array_equal(m.inner(x), x[1:-1])
    with pytest.raises(caten.Error, match="constraint"):
        m.inner(np.arange(1, dtype=np.float32))  # slice gives 0 elements, declared -1
    rng = np.random.default_rng(1)
    xs, ws = rng.standard_normal((1, 2, 8, 7)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    ref = sum(np.einsum("bchw,oc->bohw", xs[:, :, i:i + 6, j:j + 5].astype(np.float64), ws[:, :, i, j])
              for i in range(3) for j in range(3))
    np.testing.assert_allclose(m.conv(xs, ws), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(caten.Error, match="constraint"):
        m.conv(rng.standard_normal((1, 2, 9, 7)).astype(np.float32), ws)


def test_declared_dims_wrong_for_every_size_fail_at_load():
    with pytest.raises(caten.Error, match="declared"):
        caten.loads("(composite f ((X{f32}[M]) -> (Y{f32}[(+ M 1)])) (exp X))", runtime="numpy")


# 12c: a tree of calls is elaborated once per (composite, arguments) -----------------------------
@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_call_tree_is_linear(rt):
    depth = 40  # re-elaborating at every call site took 2**40 expansions
    lines = ["(composite g0 ((X{f32}[N]) -> (Y{f32}[N])) (+ X 1.0))"]
    lines += [f"(composite g{k} ((X{{f32}}[N]) -> (Y{{f32}}[N])) (+ (g{k - 1} X) (g{k - 1} X)))"
              for k in range(1, depth + 1)]
    r = run_py(f"""
        import caten, numpy as np
        m = caten.loads({chr(10).join(lines)!r}, runtime={rt!r})
        x = np.array([0.0, 1.0, -1.0], np.float32)
        print(' '.join(repr(float(v)) for v in getattr(m, 'g{depth}')(x)))
        """, limit=120)
    assert r.returncode == 0, r.stderr
    got = [float(v) for v in r.stdout.split()]
    want = [(x + 1.0) * 2.0 ** depth for x in (0.0, 1.0, -1.0)]  # exact in f32: powers of two
    assert got == want


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_call_tree_on_computed_arguments_is_linear(rt):
    """Both calls get `(* X 0.5)`: two computations of the same call. Each came back with an origin
    of its own, so the calls of g{k-1} missed the memo and depth 40 never finished; a call is now
    memoized whole (its value and origin) per (composite, arguments, keywords)."""
    depth = 40
    lines = ["(composite g0 ((X{f32}[N]) -> (Y{f32}[N])) (+ X 1.0))"]
    lines += [f"(composite g{k} ((X{{f32}}[N]) -> (Y{{f32}}[N])) (+ (g{k - 1} (* X 0.5)) (g{k - 1} (* X 0.5))))"
              for k in range(1, depth + 1)]
    r = run_py(f"""
        import caten, numpy as np
        m = caten.loads({chr(10).join(lines)!r}, runtime={rt!r})
        x = np.array([0.0, 1.0, -1.0, 3e12], np.float32)
        print(' '.join(repr(float(v)) for v in getattr(m, 'g{depth}')(x)))
        """, limit=120)
    assert r.returncode == 0, r.stderr
    x = np.array([0.0, 1.0, -1.0, 3e12], np.float32)
    scale = np.float32(2.0 ** depth)
    want = ((x / scale).astype(np.float32) + np.float32(1.0)) * scale  # halvings and doublings are exact
    assert [float(v) for v in r.stdout.split()] == [float(v) for v in want]


def test_memo_tells_signed_zeros_apart():
    src = """(composite add ((X{f32}[N] c) -> (Y{f32}[N])) (* X c))
    (composite f ((X{f32}[N]) -> (Y{f32}[N] Z{f32}[N])) (return (add X 0.0) (add X -0.0)))"""
    y, z = caten.loads(src, runtime="numpy").f(np.array([2.0], np.float32))
    assert not np.signbit(y[0]) and np.signbit(z[0])


# 12b: hostile source ---------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_import_of_a_non_regular_file(tmp_path, target):
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    src = tmp_path / "imp.lisp"
    src.write_text(f'(import "{target}")\n')
    r = caten_cli("-r", "numpy", "--emit", "ir", str(src), limit=60)
    assert r.returncode == 1 and "not a regular file" in r.stderr and "internal" not in r.stderr


def test_huge_literal_is_a_diagnostic():
    with pytest.raises(caten.Error, match="5000 characters") as ei:
        caten.loads("(composite f ((X{i64}[N]) -> (Y{i64}[N])) (+ X " + "9" * 5000 + "))", runtime="numpy")
    assert (ei.value.line, ei.value.col) == (1, 48)


def test_unicode_digits_are_not_numbers():
    with pytest.raises(caten.Error):
        caten.loads("(composite f ((X{i64}[N]) -> (Y{i64}[N])) (+ X \u0661\u0662))", runtime="numpy")
    m = caten.loads("(composite f ((X{i64}[N]) -> (Y{i64}[N])) (+ X 12))", runtime="numpy")
    np.testing.assert_array_equal(m.f(np.arange(3)), np.arange(3) + 12)


def test_long_names_are_a_diagnostic():
    with pytest.raises(caten.Error, match="300 characters") as ei:
        caten.loads("(composite " + "a" * 300 + " ((X{f32}[N]) -> (Y{f32}[N])) (exp X))", runtime="c")
    assert (ei.value.line, ei.value.col) == (1, 12)


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_outputs_too_large_to_allocate(rt):
    big = "(composite big ((X{f32}[N]) -> (Y{f32}[4611686018427387904, 4])) (full [4611686018427387904 4] 1.0))"
    with pytest.raises(caten.Error, match="more than an int64 index can count"):  # known when compiling
        caten.loads(big, runtime=rt).big(np.ones(3, np.float32))
    m = caten.loads("(composite huge ((X{f32}[N]) -> (Y{f32}[N, N, N, N, N])) "
                    "(expand (reshape X [N 1 1 1 1]) [N N N N N]))", runtime=rt)
    with pytest.raises(caten.Error, match="cannot allocate"):
        m.huge(np.ones(100000, np.float32))  # 10**25 elements: past int64
    np.testing.assert_array_equal(m.huge(np.arange(2, dtype=np.float32)),
                                  np.broadcast_to(np.arange(2, dtype=np.float32).reshape(2, 1, 1, 1, 1), (2,) * 5))


def test_a_runtime_without_its_device_still_compiles():
    """The availability check is at the call: `caten test-runtime -r cuda` without a GPU compiles
    every case (it failed them all when the check sat in the compile path)."""
    from caten import plugin as R

    rt = R.get("cuda")
    ok, _ = rt.available()
    if ok:
        pytest.skip("a CUDA GPU is here: nothing to show")
    mod = caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (exp X))", runtime="cuda")
    mod.f.program({})  # compiles (PTX checked by ptxas where it is installed)
    with pytest.raises(caten.Error, match="cannot run here"):
        mod.f(np.ones(3, np.float32))
