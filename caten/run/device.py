"""The host side of a device program, written once for every device runtime.

A device runtime (OpenCL, CUDA) renders a `DeviceProgram` (caten.render.cstyle): kernels, the
buffers they use with sizes as expressions of the dims, the launch order. Running one is the
same everywhere: bind the dims, get a device buffer per buffer (cached per executable, grown
when a call needs more), copy the inputs in, launch the kernels in order with their grids, copy
the outputs back, read the bounds-checked mode's error record. Only five things differ between
devices, and an `Adapter` supplies them: alloc, copy_in, copy_out, launch, sync (plus optional
hooks: loading a kernel, freeing, zero-copy host buffers, a per-call entry).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from caten.errors import Error
from caten.ir.oob import DEVICE_BUF, raise_if_failed
from caten.render.cstyle import eval_dim


@dataclass(frozen=True)
class Grid:
    """One launch: `count` grid iterations (work-items, or work-groups when mode is "groups")
    over `groups` work-groups of `local` work-items."""
    count: int
    groups: int
    local: int
    mode: str  # "items" | "groups" (caten.render.cstyle.DeviceKernel)


class Adapter:
    """What a device runtime implements to run device programs: the five operations, the
    loading of a kernel, and optional hooks whose defaults do nothing."""

    def alloc(self, nbytes: int) -> Any:
        """A device buffer of at least nbytes (> 0) bytes."""
        raise NotImplementedError

    def copy_in(self, buf: Any, array: np.ndarray) -> None:
        """Copy a contiguous host array into the start of buf."""
        raise NotImplementedError

    def copy_out(self, buf: Any, array: np.ndarray) -> None:
        """Copy the start of buf into a contiguous host array (ordered after every launch)."""
        raise NotImplementedError

    def launch(self, kernel: Any, args: Sequence[Any], grid: Grid) -> None:
        """Enqueue kernel with its arguments: buffers, then the dims as np.int64."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait until everything enqueued has finished."""
        raise NotImplementedError

    def kernel(self, name: str) -> Any:
        """The loaded kernel `name` (called once per kernel, at the first run)."""
        raise NotImplementedError

    def free(self, buf: Any) -> None:
        """Release a buffer the executable outgrew (default: the garbage collector does)."""

    def begin(self) -> None:
        """Called at the start of every run (e.g. make the device context current)."""

    def host_buffer(self, array: np.ndarray, writable: bool) -> Any | None:
        """A device buffer that is `array`'s own memory (a CPU device), or None to copy."""
        return None


class DeviceExecutable:
    """A device program run through an adapter; one call at a time (the kernels' arguments and
    the cached buffers belong to the executable)."""

    def __init__(self, dp: Any, adapter: Adapter) -> None:
        self.dp, self.adapter = dp, adapter
        self.defines = dict(dp.program.defines)
        self.buffers: dict[str, tuple[Any, int]] = {}  # name -> (device buffer, bytes)
        self.kernels: list[tuple[Any, Any]] | None = None  # (DeviceKernel, loaded kernel)
        self.last: list[tuple[Any, list, Grid]] = []  # the last run's launches (`replay`)
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        with self._lock:
            self._run(inputs, outputs, env)

    def replay(self) -> None:
        """Enqueue the last run's launches again over its device buffers, without copies or a
        wait: the device work alone, for timing it between device events (benchmarks/bench_cuda.py)."""
        with self._lock:
            self.adapter.begin()
            for launch in self.last:
                self.adapter.launch(*launch)

    def _buffer(self, name: str, nbytes: int) -> Any:
        """The cached buffer `name`, reallocated when too small (at least one byte: devices
        refuse empty buffers)."""
        hit = self.buffers.get(name)
        if hit is None or hit[1] < nbytes:
            if hit is not None:
                self.adapter.free(hit[0])
            hit = self.buffers[name] = (self.adapter.alloc(max(nbytes, 1)), max(nbytes, 1))
        return hit[0]

    def _host(self, name: str, a: np.ndarray, writable: bool) -> tuple[Any, bool]:
        """A buffer for host array `a` and whether it is `a` itself (the adapter's optional
        `host_buffer`, where the device shares host memory), else the cached device buffer."""
        if a.nbytes:
            buf = self.adapter.host_buffer(a, writable)
            if buf is not None:
                return buf, True
        return self._buffer(name, a.nbytes), False

    def _run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        ad = self.adapter
        ad.begin()
        if self.kernels is None:
            self.kernels = [(k, ad.kernel(k.name)) for k in self.dp.kernels]
        env = {**self.defines, **env}
        bufs: dict[str, Any] = {}
        keep: list[np.ndarray] = []  # host arrays a buffer may point into, alive until the end
        outs: list[tuple[np.ndarray, Any]] = []
        oob = None
        for b in self.dp.buffers.values():
            if b.role == "in":
                a = np.ascontiguousarray(inputs[b.index])
                keep.append(a)
                bufs[b.name], shared = self._host(b.name, a, False)
                if a.nbytes and not shared:
                    ad.copy_in(bufs[b.name], a)
            elif b.role == "out":
                o = outputs[b.index]
                if not o.flags.c_contiguous:
                    raise Error(f"{type(ad).__name__}: outputs must be C-contiguous")
                bufs[b.name], _ = self._host(b.name, o, True)
                if o.nbytes:
                    outs.append((o, bufs[b.name]))
            elif b.role == DEVICE_BUF:  # the bounds-checked mode's error record, cleared each call
                oob = np.zeros(eval_dim(b.elems, env), np.int64)
                bufs[b.name] = self._buffer(b.name, oob.nbytes)
                ad.copy_in(bufs[b.name], oob)
            else:
                bufs[b.name] = self._buffer(b.name, eval_dim(b.nbytes, env))
        dims: dict[str, np.int64] = {}
        self.last = []
        for k, fn in self.kernels:
            count = eval_dim(k.count, env)
            if count == 0:
                continue
            groups = count if k.mode == "groups" else -(-count // k.local)
            for d in k.dims:
                dims.setdefault(d, np.int64(env[d]))
            self.last.append((fn, [bufs[p.name] for p in k.params] + [dims[d] for d in k.dims],
                              Grid(count, groups, k.local, k.mode)))
            ad.launch(*self.last[-1])
        for o, buf in outs:
            ad.copy_out(buf, o)
        if oob is not None:
            ad.copy_out(bufs[DEVICE_BUF], oob)
        ad.sync()
        if oob is not None:
            raise_if_failed(oob.ctypes.data, self.dp.bounds, self.dp.program.name)
