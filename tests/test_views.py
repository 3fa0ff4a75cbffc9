"""Views (movement ops) against numpy, on the numpy, llvm and c runtimes.

Every output is written into a buffer with a guard region behind it (the compiled entry is
called directly with views of over-allocated arrays), so a kernel that writes past the end of
an output fails here instead of corrupting the heap. Expected values come from numpy itself,
never from a caten runtime. The property test draws random chains of movement ops (reshape,
permute, expand, slice with steps, pad, flip, concat) over static and symbolic dims, starting
from an input or from a computed tensor, so outputs are often views of computed tensors.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caten
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.run import runtime as R
from caten.run.module import check_shapes

RUNTIMES = ["numpy", "llvm", "c"]
WITH_OPENCL = RUNTIMES + ["opencl"]  # PoCL here; skipped, with the reason, where it is missing
GUARD = 0x7B  # byte pattern of the guard region


def _fenced(a: np.ndarray, pad: int = 64) -> np.ndarray:
    """A copy of `a` inside a larger buffer of sentinels (NaN, or the dtype's largest value), so a
    kernel that reads past either end of an input returns a value that cannot match."""
    fill = np.nan if a.dtype.kind == "f" else np.iinfo(a.dtype).max if a.dtype.kind in "iu" else True
    raw = np.full(a.size + 2 * pad, fill, a.dtype)
    out = raw[pad:pad + a.size].reshape(a.shape)
    out[...] = a
    return out


def run_guarded(mod, name: str, *args: np.ndarray):
    """Call composite `name` with every output followed by a guard region 8x its size (and at
    least 256 bytes), every input fenced by sentinels; fail if any guard byte changed."""
    comp = getattr(mod, name)
    arrays = [_fenced(np.asarray(a)) for a in args]
    prog, exe = comp.program(comp._bind_types(arrays))
    env = check_shapes(prog, arrays)
    outs, raws = [], []
    for o in prog.outputs:
        shape = tuple(D.evaluate(d, env) for d in o.shape)
        n = int(np.prod(shape, dtype=np.int64))
        item = o.dtype.np.itemsize
        raw = np.full(n * item * 9 + 256, GUARD, np.uint8)
        raws.append(raw)
        outs.append(raw[:n * item].view(o.dtype.np).reshape(shape))
    exe.run(arrays, outs, env)
    for i, (raw, o) in enumerate(zip(raws, outs)):
        bad = np.flatnonzero(raw[o.nbytes:] != GUARD)
        assert bad.size == 0, f"output {i}: {bad.size} bytes written past its end (first at +{bad[0]})"
    return outs[0] if len(outs) == 1 else tuple(outs)


def check(src: str, name: str, args: list[np.ndarray], want, runtimes=RUNTIMES) -> None:
    wants = want if isinstance(want, tuple) else (want,)
    for rt in runtimes:
        ok, why = R.get(rt).available()
        if not ok:
            pytest.skip(f"runtime {rt} unavailable: {why}")
        try:
            got = run_guarded(caten.loads(src, runtime=rt, use_cache=False), name, *args)
        except AssertionError as e:
            raise AssertionError(f"{rt}: {e}\n{src}") from None
        gots = got if isinstance(got, tuple) else (got,)
        for g, w in zip(gots, wants):
            assert g.shape == w.shape, (rt, g.shape, w.shape)
            np.testing.assert_array_equal(g, w, err_msg=f"{rt}: {src}")


# ------------------------------------------------------------------ outputs that are views
@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_slice_of_computed_prefix(runtime):
    x = np.arange(1000, dtype=np.float32)
    check("(composite f ((x{f32}[1000]) -> (y{f32}[250])) (slice (* x 2) [0 250 1]))", "f", [x],
          x[:250] * 2, [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_slice_of_arange(runtime):
    x = np.zeros(1, np.float32)
    src = "(composite f ((x{f32}[1]) -> (y{i32}[2500])) (slice (arange 10000 :dtype i32) [0 2500 1]))"
    check(src, "f", [x], np.arange(2500, dtype=np.int32), [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_reshape_of_slice_of_computed(runtime):
    x = np.arange(1000, dtype=np.float32)
    src = "(composite f ((x{f32}[1000]) -> (y{f32}[5 50])) (reshape (slice (* x 2) [0 250 1]) [5 50]))"
    check(src, "f", [x], (x[:250] * 2).reshape(5, 50), [runtime])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_output_symbolic_prefix_of_computed(runtime):
    src = "(composite f ((x{f32}[N]) -> (y{f32}[(min 250 N)])) (slice (* x 2) [0 250 1]))"
    for n in (1000, 251, 250, 7):
        x = np.arange(n, dtype=np.float32)
        check(src, "f", [x], x[:250] * 2, [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_pad_then_slice(runtime):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    src = "(composite f ((x{f32}[3 4]) -> (y{f32}[2 5])) (slice (pad (+ x 1) [[1 2] [0 3]]) [0 2 1] [0 5 1]))"
    check(src, "f", [x], np.pad(x + 1, [[1, 2], [0, 3]])[:2, :5], [runtime])
    src = "(composite f ((x{f32}[3 4]) -> (y{f32}[2 7])) (slice (pad (+ x 1) [[1 2] [0 3]]) [0 2 1]))"
    check(src, "f", [x], np.pad(x + 1, [[1, 2], [0, 3]])[:2], [runtime])  # a contiguous prefix


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_stack_then_slice(runtime):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    src = """(composite f ((x{f32}[3 4]) -> (y{f32}[1 3 4]))
      (slice (concat (reshape (* x 2) [1 3 4]) (reshape (+ x 1) [1 3 4]) :axis 0) [0 1 1]))"""
    check(src, "f", [x], (x * 2)[None], [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_output_diagonal_of_computed(runtime):
    # the diagonal trick: flatten, pad by n, view as [n, n+1], keep column 0 (11 of 77 written)
    x = np.arange(49, dtype=np.float32).reshape(7, 7)
    src = """(composite f ((x{f32}[7 7]) -> (y{f32}[7 1]))
      (slice (reshape (pad (reshape (* x 3) [49]) [[0 7]]) [7 8]) [0 7 1] [0 1 1]))"""
    check(src, "f", [x], np.diag(x * 3)[:, None], [runtime])
    # the first row of that [7, 11] view: 11 elements out, 77 computed
    src = """(composite f ((x{f32}[7 7]) -> (y{f32}[1 11]))
      (slice (reshape (pad (reshape (* x 3) [49]) [[0 28]]) [7 11]) [0 1 1]))"""
    check(src, "f", [x], np.pad((x * 3).reshape(49), [[0, 28]]).reshape(7, 11)[:1], [runtime])


# ------------------------------------------------------------------ composed views
@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_flip_of_reshaped_permute(runtime):
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    src = "(composite f ((X{f32}[5 3]) -> (Y{f32}[1 15])) (flip (reshape (permute X [1 0]) [1 15]) :axis -1))"
    check(src, "f", [x], np.flip(x.T.reshape(1, 15), -1), [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_flip_expand_reshape_chain(runtime):
    x = np.arange(12, dtype=np.float32).reshape(4, 1, 3)
    src = """(composite f ((X{f32}[4 1 3]) -> (Y{f32}[2 6]))
      (flip (flip (expand (reshape (flip (slice X [0 4 2]) :axis 2) [6]) [2 6]) :axis -2) :axis -1))"""
    want = np.flip(np.broadcast_to(np.flip(x[0:4:2], 2).reshape(6), (2, 6)), (0, 1))
    check(src, "f", [x], want, [runtime])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_flip_of_reshaped_permute_symbolic(runtime):
    src = "(composite f ((X{f32}[N 3]) -> (Y{f32}[1 (* 3 N)])) (flip (reshape (permute X [1 0]) [1 (* 3 N)]) :axis -1))"
    for n in (5, 1, 8):
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        check(src, "f", [x], np.flip(x.T.reshape(1, 3 * n), -1), [runtime])


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_concat_of_sliced_padded_symbolic(runtime):
    src = """(composite f ((X{f32}[N M]) -> (Y{f32}[(* 2 N) (+ M 1)]))
      (setf p (slice (pad X [[1 1] [1 1]]) [1 (+ N 1) 1] [0 (+ M 1) 1]))
      (concat p (flip p :axis 0) :axis 0))"""
    for n, m in ((3, 4), (1, 1), (5, 2)):
        x = np.arange(n * m, dtype=np.float32).reshape(n, m) + 1
        p = np.pad(x, 1)[1:n + 1, 0:m + 1]
        check(src, "f", [x], np.concatenate([p, p[::-1]], 0), [runtime])


# ------------------------------------------------------------------ slices of symbolic dims
@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_slice_of_symbolic_dim_has_min_extent(runtime):
    src = "(composite f ((X{f32}[N B]) -> (Y{f32}[(min 3 N) B])) (slice X [0 3 1]))"
    for n in (5, 3, 2, 1, 0):
        x = np.arange(n * 2, dtype=np.float32).reshape(n, 2) + 1
        check(src, "f", [x], x[0:3], [runtime])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_slice_of_symbolic_dim_declared_literal_is_a_call_time_constraint(runtime):
    src = "(composite f ((X{f32}[N B]) -> (Y{f32}[3 B])) (slice X [0 3 1]))"
    mod = caten.loads(src, runtime=runtime, use_cache=False)
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.testing.assert_array_equal(run_guarded(mod, "f", x), x[:3])
    with pytest.raises(caten.Error, match="constraint"):
        mod.f(np.zeros((2, 2), np.float32))  # min(3, 2) = 2 rows, not the 3 declared


@pytest.mark.parametrize("runtime", WITH_OPENCL)
def test_sum_of_slice_of_symbolic_dim(runtime):
    x3 = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    assert float(x3[0:3, 1:2].sum()) == 12.0  # the example
    for n in (3, 5, 2, 1, 0):  # also fewer rows than the slice asks for
        x = np.arange(2 * n, dtype=np.float32).reshape(n, 2) + 1
        for sl, want in (("[0 N 1] [1 2 1]", x[0:, 1:2].sum()), ("[0 3 1] [1 2 1]", x[0:3, 1:2].sum()),
                         ("[0 -1 1] [1 2 1]", x[0:-1, 1:2].sum()), ("[-2 5 2]", x[-2:5:2].sum())):
            src = f"(composite f ((X{{f32}}[N 2]) -> (Y{{f32}}[])) (sum (slice X {sl})))"
            check(src, "f", [x], np.asarray(want, np.float32), [runtime])


def test_min_max_dims_keep_their_sign():
    n = D.sym("N")
    three = D.dmin(3, n)
    assert [D.evaluate(three, {"N": k}) for k in (1, 2, 3, 7)] == [1, 2, 3, 3]
    assert D.dmax(three, 0) == three  # min(3, N) >= 0: never collapses to 0
    assert D.dmax(n, D.dmin(n, 2)) == n
    assert D.sign_of(D.add(D.dmin(n, 3), -5)) is None


# ------------------------------------------------------------------ random chains
SYMS = ["P", "Q", "R"]
MAX_ELEMS = 400
KINDS = ["reshape", "reshape", "permute", "expand", "slice", "slice", "pad", "flip", "flip", "concat", "add"]


def _d(i: int) -> str:
    return f"(dim t {i})"


def chain(rng: random.Random, x: np.ndarray, sym: list[bool]) -> tuple[list[str], np.ndarray]:
    """(lisp forms, numpy oracle) of a random chain of movement ops applied to the input x;
    `sym` marks the axes whose size is symbolic (they cannot be split or expanded: the language
    needs a `where` for that)."""
    if rng.random() < 0.5:
        forms, a = ["(setf t (* X 2))"], x * 2
    else:
        forms, a = ["(setf t X)"], x
    for _ in range(rng.randint(1, 6)):
        r = a.ndim
        kind = rng.choice(KINDS)
        dims = [_d(i) for i in range(r)]
        if kind == "reshape" and r >= 1:
            how = rng.choice(["merge", "merge", "split", "unsqueeze", "flat"])
            if how == "merge" and r >= 2:
                i = rng.randint(0, r - 2)
                new = dims[:i] + [f"(* {dims[i]} {dims[i + 1]})"] + dims[i + 2:]
                a = a.reshape(a.shape[:i] + (a.shape[i] * a.shape[i + 1],) + a.shape[i + 2:])
                sym = sym[:i] + [sym[i] or sym[i + 1]] + sym[i + 2:]
            elif how == "split":
                cands = [(i, k) for i in range(r) for k in (2, 3)
                         if a.shape[i] % k == 0 and a.shape[i] > k and not sym[i]]
                if not cands or r >= 4:
                    continue
                i, k = rng.choice(cands)
                new = dims[:i] + [str(a.shape[i] // k), str(k)] + dims[i + 1:]
                a = a.reshape(a.shape[:i] + (a.shape[i] // k, k) + a.shape[i + 1:])
                sym = sym[:i] + [False, False] + sym[i + 1:]
            elif how == "unsqueeze" and r < 4:
                i = rng.randint(0, r)
                new = dims[:i] + ["1"] + dims[i:]
                a = a.reshape(a.shape[:i] + (1,) + a.shape[i:])
                sym = sym[:i] + [False] + sym[i:]
            else:
                new = ["-1"]
                a = a.reshape(-1)
                sym = [any(sym)]
            forms.append(f"(setf t (reshape t [{' '.join(new)}]))")
        elif kind == "permute" and r >= 2:
            perm = list(range(r))
            rng.shuffle(perm)
            forms.append(f"(setf t (permute t [{' '.join(map(str, perm))}]))")
            a = a.transpose(perm)
            sym = [sym[p] for p in perm]
        elif kind == "expand":
            ones = [i for i in range(r) if a.shape[i] == 1 and not sym[i]]
            k = rng.randint(2, 3)
            if ones and a.size * k <= MAX_ELEMS:
                i = rng.choice(ones)
                new = dims[:i] + [str(k)] + dims[i + 1:]
                a = np.broadcast_to(a, a.shape[:i] + (k,) + a.shape[i + 1:])
                sym = sym[:i] + [False] + sym[i + 1:]
            elif r < 4 and a.size * k <= MAX_ELEMS:  # a new leading axis
                new = [str(k)] + dims
                a = np.broadcast_to(a, (k,) + a.shape)
                sym = [False] + sym
            else:
                continue
            forms.append(f"(setf t (expand t [{' '.join(new)}]))")
        elif kind == "slice" and r >= 1:
            specs, sl = [], []
            for _ in range(rng.randint(1, r)):
                s, e, k = rng.randint(-3, 3), rng.randint(-3, 6), rng.choice([1, 1, 2, 3])
                if rng.random() < 0.3:
                    s = 0  # a prefix: the view keeps the start of its source
                specs.append(f"[{s} {e} {k}]")
                sl.append(slice(s, e, k))
            forms.append(f"(setf t (slice t {' '.join(specs)}))")
            a = a[tuple(sl)]
        elif kind == "pad" and r >= 1:
            w = [(rng.randint(0, 2), rng.randint(0, 2)) for _ in range(r)]
            if int(np.prod([n + lo + hi for n, (lo, hi) in zip(a.shape, w)])) > MAX_ELEMS:
                continue
            forms.append(f"(setf t (pad t [{' '.join(f'[{lo} {hi}]' for lo, hi in w)}]))")
            a = np.pad(a, w)
        elif kind == "flip" and r >= 1:
            axes = rng.sample(range(r), rng.randint(1, r))
            forms.append(f"(setf t (flip t :axis [{' '.join(map(str, axes))}]))")
            a = np.flip(a, tuple(axes))
        elif kind == "concat" and r >= 1 and 2 * a.size <= MAX_ELEMS:
            ax = rng.randint(0, r - 1)
            if rng.random() < 0.5:
                forms.append(f"(setf t (concat t (flip t :axis {ax}) :axis {ax}))")
                a = np.concatenate([a, np.flip(a, ax)], ax)
            else:
                s = rng.randint(0, 2)
                spec = " ".join([f"[0 {_d(i)} 1]" for i in range(ax)] + [f"[{s} {_d(ax)} 1]"])
                forms.append(f"(setf t (concat (slice t {spec}) t :axis {ax}))")
                a = np.concatenate([a[(slice(None),) * ax + (slice(s, None),)], a], ax)
        elif kind == "add":
            forms.append("(setf t (+ t 1))")
            a = a + 1
    return forms, np.ascontiguousarray(a)


def random_program(seed: int) -> tuple[str, np.ndarray, tuple[np.ndarray, ...]]:
    """A composite with several chain outputs over one input of static or symbolic dims; the
    outputs are declared with their (numpy) sizes: call-time constraints for symbolic ones."""
    rng = random.Random(seed)
    sym = [rng.random() < 0.5 for _ in range(rng.randint(1, 3))]
    shape = tuple(0 if s and rng.random() < 0.1 else rng.randint(1, 4) for s in sym)  # symbolic dims may be 0
    sig = [SYMS[i] if s else str(n) for i, (s, n) in enumerate(zip(sym, shape))]
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    chains = [chain(rng, x, [not d.isdigit() for d in sig]) for _ in range(rng.randint(3, 6))]
    outs = " ".join(f"Y{i}{{f32}}[{' '.join(map(str, a.shape))}]" for i, (_, a) in enumerate(chains))
    body = []
    for i, (forms, _) in enumerate(chains):
        body += forms + [f"(setf y{i} t)"]
    body.append(f"(return {' '.join(f'y{i}' for i in range(len(chains)))})")
    src = f"(composite f ((X{{f32}}[{' '.join(sig)}]) -> ({outs}))\n  " + "\n  ".join(body) + ")"
    return src, x, tuple(a for _, a in chains)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1))
def test_random_movement_chains_match_numpy(seed):
    src, x, want = random_program(seed)
    check(src, "f", [x], want)


def test_expand_keeps_an_empty_mask_empty():
    from caten.ir.view import View

    x = np.array([5.0, 6.0], np.float32)
    v = View.of([2]).pad([(1, 0)]).shrink([(0, 1)])  # the pad's zero only: mask (1, 1)
    np.testing.assert_array_equal(v.expand([3]).apply(x, {}), np.zeros(3, np.float32))
    np.testing.assert_array_equal(View.of([2]).pad([(1, 0)]).shrink([(1, 2)]).expand([3]).apply(x, {}),
                                  np.full(3, 5.0, np.float32))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_stepped_slice_extent_that_may_be_empty(runtime):
    # x[-1:3:3] is empty for P >= 4: its extent is (idiv (- (max ..) P) 3) + 1, whose idiv can be
    # negative; assuming it >= 0 made a later slice of it 1 long instead of 0
    for p in (4, 5, 2, 3):
        x = np.arange(p, dtype=np.float32) + 1
        s = x[-1:3:3]
        c = np.concatenate([s, s[::-1]])
        want = c[1:2:2]
        src = f"""(composite f ((X{{f32}}[P]) -> (Y{{f32}}[{want.size}]))
          (setf s (slice X [-1 3 3])) (slice (concat s (flip s :axis 0) :axis 0) [1 2 2]))"""
        check(src, "f", [x], want, [runtime])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_concat_with_a_whole_slice_of_a_clamped_extent(runtime):
    # t = x[-2:-1, 1:1:2] has clamped symbolic extents; (slice t [0 (dim t 0) 1] ...) must keep
    # them exactly (min(0, extent) is 0), or concat rejects the shapes
    for shape in ((4, 3, 2), (1, 1, 2), (2, 4, 2)):
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
        t = (x * 2)[-2:-1, 1:1:2]
        want = np.concatenate([t[:, :, 2:], t], 2)
        dims = " ".join(str(d) for d in want.shape)
        src = f"""(composite f ((X{{f32}}[P Q 2]) -> (Y{{f32}}[{dims}]))
          (setf t (slice (* X 2) [-2 -1 1] [1 1 2]))
          (concat (slice t [0 (dim t 0) 1] [0 (dim t 1) 1] [2 (dim t 2) 1]) t :axis 2))"""
        check(src, "f", [x], want, [runtime])


def test_reshape_of_strided_views_merges_exactly():
    """View.reshape gives one strided view when numpy could reshape without a copy; the result
    must index like numpy's reshape (flips, steps, shrinks and permutes first)."""
    from caten.ir.view import View

    rng = np.random.default_rng(0)
    merged = 0
    for _ in range(600):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=rng.integers(1, 4)))
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        v, a = View.of(shape), x
        for _ in range(3):
            k = rng.integers(0, 4)
            if k == 0:
                p = [int(i) for i in rng.permutation(a.ndim)]
                v, a = v.permute(p), a.transpose(p)
            elif k == 1:
                ax = int(rng.integers(0, a.ndim))
                v, a = v.flip([ax]), np.flip(a, ax)
            elif k == 2:
                st = [int(rng.integers(1, 3)) for _ in range(a.ndim)]
                v, a = v.step(st), a[tuple(slice(None, None, s) for s in st)]
            else:
                b = [(int(rng.integers(0, d)), d) for d in a.shape]
                v, a = v.shrink(b), a[tuple(slice(lo, hi) for lo, hi in b)]
        fs, t = [], a.size
        for f in (2, 3, 2, 3, 5):
            if t % f == 0 and rng.random() < 0.5:
                fs.append(f)
                t //= f
        new = tuple(int(d) for d in rng.permutation(fs + [t]))
        r = v.reshape(new)
        if r is not None:
            merged += 1
            np.testing.assert_array_equal(r.apply(x, {}), a.reshape(new))
    assert merged > 300  # most of these reshapes need no second view
    swap = View.of([2, 3]).permute([1, 0])
    assert swap.reshape([6]) is None  # a transposed matrix cannot be flattened in place


@pytest.mark.parametrize("dt", ["i32", "i64", "f32"])
@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_pad_before_the_rows_keeps_them(rt, dt):
    """`caten fuzz` seed 153278: on c, GCC 12.2 -O3 with AVX2 if-converted the pad's guarded load
    into a masked load and zeroed rows 2-3 (runtimes/c_rt.py FLAGS)."""
    src = f"(composite fz ((X{{{dt}}}[4, 2]) -> (Y{{{dt}}}[6, 2])) (pad X [[2 0] [0 0]] :value 0))"
    x = np.arange(-8, 0).reshape(4, 2).astype(T.lookup(dt).np)
    got = caten.loads(src, runtime=rt).fz(x)
    assert np.array_equal(got, np.pad(x, [(2, 0), (0, 0)]))
