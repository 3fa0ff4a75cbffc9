"""The GEMM micro-kernel: `TileMM` as rows of vector accumulators carried in phis through the k
loop, and `MacroMM` as a shared function per tile shape running a packed block's tiles."""

from __future__ import annotations

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.render.llvm.emit import Emitter
from caten.render.llvm.values import rty


def tilemm(g: Emitter, s: L.TileMM) -> None:
    """The micro-kernel: rows accumulators of <cols x T> carried in phis through the k loop,
    one vector load of B and one broadcast of A per row and k, then full-tile vector stores
    (or, for an edge tile, a spill to a stack tile and scalar stores of the valid part). The
    output tile's lines are prefetched (for writing) before the k loop: its rows lie a row of
    the output apart, in L3 or memory, and the stores after the loop waited for them (a
    2048^3 matmul on a 2-core Zen 4: 96-97 -> 92-93 ms; no change on an AVX-512 Xeon)."""
    ty, rows, cols = rty(s.dtype), s.rows, s.cols
    vt = f"<{cols} x {ty}>"
    fma = f"llvm.fma.v{cols}{'f64' if ty == 'double' else 'f32'}"
    if not s.pairs:
        g.mod.declare(fma, vt, [vt, vt, vt])
    aoff, boff, kext = g.v(s.aoff), g.v(s.boff), g.v(s.kext)
    pre = g.cur
    h, b, e = g.label("th"), g.label("tb"), g.label("te")
    k, k1 = g.tmp(), g.tmp()
    accs = [g.tmp() for _ in range(rows)]
    news = [g.tmp() for _ in range(rows)]
    # (a prefetch never faults: an edge tile's rows past the output are harmless)
    g.mod.declare("llvm.prefetch.p0", "void", ["ptr", "i32", "i32", "i32"])
    o0, ost = g.v(s.ooff), g.v(s.ostride)
    per = 64 // s.dtype.itemsize
    for r in range(rows):
        oi = g.ins(f"add i64 {o0}, {g.ins(f'mul i64 {ost}, {r}')}")
        for c in range(0, cols, per):
            pp = g.ins(f"getelementptr {ty}, ptr %b_{s.out}, i64 {g.ins(f'add i64 {oi}, {c}')}")
            g.emit(f"call void @llvm.prefetch.p0(ptr {pp}, i32 1, i32 3, i32 1)")
    g.emit(f"br label %{h}")
    g.block(h)
    g.emit(f"{k} = phi i64 [0, %{pre}], [{k1}, %{b}]")
    for a, nw in zip(accs, news):
        g.emit(f"{a} = phi {vt} [zeroinitializer, %{pre}], [{nw}, %{b}]")
    c = g.icmp("slt", "i64", k, kext)
    g.emit(f"br i1 {c}, label %{b}, label %{e}")
    g.block(b)
    bi = g.ins(f"add i64 {g.ins(f'mul i64 {k}, {cols}')}, {boff}")
    bv = g.ins(f"load {vt}, ptr {g.ins(f'getelementptr inbounds {ty}, ptr %b_{s.b}, i64 {bi}')}, align 4")
    ai = g.ins(f"add i64 {g.ins(f'mul i64 {k}, {rows}')}, {aoff}")
    ap = g.ins(f"getelementptr inbounds {ty}, ptr %b_{s.a}, i64 {ai}")
    for r in range(rows):
        pr = ap if r == 0 else g.ins(f"getelementptr inbounds {ty}, ptr {ap}, i64 {r}")
        av = g.ins(f"load {ty}, ptr {pr}, align 4")
        ins = g.ins(f"insertelement {vt} poison, {ty} {av}, i32 0")
        sp = g.ins(f"shufflevector {vt} {ins}, {vt} poison, <{cols} x i32> zeroinitializer")
        if s.pairs:
            g.emit(f"{news[r]} = add {vt} {accs[r]}, {pair_dot(g, sp, bv, cols)}")
        else:
            g.emit(f"{news[r]} = call {vt} @{fma}({vt} {sp}, {vt} {bv}, {vt} {accs[r]})")
    g.emit(f"{k1} = add nuw nsw i64 {k}, 1")
    g.emit(f"br label %{h}, !llvm.loop {g.mod.unroll_md(4)}")
    g.block(e)
    store_tile(g, [[a] for a in accs], s.dtype, rows, cols, s.out, (s.ooff, s.ostride, s.rvalid, s.cvalid, s.beta),
               s.var)


def pair_dot(g: Emitter, a: str, b: str, cols: int) -> str:
    """lo(a)*lo(b) + hi(a)*hi(b) per lane of two <cols x i32> vectors of 16-bit pairs, in the
    form x86's instruction selection turns into vpmaddwd (vpdpwssd with the add, on VNNI)."""
    wide, half = f"<{2 * cols} x i32>", f"<{2 * cols} x i16>"
    a32, b32 = (g.ins(f"sext {half} {g.ins(f'bitcast <{cols} x i32> {v} to {half}')} to {wide}") for v in (a, b))
    p = g.ins(f"mul nsw {wide} {a32}, {b32}")
    lanes = [", ".join(f"i32 {2 * i + o}" for i in range(cols)) for o in (0, 1)]
    even, odd = (g.ins(f"shufflevector {wide} {p}, {wide} poison, <{cols} x i32> <{ln}>") for ln in lanes)
    return g.ins(f"add <{cols} x i32> {even}, {odd}")


def store_tile(g: Emitter, accs: list[list[str]], dtype: DType, rows: int, cols: int, out: str,
               at: tuple[L.X, L.X, L.X, L.X, L.X], var: str, stream: str | None = None) -> None:
    """A tile's rows, each as vectors side by side (`accs[r]`, equal widths summing to cols),
    into out[ooff + r*ostride + c] (plus what is there if beta), `at` = (ooff, ostride, rvalid,
    cvalid, beta): vector stores of the valid rows when every column is valid, else a spill to
    a stack tile and scalar stores of the valid part. `stream`: an i1, true where the plain
    stores may go past the caches (non-temporal: every vector of every row aligned to its size)."""
    ty = rty(dtype)
    width = cols // len(accs[0])
    vt = f"<{width} x {ty}>"
    ooff, ostr, rv, cv, beta = (g.v(x) for x in at)
    lf, lp, lj = g.label("tf"), g.label("tp"), g.label("tj")
    g.emit(f"br i1 {g.icmp('eq', 'i64', cv, str(cols))}, label %{lf}, label %{lp}")
    g.block(lf)  # whole rows: vector stores of the rows below rvalid (an edge tile of M included)

    def emit_rows(add: bool, nt: bool = False) -> None:
        _whole_rows(g, accs, ty, vt, width, out, ooff, ostr, rv, add, width * dtype.itemsize if nt else 0)
        g.emit(f"br label %{lj}")

    def plain() -> None:
        if stream is not None:
            ln, lr = g.label("tn"), g.label("tr")
            g.emit(f"br i1 {stream}, label %{ln}, label %{lr}")
            g.block(ln)
            emit_rows(False, True)
            g.block(lr)
        emit_rows(False)

    if at[4].op == "const" and at[4].arg:
        emit_rows(True)
    elif at[4].op == "const":
        plain()
    else:  # (a branch, not a select: the plain stores must not read the output first)
        la, ls = g.label("ta"), g.label("ts")
        g.emit(f"br i1 {beta}, label %{la}, label %{ls}")
        g.block(la)
        emit_rows(True)
        g.block(ls)
        plain()
    g.block(lp)
    tname = f"{var}_tile"
    g.allocas.append(f"  %b_{tname} = alloca [{rows * cols} x {ty}], align 64")
    for r, row in enumerate(accs):
        for p, a in enumerate(row):
            tp = g.ins(f"getelementptr inbounds {ty}, ptr %b_{tname}, i64 {r * cols + p * width}")
            g.emit(f"store {vt} {a}, ptr {tp}, align 4")
    rvar, cvar = f"{var}_er", f"{var}_ec"
    oidx = L.iadd(at[0], L.iadd(L.imul(L.var(rvar), at[1]), L.var(cvar)))
    tv = L.load(tname, L.iadd(L.imul(L.var(rvar), L.const(cols)), L.var(cvar)), dtype)
    val = L.alu(Op.WHERE, dtype, at[4], L.alu(Op.ADD, dtype, L.load(out, oidx, dtype), tv), tv)
    g.scopes.append({})
    g.stmts([L.Loop(rvar, at[2], [L.Loop(cvar, at[3], [L.Store(out, oidx, val)], "cold")], "cold")])
    g.scopes.pop()
    g.emit(f"br label %{lj}")
    g.block(lj)


def _whole_rows(g: Emitter, accs: list[list[str]], ty: str, vt: str, width: int, out: str, ooff: str,
                ostr: str, rv: str, add: bool, nt: int) -> None:
    """Vector stores of a tile's rows below rv, each adding what is there if `add`; `nt` > 0:
    non-temporal stores, every vector aligned to nt bytes."""
    for r, row in enumerate(accs):
        skip = None
        if r > 0:
            keep, skip = g.label("tr"), g.label("ts")
            g.emit(f"br i1 {g.icmp('slt', 'i64', str(r), rv)}, label %{keep}, label %{skip}")
            g.block(keep)
        oi = g.ins(f"add i64 {ooff}, {g.ins(f'mul i64 {ostr}, {r}')}")
        for p, a in enumerate(row):
            op = g.ins(f"getelementptr inbounds {ty}, ptr %b_{out}, i64 {g.ins(f'add i64 {oi}, {p * width}')}")
            old = g.ins(f"load {vt}, ptr {op}, align 4")
            val = (g.ins(f"add {vt} {old}, {a}") if ty.startswith("i") else g.fop("fadd", vt, old, a, "")) if add else a
            g.emit(f"store {vt} {val}, ptr {op}, align {nt}, !nontemporal !{{i32 1}}" if nt else
                   f"store {vt} {val}, ptr {op}, align 4")
        if skip is not None:
            g.emit(f"br label %{skip}")
            g.block(skip)


def macromm(g: Emitter, s: L.MacroMM) -> str:
    """The function running a packed block's tiles, defined once per module for each tile
    shape: `(ptr a, ptr b, ptr out, i64 aoff, boff, ooff, ostride, ni, nj, mrem, nrem, kext, i1 beta)`."""
    mod = g.mod
    name = f"caten_tiles_{s.dtype.name}{'p' if s.pairs else ''}_{s.rows}x{s.cols}_{s.astep}_{s.bstep}"
    if name not in mod.shared:
        mod.shared.add(name)
        names = ("kext", "aoff", "boff", "ooff", "ostride", "ni", "nj", "mrem", "nrem")
        v = {n: L.var(n) for n in names}
        gen = L.MacroMM("mm", s.dtype, s.rows, s.cols, v["kext"], "A", v["aoff"], s.astep, "B", v["boff"],
                        s.bstep, "O", v["ooff"], v["ostride"], v["ni"], v["nj"], v["mrem"], v["nrem"],
                        L.var("beta", T.bool_), s.pairs)
        fg = g.new([], {})
        fg.stmts(gen.expand())
        params = [f"ptr noalias %b_{b}" for b in "ABO"] + [f"i64 %v_{n}" for n in names] + ["i1 %v_beta"]
        mod.funcs.append(fg.text(f"define internal void @{name}({', '.join(params)}) #1 {{"))
        mod.root(name)
    return name
