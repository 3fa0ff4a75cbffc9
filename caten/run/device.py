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
from caten.lower.entry import LoopStep
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

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copy nbytes between device buffers, at byte offsets (a loop's state, slices)."""
        raise NotImplementedError


class DeviceExecutable:
    """A device program run through an adapter; one call at a time (the kernels' arguments and
    the cached buffers belong to the executable)."""

    def __init__(self, dp: Any, adapter: Adapter) -> None:
        self.dp, self.adapter = dp, adapter
        self.defines = dict(dp.program.defines)
        self.buffers: dict[str, tuple[Any, int]] = {}  # name -> (device buffer, bytes)
        self.loaded: dict[str, Any] = {}  # kernel name -> the adapter's loaded kernel
        self.subs: dict[int, Any] = {}  # id of a body's device program -> its runner (Body)
        self.record: Any = None  # the bounds-checked mode's error record (a body's: its program's)
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
                bufs[b.name] = self.record = self._buffer(b.name, oob.nbytes)
                ad.copy_in(bufs[b.name], oob)
            else:
                bufs[b.name] = self._buffer(b.name, eval_dim(b.nbytes, env))
        self.last = []
        self._exec(bufs, env)
        for o, buf in outs:
            ad.copy_out(buf, o)
        if oob is not None:
            ad.copy_out(bufs[DEVICE_BUF], oob)
        ad.sync()
        if oob is not None:
            raise_if_failed(oob.ctypes.data, self.dp.bounds, self.dp.program.name)

    def _kernel(self, name: str) -> Any:
        fn = self.loaded.get(name)
        if fn is None:
            fn = self.loaded[name] = self.adapter.kernel(name)
        return fn

    def _exec(self, bufs: dict[str, Any], env: dict[str, int]) -> None:
        """Run the program's steps over bound device buffers: its kernels, and its loops and
        branches (caten.lower.entry), whose trips the host drives (each body's kernels launched
        per trip; a condition read back each trip)."""
        for step, roles in self.dp.steps:
            if roles is None:
                self._launch(step, bufs, env)
            elif isinstance(step, LoopStep):
                self._loop(step, roles, bufs, env)
            else:
                flag = self._read(bufs[step.pred], np.zeros(1, np.bool_))
                sub = self._sub(roles["then" if flag[0] else "else"])
                sub.run_bound(list(step.captures) + list(step.outs), bufs, env, self._buffer)

    def _launch(self, k: Any, bufs: dict[str, Any], env: dict[str, int]) -> None:
        count = eval_dim(k.count, env)
        if count == 0:
            return
        groups = count if k.mode == "groups" else -(-count // k.local)
        args = [bufs[p.name] for p in k.params] + [np.int64(env[d]) for d in k.dims]
        self.last.append((self._kernel(k.name), args, Grid(count, groups, k.local, k.mode)))
        self.adapter.launch(*self.last[-1])

    def _sub(self, dp: Any) -> DeviceExecutable:
        sub = self.subs.get(id(dp))
        if sub is None:
            sub = self.subs[id(dp)] = DeviceExecutable(dp, self.adapter)
            sub.loaded = self.loaded
        sub.record = self.record
        return sub

    def run_bound(self, names: list[str], outer: dict[str, Any], env: dict[str, int], alloc: Any) -> None:
        """Run as a body: its inputs then outputs are the buffers `names` of the enclosing program
        (`outer`, device buffers or (buffer, byte offset) slices), its temporaries its own."""
        ins = [b for b in self.dp.buffers.values() if b.role == "in"]
        outs = [b for b in self.dp.buffers.values() if b.role == "out"]
        bufs: dict[str, Any] = {}
        for b, n in zip(sorted(ins, key=lambda b: b.index) + sorted(outs, key=lambda b: b.index), names):
            bufs[b.name] = outer[n]
        for b in self.dp.buffers.values():
            if b.role == DEVICE_BUF:  # the bounds-checked mode's record: the whole program's one
                bufs[b.name] = self.record
            elif b.role not in ("in", "out"):
                bufs[b.name] = self._buffer(b.name, eval_dim(b.nbytes, env))
        self.last = []
        self._exec(bufs, env)

    def _loop(self, s: LoopStep, roles: dict[str, Any], bufs: dict[str, Any], env: dict[str, int]) -> None:
        ad = self.adapter
        sizes = [eval_dim(n, env) for n in s.sizes]
        for (cur, _), init, n in zip(s.state, s.inits, sizes):
            if n:
                ad.copy(bufs[cur], 0, bufs[init], 0, n)
        start = self._scalar(s.start, bufs, env)
        end = self._scalar(s.end, bufs, env) if s.end is not None else None
        if s.trips is not None:
            last = start + eval_dim(s.trips, env)
            end = last if end is None else min(end, last)
        body, cond = self._sub(roles["body"]), self._sub(roles["cond"]) if "cond" in roles else None
        cur = [bufs[c] for c, _ in s.state]
        nxt = [bufs[n] for _, n in s.state]
        xs = [(bufs[x], eval_dim(n, env)) for x, n in s.xs]
        ys = [(bufs[y], eval_dim(n, env)) for y, n in s.ys]
        xslot = [self._buffer(f"__x{j}_{id(s)}", n) for j, (_, n) in enumerate(xs)]
        yslot = [self._buffer(f"__y{j}_{id(s)}", n) for j, (_, n) in enumerate(ys)]
        caps = [bufs[c] for c in s.captures]
        flag = np.zeros(1, np.bool_)
        i = start
        while end is None or i < end:
            inner = {**env, s.index: i, s.first: int(i == start)}
            if cond is not None:
                cond.run_bound([f"a{j}" for j in range(len(cur) + len(caps))] + ["f"],
                               {**{f"a{j}": b for j, b in enumerate(cur + caps)}, "f": bufs[s.flag]}, inner,
                               self._buffer)
                if not self._read(bufs[s.flag], flag)[0]:
                    break
            pos = i - start if not (s.reverse and s.trips is not None) else eval_dim(s.trips, env) - 1 - (i - start)
            for slot, (x, n) in zip(xslot, xs):
                if n:
                    ad.copy(slot, 0, x, pos * n, n)
            args = cur + caps + xslot + nxt + yslot
            body.run_bound([f"a{j}" for j in range(len(args))], {f"a{j}": b for j, b in enumerate(args)}, inner,
                           self._buffer)
            for slot, (y, n) in zip(yslot, ys):
                if n:
                    ad.copy(y, pos * n, slot, 0, n)
            cur, nxt = nxt, cur
            i += 1
        for c, fin, n in zip(cur, s.finals, sizes):
            if fin is not None and n:
                ad.copy(bufs[fin], 0, c, 0, n)

    def _scalar(self, b: Any, bufs: dict[str, Any], env: dict[str, int]) -> int:
        if not isinstance(b, str):
            return eval_dim(b, env)
        return int(self._read(bufs[b], np.zeros(1, np.int64))[0])

    def _read(self, buf: Any, into: np.ndarray) -> np.ndarray:
        """The first bytes of a device buffer (through a scratch buffer of the executable's: a
        buffer that is a host array's memory copies out only onto that array)."""
        tmp = self._buffer("__read", into.nbytes)
        self.adapter.copy(tmp, 0, buf, 0, into.nbytes)
        self.adapter.copy_out(tmp, into)
        return into
