"""torch's elementwise math beyond the core ops (rounding, copysign, atan2, shifts...), each from a
composite of ops/*.lisp."""

from __future__ import annotations
