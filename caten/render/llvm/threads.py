"""Parallel loops on the module's thread pool: a `Parallel` body is outlined into a function of
its own and run through a trampoline per iteration. Also the free-variable analysis that
outlining needs (shared with the module's stage outlining)."""

from __future__ import annotations

from caten import loopir as L
from caten.loopir import X
from caten.lower.dimargs import takes
from caten.render.llvm.emit import Emitter
from caten.render.llvm.pool import declare_pool


def parallel(g: Emitter, s: L.Parallel) -> None:
    """Iterations on the module's thread pool (caten.render.llvm.pool): the body becomes a
    function of its own, called through a trampoline with one context per iteration (the
    values it reads and its iteration number); the caller runs iterations too."""
    free, bufs = uses(s.body)
    free.discard(s.var)
    if any(v in g.accs or v == "?" for v in free):
        raise TypeError("a parallel loop body must not read enclosing accumulators")
    dims, order = takes(s.body, g.dims, bufs)  # in its structure's order (caten.lower.dimargs)
    params = [("ptr", f"%b_{b}") for b in order] + [("i64", f"%d_{d}") for d in dims]
    params += [("i64", f"%v_{v}") for v in sorted(free)] + [("i64", f"%v_{s.var}")]
    body, tramp = g.mod.fresh("par"), g.mod.fresh("par_thread")
    fg = g.new(dims=dims)
    fg.stmts(s.body)
    sig = ", ".join(f"{t} {'noalias ' if t == 'ptr' else ''}{n}" for t, n in params)
    g.mod.funcs.append(fg.text(f"define internal void @{body}({sig}) #1 {{"))
    ctxty = f"[{len(params)} x i64]"
    t = g.new()
    vals = []
    for i, (ty, _) in enumerate(params):
        w = t.ins(f"load i64, ptr {t.ins(f'getelementptr inbounds {ctxty}, ptr %ctx, i64 0, i64 {i}')}")
        vals.append(f"ptr {t.conv('inttoptr', 'i64', w, 'ptr')}" if ty == "ptr" else f"i64 {w}")
    t.emit(f"call void @{body}({', '.join(vals)})")
    g.mod.funcs.append(t.text(f"define internal ptr @{tramp}(ptr %ctx) #1 {{", "ret ptr null"))
    declare_pool(g.mod)

    n, most = g.v(s.extent), s.most  # (the extent never exceeds `most`: Parallel's contract)
    ctx = f"%{tramp}_ctx"
    g.allocas.append(f"  {ctx} = alloca [{most} x {ctxty}], align 8")
    words = [g.conv("ptrtoint", "ptr", v, "i64") if ty == "ptr" else v for ty, v in params[:-1]]
    pre = g.cur
    h, b, e = g.label("ph"), g.label("pb"), g.label("pe")
    i, i1 = g.tmp(), g.tmp()
    g.emit(f"br label %{h}")
    g.block(h)
    at = len(g.lines)
    g.lines.append(None)
    g.emit(f"br i1 {g.icmp('slt', 'i64', i, n)}, label %{b}, label %{e}")
    g.block(b)
    c = g.ins(f"getelementptr inbounds [{most} x {ctxty}], ptr {ctx}, i64 0, i64 {i}")
    for j, w in enumerate(words + [i]):
        g.emit(f"store i64 {w}, ptr {g.ins(f'getelementptr inbounds {ctxty}, ptr {c}, i64 0, i64 {j}')}")
    g.emit(f"{i1} = add nuw nsw i64 {i}, 1")
    g.lines[at] = f"  {i} = phi i64 [0, %{pre}], [{i1}, %{g.cur}]"
    g.emit(f"br label %{h}")
    g.block(e)
    g.emit(f"call void @caten_pool_run(ptr @{tramp}, ptr {ctx}, i64 {len(params) * 8}, i64 {n}, i64 {most - 1})")


def uses(stmts: list) -> tuple[set[str], set[str]]:
    """The variables a statement list reads but does not bind (loop counters, accumulators),
    and the buffers it loads or stores."""
    used: set[str] = set()
    bound: set[str] = set()
    bufs: set[str] = set()
    seen: set[int] = set()

    def x(e: X) -> None:
        for n in L.nodes(e, seen=seen):
            if n.op == "var":
                used.add(n.arg)
            elif n.op == "load":
                bufs.add(n.arg)

    def walk(ss: list) -> None:
        for s in ss:
            if isinstance(s, L.Loop):
                bound.add(s.var)
                x(s.extent)
                walk(s.body)
            elif isinstance(s, L.Store):
                bufs.add(s.buf)
                x(s.idx)
                x(s.value)
            elif isinstance(s, L.Acc):
                bound.add(s.var)
                x(s.init)
            elif isinstance(s, L.SetAcc):
                used.add(s.var)
                x(s.value)
            elif isinstance(s, L.TileMM):
                bufs.update((s.a, s.b, s.out))
                for e in (s.kext, s.aoff, s.boff, s.ooff, s.ostride, s.rvalid, s.cvalid, s.beta):
                    x(e)
            elif isinstance(s, (L.MacroMM, L.DirectMM)):
                bufs.update((s.a, s.b, s.out))
                for e in s.exprs():
                    x(e)
            elif isinstance(s, L.PanelCopy):
                bufs.update((s.src, s.dst))
                for e in s.exprs():
                    x(e)
            elif hasattr(s, "reads"):  # an outlined stage's call (fn.StageCall)
                bufs.update(s.bufs)
                used.update(s.reads)
            else:
                used.add("?")
    walk(stmts)
    return used - bound, bufs


def free_vars(stmts: list) -> set[str]:
    return uses(stmts)[0]
