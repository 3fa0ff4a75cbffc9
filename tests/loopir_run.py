"""Run lowered kernels (loop IR) in Python, on top of caten.lower.evaluate: a test oracle for
passes over whole kernels, such as decompose. Static shapes only (dims come from `env`).

A loop whose body is only stores to buffers it does not also read runs as one vectorized
step (its iterations are independent); any other loop runs iteration by iteration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from caten import loopir as L
from caten.lower.evaluate import evaluate


def _loads(x: L.X, out: set[str]) -> None:
    out.update(e.arg for e in L.nodes(x) if e.op == "load")


def _vectorizable(s: L.Loop) -> bool:
    if not all(isinstance(b, L.Store) for b in s.body):
        return False
    reads: set[str] = set()
    for b in s.body:
        _loads(b.idx, reads)
        _loads(b.value, reads)
    return not reads & {b.buf for b in s.body}


def _stmts(body: Sequence, env: dict, bufs: dict[str, np.ndarray]) -> None:
    for s in body:
        if isinstance(s, (L.TileMM, L.MacroMM)):
            _stmts(s.expand(), env, bufs)
        elif isinstance(s, L.Loop):
            n = int(evaluate(s.extent, env, bufs))
            if _vectorizable(s):
                _stmts(s.body, {**env, s.var: np.arange(n, dtype=np.int64)}, bufs)
                continue
            for i in range(n):
                env[s.var] = np.int64(i)
                _stmts(s.body, env, bufs)
        elif isinstance(s, L.Store):
            idx, val = evaluate(s.idx, env, bufs), evaluate(s.value, env, bufs)
            bufs[s.buf][idx] = val
        elif isinstance(s, L.Acc):
            env[s.var] = evaluate(s.init, env, bufs)
        elif isinstance(s, L.SetAcc):
            env[s.var] = evaluate(s.value, env, bufs)
        else:
            raise TypeError(f"cannot run {type(s).__name__}")


def run(kernels: Sequence[L.Kernel], plan, inputs: Sequence[np.ndarray], out_shapes: Sequence[tuple],
        env: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """The program's outputs: the plan's kernel calls in order over fresh buffers."""
    bufs = {name: np.ascontiguousarray(a, dtype=dt.np).reshape(-1) for (name, dt), a in zip(plan.inputs, inputs)}
    for (name, dt), shape in zip(plan.outputs, out_shapes):
        bufs[name] = np.zeros(int(np.prod(shape, dtype=np.int64)), dt.np)
    for name, dt, _ in plan.temps:
        bufs[name] = np.zeros(int(plan.arena_size) // dt.itemsize + 1, dt.np)
    by_name = {k.name: k for k in kernels}
    for kname, _, _ in plan.calls:
        _stmts(by_name[kname].body, dict(env or {}), bufs)
    return [bufs[name].reshape(shape) for (name, _), shape in zip(plan.outputs, out_shapes)]
