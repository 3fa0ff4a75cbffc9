"""convolution modules beyond Conv1d/Conv2d: Conv3d, ConvTranspose1d/2d/3d, Fold, Unfold."""

from __future__ import annotations

__all__: list[str] = []
