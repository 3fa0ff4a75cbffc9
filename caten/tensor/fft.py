"""torch.fft on caten.Tensor: each transform is a call of the library's composites in ops/fft.lisp
(`fft`, `rfft`, `irfft`, a mixed-radix Cooley-Tukey FFT over planar complex pairs), so its values
and gradients come from the language, on every runtime. The n-d transforms repeat the 1-d ones
along each dim; the helpers (fftfreq, fftshift) are plain Tensor arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from caten.errors import Error
from caten.tensor.complex import ComplexTensor, as_complex
from caten.tensor.tensor import Tensor, apply

NORMS = {None: 0, "backward": 0, "ortho": 0.5, "forward": 1}

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2", "rfftn",
           "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _norm(norm: str | None, name: str) -> float:
    if norm not in NORMS:
        raise Error(f'{name}: invalid normalization mode "{norm}"', hint='norm is "backward", "ortho" or "forward"')
    return NORMS[norm]


def _float(t: Tensor, name: str) -> Tensor:
    if t.dtype in ("f16", "bf16"):
        raise Error(f"{name}: unsupported dtype {t.dtype}", hint="torch's CPU FFT takes float32 and float64 too")
    return t if t.dtype in ("f32", "f64") else t.float()


def _complex_in(x: Any, name: str) -> ComplexTensor:
    if isinstance(x, ComplexTensor):
        return x
    if not isinstance(x, Tensor):
        raise Error(f"{name}: expected a tensor, got {type(x).__name__}")
    return as_complex(_float(x, name))


def _dim(x: Any, dim: int, name: str) -> int:
    r = len(x.shape)
    if r == 0:
        raise Error(f"{name}: a 0-d tensor has no dim to transform", hint="reshape it to [1] first")
    if not -r <= dim < r:
        raise Error(f"{name}: dim {dim} is out of range for a tensor of rank {r}")
    return dim % r


def _n(n: int | None, size: int, name: str) -> int:
    m = size if n is None else int(n)
    if m < 1:
        raise Error(f"{name}: invalid number of data points ({m}) specified")
    return m


def _c2c(x: Any, n: int | None, dim: int, norm: str | None, inverse: bool, name: str) -> ComplexTensor:
    z = _complex_in(x, name)
    d = _dim(z, dim, name)
    m = _n(n, z.shape[d], name)
    re, im = apply("fft", [z.real, z.imag], {"axis": d, "n": m, "norm-exp": _norm(norm, name), "inverse": inverse})
    return ComplexTensor(re, im)


def fft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    """torch.fft.fft: the DFT along dim (a real input's imaginary part is 0)."""
    return _c2c(input, n, dim, norm, False, "fft")


def ifft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    return _c2c(input, n, dim, norm, True, "ifft")


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    """torch.fft.rfft: the n // 2 + 1 non-negative frequencies of a real signal's DFT."""
    if isinstance(input, ComplexTensor):
        raise Error("rfft expects a real input tensor, but got a complex one", hint="use caten.fft.fft")
    x = _float(input, "rfft")
    d = _dim(x, dim, "rfft")
    m = _n(n, x.shape[d], "rfft")
    re, im = apply("rfft", [x], {"axis": d, "n": m, "norm-exp": _norm(norm, "rfft")})
    return ComplexTensor(re, im)


def irfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """torch.fft.irfft: the real signal of length n (default 2 (m - 1)) of a onesided spectrum."""
    z = _complex_in(input, "irfft")
    d = _dim(z, dim, "irfft")
    m = _n(n, 2 * (z.shape[d] - 1), "irfft")
    return apply("irfft", [z.real, z.imag], {"axis": d, "n": m, "norm-exp": _norm(norm, "irfft")})


def hfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """torch.fft.hfft: irfft of the conjugate with the opposite normalization."""
    z = _complex_in(input, "hfft")
    d = _dim(z, dim, "hfft")
    m = _n(n, 2 * (z.shape[d] - 1), "hfft")
    p = 1 - _norm(norm, "hfft")
    return apply("irfft", [z.real, -z.imag], {"axis": d, "n": m, "norm-exp": p})


def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:
    """torch.fft.ihfft: the conjugate of rfft with the opposite normalization."""
    x = _float(input, "ihfft")
    d = _dim(x, dim, "ihfft")
    m = _n(n, x.shape[d], "ihfft")
    re, im = apply("rfft", [x], {"axis": d, "n": m, "norm-exp": 1 - _norm(norm, "ihfft")})
    return ComplexTensor(re, -im)


def _dims(x: Any, s: Sequence[int] | None, dim: Any, default_all: bool, name: str) -> tuple[list, list[int]]:
    r = len(x.shape)
    if dim is None:
        dims = list(range(r - len(s), r)) if s is not None else (list(range(r)) if default_all else [r - 2, r - 1])
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
    dims = [_dim(x, d, name) for d in dims]
    if len(set(dims)) != len(dims):
        raise Error(f"{name}: dims must be unique, got {dims}")
    sizes = [None] * len(dims) if s is None else list(s)
    if len(sizes) != len(dims):
        raise Error(f"{name}: s has {len(sizes)} sizes for {len(dims)} dims")
    return sizes, dims


def fftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    sizes, dims = _dims(input, s, dim, True, "fftn")
    z = _complex_in(input, "fftn")
    for m, d in zip(sizes, dims):
        z = _c2c(z, m, d, norm, False, "fftn")
    return z


def ifftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    sizes, dims = _dims(input, s, dim, True, "ifftn")
    z = _complex_in(input, "ifftn")
    for m, d in zip(sizes, dims):
        z = _c2c(z, m, d, norm, True, "ifftn")
    return z


def fft2(input: Any, s: Sequence[int] | None = None, dim: Sequence[int] = (-2, -1),
         norm: str | None = None) -> ComplexTensor:
    return fftn(input, s, dim, norm)


def ifft2(input: Any, s: Sequence[int] | None = None, dim: Sequence[int] = (-2, -1),
          norm: str | None = None) -> ComplexTensor:
    return ifftn(input, s, dim, norm)


def rfftn(input: Tensor, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> ComplexTensor:
    """rfft along the last of dims, then fft along the others."""
    sizes, dims = _dims(input, s, dim, True, "rfftn")
    z = rfft(input, sizes[-1], dims[-1], norm)
    for m, d in zip(sizes[:-1], dims[:-1]):
        z = _c2c(z, m, d, norm, False, "rfftn")
    return z


def irfftn(input: Any, s: Sequence[int] | None = None, dim: Any = None, norm: str | None = None) -> Tensor:
    """ifft along all but the last of dims, then irfft along the last."""
    sizes, dims = _dims(input, s, dim, True, "irfftn")
    z = _complex_in(input, "irfftn")
    for m, d in zip(sizes[:-1], dims[:-1]):
        z = _c2c(z, m, d, norm, True, "irfftn")
    return irfft(z, sizes[-1], dims[-1], norm)


def rfft2(input: Tensor, s: Sequence[int] | None = None, dim: Sequence[int] = (-2, -1),
          norm: str | None = None) -> ComplexTensor:
    return rfftn(input, s, dim, norm)


def irfft2(input: Any, s: Sequence[int] | None = None, dim: Sequence[int] = (-2, -1),
           norm: str | None = None) -> Tensor:
    return irfftn(input, s, dim, norm)


def _freq_dtype(dtype: Any) -> np.dtype:
    from caten.tensor.torchnames import DTYPES

    name = None if dtype is None else str(dtype).replace("caten.", "").replace("torch.", "")
    dt = {"f32": np.float32, "f64": np.float64}.get(DTYPES.get(name, name) if name else "f32")
    if dt is None:
        raise Error(f"fftfreq: dtype {dtype} is not a float dtype caten's FFT has", hint="float32 or float64")
    return np.dtype(dt)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, requires_grad: bool = False,
            runtime: str | None = None) -> Tensor:
    """torch.fft.fftfreq: [0, 1, ..., n//2 - 1... -n//2 ...] / (d n), computed in f64 then rounded."""
    k = np.fft.fftfreq(int(n), float(d))
    return Tensor(k.astype(_freq_dtype(dtype)), requires_grad=requires_grad, runtime=runtime)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, requires_grad: bool = False,
             runtime: str | None = None) -> Tensor:
    k = np.fft.rfftfreq(int(n), float(d))
    return Tensor(k.astype(_freq_dtype(dtype)), requires_grad=requires_grad, runtime=runtime)


def _shift(x: Any, dim: Any, inverse: bool) -> Any:
    dims = list(range(len(x.shape))) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    shifts = [-(x.shape[d] // 2) if inverse else x.shape[d] // 2 for d in dims]
    return x.roll(shifts, dims)


def fftshift(input: Any, dim: Any = None) -> Any:
    """torch.fft.fftshift: roll each dim by size // 2 (the zero frequency to the centre)."""
    return _shift(input, dim, False)


def ifftshift(input: Any, dim: Any = None) -> Any:
    """torch.fft.ifftshift: fftshift undone (roll by -(size // 2))."""
    return _shift(input, dim, True)
