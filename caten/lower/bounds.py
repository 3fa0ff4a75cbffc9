"""The bounds-checked mode (`--check-bounds`, `CATEN_CHECK_BOUNDS=1`, `check_bounds=True`).

A loop-IR pass run after lowering: every load and store index `i` of buffer `b` becomes
`bcheck(i, extent(b))`, an index expression whose value is `i` when `0 <= i < extent` and 0
otherwise (so the access stays inside the buffer), and which records the first failure --
(kernel number, buffer number, index, extent) -- into a five-slot i64 error record `slot`
(a global of the generated module). Renderers only spell `bcheck`; the host reads the record
after each call and raises through `raise_if_failed`. Implemented once here so that every
renderer checks the same accesses.

GEMM micro-kernels (TileMM, MacroMM) are expanded into plain loops first, so their panel
accesses are checked too (the checked mode is for finding bugs, not for speed).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field, replace

from caten.errors import Error
from caten.ir import dims as D
from caten.ir.walk import Visit, drive
from caten.lower import loopir as L
from caten.lower.loopir import IDX, X

SLOTS = 5  # flag, kernel, buffer, index, extent


def enabled(flag: bool | None = None) -> bool:
    """The option's value: an explicit flag wins, else the CATEN_CHECK_BOUNDS environment variable."""
    if flag is not None:
        return bool(flag)
    return os.environ.get("CATEN_CHECK_BOUNDS", "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass
class Table:
    """What the numbers in an error record name."""
    slot: str
    kernels: list[str] = field(default_factory=list)
    buffers: list[str] = field(default_factory=list)

    def number(self, names: list[str], name: str) -> int:
        if name not in names:
            names.append(name)
        return names.index(name)


def bcheck(idx: X, extent: X, slot: str, kernel: int, buf: int) -> X:
    return X.make("bcheck", IDX, (idx, extent), (slot, kernel, buf))


def instrument(kernels: list[L.Kernel], sched, slot: str) -> tuple[list[L.Kernel], Table]:
    """Kernels whose every load and store index is checked against its buffer's extent."""
    table = Table(slot)
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
        shape = b.shape[b.local:] if b.local >= 0 else b.shape
    return D.prod(shape)


def raise_if_failed(addr: int, table: Table, program: str) -> None:
    """Read (and clear) the error record at `addr`; raise caten.Error if an access failed."""
    rec = (ctypes.c_int64 * SLOTS).from_address(addr)
    if rec[0] == 0:
        return
    _, k, b, i, e = list(rec)
    for j in range(SLOTS):
        rec[j] = 0
    kname = table.kernels[k] if 0 <= k < len(table.kernels) else f"#{k}"
    bname = table.buffers[b] if 0 <= b < len(table.buffers) else f"#{b}"
    raise Error(f"out-of-bounds: kernel {kname}, buffer {bname}, index {i}, extent {e} (in `{program}`)",
                hint="a caten bug: the generated code accesses memory outside a buffer; please report it "
                     "with this program")


# the recorder, as each renderer spells it ---------------------------------------------------------
LLVM_RECORDER = """define internal void @caten_oob_record(ptr %s, i64 %k, i64 %b, i64 %i, i64 %e) #1 {
entry:
  %f = load i64, ptr %s, align 8
  %z = icmp eq i64 %f, 0
  br i1 %z, label %w, label %r
w:
  store i64 1, ptr %s, align 8
  %p1 = getelementptr inbounds i64, ptr %s, i64 1
  store i64 %k, ptr %p1, align 8
  %p2 = getelementptr inbounds i64, ptr %s, i64 2
  store i64 %b, ptr %p2, align 8
  %p3 = getelementptr inbounds i64, ptr %s, i64 3
  store i64 %i, ptr %p3, align 8
  %p4 = getelementptr inbounds i64, ptr %s, i64 4
  store i64 %e, ptr %p4, align 8
  br label %r
r:
  ret void
}"""

def c_recorder(func: str = "static", gptr: str = "") -> str:
    """`caten_bcheck` in C-style source (`func`: the helper qualifier, `gptr`: the address space)."""
    return (f"{func} i64 caten_bcheck({gptr}i64 *s, i64 i, i64 n, i64 k, i64 b) {{\n"
            "  if ((u64)i < (u64)n) return i;\n"
            "  if (!s[0]) { s[0] = 1; s[1] = k; s[2] = b; s[3] = i; s[4] = n; }\n"
            "  return 0;\n}")


def c_slots(table: Table | None) -> str:
    """The C definitions of the error record and its recorder (empty when not checking)."""
    return "" if table is None else f"i64 {table.slot}[{SLOTS}];\n{c_recorder()}\n"


DEVICE_BUF = "oob"  # device targets: the error record is one more buffer argument of every kernel


def device_instrument(kernels: list[L.Kernel], sched) -> tuple[list[L.Kernel], Table]:
    """`instrument` for device kernels, whose error record is the buffer parameter `b_oob`."""
    from caten.ir import dtypes as T

    out, table = instrument(kernels, sched, f"b_{DEVICE_BUF}")
    for k in out:
        k.params = k.params + [L.BufParam(DEVICE_BUF, T.i64, DEVICE_BUF)]
    return out, table
