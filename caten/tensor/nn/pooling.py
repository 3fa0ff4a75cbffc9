"""torch.nn.functional's pooling beyond 2-D max/avg: 1-D and 3-D, adaptive, lp and fractional-free."""

from __future__ import annotations

__all__: list[str] = []
