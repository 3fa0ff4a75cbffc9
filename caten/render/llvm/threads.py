"""Parallel loops on pthreads: a `Parallel` body is outlined into a function of its own and run
through a trampoline per iteration. Also the free-variable analysis that outlining needs (shared
with the module's stage outlining)."""

from __future__ import annotations

from caten.lower import loopir as L
from caten.lower.loopir import X
from caten.render.llvm.emit import Emitter


def parallel(g: Emitter, s: L.Parallel) -> None:
    """Iterations on threads: the body becomes a function of its own; iterations 1.. start on
    pthreads (one that cannot start runs here), iteration 0 runs here, then all are joined."""
    free, bufs = uses(s.body)
    free.discard(s.var)
    if any(v in g.accs or v == "?" for v in free):
        raise TypeError("a parallel loop body must not read enclosing accumulators")
    params = [("ptr", f"%b_{b}") for b in sorted(bufs)] + [("i64", f"%d_{d}") for d in g.dims]
    params += [("i64", f"%v_{v}") for v in sorted(free)] + [("i64", f"%v_{s.var}")]
    body, tramp = g.mod.fresh("par"), g.mod.fresh("par_thread")
    fg = g.new()
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
    g.mod.declare("pthread_create", "i32", ["ptr", "ptr", "ptr", "ptr"])
    g.mod.declare("pthread_join", "i32", ["i64", "ptr"])

    n, most = g.v(s.extent), s.most
    ctx, hs, ok = f"%{tramp}_ctx", f"%{tramp}_h", f"%{tramp}_ok"
    g.allocas += [f"  {ctx} = alloca [{most} x {ctxty}], align 8", f"  {hs} = alloca [{most} x i64], align 8",
                     f"  {ok} = alloca [{most} x i1], align 1"]
    words = [g.conv("ptrtoint", "ptr", v, "i64") if ty == "ptr" else v for ty, v in params[:-1]]

    def slot(arr: str, ty: str, i: str) -> str:
        return g.ins(f"getelementptr inbounds [{most} x {ty}], ptr {arr}, i64 0, i64 {i}")

    def each(first: str, emit_body) -> None:
        pre = g.cur
        h, b, e = g.label("ph"), g.label("pb"), g.label("pe")
        i, i1 = g.tmp(), g.tmp()
        g.emit(f"br label %{h}")
        g.block(h)
        at = len(g.lines)
        g.lines.append(None)
        g.emit(f"br i1 {g.icmp('slt', 'i64', i, n)}, label %{b}, label %{e}")
        g.block(b)
        emit_body(i)
        g.emit(f"{i1} = add nuw nsw i64 {i}, 1")
        g.lines[at] = f"  {i} = phi i64 [{first}, %{pre}], [{i1}, %{g.cur}]"
        g.emit(f"br label %{h}")
        g.block(e)

    def spawn(i: str) -> None:
        c = slot(ctx, ctxty, i)
        for j, w in enumerate(words + [i]):
            g.emit(f"store i64 {w}, ptr {g.ins(f'getelementptr inbounds {ctxty}, ptr {c}, i64 0, i64 {j}')}")
        hp = slot(hs, "i64", i)
        rc = g.ins(f"call i32 @pthread_create(ptr {hp}, ptr null, ptr @{tramp}, ptr {c})")
        started = g.icmp("eq", "i32", rc, "0")
        g.emit(f"store i1 {started}, ptr {slot(ok, 'i1', i)}")
        run, go = g.label("pr"), g.label("pg")
        g.emit(f"br i1 {started}, label %{go}, label %{run}")
        g.block(run)
        g.emit(f"call ptr @{tramp}(ptr {c})")
        g.emit(f"br label %{go}")
        g.block(go)

    def join(i: str) -> None:
        started = g.ins(f"load i1, ptr {slot(ok, 'i1', i)}")
        jn, go = g.label("pj"), g.label("pg")
        g.emit(f"br i1 {started}, label %{jn}, label %{go}")
        g.block(jn)
        h = g.ins(f"load i64, ptr {slot(hs, 'i64', i)}")
        g.emit(f"call i32 @pthread_join(i64 {h}, ptr null)")
        g.emit(f"br label %{go}")
        g.block(go)

    each("1", spawn)
    g.emit(f"call void @{body}({', '.join(f'{ty} {v}' for ty, v in params[:-1])}, i64 0)")
    each("1", join)


def uses(stmts: list) -> tuple[set[str], set[str]]:
    """The variables a statement list reads but does not bind (loop counters, accumulators),
    and the buffers it loads or stores."""
    used: set[str] = set()
    bound: set[str] = set()
    bufs: set[str] = set()
    seen: set[int] = set()

    def x(e: X) -> None:
        stack = [e]
        while stack:
            e = stack.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if e.op == "var":
                used.add(e.arg)
            elif e.op == "load":
                bufs.add(e.arg)
            stack.extend(e.src)

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
            elif isinstance(s, L.MacroMM):
                bufs.update((s.a, s.b, s.out))
                for e in s.exprs():
                    x(e)
            else:
                used.add("?")
    walk(stmts)
    return used - bound, bufs


def free_vars(stmts: list) -> set[str]:
    return uses(stmts)[0]
