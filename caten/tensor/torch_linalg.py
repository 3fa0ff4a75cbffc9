"""torch's linear-algebra and combinatoric names (einsum, cross, kron, baddbmm, cdist, meshgrid...)."""

from __future__ import annotations
