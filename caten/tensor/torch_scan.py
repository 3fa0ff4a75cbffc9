"""torch's scans and searches (cummax, cummin, logcumsumexp, searchsorted, bucketize, mode)."""

from __future__ import annotations
