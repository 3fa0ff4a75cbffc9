"""torch.nn.functional's padding modes and resizing: pad (constant, reflect, replicate, circular),
interpolate, pixel_shuffle, grid_sample."""

from __future__ import annotations

__all__: list[str] = []
