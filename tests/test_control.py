"""Control flow in the language (LANGUAGE.md section 14): while, fori, scan, if, cond and dotimes
as loops, on the reference interpreter and the compiled runtimes; their gradients against torch's
autograd of the unrolled computation; their diagnostics; code and compile time that do not grow
with the trip count; the bounds-checked mode inside loop bodies."""

from __future__ import annotations

import time

import numpy as np
import pytest

import caten

RTS = ["numpy", "llvm", "c"]


def _have(rt: str) -> bool:
    from caten import plugin as R

    try:
        return R.get(rt).available()[0]
    except caten.Error:
        return False


DEVICE = ["opencl"] if _have("opencl") else []  # (PoCL in CI: the host drives the trips)

SOLVERS = """
(composite newton-sqrt ((A{f32}[N]) -> (X{f32}[N]) (K{i64}[]))
  (setf st (while ((x A) (k 0))
             (and (< k 100) (> (max (abs (- (* x x) A))) 1e-6))
             (next (* 0.5 (+ x (/ A x))) (+ k 1))))
  (return (nth st 0) (nth st 1)))
(composite bisect ((C{f64}[]) -> (X{f64}[]))
  (setf st (while ((lo (* C 0.0)) (hi (max C 1.0)))
             (> (- hi lo) 1e-12)
             (let ((mid (* 0.5 (+ lo hi))))
               (if (> (- (* mid (* mid mid)) C) 0.0) (next lo mid) (next mid hi)))))
  (return (nth st 0)))
(composite power ((M{f32}[N, N]) (V{f32}[N]) -> (E{f32}[]))
  (setf v (fori (i 0 200) ((v V))
            (let ((w (matmul M v))) (next (/ w (sqrt (sum (* w w))))))))
  (return (sum (* v (matmul M v)))))
"""


@pytest.mark.parametrize("rt", RTS + DEVICE)
def test_iterative_solvers_converge(rt):
    """A while Newton iteration for sqrt (its trip count known only when it converges), a bisection
    whose branch picks the next state, and a power iteration of 200 fori trips."""
    m = caten.loads(SOLVERS, runtime=rt)
    a = np.array([2, 9, 16, 1e-3, 123.5], np.float32)
    x, k = m.newton_sqrt(a)
    np.testing.assert_allclose(x, np.sqrt(a), rtol=1e-6)
    assert 3 <= int(k) < 100
    assert abs(float(m.bisect(np.float64(10.0))) - 10 ** (1 / 3)) < 1e-9
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    mat = (q @ np.diag([5.0, 2, 1, 0.5, 0.2, 0.1]) @ q.T).astype(np.float32)
    np.testing.assert_allclose(m.power(mat, np.ones(6, np.float32)), 5.0, rtol=1e-4)


SCANS = """
(composite running ((X{f32}[T, N]) -> (C{f32}[N]) (Y{f32}[T, N]))
  (setf r (scan (lambda (c x) (next (* c x) (* c x))) (ones [N]) X :axis 0))
  (return (nth r 0) (nth r 1)))
(composite cols ((X{f32}[N, T]) -> (C{f32}[N]) (Y{f32}[N, T]))
  (setf r (scan (lambda (c x) (next (+ c x) (- c x))) (zeros [N]) X :axis 1 :reverse true))
  (return (nth r 0) (nth r 1)))
(composite step2 ((c{f32}[N]) (d{f32}[N]) (x{f32}[N]) (w{f32}[N]) -> (c2{f32}[N]) (d2{f32}[N]) (y{f32}[N]))
  (return (+ c (* x w)) (max d x) (* c w)))
(composite listed ((X{f32}[T, N]) (W{f32}[T, N]) -> (C{f32}[N]) (D{f32}[N]) (Y{f32}[T, N]))
  (setf r (scan step2 [(zeros [N]) (full [N] -100.0)] [X W]))
  (return (nth (nth r 0) 0) (nth (nth r 0) 1) (nth r 1)))
"""


@pytest.mark.parametrize("rt", RTS + DEVICE)
def test_scan_stacks_and_carries(rt):
    """scan as jax.lax.scan: a running product along axis 0, a reversed scan along axis 1, a list
    carry and a list of scanned tensors through a composite; symbolic lengths (one program)."""
    m = caten.loads(SCANS, runtime=rt)
    rng = np.random.default_rng(1)
    for t in (1, 5):
        x = rng.uniform(0.5, 1.5, (t, 3)).astype(np.float32)
        c, y = m.running(x)
        np.testing.assert_allclose(y, np.cumprod(x, 0), rtol=1e-6)
        np.testing.assert_allclose(c, np.prod(x, 0), rtol=1e-6)
    x = rng.standard_normal((4, 7)).astype(np.float32)
    c, y = m.cols(x)
    want_y = np.zeros_like(x)
    acc = np.zeros(4, np.float32)
    for j in reversed(range(7)):
        want_y[:, j] = acc - x[:, j]
        acc = acc + x[:, j]
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c, acc, rtol=1e-6)
    xs, ws = rng.standard_normal((6, 2)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)
    c, d, y = m.listed(xs, ws)
    cc, want = np.zeros(2, np.float32), []
    for i in range(6):
        want.append(cc * ws[i])
        cc = cc + xs[i] * ws[i]
    np.testing.assert_allclose(c, cc, rtol=1e-5)
    np.testing.assert_allclose(d, xs.max(0))
    np.testing.assert_allclose(y, np.stack(want), rtol=1e-5, atol=1e-6)


BRANCHES = """
(composite pick ((A{f32}[N]) -> (Y{f32}[N]) (Z{i32}[]))
  (setf r (if (> (sum A) 0.0) (list (* A 2.0) (cast 1 i32)) (list (- A) (cast 2 i32))))
  (return (nth r 0) (nth r 1)))
(composite classify ((S{f32}[]) -> (Y{i64}[]))
  (return (cond ((< S -1.0) 0) ((< S 1.0) 1) (true 2))))
(composite select ((K{i64}[]) (X{f32}[N]) -> (Y{f32}[N]))
  (case K (0 (* X 2.0)) ([1 2] (- X)) (otherwise (+ X 10.0))))
(composite nested ((X{f32}[R, C]) (K{i64}[]) -> (Y{f32}[R, C]))
  (setf y (fori (i 0 K) ((acc X))
            (next (fori (j 0 R) ((a acc))
                    (next (if (> (max (slice a [j (+ j 1) 1] [0 C 1])) 0.0)
                              (- a (softmax a :axis 1))
                              (+ a (* 0.5 (sum a :axis 0 :keepdims true)))))))))
  (return y))
"""


def _nested_ref(x: np.ndarray, k: int) -> np.ndarray:
    a = x.astype(np.float64)
    for _ in range(k):
        for j in range(a.shape[0]):
            if a[j].max() > 0:
                e = np.exp(a - a.max(1, keepdims=True))
                a = a - e / e.sum(1, keepdims=True)
            else:
                a = a + 0.5 * a.sum(0, keepdims=True)
    return a


@pytest.mark.parametrize("rt", RTS + DEVICE)
def test_branches_and_nested_loops(rt):
    """if/cond on runtime scalars (only the taken branch runs; several results), and loops nested
    two deep with a runtime bound, a view by the counter, reductions and a branch inside."""
    m = caten.loads(BRANCHES, runtime=rt)
    a = np.array([1, -2, 3], np.float32)
    y, z = m.pick(a)
    np.testing.assert_array_equal(y, a * 2) and int(z) == 1
    y, z = m.pick(-a * 3)
    np.testing.assert_array_equal(y, a * 3)
    assert int(z) == 2
    assert [int(m.classify(np.float32(s))) for s in (-5, 0.5, 3)] == [0, 1, 2]
    x3 = np.arange(3, dtype=np.float32)
    for k, want in ((0, x3 * 2), (1, -x3), (2, -x3), (7, x3 + 10)):
        np.testing.assert_array_equal(m.select(np.int64(k), x3), want)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    for k in (0, 1, 3):
        np.testing.assert_allclose(m.nested(x, np.int64(k)), _nested_ref(x, k), rtol=1e-4, atol=1e-5)


DOTIMES = """
(composite many ((A{f32}[N]) -> (Y{f32}[N]))
  (setf acc A)
  (setf k (cast 0 i32))
  (dotimes (i 3000) (setf acc (+ acc (* 0.5 (cast (mod i 3) f32)))) (setf k (+ k 1)))
  (return (+ acc (cast k f32))))
(composite literal-count ((X{f32}[N]) -> (Y{f32}[(+ N 100)]))
  (setf k 0)
  (dotimes (i 100) (setf k (+ k 1)))
  (pad X [[0 k]]))
(composite sym ((A{f32}[N]) -> (Y{f32}[N]))
  (setf acc A)
  (dotimes (i N) (setf acc (+ acc (sum (slice A [i (+ i 1) 1])))))
  (return acc))
"""


@pytest.mark.parametrize("rt", RTS)
def test_dotimes_over_large_or_symbolic_counts_is_a_loop(rt):
    m = caten.loads(DOTIMES, runtime=rt)
    a = np.arange(4, dtype=np.float32)
    want = a + 0.5 * float(sum(i % 3 for i in range(3000))) + 3000
    np.testing.assert_allclose(m.many(a), want, rtol=1e-6)
    np.testing.assert_allclose(m.sym(a), a + a.sum(), rtol=1e-6)
    # a count kept as a compile-time value (a dim of the output): that dotimes unrolls, as before
    np.testing.assert_array_equal(m.literal_count(a), np.pad(a, (0, 100)))


def _graph_text(src: str, defines: dict[str, int]) -> str:
    from caten.pipeline import compile_program, emit
    from caten.plugin import get
    from caten.read.source import read_text

    s = read_text(src, "<string>", False)
    cdef = s.entry("count")
    return emit(get("llvm"), compile_program(s, cdef, {}, defines), "loops")[".txt"]


def test_code_and_compile_time_do_not_grow_with_the_trip_count():
    """A fori of 10^6 trips is the same code as one of 10 (the count an argument), and compiling
    it takes about as long."""
    src = "(composite count ((A{f32}[N]) -> (Y{f32}[N])) (fori (i 0 M) ((acc A)) (next (+ acc 1.0))))"
    src = src.replace("(A{f32}[N])", "(A{f32}[N]) (S{f32}[M])")
    short, long_ = _graph_text(src, {"M": 10}), _graph_text(src, {"M": 10 ** 6})
    assert abs(len(short) - len(long_)) <= 8 and "loop " in short
    times = []
    for n in (10, 10 ** 6):
        t0 = time.perf_counter()
        m = caten.loads(src, runtime="llvm", defines={"M": n}, use_cache=False)
        y = m.count(np.zeros(3, np.float32), np.zeros(n, np.float32))
        times.append(time.perf_counter() - t0)
        np.testing.assert_array_equal(y, np.full(3, n, np.float32))
    assert times[1] < 3 * times[0] + 1.0


GRADS = """
(composite cprod ((X{f32}[T, N]) -> (L{f32}[]))
  (setf r (scan (lambda (c x) (next (* c x) (* c x))) (ones [N]) X :axis 0))
  (return (+ (sum (nth r 0)) (sum (* (nth r 1) (nth r 1))))))
(composite cprod-ck ((X{f32}[T, N]) -> (L{f32}[]))
  (setf r (scan (lambda (c x) (next (* c x) (* c x))) (ones [N]) X :axis 0 :checkpoint true))
  (return (+ (sum (nth r 0)) (sum (* (nth r 1) (nth r 1))))))
(composite dcprod ((X{f32}[T, N]) -> (G{f32}[T, N]) (G2{f32}[T, N]))
  (return (grad cprod X :wrt X) (grad cprod-ck X :wrt X)))
(composite rnn ((X{f32}[T, N]) (W{f32}[N, N]) (H{f32}[N]) -> (L{f32}[]))
  (setf r (scan (lambda (h x) (let ((hn (tanh (+ (matmul W h) x)))) (next hn hn))) H X :reverse true))
  (return (sum (* (nth r 1) (nth r 1)))))
(composite drnn ((X{f32}[T, N]) (W{f32}[N, N]) (H{f32}[N]) -> (GX{f32}[T, N]) (GW{f32}[N, N]) (GH{f32}[N]))
  (return (grad rnn X W H :wrt X) (grad rnn X W H :wrt W) (grad rnn X W H :wrt H)))
(composite ode ((Y{f32}[N]) (K{f32}[N]) -> (L{f32}[]))
  (setf y (fori (i 0 20) ((y Y)) (next (+ y (* 0.05 (* K (sin (+ y (* 0.01 (cast i f32))))))))))
  (return (sum (* y y))))
(composite dode ((Y{f32}[N]) (K{f32}[N]) -> (GY{f32}[N]) (GK{f32}[N]))
  (return (grad ode Y K :wrt Y) (grad ode Y K :wrt K)))
(composite br ((A{f32}[N]) (B{f32}[N]) -> (L{f32}[]))
  (return (sum (if (> (sum A) 0.0) (* A B) (* B B)))))
(composite dbr ((A{f32}[N]) (B{f32}[N]) -> (GA{f32}[N]) (GB{f32}[N]))
  (return (grad br A B :wrt A) (grad br A B :wrt B)))
"""


@pytest.mark.parametrize("rt", RTS)
def test_gradients_through_scan_fori_and_if_match_torch(rt):
    """Reverse mode through a cumulative product (stored and checkpointed carries), a reversed
    RNN (the weights a capture), an ODE integrator whose body reads its counter, and an if."""
    torch = pytest.importorskip("torch")
    m = caten.loads(GRADS, runtime=rt)
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.5, (5, 3)).astype(np.float32)
    t = torch.tensor(x, requires_grad=True)
    c, ys = torch.ones(3), []
    for i in range(5):
        c = c * t[i]
        ys.append(c)
    (c.sum() + (torch.stack(ys) ** 2).sum()).backward()
    g, g2 = m.dcprod(x)
    np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(g2, t.grad.numpy(), rtol=1e-5)

    n, T = 4, 6
    x, w, h = (rng.standard_normal(s).astype(np.float32) for s in ((T, n), (n, n), (n,)))
    w *= 0.5
    tx, tw, th = (torch.tensor(a, requires_grad=True) for a in (x, w, h))
    hh, ys = th, [None] * T
    for i in reversed(range(T)):
        hh = torch.tanh(tw @ hh + tx[i])
        ys[i] = hh
    (torch.stack(ys) ** 2).sum().backward()
    for got, want in zip(m.drnn(x, w, h), (tx, tw, th)):
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-4, atol=1e-5)

    y0, k = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    ty, tk = torch.tensor(y0, requires_grad=True), torch.tensor(k, requires_grad=True)
    yy = ty
    for i in range(20):
        yy = yy + 0.05 * (tk * torch.sin(yy + 0.01 * i))
    (yy * yy).sum().backward()
    for got, want in zip(m.dode(y0, k), (ty, tk)):
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-4, atol=1e-6)

    for sign in (1, -1):
        a = sign * np.abs(rng.standard_normal(n)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        (ta * tb if ta.sum() > 0 else tb * tb).sum().backward()
        ga, gb = m.dbr(a, b)
        np.testing.assert_allclose(ga, ta.grad.numpy() if ta.grad is not None else 0, rtol=1e-6)
        np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("src,msg", [
    ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (while ((x A)) (< (sum x) 10.0) (next (sum x))))",
     r"state value 0 starts as f32\[N\] but its next value is f32\[\]"),
    ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (while ((x A)) (> x 0.0) (next (- x 1.0))))",
     "the condition must be a rank-0 bool"),
    ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (if (> (sum A) 0.0) A (sum A)))",
     "both branches must give the same dtypes and shapes"),
    ("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (fori (i 0 3) ((x A)) (* x 2.0)))",
     r"body must end in \(next ...\)"),
    ("(composite f ((A{f32}[N]) -> (Y{f32}[])) (sum (while ((x A)) (< (sum x) 9.0) (next (+ x 1.0)))))\n"
     "(composite g ((A{f32}[N]) -> (G{f32}[N])) (grad f A :wrt A))",
     "reverse mode through a loop whose trip count is known only at run time"),
])
def test_malformed_loops_get_diagnostics(src, msg):
    with pytest.raises(caten.Error, match=msg):
        caten.loads(src, runtime="numpy")


def test_check_bounds_covers_loop_bodies(monkeypatch):
    """The bounds-checked mode instruments the kernels of a loop's body too, and reports a failure
    there as the program's own."""
    import dataclasses

    import caten.lower.kernel_lowerer as lower_mod
    from caten import loopir as L

    real = lower_mod.lower

    def buggy(sched):  # a lowering bug on purpose, only in the body: its stores into out0 move by 1
        out = real(sched)
        if "__l" not in (out[0].name if out else ""):
            return out
        def shift(stmts):
            res = []
            for st in stmts:
                if isinstance(st, L.Loop):
                    st = dataclasses.replace(st, body=shift(st.body))
                elif isinstance(st, L.Store) and st.buf == "out0":
                    st = L.Store(st.buf, L.iadd(st.idx, L.const(1)), st.value)
                res.append(st)
            return res
        return [dataclasses.replace(k, body=shift(k.body)) for k in out]

    monkeypatch.setattr(lower_mod, "lower", buggy)
    src = "(composite h ((X{f32}[N]) -> (Y{f32}[N])) (fori (i 0 3) ((x X)) (next (* (+ x 7.0) 2.0))))"
    for rt in ["llvm", "c"] + DEVICE:
        m = caten.loads(src, runtime=rt, check_bounds=True, use_cache=False)
        with pytest.raises(caten.Error, match=r"out-of-bounds: kernel h__l\S+, buffer out0, index \d+, extent 9"):
            m.h(np.arange(9, dtype=np.float32))


def _program(src: str, name: str):
    from caten.pipeline import compile_program
    from caten.read.source import read_text

    s = read_text(src, "<string>", False)
    return compile_program(s, s.entry(name), {}, {})


def test_only_the_taken_branch_computes():
    """A branch's own computation stays inside it (its IF's operands are the condition and the
    values that exist outside anyway), so the side not taken costs nothing."""
    from caten.ir.graph import toposort
    from caten.ir.ops import Op

    prog = _program("(composite f ((A{f32}[N]) -> (Y{f32}[N])) (if (> (sum A) 0.0) (sin (exp A)) (cos A)))", "f")
    (node,) = [n for n in toposort(prog.nodes) if n.op is Op.IF]
    assert [s.op for s in node.src[1:]] == [Op.BUFFER]
    then = node.arg[0].then
    assert any(n.op is Op.SIN for n in toposort(list(then.outputs)))


MATVEC = """
(composite f ((X{f32}[T, B, G]) (H0{f32}[B, H]) (WT{f32}[H, G]) -> (Y{f32}[B, H]) where G = (* 4 H))
  (nth (scan (lambda (h x) (let ((g (+ x (matmul h WT))))
                             (let ((hn (tanh (slice g [0 B 1] [0 H 1])))) (next hn hn)))) H0 X) 0))
"""


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_an_invariant_weight_packed_once_per_loop_is_packed_again_next_call(rt):
    """A body's GEMM packs its captured weight on the first trip only (GemmPlan.hoisted); a second
    call with other weights packs those (the buffer is the loop's, never stale)."""
    m, ref = caten.loads(MATVEC, runtime=rt), caten.loads(MATVEC, runtime="numpy")
    r = np.random.default_rng(7)
    x = r.standard_normal((9, 3, 64)).astype(np.float32)
    h = r.standard_normal((3, 16)).astype(np.float32)
    w = (r.standard_normal((16, 64)) * 0.3).astype(np.float32)
    for scale in (1.0, -2.0, 0.5):
        np.testing.assert_allclose(m.f(x, h, w * scale), ref.f(x, h, w * scale), rtol=1e-5, atol=1e-6)


def test_device_source_manifest_describes_loops(tmp_path):
    """`-S` for a device runtime writes the bodies' kernels too, and the manifest's `steps` give
    the launches in order with each loop's statement and its bodies' own programs."""
    import json

    from click.testing import CliRunner

    from caten.cli.main import cli

    src = tmp_path / "n.lisp"
    src.write_text(SOLVERS)
    out = tmp_path / "n.cu"
    r = CliRunner().invoke(cli, ["-r", "cuda", "-S", str(src), "-e", "newton-sqrt", "-o", str(out)])
    assert r.exit_code == 0, r.output
    prog = json.loads((tmp_path / "n.json").read_text())["programs"][0]
    kinds = [next(iter(s)) for s in prog["steps"]]
    assert "control" in kinds and kinds.count("launch") == len(prog["launches"])
    loop = next(s for s in prog["steps"] if "control" in s)
    assert loop["control"].startswith("loop ") and set(loop["bodies"]) == {"body", "cond"}
    text = out.read_text()
    assert all(k["kernel"] in text for b in loop["bodies"].values() for k in b["launches"])
