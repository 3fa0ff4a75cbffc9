"""Run the cases on one runtime and compare with the numpy reference.

For each row the variants become one source: a composite per variant and `all`, which
returns every variant's outputs, so that one compile per (row, dtype) covers every layout.
The reference is the numpy runtime at -O0 on the same source; the runtime under test
compiles at its default level. Each compiled case is called at three sizes (the dynamic
dims). Runtimes other than numpy run in a forked child, so a crash or hang becomes a FAIL
cell instead of the end of the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.conformance import cases as C
from caten.conformance.values import EDGES, EDGES_NO_HUGE, EDGES_PRODUCT, NEAR_ONE, ORDINARY, compare, generate, seed_of
from caten.errors import Error
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.graph import toposort
from caten.ir.ops import TRANSCENDENTAL, Op
from caten.plugin import Runtime
from caten.run.isolate import Isolated

RUN_TIMEOUT_S = 60.0


@dataclass
class Cell:
    op: str
    dtype: str
    status: str  # pass | fail | unsupported | compile-only
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    reason: str = ""

    def json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not np.isfinite(x) else float(x)

        return {"op": self.op, "dtype": self.dtype, "status": self.status,
                "max_abs_err": num(self.max_abs_err), "max_rel_err": num(self.max_rel_err)}


@dataclass
class Result:
    runtime: str
    device: str
    rows: list[C.Row]
    cells: list[Cell] = field(default_factory=list)
    seconds: float = 0.0
    grads: list[Any] = field(default_factory=list)  # gradrun.GradCell, one per differentiable row and dtype
    grad_rows: list[Any] = field(default_factory=list)  # gradcases.GradRow, every row's derivation

    def counts(self, grads: bool = False) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "unsupported": 0, "compile-only": 0}
        for c in self.grads if grads else self.cells:
            out[c.status] += 1
        return out

    def summary(self, grads: bool = False) -> str:
        n = self.counts(grads)
        s = f"{n['pass']} passed, {n['fail']} failed, {n['unsupported']} unsupported"
        return s + (f", {n['compile-only']} compile-only" if n["compile-only"] else "")


def precision(nodes: list) -> DType | None:
    """The least precise float dtype an output's graph computes in (its ULPs are the unit)."""
    fl = [n.dtype for n in toposort(nodes) if n.dtype.is_float]
    if not fl:
        return None
    from caten.conformance.values import finfo

    return max(fl, key=lambda d: float(finfo(d).eps))


def graph_kind(nodes: list) -> str:
    """The tolerance class of an output's graph: reduce > math > basic."""
    ops = {n.op for n in toposort(nodes)}
    if any(n.op is Op.REDUCE and n.dtype.is_float for n in toposort(nodes)):
        return "reduce"
    if ops & TRANSCENDENTAL:  # polynomial math: the op table's cost class
        return "math"
    return "basic"


def unsupported(rt: Runtime, nodes: list) -> list[str]:
    bad = []
    for n in toposort(nodes):
        for d in dict.fromkeys([n.dtype, *(s.dtype for s in n.src)]):
            if not rt.supports(n.op, d):
                bad.append(f"{n.op.value} on {d.name}")
    return list(dict.fromkeys(bad))


def _short(e: BaseException) -> str:
    msg = e.message if isinstance(e, Error) else str(e)
    msg = " ".join(str(msg).split())
    return f"{type(e).__name__}: {msg[:300]}" if not isinstance(e, Error) else msg[:300]


_TARGET_MODS: dict[str, Any] = {}


def target_case(rt_name: str, opt: int, src: str, dt_name: str, compile_only: bool,
                calls: list[list[np.ndarray]], _mods: dict | None = None) -> tuple:
    """The runtime-under-test side of one case: elaborate, check `supports`, compile, run.
    Returns ("unsupported", reasons) | ("fail", why) | ("compiled",) | ("ran", [outputs or error text])."""
    import caten
    from caten import plugin as R

    rt = R.get(rt_name)
    _mods = _TARGET_MODS if _mods is None else _mods
    try:
        mod = _mods.get(src)
        if mod is None:
            if len(_mods) > 64:
                _mods.clear()
            # no disk cache: a thousand one-off cases would only evict the user's entries
            mod = _mods[src] = caten.loads(src, runtime=rt_name, opt_level=opt, use_cache=False)
        types = {"T": T.lookup(dt_name)}
        prog = mod.all.elaborate(dict(types))
    except Exception as e:  # noqa: BLE001
        return ("fail", f"elaboration failed: {_short(e)}")
    bad = unsupported(rt, prog.nodes)
    if bad:
        return ("unsupported", bad)
    try:
        mod.all.program(dict(types))
    except Exception as e:  # noqa: BLE001
        return ("fail", f"compile failed: {_short(e)}")
    if compile_only:
        return ("compiled",)
    outs: list = []
    for args in calls:
        try:
            got = mod.all(*args)
        except Exception as e:  # noqa: BLE001
            outs.append(_short(e))
            break
        outs.append(got if isinstance(got, tuple) else (got,))
    return ("ran", outs)


def _runtime_worker(plugin_paths: list[str]) -> Callable[..., tuple]:  # pragma: no cover - in the worker
    from caten import plugin as R

    for path in plugin_paths:
        R.load_plugin(path)

    def handle(*msg: Any) -> tuple:
        try:
            return target_case(*msg)
        except Exception as e:  # noqa: BLE001
            return ("fail", f"the runtime failed: {_short(e)}")
    return handle


class Worker:
    """The runtime under test in a child process (caten.run.isolate): a crash or a hang there
    becomes a FAIL cell (and a fresh worker), not the end of the report."""

    def __init__(self, plugins: list[str]):
        self.plugins = plugins
        self.iso = Isolated(_runtime_worker, (plugins,), RUN_TIMEOUT_S)

    def __call__(self, *msg: Any) -> tuple:
        reply = self.iso(*msg)
        if reply[0] == "crash":
            why = reply[1]
            return ("fail", why if why.startswith("timed out") else f"the runtime {why}")
        return reply

    def stop(self, kill: bool = False) -> None:
        self.iso.stop(kill)


class RowRunner:
    """The modules of one row: reference and runtime under test, per subset of variants."""

    def __init__(self, row: C.Row, rt: Runtime, opt_level: int = 2):
        import caten

        self.row, self.rt, self.opt = row, rt, opt_level
        self.variants = row.variants or []
        self.tag = {id(v): str(i) for i, v in enumerate(self.variants)}
        self._caten = caten
        self._mods: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.full = self.modules(self.variants)

    def modules(self, variants: list[C.Variant]) -> tuple[Any, Any]:
        tags = tuple(self.tag[id(v)] for v in variants)
        if tags not in self._mods:
            vs = [v for v in self.variants if self.tag[id(v)] in tags]
            src = C.source_of(vs, self.tag)
            self._mods[tags] = (self._caten.loads(src, runtime="numpy", opt_level=0, use_cache=False), src)
        return self._mods[tags]

    def subset(self, dt: DType) -> list[C.Variant] | None:
        """The variants that elaborate for dt; None if none does."""
        types = {"T": dt}
        ref, _ = self.full
        try:
            ref.all.elaborate(dict(types))
            return self.variants
        except Error:
            pass
        ok = []
        for v in self.variants:
            try:
                getattr(ref, f"v{self.tag[id(v)]}").elaborate(dict(types))
                ok.append(v)
            except Error:
                continue
        if not ok:
            return None
        return ok


def _inputs(prog: Any, row: str, dt: DType, domains: dict[str, str], edges: str,
            ordinary: str = ORDINARY) -> list[dict[str, np.ndarray]]:
    """Input arrays by parameter name for each call (seeded by name: a subset sees the same).
    The middle call gets the edge values; where a float sum is involved, without huge finite
    ones, whose overflow depends on the order of accumulation; where a product is, without tiny
    ones either (a partial product that underflows to 0 meets an inf as nan in one order only)."""
    out = []
    for ci, sizes in enumerate(C.SIZES):
        profile = edges if ci == 1 else ordinary
        arrays = {}
        for spec in prog.inputs:
            shape = tuple(D.evaluate(d, sizes) for d in spec.shape)
            arrays[spec.name] = generate(spec.dtype, shape, seed_of(row, dt.name, spec.name, ci), profile,
                                         domains.get(spec.name, ""))
        out.append(arrays)
    return out


def _reference(rr: RowRunner, variants: list[C.Variant], dt: DType) -> tuple[list, Any, Any, list, list] | None:
    """Reference outputs of every call, dropping variants the reference rejects at some size
    (e.g. a 3x3 kernel on a 1x1 image). None if no variant is left."""
    types = {"T": dt}
    domains = {p.name: p.domain for v in variants for p in v.params}
    for _ in range(len(variants) + 1):
        ref, src = rr.modules(variants)
        prog = ref.all.elaborate(dict(types))
        overflow_order = any(n.op is Op.REDUCE and n.dtype.is_float for n in toposort(prog.nodes))
        product = any(n.op is Op.REDUCE and n.arg[0] == "mul" and n.dtype.is_float for n in toposort(prog.nodes))
        edges = EDGES_PRODUCT if product else EDGES_NO_HUGE if overflow_order else EDGES
        calls = _inputs(prog, rr.row.name, dt, domains, edges, NEAR_ONE if product else ORDINARY)
        wants, bad = [], []
        for arrays in calls:
            try:
                w = ref.all(*(arrays[s.name] for s in prog.inputs))
                wants.append(w if isinstance(w, tuple) else (w,))
                continue
            except Exception:  # noqa: BLE001 - find the variants that do not accept these sizes
                pass
            full_ref = rr.full[0]
            for v in variants:
                try:
                    getattr(full_ref, f"v{rr.tag[id(v)]}")(*(arrays[p.name] for p in v.params))
                except Exception:  # noqa: BLE001
                    bad.append(v)
            if not bad:
                wants.append(None)  # rejected as a whole only: skip this call
            break
        if not bad:
            return variants, ref, src, calls, wants
        variants = [v for v in variants if v not in bad]
        if not variants:
            return None
    return None


def _magnitudes(ref: Any, args: list[np.ndarray]) -> tuple | None:
    """The reference evaluated on |inputs|: for a sum of products, sum |a||b|, the scale of the
    rounding error any summation order may make (n eps sum|x|), which a result that cancels says
    nothing about. None where the reference rejects it."""
    absd = [np.abs(a) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a for a in args]
    try:
        with np.errstate(all="ignore"):
            m = ref.all(*absd)
    except Exception:  # noqa: BLE001 - e.g. a domain check the absolute values fail
        return None
    return m if isinstance(m, tuple) else (m,)


def run_cell(rr: RowRunner, dt: DType, compile_only: bool, target: Worker | None = None) -> Cell | None:
    row = rr.row
    try:
        sub = rr.subset(dt)
    except Error as e:
        return Cell(row.name, dt.name, "fail", reason=f"the case does not load: {_short(e)}")
    if sub is None:
        return None  # the op does not apply to this dtype
    try:
        refd = _reference(rr, sub, dt)
    except Exception as e:  # noqa: BLE001
        return Cell(row.name, dt.name, "fail", reason=f"the reference failed: {_short(e)}")
    if refd is None:
        return None
    variants, ref, src, calls, wants = refd
    prog = ref.all.elaborate({"T": dt})
    todo = [(sizes, [arrays[s.name] for s in prog.inputs], want)
            for sizes, arrays, want in zip(C.SIZES, calls, wants) if want is not None]
    msg = (rr.rt.name, rr.opt, src, dt.name, compile_only, [args for _, args, _ in todo])
    if target is not None:
        reply = target(*msg)
    else:
        # in-process; the numpy runtime reuses the reference's elaboration (it is the reference)
        reply = target_case(*msg, _mods={src: ref} if rr.rt.name == "numpy" else _TARGET_MODS)
    if reply[0] == "unsupported":
        return Cell(row.name, dt.name, "unsupported", reason="; ".join(reply[1][:4]))
    if reply[0] == "fail":
        return Cell(row.name, dt.name, "fail", reason=reply[1])
    if reply[0] == "compiled":
        return Cell(row.name, dt.name, "compile-only")
    owner: list[C.Variant] = [v for v in variants for _ in v.outs]
    kinds = [graph_kind([n]) for n in prog.nodes]
    precs = [precision([n]) for n in prog.nodes]
    max_abs = max_rel = 0.0
    failure = ""
    ran = 0
    for got, (sizes, args, want) in zip(reply[1], todo):
        where = " ".join(f"{k}={sizes[k]}" for k in prog.dims if k in sizes) or "fixed shapes"
        if isinstance(got, str):
            return Cell(row.name, dt.name, "fail", None, None, f"run failed at {where}: {got}")
        ran += 1
        mags = _magnitudes(ref, args) if "reduce" in kinds else None
        n_in = max((int(np.size(a)) for a in args), default=1)
        for j, (g, w) in enumerate(zip(got, want)):
            odt = T.from_numpy(np.asarray(w).dtype) or dt
            o = compare(g, w, odt, kinds[j], precs[j], None if mags is None else mags[j],
                        max(1, n_in // max(1, int(np.size(w)))))
            max_abs, max_rel = max(max_abs, o.max_abs), max(max_rel, o.max_rel)
            if not o.ok and not failure:
                failure = f"`{owner[j].expr}` ({owner[j].label}; {where}): {o.reason}"
    if ran == 0:
        return None  # the reference accepts no size of the case: nothing to compare
    if failure:
        return Cell(row.name, dt.name, "fail", max_abs, max_rel, failure)
    return Cell(row.name, dt.name, "pass", max_abs, max_rel)


def run_suite(rt: Runtime, pattern: str | None = None, compile_only: bool = False, isolate: bool | None = None,
              progress: Callable[[str, int], None] | None = None, rows: list[C.Row] | None = None,
              plugins: list[str] | None = None, grads: bool = True, jobs: int = 1,
              dtypes: tuple[DType, ...] | None = None) -> Result:
    """Run every row matching `pattern` on rt; `progress(row_name, cells_done)` after each cell.
    `isolate` (default: every runtime but numpy; CATEN_CONFORMANCE_ISOLATE=0 turns it off) runs
    the runtime in a worker process; `plugins` are the plugin files that worker loads. `grads`
    also runs the gradient cases of the rows (gradrun.py). `jobs` > 1 (isolated only): the
    forward rows run on that many workers at once (the report is the same, in row order). `dtypes`:
    only those columns (default every dtype)."""
    t0 = time.perf_counter()
    dts = dtypes or C.DTYPES
    if isolate is None:
        isolate = rt.name != "numpy" and os.environ.get("CATEN_CONFORMANCE_ISOLATE", "1") != "0"
    if isolate:
        from caten import plugin as R

        files = list(plugins or [])
        worker = Worker(files + [f for f in R.plugin_files() if f not in files])
    else:
        worker = None
    rows = rows if rows is not None else C.rows(pattern)
    res = Result(rt.name, device_of(rt), rows)
    try:
        if isolate and jobs > 1:
            _run_rows_parallel(rt, rows, res, compile_only, lambda: Worker(worker.plugins), jobs, progress, dts)
        else:
            _run_rows(rt, rows, res, compile_only, worker, progress, dts)
        if grads:
            from caten.conformance.gradrun import run_grads

            def local(*msg: Any) -> tuple:
                return target_case(*msg, _mods=_TARGET_MODS)

            res.grads, res.grad_rows = run_grads(rt, rows, compile_only, worker or local, progress)
    finally:
        if worker is not None:
            worker.stop()
    res.seconds = time.perf_counter() - t0
    return res


def _run_rows(rt: Runtime, rows: list[C.Row], res: Result, compile_only: bool, worker: Worker | None,
              progress: Callable[[str, int], None] | None, dtypes: tuple[DType, ...] = C.DTYPES) -> None:
    for row in rows:
        res.cells += _row_cells(rt, row, compile_only, worker, progress, dtypes)


def _row_cells(rt: Runtime, row: C.Row, compile_only: bool, worker: Worker | None,
               progress: Callable[[str, int], None] | None, dtypes: tuple[DType, ...] = C.DTYPES) -> list[Cell]:
    """The cells of one row, dtype by dtype."""
    C.build(row)
    if progress:
        progress(row.name, 0)
    if not row.variants:
        if progress:
            progress(row.name, len(dtypes))
        return []
    try:
        rr = RowRunner(row, rt)
    except Exception as e:  # noqa: BLE001 - a broken case source is a bug here, reported as such
        row.note = f"the generated case does not load: {_short(e)}"
        if progress:
            progress(row.name, len(dtypes))
        return []
    cells = []
    for dt in dtypes:
        cell = run_cell(rr, dt, compile_only, worker)
        if cell is not None:
            cells.append(cell)
        if progress:
            progress(row.name, 1)
    return cells


def _run_rows_parallel(rt: Runtime, rows: list[C.Row], res: Result, compile_only: bool,
                       new_worker: Callable[[], Worker], jobs: int,
                       progress: Callable[[str, int], None] | None, dtypes: tuple[DType, ...] = C.DTYPES) -> None:
    """The rows on `jobs` threads, each with a worker process of its own (the runtime's compiles
    and runs go on in the workers at once; the references, in this process, take turns)."""
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    free: queue.Queue = queue.Queue()
    workers = [new_worker() for _ in range(jobs)]
    for w in workers:
        free.put(w)
    lock = threading.Lock()

    def locked(name: str, n: int) -> None:
        with lock:
            progress(name, n)

    def one(row: C.Row) -> list[Cell]:
        w = free.get()
        try:
            return _row_cells(rt, row, compile_only, w, locked if progress else None, dtypes)
        finally:
            free.put(w)
    try:
        with ThreadPoolExecutor(jobs) as pool:
            for cells in pool.map(one, rows):
                res.cells += cells
    finally:
        for w in workers:
            w.stop()


def device_of(rt: Runtime) -> str:
    dev = getattr(rt, "device", None)
    if callable(dev):
        try:
            dev = dev()
        except Exception:  # noqa: BLE001
            dev = None
    if isinstance(dev, str) and dev:
        return dev
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"host CPU: {cpu}"
