"""torch's indexed stores: scatter, scatter_add, scatter_reduce, index_add, index_put and item assignment."""

from __future__ import annotations
