"""The bounds-checked mode's recorder function, as each renderer spells it (the checks
themselves are loop IR: `caten.lower.bounds`; the record's layout: `caten.ir.oob`)."""

from __future__ import annotations

from caten.ir.oob import SLOTS, Table

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
