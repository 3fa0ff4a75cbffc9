"""The C ABI: each program's entry `int32_t NAME(in..., out..., dims...)` (where-constraint checks,
the scratch arena) around `NAME__impl`, which calls the kernels in order; and the C header that
declares the entries."""

from __future__ import annotations

import re
from collections.abc import Sequence

from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.lower.entry import IfStep, LoopStep, nested
from caten.render.llvm.fn import FnGen
from caten.render.llvm.module import Module


def entry_functions(mod: Module, plan, defines: dict[str, D.Dim], profile: bool = False) -> None:
    """`NAME__impl(in..., out..., arena, dims...)` and the C ABI `int32_t NAME(in..., out..., dims...)`
    of an entry plan (`caten.pipeline.EntryPlan`), with the impls of its loops' and branches'
    bodies. `profile`: each step adds the cycles it took (the CPU's cycle counter) to
    `NAME__prof[k]`, and `NAME__cycles()` reads the counter, so `caten profile` can calibrate it."""
    for sub in nested(plan):
        impl_function(mod, sub, defines)
    impl_function(mod, plan, defines, profile)
    io = [b for b, _ in plan.inputs + plan.outputs]
    g = FnGen(mod, list(plan.dims), defines)
    fail = None
    for lhs, rhs in plan.constraints:
        ne = g.icmp("ne", "i64", g.dimval(lhs), g.dimval(rhs))
        fail = ne if fail is None else g.ins(f"or i1 {fail}, {ne}")
    if fail is not None:
        g.emit(f"br i1 {fail}, label %bad, label %ok")
        g.block("bad")
        g.emit("ret i32 1")
        g.block("ok")
    size = g.ins(f"add i64 {g.dimval(plan.arena_size)}, 64")
    mod.declare("malloc", "ptr", ["i64"])
    mod.declare("free", "void", ["ptr"])
    # the arena of the last call is kept for the next (a fresh malloc of tens of MB each call is
    # an mmap whose pages fault in again: 15% of a training step); a call that finds it in use
    # (another thread's) takes one of its own
    cache = f"@{plan.name}__arena"
    mod.funcs.append(f"{cache} = internal global {{ ptr, i64, i32 }} zeroinitializer, align 8")
    cptr, ccap, cbusy = (g.ins(f"getelementptr inbounds {{ ptr, i64, i32 }}, ptr {cache}, i32 0, i32 {i}")
                         for i in range(3))
    got = g.ins(f"extractvalue {{ i32, i1 }} {g.ins(f'cmpxchg ptr {cbusy}, i32 0, i32 1 acquire monotonic')}, 1")
    g.emit(f"br i1 {got}, label %mine, label %own")
    g.block("mine")
    old, cap = g.ins(f"load ptr, ptr {cptr}"), g.ins(f"load i64, ptr {ccap}")
    g.emit(f"br i1 {g.icmp('ult', 'i64', cap, size)}, label %grow, label %keep")
    g.block("grow")
    g.emit(f"call void @free(ptr {old})")
    fresh = g.ins(f"call ptr @malloc(i64 {size})")
    ok = g.icmp("ne", "ptr", fresh, "null")
    g.emit(f"store ptr {fresh}, ptr {cptr}")
    g.emit(f"store i64 {g.ins(f'select i1 {ok}, i64 {size}, i64 0')}, ptr {ccap}")
    g.emit("br label %keep")
    g.block("keep")
    kept = g.ins(f"phi ptr [{old}, %mine], [{fresh}, %grow]")
    g.emit("br label %have")
    g.block("own")
    own = g.ins(f"call ptr @malloc(i64 {size})")
    g.emit("br label %have")
    g.block("have")
    a = g.ins(f"phi ptr [{kept}, %keep], [{own}, %own]")
    g.emit(f"br i1 {g.icmp('eq', 'ptr', a, 'null')}, label %nomem, label %mem")  # malloc failed: 2, no crash
    g.block("nomem")
    g.emit(f"br i1 {got}, label %unbusy, label %fail")
    g.block("unbusy")
    g.emit(f"store atomic i32 0, ptr {cbusy} release, align 4")
    g.emit("br label %fail")
    g.block("fail")
    g.emit("ret i32 2")
    g.block("mem")
    ai = g.ins(f"ptrtoint ptr {a} to i64")
    pad = g.ins(f"and i64 {g.ins(f'sub i64 0, {ai}')}, 63")
    aligned = g.ins(f"getelementptr inbounds i8, ptr {a}, i64 {pad}")
    args = [f"ptr %b_{b}" for b in io] + [f"ptr {aligned}"] + [f"i64 %d_{d}" for d in plan.dims]
    g.emit(f"call void @{plan.name}__impl({', '.join(args)})")
    g.emit(f"br i1 {got}, label %back, label %drop")
    g.block("back")
    g.emit(f"store atomic i32 0, ptr {cbusy} release, align 4")
    g.emit("br label %done")
    g.block("drop")
    g.emit(f"call void @free(ptr {a})")
    g.emit("br label %done")
    g.block("done")
    params = [f"ptr %b_{b}" for b in io] + [f"i64 %d_{d}" for d in plan.dims]
    mod.funcs.append(g.text(f"define i32 @{plan.name}({', '.join(params)}) #0 {{", "ret i32 0"))


def impl_function(mod: Module, plan, defines: dict[str, D.Dim], profile: bool = False) -> None:
    """`NAME__impl(in..., out..., arena, dims...)`: the plan's steps in order."""
    io = [b for b, _ in plan.inputs + plan.outputs]
    g = FnGen(mod, list(plan.dims), defines)
    ptrs = {b: f"%b_{b}" for b in io}
    used = plan.buffers_used()
    for b, _, off in plan.temps:
        if b in used:
            ptrs[b] = g.ins(f"getelementptr inbounds i8, ptr %arena, i64 {g.dimval(off)}")
    if profile:
        nk = max(1, len(plan.calls))
        mod.funcs.append(f"@{plan.name}__prof = global [{nk} x i64] zeroinitializer, align 8")
        mod.funcs.append(f"define i64 @{plan.name}__cycles() #0 {{\n  %c = call i64 @llvm.readcyclecounter()\n"
                         "  ret i64 %c\n}")
        mod.declare("llvm.readcyclecounter", "i64", [])
    for i, step in enumerate(plan.calls):
        c0 = g.ins("call i64 @llvm.readcyclecounter()") if profile else None
        if isinstance(step, LoopStep):
            _loop(g, mod, step, ptrs)
        elif isinstance(step, IfStep):
            _branch(g, step, ptrs)
        else:
            k, bufs, ds = step
            args = [f"ptr {ptrs[b]}" for b in bufs] + [f"i64 %d_{d}" for d in ds]
            g.emit(f"call void @{k}({', '.join(args)})")
        if profile:
            took = g.ins(f"sub i64 {g.ins('call i64 @llvm.readcyclecounter()')}, {c0}")
            slot = g.ins(f"getelementptr inbounds [{max(1, len(plan.calls))} x i64], ptr @{plan.name}__prof, "
                         f"i64 0, i64 {i}")
            old = g.ins(f"load i64, ptr {slot}")
            g.emit(f"store i64 {g.ins(f'add i64 {old}, {took}')}, ptr {slot}")
    params = [f"ptr %b_{b}" for b in io] + ["ptr %arena"] + [f"i64 %d_{d}" for d in plan.dims]
    mod.funcs.append(g.text(f"define void @{plan.name}__impl({', '.join(params)}) #0 {{"))


def _call_impl(g: FnGen, sub, bufs: list[str], arena: str, dims: dict[str, str] | None = None) -> None:
    dims = dims or {}
    args = [f"ptr {b}" for b in bufs] + [f"ptr {arena}"] + [f"i64 {dims.get(d, f'%d_{d}')}" for d in sub.dims]
    g.emit(f"call void @{sub.name}__impl({', '.join(args)})")


def _memcpy(g: FnGen, mod: Module, dst: str, src: str, n: str) -> None:
    mod.declare("llvm.memcpy.p0.p0.i64", "void", ["ptr", "ptr", "i64", "i1"])
    g.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {n}, i1 false)")


def _bound(g: FnGen, b, ptrs: dict[str, str]) -> str:
    return g.ins(f"load i64, ptr {ptrs[b]}") if isinstance(b, str) else g.dimval(b)


def _loop(g: FnGen, mod: Module, s: LoopStep, ptrs: dict[str, str]) -> None:
    """The loop: state copied in, then trips calling the body's impl with the current and next
    state swapped by phis (no copy per trip), then the final state copied out."""
    for (cur, _), init, n in zip(s.state, s.inits, s.sizes):
        _memcpy(g, mod, ptrs[cur], ptrs[init], g.dimval(n))
    start = _bound(g, s.start, ptrs)
    end = _bound(g, s.end, ptrs) if s.end is not None else None
    if s.trips is not None:  # a scanned or stacked tensor holds `trips` slices: no trip past them
        last = g.ins(f"add i64 {start}, {g.dimval(s.trips)}")
        end = last if end is None else g.ins(f"select i1 {g.icmp('slt', 'i64', end, last)}, i64 {end}, i64 {last}")
    pre = g.cur
    h, t, b, e = g.label("ch"), g.label("ct"), g.label("cb"), g.label("ce")
    g.emit(f"br label %{h}")
    g.block(h)
    at = len(g.lines)
    nc = len(s.state)
    for _ in range(1 + 2 * nc):
        g.lines.append(None)
    iv = g.tmp()
    cur = [g.tmp() for _ in range(nc)]
    nxt = [g.tmp() for _ in range(nc)]
    if end is not None:
        g.emit(f"br i1 {g.icmp('slt', 'i64', iv, end)}, label %{t}, label %{e}")
    else:
        g.emit(f"br label %{t}")
    g.block(t)
    if s.cond is not None:
        carena = g.ins(f"getelementptr inbounds i8, ptr {ptrs[s.arena]}, i64 {g.dimval(s.cond_offset)}")
        _call_impl(g, s.cond, cur + [ptrs[c] for c in s.captures] + [ptrs[s.flag]], carena, {s.index: iv})
        ok = g.icmp("ne", "i8", g.ins(f"load i8, ptr {ptrs[s.flag]}"), "0")
        g.emit(f"br i1 {ok}, label %{b}, label %{e}")
    else:
        g.emit(f"br label %{b}")
    g.block(b)
    pos = g.ins(f"sub i64 {iv}, {start}")
    if s.reverse and s.trips is not None:
        pos = g.ins(f"sub i64 {g.ins(f'sub i64 {g.dimval(s.trips)}, 1')}, {pos}")
    xs = [g.ins(f"getelementptr inbounds i8, ptr {ptrs[x]}, i64 {g.ins(f'mul i64 {pos}, {g.dimval(n)}')}")
          for x, n in s.xs]
    ys = [g.ins(f"getelementptr inbounds i8, ptr {ptrs[y]}, i64 {g.ins(f'mul i64 {pos}, {g.dimval(n)}')}")
          for y, n in s.ys]
    first = g.ins(f"zext i1 {g.icmp('eq', 'i64', iv, start)} to i64")
    _call_impl(g, s.body, cur + [ptrs[c] for c in s.captures] + xs + nxt + ys, ptrs[s.arena],
               {s.index: iv, s.first: first})
    step = g.ins(f"add i64 {iv}, 1")
    latch = g.cur
    g.emit(f"br label %{h}")
    g.lines[at] = f"  {iv} = phi i64 [{start}, %{pre}], [{step}, %{latch}]"
    for j, ((c0, n0), c, n) in enumerate(zip(s.state, cur, nxt)):
        g.lines[at + 1 + j] = f"  {c} = phi ptr [{ptrs[c0]}, %{pre}], [{n}, %{latch}]"
        g.lines[at + 1 + nc + j] = f"  {n} = phi ptr [{ptrs[n0]}, %{pre}], [{c}, %{latch}]"
    g.block(e)
    for c, fin, n in zip(cur, s.finals, s.sizes):
        if fin is not None:
            _memcpy(g, mod, ptrs[fin], c, g.dimval(n))


def _branch(g: FnGen, s: IfStep, ptrs: dict[str, str]) -> None:
    t, e, j = g.label("it"), g.label("ie"), g.label("ij")
    ok = g.icmp("ne", "i8", g.ins(f"load i8, ptr {ptrs[s.pred]}"), "0")
    g.emit(f"br i1 {ok}, label %{t}, label %{e}")
    for lab, sub in ((t, s.then), (e, s.other)):
        g.block(lab)
        _call_impl(g, sub, [ptrs[c] for c in s.captures] + [ptrs[o] for o in s.outs], ptrs[s.arena])
        g.emit(f"br label %{j}")
    g.block(j)


def c_type(dt: DType) -> str:
    if dt.is_bool:
        return "bool"
    if dt.is_int:
        return f"{'u' if dt.kind == 'uint' else ''}int{max(dt.bits, 8)}_t"  # (i4/u4: a byte each)
    return {"f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double"}.get(dt.name, "uint8_t")  # (float8)


def c_header(progs, names: Sequence[str], library: str | None = None,
             in_place: Sequence[frozenset[int]] | None = None) -> str:
    """One C header declaring the entry of every program (LANGUAGE.md section 8). Its include
    guard derives from the library's name (else its entries' names), so the headers of several
    caten libraries can be included in one C file. An output named as an input (written in place)
    is declared NAME_out, and its comment says how to pass it (`in_place`: per program, the outputs
    the code computes in the input's own memory)."""
    guard = f"CATEN_{re.sub(r'[^A-Za-z0-9]', '_', library or '_'.join(names)).upper()}_H"
    lines = [f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>", "#include <stdint.h>",
             "#ifdef __cplusplus", 'extern "C" {', "#endif"]
    for k, (prog, name) in enumerate(zip(progs, names)):
        aliased = dict(getattr(prog, "aliases", ()))
        direct = in_place[k] if in_place else frozenset()
        args = [f"const {c_type(s.dtype)} *{s.name}" for s in prog.inputs]
        args += [f"{c_type(s.dtype)} *{s.name}{'_out' if i in aliased else ''}" for i, s in enumerate(prog.outputs)]
        args += [f"int64_t {d}" for d in prog.dims]
        notes = "".join(f" {s.name}_out: pass {s.name}'s own pointer (written in place)." if i in direct else
                        f" {s.name}_out: memory apart from {s.name}; copy it into {s.name} after the call."
                        for i, s in enumerate(prog.outputs) if i in aliased)
        lines.append(f"/* {prog.name}: {' '.join(map(str, prog.inputs))} -> {' '.join(map(str, prog.outputs))}"
                     " (f16/bf16 as uint16_t bits, float8 as uint8_t). Returns 0, 1 if a where-constraint fails,"
                     " 2 if its scratch memory"
                     f" cannot be allocated.{notes} */")
        lines.append(f"int32_t {name}({', '.join(args) or 'void'});")
    lines += ["#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)
