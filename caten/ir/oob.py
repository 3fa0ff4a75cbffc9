"""The bounds-checked mode's error record, shared by the pass that writes checks
(`caten.lower.bounds`), the renderers that spell them and the executables that read the record
after each call: five i64 slots -- flag, kernel number, buffer number, index, extent."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from caten.errors import Error

SLOTS = 5  # flag, kernel, buffer, index, extent
DEVICE_BUF = "oob"  # device targets: the error record is one more buffer argument of every kernel


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
