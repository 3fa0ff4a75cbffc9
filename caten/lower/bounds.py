"""The bounds-checked mode (`--check-bounds`, `CATEN_CHECK_BOUNDS=1`, `check_bounds=True`).

A loop-IR pass run after lowering: every load and store index `i` of buffer `b` becomes
`bcheck(i, extent(b))`, an index expression whose value is `i` when `0 <= i < extent` and 0
otherwise (so the access stays inside the buffer), and which records the first failure --
(kernel number, buffer number, index, extent) -- into a five-slot i64 error record `slot`
(a global of the generated module; `caten.ir.oob`). Renderers only spell `bcheck`
(`caten.render.checks`); the host reads the record after each call and raises through
`caten.ir.oob.raise_if_failed`. Implemented once here so that every
renderer checks the same accesses.

GEMM micro-kernels (TileMM, MacroMM) are expanded into plain loops first, so their panel
accesses are checked too (the checked mode is for finding bugs, not for speed).
"""

from __future__ import annotations

from dataclasses import replace

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.oob import DEVICE_BUF, Table
from caten.ir.walk import Visit, drive
from caten.loopir import IDX, X


def bcheck(idx: X, extent: X, slot: str, kernel: int, buf: int) -> X:
    return X.make("bcheck", IDX, (idx, extent), (slot, kernel, buf))


def instrument(kernels: list[L.Kernel], sched, slot: str, table: Table | None = None) -> tuple[list[L.Kernel], Table]:
    """Kernels whose every load and store index is checked against its buffer's extent (`table`:
    one to add to: a loop's bodies record their failures with the program's own)."""
    table = table or Table(slot)
    out = []
    for k in kernels:
        extents = {p.name: _extent(sched.buffers[p.name], sched.program) for p in k.params}
        body = _Checker(table, table.number(table.kernels, k.name), extents).walk(k.body)
        out.append(L.Kernel(k.name, k.params, k.dims, body))
    return out, table


class _Checker:
    """Rewrites one kernel's statements and expressions (expressions memoized: they are DAGs)."""

    def __init__(self, table: Table, kernel: int, extents: dict[str, D.Dim]):
        self.table, self.kernel, self.extents = table, kernel, extents
        self.memo: dict[int, X] = {}

    def ck(self, buf: str, idx: X) -> X:
        return bcheck(idx, L.dim(self.extents[buf]), self.table.slot, self.kernel,
                      self.table.number(self.table.buffers, buf))

    def x(self, e: X) -> X:
        return drive(self._x(e))

    def _x(self, e: X) -> Visit[X]:
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit
        src = []
        for s in e.src:
            src.append((yield self._x(s)))
        src = tuple(src)
        if e.op == "load":
            r = L.load(e.arg, self.ck(e.arg, src[0]), e.dtype)
        elif src == e.src:
            r = e
        else:
            r = X.make(e.op, e.dtype, src, e.arg)
        self.memo[id(e)] = r
        return r

    def walk(self, stmts: list) -> list:
        res: list = []
        for s in stmts:
            if isinstance(s, L.Loop):  # Parallel too: `replace` keeps the class
                res.append(replace(s, extent=self.x(s.extent), body=self.walk(s.body)))
            elif isinstance(s, L.Store):
                res.append(L.Store(s.buf, self.ck(s.buf, self.x(s.idx)), self.x(s.value)))
            elif isinstance(s, L.Acc):
                res.append(L.Acc(s.var, s.dtype, self.x(s.init)))
            elif isinstance(s, L.SetAcc):
                res.append(L.SetAcc(s.var, self.x(s.value)))
            elif hasattr(s, "expand"):  # TileMM, MacroMM: their plain loops
                res += self.walk(s.expand())
            else:
                raise TypeError(f"bounds check: unknown loop-IR statement {type(s).__name__}")
        return res


def _extent(b, program) -> D.Dim:
    """A buffer's length in elements: for arguments and results, what the host allocates (their
    declared shapes, not the graph's); a `local` temp holds one slice past its first axes."""
    if b.role in ("in", "out"):
        shape = (program.inputs if b.role == "in" else program.outputs)[b.index].shape
    else:
        return b.elements
    return D.prod(shape)




def device_instrument(kernels: list[L.Kernel], sched, table: Table | None = None) -> tuple[list[L.Kernel], Table]:
    """`instrument` for device kernels, whose error record is the buffer parameter `b_oob`."""
    from caten.ir import dtypes as T

    out, table = instrument(kernels, sched, f"b_{DEVICE_BUF}", table)
    for k in out:
        k.params = k.params + [L.BufParam(DEVICE_BUF, T.i64, DEVICE_BUF)]
    return out, table
