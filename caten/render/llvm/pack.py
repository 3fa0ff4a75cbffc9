"""`PackT` in registers: a GEMM's row panel packed from a row-major matrix a vector of k at a
time. Each of the panel's rows gives one vector load of `lanes` consecutive k; a perfect-shuffle
network (log2(lanes) rounds of interleaving row i with row i + lanes/2) turns them into one
vector per k, stored under a mask of the panel's `width` rows. The scalar copy it replaces
moved one float per load and store (the Mixer's channel GEMMs spent 0.9 ms a call on it).

`PackN` (a straight copy: a row-major b's column panels) is one shared function per dtype and
width too: whole vectors per k row, masked loads for a panel short of columns. Each GEMM used
to render its own loops for it (a tenth of the Mixer's LLVM time)."""

from __future__ import annotations

from caten import loopir as L
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


def _begin(g: Emitter, s: L.PanelCopy, kind: str, lanes: int) -> tuple[str, tuple[str, str, str, str] | None]:
    """The module's function for copies like s, and None where it is defined already (by an
    earlier copy of the same dtype, width and vector length), else what its definition needs:
    (element type, vector type, mask type, masked store), the store declared."""
    name = f"caten_{kind}_{s.dtype.name}_{s.width}_{lanes}"
    if name in g.mod.shared:
        return name, None
    g.mod.shared.add(name)
    ty = rty(s.dtype)
    vt, mt = f"<{lanes} x {ty}>", f"<{lanes} x i1>"
    store = f"llvm.masked.store.v{lanes}{'f64' if ty == 'double' else 'f32'}.p0"
    g.mod.declare(store, "void", [vt, "ptr", "i32", mt])
    return name, (ty, vt, mt, store)


def _define(g: Emitter, s: L.PackT, lanes: int) -> str:
    name, types = _begin(g, s, "packt", lanes)
    if types is None:
        return name
    mod = g.mod
    ty, vt, _, store = types
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


def packn(g: Emitter, s: L.PackN) -> None:
    """A call of the module's straight copy for this dtype, width and vector length."""
    lanes = g.mod.vector_bits // (8 * s.dtype.itemsize)
    if lanes < 2 or s.dtype.bits not in (32, 64):
        g.stmts(s.expand())
        return
    args = [f"ptr %b_{s.dst}", f"ptr %b_{s.src}"] + [f"i64 {g.v(x)}" for x in s.exprs()]
    g.emit(f"call void @{_define_n(g, s, lanes)}({', '.join(args)})")


def _define_n(g: Emitter, s: L.PackN, lanes: int) -> str:
    """Each k row: ceil(width/lanes) vector loads and stores (a vector past the width under a
    mask of the lanes below it); a panel short of columns loads under a mask of its `cols`
    lanes, those past them read nothing and store zeros (the padding)."""
    name, types = _begin(g, s, "packn", lanes)
    if types is None:
        return name
    mod = g.mod
    ty, vt, mt, mstore = types
    mload = mstore.replace("masked.store", "masked.load")
    mod.declare(mload, vt, ["ptr", "i32", mt, vt])
    chunks = -(-s.width // lanes)
    lines = [f"define internal void @{name}(ptr noalias %dst, ptr noalias %src, i64 %doff, i64 %soff, i64 %ld, "
             f"i64 %cols, i64 %klen) #1 {{",
             "entry:",
             f"  %ci = insertelement <{lanes} x i64> poison, i64 %cols, i64 0",
             f"  %cs = shufflevector <{lanes} x i64> %ci, <{lanes} x i64> poison, <{lanes} x i32> zeroinitializer"]
    inside = []  # each chunk's lanes below the width, as a constant mask (None: all of them)
    for j in range(chunks):
        idx = ", ".join(f"i64 {j * lanes + i}" for i in range(lanes))
        lines.append(f"  %m{j} = icmp slt <{lanes} x i64> <{idx}>, %cs")
        whole = (j + 1) * lanes <= s.width
        bits = ", ".join(f"i1 {'true' if j * lanes + i < s.width else 'false'}" for i in range(lanes))
        inside.append(None if whole else f"<{bits}>")
    lines += [f"  %full = icmp sge i64 %cols, {s.width}",
              "  br i1 %full, label %fh, label %ph"]
    for kind in ("f", "p"):  # the full panels' loop, then the short one's
        lines += [f"{kind}h:",
                  f"  %{kind}k = phi i64 [0, %entry], [%{kind}k1, %{kind}b]",
                  f"  %{kind}more = icmp slt i64 %{kind}k, %klen",
                  f"  br i1 %{kind}more, label %{kind}b, label %done",
                  f"{kind}b:",
                  f"  %{kind}so = mul i64 %{kind}k, %ld",
                  f"  %{kind}sa = add i64 %soff, %{kind}so",
                  f"  %{kind}do = mul i64 %{kind}k, {s.width}",
                  f"  %{kind}da = add i64 %doff, %{kind}do"]
        for j in range(chunks):
            v, sp, dp = f"%{kind}v{j}", f"%{kind}sp{j}", f"%{kind}dp{j}"
            # (no `inbounds` where lanes are masked off: a chunk wholly past the columns reads nothing)
            exact = kind == "f" and inside[j] is None
            lines += [f"  %{kind}si{j} = add i64 %{kind}sa, {j * lanes}",
                      f"  {sp} = getelementptr {'inbounds ' if exact else ''}{ty}, ptr %src, i64 %{kind}si{j}",
                      f"  %{kind}di{j} = add i64 %{kind}da, {j * lanes}",
                      f"  {dp} = getelementptr inbounds {ty}, ptr %dst, i64 %{kind}di{j}"]
            if exact:
                lines.append(f"  {v} = load {vt}, ptr {sp}, align 4")
            else:
                mask = f"%m{j}" if kind == "p" else inside[j]
                lines.append(f"  {v} = call {vt} @{mload}(ptr {sp}, i32 4, {mt} {mask}, {vt} zeroinitializer)")
            if inside[j] is None:
                lines.append(f"  store {vt} {v}, ptr {dp}, align 4")
            else:
                lines.append(f"  call void @{mstore}({vt} {v}, ptr {dp}, i32 4, {mt} {inside[j]})")
        lines += [f"  %{kind}k1 = add nuw nsw i64 %{kind}k, 1",
                  f"  br label %{kind}h"]
    lines += ["done:", "  ret void", "}"]
    mod.funcs.append("\n".join(lines))
    mod.root(name)
    return name
