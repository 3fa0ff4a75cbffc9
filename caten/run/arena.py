"""Scratch memory for compiled programs: one 64-byte-aligned arena per calling thread.

An executable's kernels keep their intermediates in an arena that is allocated once and
reused across calls (touching fresh pages costs more than many kernels). Each Python thread
gets its own, so two threads may call the same compiled composite at the same time."""

from __future__ import annotations

import threading

import numpy as np


class Arenas:
    def __init__(self) -> None:
        self._local = threading.local()

    def pointer(self, size: int) -> int:
        """The address of at least `size` bytes, 64-byte aligned, owned by the calling thread."""
        buf = getattr(self._local, "buf", None)
        if buf is None or size + 64 > buf.size:
            buf = self._local.buf = np.empty(size + 128, np.uint8)
            self._local.ptr = buf.ctypes.data + (-buf.ctypes.data) % 64
        return self._local.ptr
