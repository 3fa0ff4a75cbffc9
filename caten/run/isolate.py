"""Code under test in a spawned child process, so that a segfault or a hang in generated code
becomes a result (and a fresh child) instead of the end of the caller: `caten test-runtime`
and `caten fuzz` both run their runtimes through it.

Spawned, not forked: a forked child of a process that has started a device runtime (PoCL's
threads, a CUDA context) hangs on its first call.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any


def serve(conn: Any, setup: Callable[..., Callable[..., Any]], setup_args: tuple) -> None:  # pragma: no cover
    """The child's loop: `setup(*setup_args)` gives the handler; each message is its arguments."""
    handler = setup(*setup_args)
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        conn.send(handler(*msg))


class Isolated:
    """A child process running `setup(*setup_args)`'s handler on each call. A call answers the
    handler's reply, or ("crash", why) when the child died or took longer than `timeout_s`."""

    def __init__(self, setup: Callable[..., Callable[..., Any]], setup_args: tuple = (),
                 timeout_s: float = 60.0) -> None:
        self.setup, self.setup_args, self.timeout_s = setup, setup_args, timeout_s
        self.proc: Any = None

    def _start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, self.setup, self.setup_args), daemon=True)
        self.proc.start()
        child.close()
        # a child that cannot even start is the caller's failure, never a result about its input
        try:
            if self.conn.poll(self.timeout_s) and self.conn.recv() == "ready":
                return
        except (EOFError, OSError):
            pass
        self.stop(kill=True)
        raise RuntimeError("the isolated worker process did not start (it needs an importable __main__)")

    def __call__(self, *msg: Any) -> Any:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        try:
            self.conn.send(msg)
            if not self.conn.poll(self.timeout_s):
                self.stop(kill=True)
                return ("crash", f"timed out after {self.timeout_s:g} s")
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.proc = None
            return ("crash", f"crashed with {signal.Signals(-code).name}" if code and code < 0 else f"exited ({code})")

    def stop(self, kill: bool = False) -> None:
        if self.proc is None or self.proc.pid is None:
            self.proc = None
            return
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        self.proc = None
