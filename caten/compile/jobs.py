"""Compile units to objects on several cores, each object cached by its unit's content.

llvmlite serializes the calls of a process, so the other cores work in worker processes
(`caten.compile.llvmobj` serving over a pipe), started on first use and kept for the process's
life (they exit when it does: their stdin closes). The calling thread compiles too, pulling the
largest unit left from the same queue, so a slow or missing worker only costs speed; a unit a
worker fails on is compiled again here, where its error is raised as it would be without them.
CATEN_COMPILE_JOBS sets how many processes compile (1: this one alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence

from caten.cache.store import Cache, key_of
from caten.compile import llvmobj

MAX_WORKERS = 3  # each holds an LLVM (~50 MB); a module rarely has more big units than this
_lock = threading.Lock()
_workers: list[_Worker] = []


class _Worker:
    """One worker process and its pipe."""

    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "caten.compile.llvmobj"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.busy = threading.Lock()  # one request at a time on its pipe
        self.owner = os.getpid()  # a forked child must not talk on its parent's pipes

    def compile(self, text: str, cpu: str, features: str, opt: int, light: bool, pic: bool = False) -> bytes | None:
        """The object, or None where the worker failed (it is dropped if it died)."""
        body = text.encode()
        req = json.dumps({"cpu": cpu, "features": features, "opt": opt, "light": light, "pic": pic,
                          "size": len(body)})
        try:
            self.proc.stdin.write(req.encode() + b"\n" + body)
            self.proc.stdin.flush()
            status, n = self.proc.stdout.readline().split()
            data = self.proc.stdout.read(int(n))
        except (OSError, ValueError):
            self.close()
            return None
        return data if status == b"ok" and len(data) == int(n) else None

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass


def processes(cores: int) -> int:
    """How many processes compile: CATEN_COMPILE_JOBS, else `cores`."""
    env = os.environ.get("CATEN_COMPILE_JOBS", "").strip()
    return max(1, int(env)) if env.isdigit() else cores


def warm_up(cores: int) -> None:
    """Start the workers for `cores` now (a worker takes ~0.1 s to import LLVM: started while
    the caller renders, it is ready when the units are)."""
    want = min(MAX_WORKERS, processes(cores) - 1) if sys.executable else 0  # (an embedded Python: no workers)
    with _lock:
        _workers[:] = [w for w in _workers if w.alive()]
        while len(_workers) < want:
            _workers.append(_Worker())


def compile_units(units: Sequence, cpu: str, features: str, opt: int, store: Cache | None,
                  toolchain: str, cores: int, pic: bool = False) -> list[bytes]:
    """Objects of `units` (caten.render.llvm.units.Unit) in their order: from the cache where it
    has them, the rest compiled here and on the workers, largest first; `pic`: for a shared
    library (llvmobj.compile_object)."""
    keys = [key_of("llvm-unit", u.key, cpu, features, str(opt), toolchain, llvmobj.settings_key(),
                   *(["pic"] if pic else [])) for u in units]
    objs: list[bytes | None] = [store.get(k, "llvmunit") if store else None for k in keys]
    todo = sorted((i for i, o in enumerate(objs) if o is None), key=lambda i: -len(units[i].text))
    fresh = list(todo)
    queue_lock = threading.Lock()

    def take() -> int | None:
        with queue_lock:
            return todo.pop(0) if todo else None

    def remote(w: _Worker) -> None:
        if not w.busy.acquire(blocking=False):
            return  # another thread's compile has this worker
        try:
            while (i := take()) is not None:
                o = w.compile(units[i].text, cpu, features, opt, units[i].light, pic)
                if o is None:  # compiled again by the calling thread, for its diagnostic
                    with queue_lock:
                        todo.append(i)
                    return
                objs[i] = o
        finally:
            w.busy.release()

    feeders = []
    if len(todo) > 1:
        warm_up(cores)
        with _lock:
            workers = [w for w in _workers if w.alive()]
        feeders = [threading.Thread(target=remote, args=(w,), daemon=True) for w in workers]
        for f in feeders:
            f.start()
    while (i := take()) is not None:
        objs[i] = llvmobj.compile_object(units[i].text, cpu, features, opt, units[i].light, pic)
    for f in feeders:
        f.join()
    while (i := take()) is not None:  # units a worker gave back after the queue ran dry here
        objs[i] = llvmobj.compile_object(units[i].text, cpu, features, opt, units[i].light, pic)
    if store:
        for i in fresh:
            store.put(keys[i], "llvmunit", objs[i])
    return objs  # type: ignore[return-value]
