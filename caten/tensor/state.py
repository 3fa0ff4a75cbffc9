"""Process-wide Tensor state: whether gradients are recorded, the active trace, the default
runtime, and the random seed stream (a counter, so each draw gets a fresh seed without a
recompile: the seed is an input of the program, not a literal in its text)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

GRAD = [True]
TRACES: list[Any] = []  # the innermost active trace last
RUNTIME = ["llvm"]
SEED = [0]


def grad_enabled() -> bool:
    return GRAD[-1]


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within it, operations record no gradient (as torch.no_grad)."""
    GRAD.append(False)
    try:
        yield
    finally:
        GRAD.pop()


@contextlib.contextmanager
def enable_grad() -> Iterator[None]:
    GRAD.append(True)
    try:
        yield
    finally:
        GRAD.pop()


@contextlib.contextmanager
def set_grad_enabled(mode: bool) -> Iterator[None]:
    """torch.set_grad_enabled(mode) as a context manager."""
    GRAD.append(bool(mode))
    try:
        yield
    finally:
        GRAD.pop()


def trace() -> Any:
    """The trace being recorded, or None."""
    return TRACES[-1] if TRACES else None


def manual_seed(seed: int) -> None:
    """Restart the seed stream of `rand`, `randn` and `dropout` (as torch.manual_seed)."""
    SEED[0] = int(seed)
    _NP_RNG.clear()


def set_default_runtime(name: str) -> None:
    RUNTIME[0] = name


_NP_RNG: list[Any] = []


def np_rng() -> Any:
    """The numpy generator parameter initialisations draw from (reseeded by manual_seed)."""
    if not _NP_RNG:
        import numpy as np

        _NP_RNG.append(np.random.default_rng(SEED[0]))
    return _NP_RNG[0]
