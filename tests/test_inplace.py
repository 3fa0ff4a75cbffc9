"""Outputs named as an input are written into that input's array (a KV cache appended to, state
updated): the language's in-place outputs, and torch.export's buffer and input mutations imported
as them. The values are checked against numpy and torch; the no-copy path (a scatter into the
input itself) against the emitted loop IR."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from caten.errors import Error

RUNTIMES = ["numpy", "llvm", "c"]

APPEND = """
(composite step ((K{f32}[T, D]) (k{f32}[1, D]) (pos{i64}[1]) -> (K{f32}[T, D]) (s{f32}[T]))
  (setf K2 (scatter K (expand (reshape pos [1 1]) [1 D]) k :axis 0))
  (return K2 (sum K2 :axis 1)))
"""

# the old K is read after the update is computed: the update cannot overwrite it as it goes
READS_OLD = """
(composite step ((K{f32}[T, D]) (k{f32}[1, D]) (pos{i64}[1]) -> (old{f32}[T]) (K{f32}[T, D]))
  (return (sum K :axis 1) (scatter K (expand (reshape pos [1 1]) [1 D]) k :axis 0)))
"""

ELEMENTWISE = """
(composite decay ((W{f64}[N]) (g{f64}[N]) -> (W{f64}[N]) (n{f64}[]))
  (setf W2 (- W (* 0.5 g)))
  (return W2 (sum (* W2 W2))))
"""


def _direct(m, name: str) -> frozenset:
    """The outputs the compiled code writes straight into their inputs' memory."""
    comp = getattr(m, name)
    (_, exe), = comp._variants.values()
    return getattr(exe, "in_place", frozenset())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_append_writes_the_callers_array(runtime):
    rng = np.random.default_rng(0)
    m = caten.loads(APPEND, runtime=runtime)
    T, D = 7, 5
    K = np.zeros((T, D), np.float32)
    ref = K.copy()
    for pos in [0, 1, 2, 6, -1, 3, 9, -8]:  # -1 counts from the end; 9 and -8 are out of range: no write
        k = rng.standard_normal((1, D)).astype(np.float32)
        K2, s = m.step(K, k, np.array([pos]))
        if -T <= pos < T:
            ref[pos] = k[0]
        assert K2 is K
        np.testing.assert_array_equal(K, ref)
        np.testing.assert_allclose(s, ref.sum(1), rtol=1e-6)
    assert _direct(m, "step") == (frozenset() if runtime == "numpy" else frozenset({0}))


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_append_stores_only_the_new_row(runtime):
    """The scatter into the input is the whole update: no loop copies the cache."""
    from caten import pipeline
    from caten.plugin import get as get_runtime

    src = caten.loads(APPEND, runtime=runtime)
    prog = src.step.elaborate({})
    assert prog.aliases == ((0, 0),) and prog.in_place() == frozenset({0})
    loops = pipeline.emit(get_runtime(runtime), prog, "loops")[".txt"]
    assert "in0" not in loops.split("entry")[0]  # no kernel reads the cache's input pointer
    scatter = loops.split("kernel step__k1")[0]
    assert scatter.count("out0[") == 2 and scatter.count("for ") == 2  # one row's read-modify-write


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_old_value_read_alongside_is_kept(runtime):
    m = caten.loads(READS_OLD, runtime=runtime)
    K = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = K.copy()
    old, K2 = m.step(K, np.full((1, 3), 100, np.float32), np.array([2]))
    np.testing.assert_array_equal(old, before.sum(1))
    before[2] = 100
    assert K2 is K
    np.testing.assert_array_equal(K, before)
    assert _direct(m, "step") == frozenset()  # the copy path: the input is read by another output


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_elementwise_update_in_place(runtime):
    m = caten.loads(ELEMENTWISE, runtime=runtime)
    rng = np.random.default_rng(1)
    W, g = rng.standard_normal(33), rng.standard_normal(33)
    want = W - 0.5 * g
    W2, n = m.decay(W, g)
    assert W2 is W
    np.testing.assert_allclose(W, want, rtol=1e-15)
    np.testing.assert_allclose(n, (want * want).sum(), rtol=1e-12)


@pytest.mark.parametrize("runtime", ["llvm", "c"])
def test_append_under_bounds_checks(runtime):
    m = caten.loads(APPEND, runtime=runtime, check_bounds=True)
    K = np.zeros((3, 2), np.float32)
    m.step(K, np.ones((1, 2), np.float32), np.array([1]))
    np.testing.assert_array_equal(K, [[0, 0], [1, 1], [0, 0]])


def test_in_place_output_must_match_its_input():
    bad = "(composite f ((K{f32}[N]) -> (K{f32}[N, 1])) (return (reshape K [N 1])))"
    with pytest.raises(Error, match="written in place of the input"):
        caten.loads(bad, runtime="numpy").f(np.zeros(3, np.float32))
    bad = "(composite f ((K{f32}[N]) -> (K{f64}[N])) (return (cast K f64)))"
    with pytest.raises(Error, match="written in place of the input"):
        caten.loads(bad, runtime="numpy").f(np.zeros(3, np.float32))


def test_in_place_argument_checks():
    m = caten.loads(ELEMENTWISE, runtime="llvm")
    W = np.zeros(4)
    with pytest.raises(Error, match="C-contiguous, writeable"):
        m.decay(np.zeros(8)[::2], np.zeros(4))
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(Error, match="C-contiguous, writeable"):
        m.decay(ro, np.zeros(4))
    with pytest.raises(Error, match="also another argument"):
        m.decay(W, W)
    with pytest.raises(Error, match="out= is not available"):
        m.decay(W, np.zeros(4), out=(np.zeros(4), np.zeros(())))


def test_twice_named_input_is_still_refused():
    with pytest.raises(Error, match="declared twice"):
        caten.loads("(composite f ((a{f32}[N]) (a{f32}[N]) -> (b{f32}[N])) (return a))", runtime="numpy")


def test_c_header_names_the_in_place_output(tmp_path):
    import subprocess

    from caten import pipeline
    from caten.plugin import get as get_runtime

    prog = caten.loads(APPEND, runtime="c").step.elaborate({})
    out = pipeline.emit(get_runtime("c"), prog, "source")
    h = out[".h"]
    assert "float *K_out" in h and "pass K's own pointer" in h
    (tmp_path / "x.h").write_text(h)
    assert subprocess.run(["cc", "-fsyntax-only", "-x", "c", str(tmp_path / "x.h")]).returncode == 0


# torch.export: buffers and inputs the module mutates ---------------------------------------------

def _cache_module():
    torch = pytest.importorskip("torch")

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("kc", torch.zeros(1, 2, 6, 3))
            self.register_buffer("n", torch.zeros(()))

        def forward(self, k, pos):
            self.kc.index_copy_(2, pos, k)
            self.n.add_(1)
            return (self.kc * 2).sum(-1) + self.n

    return torch, Step()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_from_torch_buffer_mutations_persist(runtime):
    import copy

    torch, m = _cache_module()
    cm = caten.from_torch(copy.deepcopy(m), (torch.randn(1, 2, 1, 3), torch.tensor([0])), runtime=runtime)
    gen = torch.Generator().manual_seed(0)
    for pos in [0, 1, 5, 2, 1]:
        k = torch.randn(1, 2, 1, 3, generator=gen)
        want = m(k, torch.tensor([pos]))
        got = cm(k, torch.tensor([pos]))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert "-> (out0{f32}[1, 2, 6] b_kc{f32}[1, 2, 6, 3] b_n{f32})" in cm.source  # outputs of the buffers' names


@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_from_torch_user_input_mutation(runtime):
    torch = pytest.importorskip("torch")

    class AddInto(torch.nn.Module):
        def forward(self, acc, x):
            acc.add_(x * 3)
            return acc.sum()

    cm = caten.from_torch(AddInto(), (torch.zeros(4), torch.ones(4)), runtime=runtime)
    acc = np.zeros(4, np.float32)
    x = np.arange(4, dtype=np.float32)
    s = cm(acc, x)
    np.testing.assert_array_equal(acc, 3 * x)  # the caller's array, as torch updates its tensor
    assert float(s) == 18.0


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_along_an_inner_axis(accumulate):
    """aten.index_put with one vector of positions on an inner axis (now an index_copy/index_add
    along it): negative positions, repeats (accumulated), values that broadcast."""
    torch = pytest.importorskip("torch")

    class Put(torch.nn.Module):
        def forward(self, x, i, v):
            return torch.ops.aten.index_put.default(x, [None, i], v, accumulate)

    x, v = torch.randn(3, 5, 2), torch.randn(3, 1, 2)
    i = torch.tensor([4, -1, 0] if accumulate else [4, -2, 0])
    cm = caten.from_torch(Put(), (x, i, v), runtime="llvm")
    np.testing.assert_allclose(cm(x, i, v), Put()(x, i, v).numpy(), rtol=1e-6)


def test_in_place_after_a_warm_load(tmp_path):
    """A second process loads the compiled program from the cache (no lowering): it must still
    pass the cache's own array to the code that writes only the new row."""
    import os
    import subprocess
    import sys

    (tmp_path / "a.lisp").write_text(APPEND)
    code = ("import caten, numpy as np\n"
            f"m = caten.load({str(tmp_path / 'a.lisp')!r}, runtime='llvm')\n"
            "K = np.full((4, 2), 7, np.float32)\n"
            "m.step(K, np.ones((1, 2), np.float32), np.array([2]))\n"
            "print(K.tolist(), sorted(next(iter(m.step._variants.values()))[1].in_place))\n")
    env = {**os.environ, "CATEN_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[[7.0, 7.0], [7.0, 7.0], [1.0, 1.0], [7.0, 7.0]] [0]"
