"""torch's complex and spectral names on caten.Tensor: stft/istft, complex/polar/view_as_real/
view_as_complex, real/imag/is_complex, the window functions. The transforms are the library's FFT
composites (caten/tensor/fft.py, ops/fft.lisp); framing is `unfold` (a take), the overlap-add of
istft a sum of shifted, zero-padded views (no scatter), so all of it differentiates by autodiff."""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor import complex as C
from caten.tensor import fft as F
from caten.tensor.complex import ComplexTensor
from caten.tensor.nn.resample import pad as _pad
from caten.tensor.tensor import Tensor
from caten.tensor.torchnames import ArgError, torch_name

# ---------------------------------------------------------------- complex tensors


@torch_name("complex", "a planar complex pair (real, imag) of f32 or f64 Tensors", "creation", kind="function",
            example="caten.complex(re, im)")
def complex(real: Tensor, imag: Tensor) -> ComplexTensor:  # noqa: A001 (torch's name)
    return C.complex(real, imag)


@torch_name("polar", "the pair (abs cos(angle), abs sin(angle))", "creation", kind="function",
            example="caten.polar(r, theta)")
def polar(abs: Tensor, angle: Tensor) -> ComplexTensor:  # noqa: A002 (torch's names)
    return C.polar(abs, angle)


@torch_name("view_as_real", "the complex pair stacked last: [..., 2] (a copy)", "shape", kind="function",
            example="caten.view_as_real(z)")
def view_as_real(input: ComplexTensor) -> Tensor:
    return C.view_as_real(input)


@torch_name("view_as_complex", "the pair (x[..., 0], x[..., 1])", "shape", kind="function",
            example="caten.view_as_complex(x)")
def view_as_complex(input: Tensor) -> ComplexTensor:
    return C.view_as_complex(input)


@torch_name("is_complex", "false: a caten.Tensor is real (complex tensors are pairs)", "printing and reading")
def is_complex(self: Any) -> bool:
    return isinstance(self, ComplexTensor)


@torch_name("real", "the tensor itself (a real tensor's real part)", "elementwise", kind="function",
            example="caten.real(z)")
def real(input: Any) -> Tensor:
    return C.real(input)


@torch_name("imag", "the imaginary part of a complex pair (refused for a real tensor, as torch)", "elementwise",
            kind="function", example="caten.imag(z)")
def imag(input: Any) -> Tensor:
    return C.imag(input)


# ---------------------------------------------------------------- windows


def _window(name: str, n: int, periodic: bool, dtype: Any, requires_grad: bool, runtime: Any, a: list[float]):
    """A cosine-sum window, computed in f64 as torch's formula and rounded once to dtype."""
    n = int(n)
    if n < 0:
        raise Error(f"{name}: window_length must be non-negative, got {n}")
    m = n if periodic else n - 1
    i = np.arange(n, dtype=np.float64)
    w = np.zeros(n) if n else np.zeros(0)
    if n == 1:
        w = np.ones(1)
    elif n > 1:
        w = sum(((-1) ** k) * c * np.cos(2 * np.pi * k * i / m) for k, c in enumerate(a))
    dt = F._freq_dtype(dtype)
    return Tensor(np.asarray(w, dt), requires_grad=requires_grad, runtime=runtime)


@torch_name("hann_window", "0.5 - 0.5 cos(2 pi i / N), in f64 then rounded", "creation", kind="function",
            example="caten.hann_window(16)")
def hann_window(window_length: int, periodic: bool = True, *, dtype: Any = None, device: Any = None,
                requires_grad: bool = False, runtime: Any = None) -> Tensor:
    return _window("hann_window", window_length, periodic, dtype, requires_grad, runtime, [0.5, 0.5])


@torch_name("hamming_window", "0.54 - 0.46 cos(2 pi i / N), in f64 then rounded", "creation", kind="function",
            example="caten.hamming_window(16)")
def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype: Any = None, device: Any = None, requires_grad: bool = False, runtime: Any = None) -> Tensor:
    return _window("hamming_window", window_length, periodic, dtype, requires_grad, runtime, [alpha, beta])


@torch_name("blackman_window", "0.42 - 0.5 cos(2 pi i / N) + 0.08 cos(4 pi i / N)", "creation", kind="function",
            example="caten.blackman_window(16)")
def blackman_window(window_length: int, periodic: bool = True, *, dtype: Any = None, device: Any = None,
                    requires_grad: bool = False, runtime: Any = None) -> Tensor:
    return _window("blackman_window", window_length, periodic, dtype, requires_grad, runtime, [0.42, 0.5, 0.08])


# ---------------------------------------------------------------- stft / istft


def _parts_map(z: Any, fn: Any) -> Any:
    return ComplexTensor(fn(z.real), fn(z.imag)) if isinstance(z, ComplexTensor) else fn(z)


def _full_window(window: Any, win: int, n_fft: int, like: Any, name: str) -> Any:
    """The window padded on both sides to n_fft (left (n_fft - win) // 2), as torch's."""
    dt = like.real.dtype if isinstance(like, ComplexTensor) else like.dtype
    if window is None:
        window = Tensor(np.ones(win, F._freq_dtype(dt)), runtime=like.runtime)
    if tuple(window.shape) != (win,):
        raise Error(f"{name}: expected a 1D window tensor of size equal to win_length={win}, "
                    f"but got window with size {list(window.shape)}")
    left = (n_fft - win) // 2
    if left or n_fft - win - left:
        window = _parts_map(window, lambda t: _pad(t, [left, n_fft - win - left]))
    return window


def _sizes(n_fft: int, hop_length: Any, win_length: Any, name: str) -> tuple[int, int, int]:
    n_fft = int(n_fft)
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    win = n_fft if win_length is None else int(win_length)
    if n_fft <= 0:
        raise Error(f"{name}: expected 0 < n_fft, but got n_fft={n_fft}")
    if hop <= 0:
        raise Error(f"{name}: expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise Error(f"{name}: expected 0 < win_length <= n_fft, but got win_length={win}")
    return n_fft, hop, win


@torch_name("stft", "frames (`unfold`) times the window, then the library's `rfft`/`fft` per frame",
            "elementwise", example="x.stft(16, 4, window=caten.hann_window(16), return_complex=True)")
def stft(self: Any, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
         window: Any = None, center: bool = True, pad_mode: str = "reflect", normalized: bool = False,
         onesided: bool | None = None, return_complex: bool | None = None) -> Any:
    """torch.stft: [B?, n_fft // 2 + 1 (onesided) or n_fft, frames] complex (or [..., 2] real)."""
    cplx = isinstance(self, ComplexTensor) or isinstance(window, ComplexTensor)
    if return_complex is None:
        if not cplx:
            raise Error("stft requires the return_complex parameter be given for real inputs, and will further "
                        "require that return_complex=True in a future PyTorch release.",
                        hint="pass return_complex=True")
        return_complex = True
    if self.ndim not in (1, 2):
        raise Error(f"stft: expected a 1D or 2D tensor, got {self.ndim}D")
    n_fft, hop, win = _sizes(n_fft, hop_length, win_length, "stft")
    x = self if isinstance(self, ComplexTensor) else F._float(self, "stft")
    batched = x.ndim == 2
    x = x if batched else x.unsqueeze(0)
    if center:
        p = n_fft // 2
        x = _parts_map(x, lambda t: _pad(t.unsqueeze(0), [p, p], mode=pad_mode).squeeze(0))
    length = x.shape[-1]
    if not 0 < n_fft <= length:
        raise Error(f"stft: expected 0 < n_fft <= {length}, but got n_fft={n_fft}")
    frames = _parts_map(x, lambda t: t.unfold(-1, n_fft, hop))  # [B, F, n_fft]
    w = _full_window(window, win, n_fft, x, "stft")
    frames = frames * w if not isinstance(w, ComplexTensor) else w * frames
    onesided = (not cplx) if onesided is None else bool(onesided)
    if onesided and cplx:
        raise Error("stft: cannot have onesided output if window or input is complex")
    norm = "ortho" if normalized else "backward"
    spec = F.rfft(frames, dim=-1, norm=norm) if onesided else F.fft(frames, dim=-1, norm=norm)
    spec = spec.transpose(-1, -2)
    spec = spec if batched else spec.squeeze(0)
    return spec if return_complex else C.view_as_real(spec)


def _overlap_add(y: Tensor, hop: int) -> Tensor:
    """sum over frames f of y[:, f, :] placed at f * hop: [B, F, n] -> [B, (F + r - 1) hop], r = ceil(n / hop),
    as the sum of r shifted views of the frames cut in hop-long blocks."""
    b, nf, n = y.shape
    r = -(-n // hop)
    y = _pad(y, [0, r * hop - n]).reshape(b, nf, r, hop)
    out = None
    for j in range(r):
        part = _pad(y[:, :, j, :], [0, 0, j, r - 1 - j])
        out = part if out is None else out + part
    return out.reshape(b, (nf + r - 1) * hop)


@torch_name("istft", "the library's `irfft`/`fft` per frame, times the window, overlap-added (shifted views) "
            "and divided by the window's squared overlap-add", "elementwise",
            example="z.istft(16, 4, window=caten.hann_window(16))")
def istft(self: Any, n_fft: int, hop_length: int | None = None, win_length: int | None = None,
          window: Any = None, center: bool = True, normalized: bool = False, onesided: bool | None = None,
          length: int | None = None, return_complex: bool = False) -> Any:
    """torch.istft: the signal whose stft is the input (least squares over the overlaps)."""
    if not isinstance(self, ComplexTensor):
        raise ArgError("istft requires a complex-valued input tensor matching the output from stft with "
                       "return_complex=True.", hint="pass a complex tensor (caten.view_as_complex of [..., 2])")
    n_fft, hop, win = _sizes(n_fft, hop_length, win_length, "istft")
    if self.ndim not in (2, 3):
        raise Error(f"istft: expected a tensor of 2 or 3 dims (batch?, freq, frames), got {self.ndim}")
    z = self if self.ndim == 3 else self.unsqueeze(0)
    nfreq, nframes = z.shape[-2], z.shape[-1]
    onesided = (nfreq != n_fft) if onesided is None else bool(onesided)
    want = n_fft // 2 + 1 if onesided else n_fft
    if nfreq != want:
        raise Error(f"istft: expected the frequency dimension (3rd to the last) of the input tensor to match "
                    f"{'n_fft / 2 + 1' if onesided else 'n_fft'} when onesided={onesided}, but got {nfreq}")
    if nframes < 1:
        raise Error("istft: the input has no frames")
    if return_complex and onesided:
        raise Error("istft: cannot have onesided output if window or input is complex")
    w = _full_window(window, win, n_fft, z, "istft")
    if isinstance(w, ComplexTensor) and not return_complex:
        raise Error("istft: complex windows are incompatible with return_complex=False")
    norm = "ortho" if normalized else "backward"
    frames = z.transpose(-1, -2)  # [B, F, freq]
    if return_complex:
        y = F.ifft(frames, n_fft, -1, norm) * w
    else:
        if not onesided:
            frames = frames[..., : n_fft // 2 + 1]
        y = F.irfft(frames, n_fft, -1, norm) * w
    total = n_fft + hop * (nframes - 1)
    out = _parts_map(y, lambda t: _overlap_add(t, hop)[:, :total])
    w2 = (w * w.conj()).real if isinstance(w, ComplexTensor) else w * w
    env = _overlap_add(w2.reshape(1, 1, n_fft).expand(1, nframes, n_fft), hop)[:, :total]
    start = n_fft // 2 if center else 0
    end = start + int(length) if length is not None else (total - n_fft // 2 if center else total)
    stop = min(end, total)
    out = _parts_map(out, lambda t: t[:, start:stop])
    env = env[:, start:stop]
    low = float(np.abs(env.detach().numpy()).min()) if env.numel() else 1.0
    if low < 1e-11:
        raise Error(f"istft: window overlap add min: {low:g} (below 1e-11)",
                    hint="the window's squared overlap-add must be nonzero everywhere (NOLA): "
                         "e.g. a hann window with hop_length <= n_fft / 2, or center=True")
    out = out / env
    if end > total:
        out = _parts_map(out, lambda t: _pad(t, [0, end - total]))
    return out if self.ndim == 3 else out.squeeze(0)


ComplexTensor.stft = stft
ComplexTensor.istft = istft
