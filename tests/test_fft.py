"""caten.fft, stft/istft and the ops/fft.lisp composites against torch (values and gradients).

Each case realizes all its outputs in one program (caten.tensor.realize), so the test set stays
within its time budget; numpy runs every case, llvm and c a representative few."""

import numpy as np
import pytest

import caten
import caten.fft as cfft
from caten.tensor.complex import ComplexTensor
from caten.tensor.realize import realize
from caten.tensor.tensor import Tensor

torch = pytest.importorskip("torch")

TOL = {"f32": 1e-4, "f64": 1e-10}
NP = {"f32": np.float32, "f64": np.float64}


@pytest.fixture(autouse=True)
def _numpy_default():
    caten.tensor.set_default_runtime("numpy")


def _run(runtime, *outs):
    """Realize every output (complex parts too) in one program; their numpy values."""
    ts = [p for o in outs for p in ((o.real, o.imag) if isinstance(o, ComplexTensor) else (o,))]
    realize([t.node for t in ts], runtime)
    return [o.numpy() for o in outs]


def _close(got, ref, dt):
    ref = ref.detach().resolve_conj().numpy() if isinstance(ref, torch.Tensor) else ref
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = float(np.abs(ref).max()) if ref.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=TOL[dt], atol=TOL[dt] * max(scale, 1.0))


def _data(shape, dt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(NP[dt])


@pytest.mark.ci_slice(2)
@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000, 4096])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_transforms_match_torch(n, dt):
    x, y = _data((2, n), dt), _data((2, n), dt, 1)
    X, Y = Tensor(x, runtime="numpy"), Tensor(y, runtime="numpy")
    z = caten.complex(X, Y)
    tz = torch.complex(torch.tensor(x), torch.tensor(y))
    spec = cfft.rfft(X, norm="forward")
    outs = [cfft.fft(z), cfft.ifft(z, norm="ortho"), spec, cfft.irfft(spec, n=n, norm="forward"), cfft.fft(X)]
    got = _run("numpy", *outs)
    refs = [torch.fft.fft(tz), torch.fft.ifft(tz, norm="ortho"), torch.fft.rfft(torch.tensor(x), norm="forward"),
            torch.tensor(x), torch.fft.fft(torch.tensor(x))]
    for g, r in zip(got, refs):
        _close(g, r, dt)
    assert got[0].dtype == (np.complex64 if dt == "f32" else np.complex128)


def test_axis_n_and_batch():
    """Axis not last, n= trimming and zero-padding, every norm, rank 3 batches."""
    x = _data((3, 10, 4), "f64")
    X, tx = Tensor(x, runtime="numpy"), torch.tensor(x)
    cases = [(cfft.fft(X, n=7, dim=1, norm="ortho"), torch.fft.fft(tx, n=7, dim=1, norm="ortho")),
             (cfft.ifft(X, n=13, dim=0, norm="forward"), torch.fft.ifft(tx, n=13, dim=0, norm="forward")),
             (cfft.rfft(X, n=9, dim=-2), torch.fft.rfft(tx, n=9, dim=-2)),
             (cfft.rfft(X, n=16, dim=0, norm="ortho"), torch.fft.rfft(tx, n=16, dim=0, norm="ortho")),
             (cfft.irfft(cfft.rfft(X, dim=1), n=7, dim=1), torch.fft.irfft(torch.fft.rfft(tx, dim=1), n=7, dim=1)),
             (cfft.irfft(caten.complex(X, X * 2), dim=0, norm="ortho"),
              torch.fft.irfft(torch.complex(tx, tx * 2), dim=0, norm="ortho")),
             (cfft.fft2(X), torch.fft.fft2(tx)), (cfft.ifftn(X, s=(5, 3)), torch.fft.ifftn(tx, s=(5, 3))),
             (cfft.rfftn(X), torch.fft.rfftn(tx)), (cfft.irfft2(cfft.rfft2(X)), torch.fft.irfft2(torch.fft.rfft2(tx))),
             (cfft.hfft(caten.complex(X, X), n=6), torch.fft.hfft(torch.complex(tx, tx), n=6)),
             (cfft.ihfft(X, dim=0), torch.fft.ihfft(tx, dim=0)),
             (cfft.fftshift(X, dim=(0, 1)), torch.fft.fftshift(tx, dim=(0, 1))),
             (cfft.ifftshift(X), torch.fft.ifftshift(tx))]
    got = _run("numpy", *[c for c, _ in cases])
    for g, (_, r) in zip(got, cases):
        _close(g, r, "f64")
    np.testing.assert_array_equal(cfft.fftfreq(7, 0.5, dtype=caten.float64).numpy(), torch.fft.fftfreq(7, 0.5,
                                  dtype=torch.float64).numpy())
    np.testing.assert_array_equal(cfft.rfftfreq(8).numpy(), torch.fft.rfftfreq(8).numpy())


def test_prime_lengths_bluestein():
    """Lengths with a prime factor past 128 go through Bluestein's chirp-z convolution."""
    x, y = _data((2, 131), "f32"), _data((2, 262), "f64")
    X, Y = Tensor(x, requires_grad=True, runtime="numpy"), Tensor(y, runtime="numpy")
    got = _run("numpy", cfft.fft(X), cfft.ifft(caten.complex(Y, Y * 0.5), norm="ortho"), cfft.rfft(Y, n=257))
    ty = torch.tensor(y)
    for g, r, dt in zip(got, [torch.fft.fft(torch.tensor(x)), torch.fft.ifft(torch.complex(ty, ty * 0.5), norm="ortho"),
                              torch.fft.rfft(ty, n=257)], ["f32", "f64", "f64"]):
        _close(g, r, dt)
    tx = torch.tensor(x, requires_grad=True)
    (cfft.fft(X).abs() ** 3).sum().backward()
    (torch.fft.fft(tx).abs() ** 3).sum().backward()
    _close(X.grad.numpy(), tx.grad, "f32")


def test_empty_batch_dim():
    x = np.zeros((0, 8), np.float32)
    z, r = _run("numpy", cfft.fft(Tensor(x, runtime="numpy")), cfft.rfft(Tensor(x, runtime="numpy")))
    assert z.shape == (0, 8) and r.shape == (0, 5)


@pytest.mark.parametrize("n", [7, 64])
def test_gradients_match_torch(n):
    x, y = _data((2, n), "f64"), _data((2, n), "f64", 1)
    X, Y = Tensor(x, requires_grad=True, runtime="numpy"), Tensor(y, requires_grad=True, runtime="numpy")
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    w = np.linspace(-1, 2, n // 2 + 1)
    loss = (cfft.rfft(X).abs() ** 2).sum() + (cfft.fft(caten.complex(X, Y), norm="ortho").real * 3).sum() \
        + (cfft.ifft(caten.complex(Y, X)).imag * Tensor(np.arange(n, dtype=np.float64), runtime="numpy")).sum() \
        + (cfft.irfft(caten.complex(X[:, : n // 2 + 1], Y[:, : n // 2 + 1]), n=n) ** 2).sum() \
        + (cfft.rfft(Y, norm="forward").imag * Tensor(w, runtime="numpy")).sum()
    tl = (torch.fft.rfft(tx).abs() ** 2).sum() + (torch.fft.fft(torch.complex(tx, ty), norm="ortho").real * 3).sum() \
        + (torch.fft.ifft(torch.complex(ty, tx)).imag * torch.arange(n, dtype=torch.float64)).sum() \
        + (torch.fft.irfft(torch.complex(tx[:, : n // 2 + 1], ty[:, : n // 2 + 1]), n=n) ** 2).sum() \
        + (torch.fft.rfft(ty, norm="forward").imag * torch.tensor(w)).sum()
    loss.backward()
    tl.backward()
    _close(loss.numpy(), tl, "f64")
    _close(X.grad.numpy(), tx.grad, "f64")
    _close(Y.grad.numpy(), ty.grad, "f64")


@pytest.mark.parametrize("rt", ["llvm", "c"])
def test_compiled_runtimes(rt):
    """One program per runtime: the c2c, r2c and c2r transforms on a mixed-radix length."""
    n = 20 if rt == "c" else 64
    x = _data((3, n), "f32")
    X = Tensor(x, runtime=rt)
    spec = cfft.rfft(X)
    got = _run(rt, cfft.fft(caten.complex(X, X * 0.5)), spec, cfft.irfft(spec, n=n))
    tx = torch.tensor(x)
    for g, r in zip(got, [torch.fft.fft(torch.complex(tx, tx * 0.5)), torch.fft.rfft(tx), tx]):
        _close(g, r, "f32")


def test_refusals():
    x = Tensor(np.ones(4, np.float32), runtime="numpy")
    with pytest.raises(caten.Error, match="unsupported dtype"):
        cfft.fft(x.half())
    with pytest.raises(caten.Error, match="invalid number of data points"):
        cfft.fft(x, n=0)
    with pytest.raises(caten.Error, match="invalid normalization"):
        cfft.fft(x, norm="unitary")
    with pytest.raises(caten.Error, match="0-d"):
        cfft.rfft(Tensor(np.float32(1.0), runtime="numpy"))


SRC = """
(composite spectrum ((X{f64}[B, N]) -> (R{f64}[B, K]) (I{f64}[B, K]) (Y{f64}[B, N]))
  (setf s (rfft X :norm-exp 0.5))
  (return (nth s 0) (nth s 1) (irfft (nth s 0) (nth s 1) :n N :norm-exp 0.5)))
"""


def test_language_composites():
    x = _data((2, 12), "f64")
    mod = caten.loads(SRC, runtime="numpy", defines={"B": 2, "N": 12, "K": 7})
    re, im, y = mod.spectrum(x)
    _close(re + 1j * im, torch.fft.rfft(torch.tensor(x), norm="ortho"), "f64")
    _close(y, x, "f64")
    with pytest.raises(caten.Error, match="norm-exp"):
        bad = SRC.replace(":norm-exp 0.5))", ":norm-exp 2))")
        caten.loads(bad, runtime="numpy", defines={"B": 2, "N": 12, "K": 7}).spectrum(x)


# ---------------------------------------------------------------- stft / istft

def _hann(n, dt="f64"):
    return caten.hann_window(n, dtype=caten.float64 if dt == "f64" else caten.float32), \
        torch.hann_window(n, dtype=torch.float64 if dt == "f64" else torch.float32)


@pytest.mark.parametrize("center,hop,win_length", [(True, 5, None), (False, 4, 12), (True, 3, 10)])
def test_stft_istft_match_torch(center, hop, win_length):
    x = _data((2, 61), "f64")
    wl = win_length or 16
    w, tw = _hann(wl)
    X, tx = Tensor(x, requires_grad=True, runtime="numpy"), torch.tensor(x, requires_grad=True)
    s = caten.stft(X, 16, hop, win_length=win_length, window=w, center=center, return_complex=True)
    ts = torch.stft(tx, 16, hop, win_length=win_length, window=tw, center=center, return_complex=True)
    (s.abs() ** 2 * 0.5 + s.real).sum().backward()
    (ts.abs() ** 2 * 0.5 + ts.real).sum().backward()
    _close(s.numpy(), ts, "f64")
    _close(X.grad.numpy(), tx.grad, "f64")
    if center:  # the round trip (torch's hann envelope is 0 at the edges without centering)
        length = 61 if hop == 5 else 50
        y = caten.istft(s.detach(), 16, hop, win_length=win_length, window=w, center=True, length=length)
        ty = torch.istft(ts.detach(), 16, hop, win_length=win_length, window=tw, center=True, length=length)
        _close(y.numpy(), ty, "f64")
        _close(y.numpy(), x[:, :length], "f64")
        z0 = x[:, :9] + 0.5j * x[:, 9:18]
        Z, tz = caten.tensor(z0, requires_grad=True), torch.tensor(z0, requires_grad=True)
        zc = Z.reshape(2, 9, 1).expand(2, 9, 7)  # 7 frames of one spectrum (a tensor of its own)
        tzc = tz.reshape(2, 9, 1).expand(2, 9, 7)
        y = caten.istft(zc, 16, hop, win_length=win_length, window=w, center=True)
        ty = torch.istft(tzc, 16, hop, win_length=win_length, window=tw, center=True)
        (y * y).sum().backward()
        (ty * ty).sum().backward()
        _close(y.numpy(), ty, "f64")
        _close(Z.grad.numpy(), tz.grad, "f64")


def test_stft_options():
    x = _data(40, "f32")
    w, tw = _hann(8, "f32")
    X, tx = Tensor(x, runtime="numpy"), torch.tensor(x)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [(caten.stft(X, 8, 2, window=w, return_complex=False, normalized=True, pad_mode="constant"),
                  torch.stft(tx, 8, 2, window=tw, return_complex=False, normalized=True, pad_mode="constant")),
                 (caten.stft(X, 8, window=w, onesided=False, return_complex=True),
                  torch.stft(tx, 8, window=tw, onesided=False, return_complex=True)),
                 (X.stft(8, 3, window=w, return_complex=True, pad_mode="replicate"),
                  tx.stft(8, 3, window=tw, return_complex=True, pad_mode="replicate"))]
    z = caten.complex(X, X * 0.25)
    tz = torch.complex(tx, tx * 0.25)
    cases.append((caten.stft(z, 8, 2, window=w), torch.stft(tz, 8, 2, window=tw)))
    got = _run("numpy", *[c for c, _ in cases])
    for g, (_, r) in zip(got, cases):
        _close(g, r, "f32")
    s, ts = cases[3]
    y = caten.istft(s, 8, 2, window=w, return_complex=True)
    _close(y.numpy(), torch.istft(ts, 8, 2, window=tw, return_complex=True), "f32")
    y = caten.istft(cases[1][0], 8, window=w, normalized=False)
    _close(y.numpy(), torch.istft(cases[1][1], 8, window=tw), "f32")


def test_stft_refusals():
    x = Tensor(_data(32, "f32"), runtime="numpy")
    with pytest.raises(caten.Error, match="return_complex"):
        caten.stft(x, 8)
    s = caten.stft(x, 8, 2, window=caten.hann_window(8), center=False, return_complex=True)
    with pytest.raises(caten.Error, match="window overlap add min"):
        caten.istft(s, 8, 2, window=caten.hann_window(8), center=False)
    with pytest.raises(TypeError, match="complex-valued input"):
        caten.istft(x.reshape(4, 8), 8)
    with pytest.raises(caten.Error, match="frequency dimension"):
        caten.istft(s, 16)
