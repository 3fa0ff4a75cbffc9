"""`PackT` in registers: a GEMM's row panel packed from a row-major matrix a vector of k at a
time. Each of the panel's rows gives one vector load of `lanes` consecutive k; a perfect-shuffle
network (log2(lanes) rounds of interleaving row i with row i + lanes/2) turns them into one
vector per k, stored under a mask of the panel's `width` rows. The scalar copy it replaces
moved one float per load and store (the Mixer's channel GEMMs spent 0.9 ms a call on it)."""

from __future__ import annotations

from caten.lower import loopir as L
from caten.render.llvm.emit import Emitter
from caten.render.llvm.values import rty


def packt(g: Emitter, s: L.PackT) -> None:
    """A call of the module's transposing copy for this dtype, width and vector length; the
    plain loops where a panel is wider than a vector."""
    lanes = g.mod.vector_bits // (8 * s.dtype.itemsize)
    if s.width > lanes or lanes < 2 or lanes & (lanes - 1) or s.dtype.bits not in (32, 64):
        g.stmts(s.expand())
        return
    name = _define(g, s, lanes)
    args = [f"ptr %b_{s.dst}", f"ptr %b_{s.src}"] + [f"i64 {g.v(x)}" for x in s.exprs()]
    g.emit(f"call void @{name}({', '.join(args)})")


def interleave(lanes: int, hi: bool) -> list[int]:
    """The shuffle mask interleaving the low (or high) halves of two vectors: a0 b0 a1 b1 ..."""
    base = lanes // 2 if hi else 0
    return [x for i in range(lanes // 2) for x in (base + i, lanes + base + i)]


def _define(g: Emitter, s: L.PackT, lanes: int) -> str:
    ty = rty(s.dtype)
    name = f"caten_packt_{s.dtype.name}_{s.width}_{lanes}"
    mod = g.mod
    if name in mod.shared:
        return name
    mod.shared.add(name)
    vt = f"<{lanes} x {ty}>"
    suf = "f64" if ty == "double" else "f32"
    store = f"llvm.masked.store.v{lanes}{suf}.p0"
    mod.declare(store, "void", [vt, "ptr", "i32", f"<{lanes} x i1>"])
    mask = "<" + ", ".join(f"i1 {'true' if r < s.width else 'false'}" for r in range(lanes)) + ">"
    lines = [f"define internal void @{name}(ptr noalias %dst, ptr noalias %src, i64 %doff, i64 %soff, i64 %ld, "
             f"i64 %rows, i64 %klen) #1 {{",
             "entry:",
             f"  %full = icmp eq i64 %rows, {s.width}",
             f"  %nv = and i64 %klen, {-lanes}",
             "  %kv = select i1 %full, i64 %nv, i64 0",
             "  br label %vh",
             "vh:",
             "  %k = phi i64 [0, %entry], [%k1, %vb]",
             "  %more = icmp slt i64 %k, %kv",
             "  br i1 %more, label %vb, label %th",
             "vb:"]
    vecs = []
    for r in range(lanes):
        if r < s.width:
            lines += [f"  %ro{r} = mul i64 %ld, {r}",
                      f"  %ra{r} = add i64 %soff, %ro{r}",
                      f"  %rb{r} = add i64 %ra{r}, %k",
                      f"  %rp{r} = getelementptr inbounds {ty}, ptr %src, i64 %rb{r}",
                      f"  %v0_{r} = load {vt}, ptr %rp{r}, align 4"]
            vecs.append(f"%v0_{r}")
        else:
            vecs.append("poison")
    lo = ", ".join(f"i32 {i}" for i in interleave(lanes, False))
    hi = ", ".join(f"i32 {i}" for i in interleave(lanes, True))
    # the perfect shuffle: each round's outputs 2i and 2i+1 interleave its inputs i and i + lanes/2;
    # after log2(lanes) rounds output k holds element k of every row, in row order
    for rnd in range(lanes.bit_length() - 1):
        out = []
        for i, (a, b) in enumerate((i, i + lanes // 2) for i in range(lanes // 2)):
            lines += [f"  %v{rnd + 1}_{2 * i} = shufflevector {vt} {vecs[a]}, {vt} {vecs[b]}, <{lanes} x i32> <{lo}>",
                      f"  %v{rnd + 1}_{2 * i + 1} = shufflevector {vt} {vecs[a]}, {vt} {vecs[b]}, "
                      f"<{lanes} x i32> <{hi}>"]
            out += [f"%v{rnd + 1}_{2 * i}", f"%v{rnd + 1}_{2 * i + 1}"]
        vecs = out
    for kk in range(lanes):
        lines += [f"  %kk{kk} = add i64 %k, {kk}",
                  f"  %ko{kk} = mul i64 %kk{kk}, {s.width}",
                  f"  %kd{kk} = add i64 %doff, %ko{kk}",
                  f"  %kp{kk} = getelementptr inbounds {ty}, ptr %dst, i64 %kd{kk}",
                  f"  call void @{store}({vt} {vecs[kk]}, ptr %kp{kk}, i32 4, <{lanes} x i1> {mask})"]
    lines += [f"  %k1 = add nuw nsw i64 %k, {lanes}",
              "  br label %vh",
              "th:",  # the k left over (all of them for a panel short of rows), element by element
              "  br label %tkh",
              "tkh:",
              "  %tk = phi i64 [%kv, %th], [%tk1, %tke]",
              "  %tkc = icmp slt i64 %tk, %klen",
              "  br i1 %tkc, label %trh, label %done",
              "trh:",
              "  %tr = phi i64 [0, %tkh], [%tr1, %trb]",
              "  %trc = icmp slt i64 %tr, %rows",
              "  br i1 %trc, label %trb, label %tke",
              "trb:",
              "  %ts0 = mul i64 %tr, %ld",
              "  %ts1 = add i64 %soff, %ts0",
              "  %ts2 = add i64 %ts1, %tk",
              f"  %tsp = getelementptr inbounds {ty}, ptr %src, i64 %ts2",
              f"  %tv = load {ty}, ptr %tsp, align 4",
              f"  %td0 = mul i64 %tk, {s.width}",
              "  %td1 = add i64 %doff, %td0",
              "  %td2 = add i64 %td1, %tr",
              f"  %tdp = getelementptr inbounds {ty}, ptr %dst, i64 %td2",
              f"  store {ty} %tv, ptr %tdp, align 4",
              "  %tr1 = add nuw nsw i64 %tr, 1",
              f"  br label %trh, !llvm.loop {mod.cold_md()}",
              "tke:",
              "  %tk1 = add nuw nsw i64 %tk, 1",
              f"  br label %tkh, !llvm.loop {mod.cold_md()}",
              "done:",
              "  ret void",
              "}"]
    mod.funcs.append("\n".join(lines))
    mod.root(name)
    return name
