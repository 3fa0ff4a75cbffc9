"""The C ABI: each program's entry `int32_t NAME(in..., out..., dims...)` (where-constraint checks,
the scratch arena) around `NAME__impl`, which calls the kernels in order; and the C header that
declares the entries."""

from __future__ import annotations

import re
from collections.abc import Sequence

from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.lower import loopir as L
from caten.render.llvm.fn import FnGen
from caten.render.llvm.module import Module


def entry_functions(mod: Module, name: str, sched, kernels: list[L.Kernel], defines: dict[str, D.Dim]) -> None:
    """`NAME__impl(in..., out..., arena, dims...)` and the C ABI `int32_t NAME(in..., out..., dims...)`."""
    prog = sched.program
    ins = [f"in{i}" for i in range(len(prog.inputs))]
    outs = [f"out{i}" for i in range(len(prog.outputs))]
    g = FnGen(mod, prog.dims, defines)
    ptrs = {b: f"%b_{b}" for b in ins + outs}
    for b in sched.buffers.values():
        if b.role == "temp":
            off = g.dimval(b.offset)
            ptrs[b.name] = g.ins(f"getelementptr inbounds i8, ptr %arena, i64 {off}")
    for k in kernels:
        args = [f"ptr {ptrs[p.name]}" for p in k.params] + [f"i64 %d_{d}" for d in k.dims]
        g.emit(f"call void @{k.name}({', '.join(args)})")
    params = [f"ptr %b_{b}" for b in ins + outs] + ["ptr %arena"] + [f"i64 %d_{d}" for d in prog.dims]
    mod.funcs.append(g.text(f"define void @{name}__impl({', '.join(params)}) #0 {{"))

    g = FnGen(mod, prog.dims, defines)
    fail = None
    for c in prog.constraints:
        ne = g.icmp("ne", "i64", g.dimval(c.lhs), g.dimval(c.rhs))
        fail = ne if fail is None else g.ins(f"or i1 {fail}, {ne}")
    if fail is not None:
        g.emit(f"br i1 {fail}, label %bad, label %ok")
        g.block("bad")
        g.emit("ret i32 1")
        g.block("ok")
    size = g.dimval(sched.arena_size)
    mod.declare("malloc", "ptr", ["i64"])
    mod.declare("free", "void", ["ptr"])
    a = g.ins(f"call ptr @malloc(i64 {g.ins(f'add i64 {size}, 64')})")
    g.emit(f"br i1 {g.icmp('eq', 'ptr', a, 'null')}, label %nomem, label %mem")  # malloc failed: 2, no crash
    g.block("nomem")
    g.emit("ret i32 2")
    g.block("mem")
    ai = g.ins(f"ptrtoint ptr {a} to i64")
    pad = g.ins(f"and i64 {g.ins(f'sub i64 0, {ai}')}, 63")
    aligned = g.ins(f"getelementptr inbounds i8, ptr {a}, i64 {pad}")
    args = [f"ptr %b_{b}" for b in ins + outs] + [f"ptr {aligned}"] + [f"i64 %d_{d}" for d in prog.dims]
    g.emit(f"call void @{name}__impl({', '.join(args)})")
    g.emit(f"call void @free(ptr {a})")
    params = [f"ptr %b_{b}" for b in ins + outs] + [f"i64 %d_{d}" for d in prog.dims]
    mod.funcs.append(g.text(f"define i32 @{name}({', '.join(params)}) #0 {{", "ret i32 0"))


def c_type(dt: DType) -> str:
    if dt.is_bool:
        return "bool"
    if dt.is_int:
        return f"{'u' if dt.kind == 'uint' else ''}int{dt.bits}_t"
    return {"f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double"}[dt.name]


def c_header(progs, names: Sequence[str], library: str | None = None) -> str:
    """One C header declaring the entry of every program (LANGUAGE.md section 8). Its include
    guard derives from the library's name (else its entries' names), so the headers of several
    caten libraries can be included in one C file."""
    guard = f"CATEN_{re.sub(r'[^A-Za-z0-9]', '_', library or '_'.join(names)).upper()}_H"
    lines = [f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>", "#include <stdint.h>",
             "#ifdef __cplusplus", 'extern "C" {', "#endif"]
    for prog, name in zip(progs, names):
        args = [f"const {c_type(s.dtype)} *{s.name}" for s in prog.inputs]
        args += [f"{c_type(s.dtype)} *{s.name}" for s in prog.outputs]
        args += [f"int64_t {d}" for d in prog.dims]
        lines.append(f"/* {prog.name}: {' '.join(map(str, prog.inputs))} -> {' '.join(map(str, prog.outputs))}"
                     " (f16/bf16 as uint16_t bits). Returns 0, 1 if a where-constraint fails, 2 if its scratch memory"
                     " cannot be allocated. */")
        lines.append(f"int32_t {name}({', '.join(args) or 'void'});")
    lines += ["#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)
