"""pooling, padding and resizing modules: MaxPool1d/3d, AvgPool1d/3d, adaptive pools, padding layers,
Upsample, PixelShuffle."""

from __future__ import annotations

__all__: list[str] = []
