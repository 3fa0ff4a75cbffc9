"""Running one fuzz program: the numpy reference in this process, each target (a runtime, with or
without the bounds-checked mode) in a worker process, so that a crash or a hang in generated
code is a finding and not the end of the run.

Targets write into outputs fenced by guard bytes on both sides (checked after the call), and
their inputs are checked unmodified. Results are compared with the reference: integers and
bools exactly, floats to a tolerance (and NaN where NaN).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from caten.fuzz.types import Prog, infer
from caten.run.isolate import Isolated

GUARD = 64  # bytes on each side of every output (a multiple of 64: alignment is kept)
FILL = 0xA5
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Target:
    runtime: str
    checked: bool

    def __str__(self) -> str:
        return self.runtime + ("+bounds" if self.checked else "")


def parse_targets(text: str) -> list[Target]:
    """`llvm+bounds,c+bounds,llvm` -> targets."""
    out = []
    for t in text.split(","):
        t = t.strip()
        if t:
            out.append(Target(t.removesuffix("+bounds"), t.endswith("+bounds")))
    return out


def make_inputs(prog: Prog, seed: int) -> list[np.ndarray]:
    """The program's call arguments (small values, so that integer and float results stay exact
    where they should; the same arrays for every seed on every machine)."""
    rng = np.random.default_rng(seed)
    env = infer(prog)
    arrays = []
    for name, dt, _ in prog.inputs:
        t = env[name]
        if dt == "bool":
            a = rng.random(t.shape) < 0.5
        elif dt in ("f32", "f64"):
            a = rng.uniform(-3, 3, t.shape).round(3).astype(dt.replace("f", "float"))
        elif dt == "u8":
            a = rng.integers(0, 40, t.shape).astype(np.uint8)
        else:
            a = rng.integers(-20, 20, t.shape).astype({"i8": np.int8, "i32": np.int32, "i64": np.int64}[dt])
        arrays.append(np.ascontiguousarray(a))
    return arrays


def _short(e: BaseException) -> str:
    from caten.errors import Error

    msg = e.message if isinstance(e, Error) else f"{type(e).__name__}: {e}"
    return " ".join(str(msg).split())[:400]


def reference(src: str, entry: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import caten

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = getattr(caten.loads(src, runtime="numpy", use_cache=False), entry)(*arrays)
    return list(got) if isinstance(got, tuple) else [got]


def guarded_call(comp, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Call a compiled composite with outputs fenced by guard bytes; raise AssertionError naming
    the output whose fence was written, or the input that changed."""
    from caten.ir import dims as D
    from caten.run.module import check_shapes

    prog, exe = comp.program(comp._bind_types(arrays))
    env = check_shapes(prog, arrays)
    keep = [a.copy() for a in arrays]
    bases, outs = [], []
    for o in prog.outputs:
        shape = tuple(D.evaluate(d, env) for d in o.shape)
        n = int(np.prod(shape, dtype=np.int64)) * o.dtype.np.itemsize
        base = np.full(n + 2 * GUARD, FILL, np.uint8)
        bases.append((base, n))
        outs.append(base[GUARD:GUARD + n].view(o.dtype.np).reshape(shape))
    exe.run(arrays, outs, env)
    for i, (base, n) in enumerate(bases):
        if (base[:GUARD] != FILL).any() or (base[GUARD + n:] != FILL).any():
            where = "before" if (base[:GUARD] != FILL).any() else "after"
            raise AssertionError(f"guard bytes {where} output {i} were overwritten")
    for i, (a, k) in enumerate(zip(arrays, keep)):
        if a.tobytes() != k.tobytes():
            raise AssertionError(f"input {i} was modified")
    return [o.copy() for o in outs]


def run_target(src: str, entry: str, runtime: str, checked: bool, arrays: list[np.ndarray]) -> tuple:
    """("ok", outputs) | ("error", text) | ("oob", text) | ("guard", text): the target side."""
    import caten

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = caten.loads(src, runtime=runtime, use_cache=False, check_bounds=checked)
            return ("ok", guarded_call(getattr(mod, entry), arrays))
    except AssertionError as e:
        return ("guard", str(e))
    except caten.Error as e:
        return ("oob" if "out-of-bounds" in str(e) else "error", _short(e))
    except Exception as e:  # noqa: BLE001 - any failure of the compiler is a finding
        return ("error", _short(e))


def _resolve(target: str) -> Callable[..., Any]:  # pragma: no cover - runs in the worker
    import importlib

    mod, _, name = target.partition(":")
    return getattr(importlib.import_module(mod), name)


class Worker(Isolated):
    """Targets run in a spawned child process (caten.run.isolate, as `caten test-runtime` runs its
    runtime): a segfault or a hang becomes a "crash" result and a fresh worker. `target`
    ("module:function") is what the worker calls with each message."""

    def __init__(self, target: str = "caten.fuzz.check:run_target") -> None:
        super().__init__(_resolve, (target,), TIMEOUT_S)


def compare(ref: list[np.ndarray], got: list[np.ndarray], f32: bool = True) -> str | None:
    """None when `got` matches the reference, else what differs. `f32`: some value on the way
    was f32, so an f64 result carries f32 rounding too."""
    if len(ref) != len(got):
        return f"{len(got)} outputs, expected {len(ref)}"
    for i, (r, g) in enumerate(zip(ref, got)):
        if r.dtype != g.dtype or r.shape != g.shape:
            return f"output {i}: {g.dtype}{list(g.shape)}, expected {r.dtype}{list(r.shape)}"
        if r.dtype.kind in "f":
            rtol = 1e-9 if r.dtype == np.float64 and not f32 else 2e-3
            scale = float(np.nanmax(np.abs(r[np.isfinite(r)]))) if np.isfinite(r).any() else 1.0
            ok = np.isclose(g, r, rtol=rtol, atol=rtol * max(1.0, scale), equal_nan=True)
        else:
            ok = g == r
        if not np.all(ok):
            j = tuple(int(v) for v in np.argwhere(~np.asarray(ok))[0]) if r.ndim else ()
            return f"output {i} differs at {list(j)}: got {g[j]!r}, expected {r[j]!r} ({int((~ok).sum())} of {r.size})"
    return None


@dataclass
class Outcome:
    """One target's verdict on one program: kind is ok | mismatch | oob | guard | crash | error."""
    target: Target
    kind: str
    detail: str = ""


def check(src: str, entry: str, arrays: list[np.ndarray], targets: list[Target], worker: Worker,
          f32: bool = True) -> list[Outcome]:
    ref = reference(src, entry, arrays)
    out = []
    for t in targets:
        res = worker(src, entry, t.runtime, t.checked, arrays)
        if res[0] == "ok":
            diff = compare(ref, res[1], f32)
            out.append(Outcome(t, "mismatch" if diff else "ok", diff or ""))
        else:
            out.append(Outcome(t, res[0], res[1]))
        if out[-1].kind in ("guard", "error") or out[-1].kind == "mismatch" and not t.checked:
            worker.stop(kill=True)  # unchecked code may have written anywhere: a fresh process next
    return out
