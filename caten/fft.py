"""`caten.fft`: torch.fft's names (fft, ifft, rfft, irfft, the 2-d and n-d forms, hfft/ihfft,
fftfreq, rfftfreq, fftshift, ifftshift) on caten.Tensor; see caten/tensor/fft.py and docs/fft.md."""

from caten.tensor.fft import *  # noqa: F403
from caten.tensor.fft import __all__  # noqa: F401
