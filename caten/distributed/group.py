"""The process group: torch.distributed's default group, started here from torchrun's environment
or by the user (`torch.distributed.init_process_group`); caten only reads it."""

from __future__ import annotations

import atexit
import datetime
import os
import socket
from typing import Any

from caten.errors import Error
from caten.ir import collective


def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        raise Error("caten.distributed needs torch (torch.distributed runs the collectives)",
                    hint="pip install torch") from None
    if not dist.is_available():
        raise Error("this torch build has no torch.distributed", hint="install a torch build with distributed support")
    return dist


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now (for a group started on one machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init(backend: str | None = None, timeout: float = 300.0, rank: int | None = None, world_size: int | None = None,
         master_addr: str | None = None, master_port: int | None = None) -> None:
    """Start the default process group from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT; the arguments override it): gloo on CPU unless `backend` says otherwise. `timeout`
    (seconds) bounds every collective: a rank that dies or stalls makes the others raise
    caten.Error by then. Without torchrun's environment this is a group of one. A second call
    with a group already started does nothing."""
    dist = _dist()
    if dist.is_initialized():
        return
    env = os.environ
    r = int(env.get("RANK", "0")) if rank is None else int(rank)
    w = int(env.get("WORLD_SIZE", "1")) if world_size is None else int(world_size)
    if not 0 <= r < w:
        raise Error(f"rank {r} is not in a group of {w} processes", hint="RANK counts from 0 to WORLD_SIZE - 1")
    addr = master_addr or env.get("MASTER_ADDR", "127.0.0.1")
    port = master_port or env.get("MASTER_PORT")
    if port is None:
        if w > 1:
            raise Error("MASTER_PORT is not set: the processes cannot find each other",
                        hint="launch with torchrun --nproc-per-node N, or pass master_port= to every process")
        port = free_port()
    try:
        dist.init_process_group(backend or "gloo", init_method=f"tcp://{addr}:{port}", rank=r, world_size=w,
                                timeout=datetime.timedelta(seconds=timeout))
    except Exception as e:  # DistNetworkError, RuntimeError, ValueError
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Error(f"starting the process group (rank {r} of {w}, {addr}:{port}) failed: {first[:300]}",
                    hint="every process must start within the timeout with the same MASTER_ADDR and MASTER_PORT") from e
    # a group left to the interpreter's teardown can abort the process ("terminate called without an
    # active exception": gloo's threads destroyed while joinable), so the group caten started ends first
    atexit.register(shutdown)


def shutdown() -> None:
    """End the default process group (torch.distributed.destroy_process_group), if there is one."""
    dist = collective.group()
    if dist is not None:
        dist.destroy_process_group()


def is_initialized() -> bool:
    return collective.group() is not None


def rank() -> int:
    """This process's rank in the group (0 without one)."""
    return collective.rank()


def world_size() -> int:
    """The number of processes in the group (1 without one)."""
    return collective.world_size()
