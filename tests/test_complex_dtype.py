"""c64 / c128 as dtypes of the language (issue #42): complex parameters, outputs and ops, split
into real parts by the elaborator (caten/elaborate/complex.py), checked against numpy (and torch's
complex autograd for gradients) on odd and empty shapes, both dtypes, and the numpy, llvm and c
runtimes (the native ones also bounds-checked)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import caten


def _have(rt: str) -> bool:
    from caten import plugin as R

    try:
        return R.get(rt).available()[0]
    except caten.Error:
        return False


CONFIGS = [("numpy", False)] + [(rt, cb) for rt in ("llvm", "c") if _have(rt) for cb in (False, True)]
IDS = [f"{rt}{'-bounds' if cb else ''}" for rt, cb in CONFIGS]
CDT = {"c64": np.complex64, "c128": np.complex128}
RDT = {"c64": np.float32, "c128": np.float64}
TOL = {"c64": dict(rtol=2e-5, atol=2e-6), "c128": dict(rtol=1e-12, atol=1e-13)}

SRC = """
(composite arith ((A{T}[M N] B{T}[N] X{R}[M N]) -> (S{T}[M N] D{T}[M N] P{T}[M N] Q{T}[M N] QX{T}[M N]
                                                XQ{T}[M N] L{T}[M N] NG{T}[M N]))
  (return (+ A B) (- A B) (* A B) (/ A B) (/ A X) (/ X B) (- (* 2 A) 1.5 X) (- A)))
(composite unary ((A{T}[M N]) -> (CJ{T}[M N] E{T}[M N] AB{R}[M N] AN{R}[M N] RE{R}[M N] IM{R}[M N]))
  (return (conj A) (exp A) (abs A) (angle A) (real A) (imag A)))
(composite make ((X{R}[M N] Y{R}[N]) -> (Z{C}[M N] W{C}[M N]))
  (return (complex X Y) (+ (complex X 0) (complex 1 -2.5))))
(composite mm ((A{T}[M K] B{T}[K N] X{R}[K N] Bt{T}[2 K N]) -> (Y{T}[M N] YX{T}[M N] XY{T}[N M] YB{T}[2 M N]))
  (return (matmul A B) (matmul A X) (matmul (transpose X) (transpose A)) (matmul A Bt)))
(composite red ((A{T}[M N]) -> (S0{T}[N] S{T} MN{T}[M 1] MA{T}))
  (return (sum A :axis 0) (sum A) (mean A :axis 1 :keepdims true) (mean A)))
(composite sel ((C{bool}[M N] A{T}[M N] B{T}[N]) -> (W{T}[M N] V{T}[M N] EQ{bool}[M N]))
  (return (where C A B) (where C A 0.5) (!= A B)))
"""

MOVE = """
(composite mv ((A{T}[3 5]) -> (RS{T}[5 3] TR{T}[5 3] PM{T}[5 3] SL{T}[2 2] EX{T}[2 3 5] FL{T}[3 5] PD{T}[4 7]
                              CC{T}[6 5] SQ{T}[3 1 5] CP{T}[3 5]))
  (return (reshape A [5 3]) (transpose A) (permute A [1 0]) (slice A [1 3] [0 5 3]) (expand A [2 3 5])
          (flip A :axis 1) (pad A [[1 0] [2 0]]) (concat A (conj A) :axis 0) (unsqueeze A 1)
          (contiguous (VIEW A :flip [0]))))
(composite ffts ((Z{T}[3 12] Y{T}[2 7] X{R}[3 12]) -> (F{T}[3 12] I{T}[3 12] P{T}[2 7] RF{T}[3 7]
                                                       IR{R}[3 12]))
  (setf s (rfft X))
  (return (fft Z) (ifft Z :norm-exp 0.5) (fft Y) s (irfft s :n 12)))
"""


def _c(rng, shape, dt, special=False):
    z = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(CDT[dt])
    if special and z.size >= 6:
        flat = z.reshape(-1)
        flat[0] = 0
        flat[1] = flat[1].real
        flat[2] = 1j * flat[2].imag
        flat[3] = complex(1e30, -1e-30) if dt == "c64" else complex(1e300, -1e-300)
        flat[4] = complex(-0.0, 0.0)
    return z


def _close(got, want, dt):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, **TOL[dt])


@pytest.fixture(scope="module", params=CONFIGS, ids=IDS)
def mod(request):
    rt, cb = request.param
    return caten.loads(SRC + MOVE, runtime=rt, check_bounds=cb)


@pytest.mark.parametrize("dt", ["c64", "c128"])
@pytest.mark.parametrize("shape", [(3, 5), (1, 7), (0, 4), (4, 0)])
def test_arithmetic_and_unary_match_numpy(mod, dt, shape):
    rng = np.random.default_rng(sum(shape))
    a = _c(rng, shape, dt, special=True)
    b = _c(rng, shape[1:], dt, special=True)
    x = rng.standard_normal(shape).astype(RDT[dt])
    with np.errstate(all="ignore"):
        want = [np.asarray(w, CDT[dt]) for w in [a + b, a - b, a * b, a / b, a / x, x / b, 2 * a - 1.5 - x, -a]]
    for got, w in zip(mod.arith(a, b, x), want):
        _close(got, w, dt)
    a = _c(rng, shape, dt)
    got = mod.unary(a)
    want = [np.conj(a), np.exp(a), np.abs(a), np.angle(a), a.real.copy(), a.imag.copy()]
    for g, w in zip(got, want):
        _close(g, w.astype(w.dtype), dt)


def test_division_special_values_as_numpy(mod):
    """numpy's Smith division: zero, infinite, nan and signed-zero divisors and dividends."""
    vals = np.array([0, -0.0, 1, -2.5, np.inf, -np.inf, np.nan, 1e-300, 3e300], np.float64)
    re, im = np.meshgrid(vals, vals)
    z = np.empty(re.size, np.complex128)
    z.real, z.imag = re.reshape(-1), im.reshape(-1)
    a = np.repeat(z, z.size).reshape(z.size, z.size)
    b = np.ascontiguousarray(z)
    with np.errstate(all="ignore"):
        want = a / b
    got = mod.arith(a, b, np.ones(a.shape))[3]
    np.testing.assert_array_equal(np.isnan(got.real), np.isnan(want.real))
    np.testing.assert_array_equal(np.isnan(got.imag), np.isnan(want.imag))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-15, atol=0)


def test_exp_and_abs_special_values_as_numpy(mod):
    """numpy's cexp on infinite and nan parts ((exp re, im) for im = 0, (inf, nan), (0, 0)), hypot's
    inf with a nan, atan2's signed zeros."""
    vals = np.array([0, -0.0, 0.5, -3, np.inf, -np.inf, np.nan], np.float64)
    re, im = np.meshgrid(vals, vals)
    z = np.empty(re.shape, np.complex128)
    z.real, z.imag = re, im
    with np.errstate(all="ignore"):
        want = [np.exp(z), np.abs(z), np.angle(z)]
    _, e, ab, an, _, _ = mod.unary(z)
    for got, w in zip([e, ab, an], want):
        np.testing.assert_array_equal(np.isnan(got.real), np.isnan(w.real))
        np.testing.assert_array_equal(np.isnan(np.imag(got)), np.isnan(np.imag(w)))
        ok = ~np.isnan(w)
        np.testing.assert_allclose(got[ok], w[ok], rtol=1e-15, atol=0)
    np.testing.assert_array_equal(np.signbit(an), np.signbit(want[2]))


@pytest.mark.parametrize("dt", ["c64", "c128"])
def test_construct_matmul_reduce_select(mod, dt):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 5)).astype(RDT[dt]), rng.standard_normal(5).astype(RDT[dt])
    z, w = mod.make(x, y)
    _close(z, (x + 1j * y).astype(CDT[dt]), dt)
    _close(w, (x + (1 - 2.5j)).astype(CDT[dt]), dt)
    a, b, bt = _c(rng, (3, 4), dt), _c(rng, (4, 5), dt), _c(rng, (2, 4, 5), dt)
    xr = rng.standard_normal((4, 5)).astype(RDT[dt])
    got = mod.mm(a, b, xr, bt)
    for g, want in zip(got, [a @ b, a @ xr, xr.T @ a.T, a @ bt]):
        _close(g, want.astype(CDT[dt]), dt)
    for shape in [(3, 5), (0, 5), (3, 0)]:
        a = _c(rng, shape, dt)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of an empty axis: nan
            want = [a.sum(0), np.asarray(a.sum(), CDT[dt]), a.mean(1, keepdims=True), np.asarray(a.mean(), CDT[dt])]
        for g, w in zip(mod.red(a), want):
            np.testing.assert_allclose(g, w, **TOL[dt])
            assert g.dtype == CDT[dt]
    c = rng.random((3, 5)) < 0.5
    a, b = _c(rng, (3, 5), dt), _c(rng, (5,), dt)
    b[0] = a[1, 0]
    w, v, ne = mod.sel(c, a, b)
    _close(w, np.where(c, a, b), dt)
    _close(v, np.where(c, a, CDT[dt](0.5)), dt)
    np.testing.assert_array_equal(ne, a != b)


@pytest.mark.parametrize("dt", ["c64", "c128"])
def test_movement_and_fft(mod, dt):
    rng = np.random.default_rng(2)
    a = _c(rng, (3, 5), dt)
    want = [a.reshape(5, 3), a.T, a.T, a[1:3, 0:5:3], np.broadcast_to(a, (2, 3, 5)), a[:, ::-1],
            np.pad(a, [(1, 0), (2, 0)]), np.concatenate([a, np.conj(a)]), a[:, None], a[::-1]]
    for g, w in zip(mod.mv(a), want):
        np.testing.assert_array_equal(g, w)
    z, y, x = _c(rng, (3, 12), dt), _c(rng, (2, 7), dt), rng.standard_normal((3, 12)).astype(RDT[dt])
    f, i, p, rf, ir = mod.ffts(z, y, x)
    tol = dict(rtol=2e-5, atol=2e-5) if dt == "c64" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f, np.fft.fft(z), **tol)
    np.testing.assert_allclose(i, np.fft.ifft(z, norm="ortho"), **tol)
    np.testing.assert_allclose(p, np.fft.fft(y), **tol)
    np.testing.assert_allclose(rf, np.fft.rfft(x), **tol)
    np.testing.assert_allclose(ir, x, **tol)
    assert f.dtype == i.dtype == rf.dtype == CDT[dt] and ir.dtype == RDT[dt]


GRAD = """
(composite loss ((Z{c64}[N] W{f32}[N]) -> (L{f32}))
  (setf u (/ (* Z (complex W 0.5)) (+ Z 3)))
  (sum (+ (abs (exp u)) (* (angle Z) (real (matmul (VIEW u :reshape [1 N]) (VIEW (conj Z) :reshape [N 1])))))))
(composite grads ((Z{c64}[N] W{f32}[N]) -> (L{f32} GZ{c64}[N] GW{f32}[N]))
  (setf vg (value-and-grad loss Z W :wrt [Z W]))
  (return (nth vg 0) (nth vg 1) (nth vg 2)))
(composite hol ((Z{c128}[N]) -> (Y{c128}[N])) (* (exp (* Z Z)) (conj Z)))
(composite pull ((Z{c128}[N] C{c128}[N]) -> (G{c128}[N])) (vjp hol Z :wrt Z :cotangent C))
"""


@pytest.mark.parametrize("rt", ["numpy", "llvm"])
def test_gradients_match_torch(rt):
    torch = pytest.importorskip("torch")
    m = caten.loads(GRAD, runtime=rt)
    rng = np.random.default_rng(3)
    z, w = _c(rng, 6, "c64"), rng.standard_normal(6).astype(np.float32)
    val, gz, gw = m.grads(z, w)
    tz, tw = torch.tensor(z, requires_grad=True), torch.tensor(w, requires_grad=True)
    u = tz * torch.complex(tw, torch.full_like(tw, 0.5)) / (tz + 3)
    tl = (u.exp().abs() + tz.angle() * (u.reshape(1, 6) @ tz.conj().reshape(6, 1)).real).sum()
    tl.backward()
    np.testing.assert_allclose(val, tl.item(), rtol=1e-5)
    np.testing.assert_allclose(gz, tz.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert gz.dtype == np.complex64
    z2, c2 = _c(rng, 5, "c128"), _c(rng, 5, "c128")
    tz = torch.tensor(z2, requires_grad=True)
    (torch.exp(tz * tz) * tz.conj()).backward(torch.tensor(c2))
    np.testing.assert_allclose(m.pull(z2, c2), tz.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_abs_and_angle_gradients_at_zero_are_zero():
    """torch's: abs and angle pass no gradient at 0 (hypot's and atan2's own are nan there)."""
    m = caten.loads("(composite l ((Z{c64}[N]) -> (L{f32})) (sum (+ (abs Z) (angle Z))))\n"
                    "(composite g ((Z{c64}[N]) -> (G{c64}[N])) (grad l Z :wrt Z))", runtime="numpy")
    z = np.array([0, 3 + 4j], np.complex64)
    # d|z| = z/|z|; d angle = i z/|z|^2 (d/dre + i d/dim of atan2(im, re): (-im + i re)/|z|^2)
    np.testing.assert_allclose(m.g(z), [0, 0.6 + 0.8j + (-4 + 3j) / 25], rtol=1e-6)


def test_pair_forms_still_work():
    """rfft's (re, im) pair still reads with nth; the pair form of fft keeps its tuple."""
    m = caten.loads("(composite f ((X{f64}[8]) -> (A{f64}[5] B{f64}[5] C{f64}[8] D{f64}[8]))\n"
                    "  (setf s (rfft X)) (setf t (fft X (* 0 X)))\n"
                    "  (return (nth s 0) (nth s 1) (nth t 0) (nth t 1)))", runtime="numpy")
    x = np.arange(8.0)
    a, b, c, d = m.f(x)
    np.testing.assert_allclose(a + 1j * b, np.fft.rfft(x), atol=1e-12)
    np.testing.assert_allclose(c + 1j * d, np.fft.fft(x), atol=1e-12)


def test_type_variables_and_weak_literals():
    m = caten.loads("(composite f ((Z{T}[N]) -> (Y{T}[N] D{T}[N])) (return (* Z (complex 1 2)) (cast Z c128)))\n"
                    "(composite g ((Z{c64}[N]) -> (Y{c128}[N])) (cast Z c128))\n"
                    "(composite h ((X{f32}[N]) -> (Y{c64}[N])) (cast X c64))", runtime="numpy")
    z = np.array([1 + 1j, -2j], np.complex128)
    y, _ = m.f(z)
    assert y.dtype == np.complex128
    np.testing.assert_allclose(y, z * (1 + 2j))
    assert m.g(z.astype(np.complex64)).dtype == np.complex128
    np.testing.assert_array_equal(m.h(np.array([1.5, -2], np.float32)), np.array([1.5, -2], np.complex64))


BAD = {
    "(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (max Z Z))": "`max` is not defined for complex values",
    "(composite f ((Z{c64}[N]) -> (Y{c64})) (max Z))": "`max` is not defined for complex values",
    "(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (tanh Z))": "`tanh` is not defined for complex values",
    "(composite f ((Z{c64}[N]) -> (Y{c64})) (prod Z))": "`prod` is not defined for complex values",
    "(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (ADD Z Z))": "`ADD` is not defined for complex values",
    "(composite f ((Z{c64}[N]) -> (Y{bool}[N])) (< Z Z))": "`<` is not defined for complex values",
    "(composite f ((Z{c64}[N] X{f64}[N]) -> (Y{c64}[N])) (+ Z X))": "a f64 tensor meets a c64 value",
    "(composite f ((Z{c64}[N] X{c128}[N]) -> (Y{c64}[N])) (* Z X))": "operands have different dtypes (c64, c128)",
    "(composite f ((Z{c64}[N]) -> (Y{f32}[N])) (+ Z Z))": "declared f32 but the body gives a complex value",
    "(composite f ((Z{f32}[N]) -> (Y{c64}[N])) (+ Z Z))": "declared c64 but the body gives",
    "(composite f ((Z{c64}[N]) -> (Y{f32}[N])) (cast Z f32))": "would drop its imaginary part",
    "(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (if (complex 1.0 2.0) Z Z))": "if needs a bool condition",
    "(composite l ((Z{c64}[N]) -> (Y{c64})) (sum Z))\n"
    "(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (grad l Z :wrt Z))": "complex value, not a tensor",
    "(composite f ((Z{c64}[N]) -> (Z{c64}[N])) (+ Z 1))": "written in place",
    "(composite f ((Z{c64}[N] Z_re{f32}[N]) -> (Y{c64}[N])) Z)": "`Z_re` names another tensor",
    "(composite f ((X{i32}[N]) -> (Y{c64}[N])) (complex X X))": "`complex` needs f32 (c64) or f64 (c128)",
    "(composite f ((Z{c64}[N]) -> (Y{f32}[N])) (sin (real Z) Z))": "not defined for complex values",
}


@pytest.mark.parametrize("src", list(BAD), ids=range(len(BAD)))
def test_refused_with_a_diagnostic(src):
    with pytest.raises(caten.Error, match=BAD[src].replace("(", r"\(").replace(")", r"\)")):
        m = caten.loads(src, runtime="numpy")
        m.f(np.ones(3, np.complex64))


def test_real_array_for_a_complex_parameter_is_refused():
    m = caten.loads("(composite f ((Z{c64}[N]) -> (Y{c64}[N])) (* Z Z))", runtime="numpy")
    with pytest.raises(caten.Error, match="has dtype f32, but declared c64"):
        m.f(np.ones(3, np.float32))
    with pytest.raises(caten.Error, match="has dtype c128, but declared c64"):
        m.f(np.ones(3, np.complex128))
    with pytest.raises(caten.Error, match="out= is not available"):
        m.f(np.ones(3, np.complex64), out=np.empty(3, np.complex64))
