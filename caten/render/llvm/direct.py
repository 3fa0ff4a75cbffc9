"""Direct convolution tiles (`DirectMM`): a shared function per tile shape and window, whose
tiles load the image in place. Per column tile it finds each lane's output row and column (one
division, then a wrap loop) and from them each tap's lane masks (the padding bounds, and the
columns past the end), kept in a stack table. A tile sums, for each channel and then each tap,
the image's vectors times broadcasts of a's packed panel, into rows of vector accumulators
carried in phis. Where the tile's every vector lies inside the image buffer, vectors are loaded
whole and the masks drop the lanes outside the bounds from the multiply-adds; elsewhere (the
buffer's first and last rows) masked loads never read those lanes at all."""

from __future__ import annotations

import hashlib

from caten import loopir as L
from caten.loopir import X
from caten.render.llvm.emit import Emitter
from caten.render.llvm.gemm import store_tile
from caten.render.llvm.values import rty


class Inline:
    """A renderer-private statement: `emit(g)` writes its instructions where it stands."""

    def __init__(self, emit):
        self.emit = emit


def _splat(g: Emitter, ty: str, n: int, v: str) -> str:
    ins = g.ins(f"insertelement <{n} x {ty}> poison, {ty} {v}, i32 0")
    return g.ins(f"shufflevector <{n} x {ty}> {ins}, <{n} x {ty}> poison, <{n} x i32> zeroinitializer")


def _streaming(g: Emitter, s: L.DirectMM, at: tuple, clen: str, v: dict[str, L.X], vw: int) -> str:
    """Whether a tile's plain stores go past the caches: the output may be streamed
    (`DirectMM.stream`), the tile's one pass sums every channel (no later pass reads it back)
    and each row's vectors are aligned (non-temporal stores need it). The output, written once
    by whole lines, then costs no line reads (conv f on a 2-core Xeon: 10% faster in the
    benchmark's calls after a pause; one thread writing a fresh output per image: 1375 -> 1249
    us an image, as fast as into an L2-resident one; a two-thread loop: unchanged)."""
    item = s.dtype.itemsize
    vbytes = vw * item
    one = g.ins(f"and i1 {g.icmp('eq', 'i64', clen, g.v(v['kin']))}, {g.icmp('ne', 'i64', g.v(v['stream']), '0')}")
    base = g.ins(f"ptrtoint ptr {g.ins(f'getelementptr {rty(s.dtype)}, ptr %b_O, i64 {g.v(at[0])}')} to i64")
    row = g.ins(f"mul i64 {g.v(at[1])}, {item}")
    mis = g.ins(f"and i64 {g.ins(f'or i64 {base}, {row}')}, {vbytes - 1}")
    return g.ins(f"and i1 {one}, {g.icmp('eq', 'i64', mis, '0')}")


def directmm(g: Emitter, s: L.DirectMM) -> str:
    """The function of s's tile shape and window, defined once per module:
    `(ptr a, ptr b, ptr out, i64 ...s.params())`."""
    mod = g.mod
    digest = hashlib.blake2b(s.static().encode(), digest_size=6).hexdigest()
    name = f"caten_direct_{s.dtype.name}_{s.rows}x{s.cols}_{digest}"
    if name not in mod.shared:
        mod.shared.add(name)
        names = [n for n, _ in s.params()]
        fg = g.new([], {})
        _body(fg, s, {n: L.var(n) for n in names})
        params = [f"ptr noalias %b_{b}" for b in "ABO"] + [f"i64 %v_{n}" for n in names]
        mod.funcs.append(fg.text(f"define internal void @{name}({', '.join(params)}) #1 {{"))
        mod.root(name)
    return name


def _body(g: Emitter, s: L.DirectMM, v: dict[str, L.X]) -> None:
    rows, cols = s.rows, s.cols
    ty = rty(s.dtype)
    # the tile works in vector registers: `nparts` of `vw` lanes a row, each with its own mask
    # (one <64 x i1> mask cost a k-register shift per load, on the FMA port)
    vw = max(1, min(cols, g.mod.vector_bits // (8 * s.dtype.itemsize)))
    nparts = cols // vw
    it_, mt = f"<{cols} x i64>", f"<{cols} x i1>"
    pt, pm = f"<{vw} x {ty}>", f"<{vw} x i1>"
    jt, it, cb = L.var("jt"), L.var("it"), L.var("cb")
    lanes = "<" + ", ".join(f"i64 {i}" for i in range(cols)) + ">"
    ntaps = len(s.positions)
    table = "%b_dmasks"
    g.allocas.append(f"  {table} = alloca [{ntaps * nparts} x i{vw}], align 64")
    state: dict = {}

    def column_tile(g: Emitter) -> None:
        """Each tap's lane masks (into the stack table) and image offset for the column tile jt."""
        qs = L.iadd(v["q0"], L.imul(jt, L.const(cols)))
        cv = g.v(L.imin(L.const(cols), L.isub(v["nrem"], L.imul(jt, L.const(cols)))))
        valid = g.ins(f"icmp slt {it_} {lanes}, {_splat(g, 'i64', cols, cv)}")
        coords = (None, None)
        if s.bounds:
            q, w = g.v(qs), g.v(v["width"])
            wv = g.ins(f"add {it_} {_splat(g, 'i64', cols, g.ins(f'srem i64 {q}, {w}'))}, {lanes}")
            hv = _splat(g, "i64", cols, g.ins(f"sdiv i64 {q}, {w}"))
            ws = _splat(g, "i64", cols, w)
            # lanes past the row's end wrap into the next rows (a few rounds: the tile spans
            # cols / width rows at most)
            pre, hd, bd, ex = g.cur, g.label("wh"), g.label("wb"), g.label("we")
            h1, w1, h2, w2 = g.tmp(), g.tmp(), g.tmp(), g.tmp()
            g.emit(f"br label %{hd}")
            g.block(hd)
            g.emit(f"{h1} = phi {it_} [{hv}, %{pre}], [{h2}, %{bd}]")
            g.emit(f"{w1} = phi {it_} [{wv}, %{pre}], [{w2}, %{bd}]")
            over = g.ins(f"icmp sge {it_} {w1}, {ws}")
            bits = g.ins(f"bitcast {mt} {over} to i{cols}")
            g.emit(f"br i1 {g.icmp('ne', f'i{cols}', bits, '0')}, label %{bd}, label %{ex}")
            g.block(bd)
            g.emit(f"{w2} = sub {it_} {w1}, {g.ins(f'select {mt} {over}, {it_} {ws}, {it_} zeroinitializer')}")
            g.emit(f"{h2} = add {it_} {h1}, {g.ins(f'zext {mt} {over} to {it_}')}")
            g.emit(f"br label %{hd}")
            g.block(ex)
            coords = (h1, w1)
        offs = []
        lims = [g.v(v[f"lim{i}"]) for i in range(len(s.lims))]
        for t, pos in enumerate(s.positions):
            m = valid
            for bi, (lane, shifts) in enumerate(s.bounds):
                sh = sum(a * b for a, b in zip(shifts, pos))
                x = coords[lane] if sh == 0 else g.ins(f"add {it_} {coords[lane]}, {_splat(g, 'i64', cols, str(sh))}")
                lo = g.ins(f"icmp sge {it_} {x}, {_splat(g, 'i64', cols, lims[2 * bi])}")
                hi = g.ins(f"icmp slt {it_} {x}, {_splat(g, 'i64', cols, lims[2 * bi + 1])}")
                m = g.ins(f"and {mt} {m}, {g.ins(f'and {mt} {lo}, {hi}')}")
            for p in range(nparts):
                idx = ", ".join(f"i32 {p * vw + i}" for i in range(vw))
                part = g.ins(f"shufflevector {mt} {m}, {mt} poison, <{vw} x i32> <{idx}>")
                slot = g.ins(f"getelementptr inbounds i{vw}, ptr {table}, i64 {t * nparts + p}")
                g.emit(f"store i{vw} {g.ins(f'bitcast {pm} {part} to i{vw}')}, ptr {slot}")
            off = L.iadd(v["boff"], qs)
            for i, p in enumerate(pos):
                off = L.iadd(off, L.imul(v[f"tc{i}"], L.const(p)))
            offs.append(g.v(off))
        # the span of the taps' vectors (of channel 0), for the check that a block's lie in b
        near = far = offs[0]
        for o in offs[1:]:
            near = g.ins(f"select i1 {g.icmp('slt', 'i64', o, near)}, i64 {o}, i64 {near}")
            far = g.ins(f"select i1 {g.icmp('sgt', 'i64', o, far)}, i64 {o}, i64 {far}")
        state["offs"], state["near"], state["far"] = offs, near, g.ins(f"add i64 {far}, {cols}")

    def channels(g: Emitter, fast: bool, clen: str, c0v: str, abase: str) -> list[str]:
        """The channel loop of a tile, every tap per channel; returns the accumulators after it.
        `fast`: each tap's vectors lie inside b (`tile` checked), so they are loaded whole and
        the lanes outside the bounds are dropped by the mask of the multiply-add (AVX-512: a
        merge-masked FMA, free) or of the vector (an AND); else masked loads, which never read
        those lanes (but cost: conv f 378 -> 316 GF/s when every load is one)."""
        suf = "f64" if ty == "double" else "f32"
        fma, mload = f"llvm.fma.v{vw}{suf}", f"llvm.masked.load.v{vw}{suf}.p0"
        g.mod.declare(fma, pt, [pt, pt, pt])
        g.mod.declare(mload, pt, ["ptr", "i32", pm, pt])
        pre, hd, bd, ex = g.cur, g.label("ch"), g.label("cb"), g.label("ce")
        c, c1 = g.tmp(), g.tmp()
        cur = [g.tmp() for _ in range(rows * nparts)]
        g.emit(f"br label %{hd}")
        g.block(hd)
        at = len(g.lines)
        g.lines.append(None)  # (the phis, once the loop body's last values are known)
        g.emit(f"br i1 {g.icmp('slt', 'i64', c, clen)}, label %{bd}, label %{ex}")
        g.block(bd)
        step = g.ins(f"mul i64 {g.ins(f'add i64 {c0v}, {c}')}, {state['istride']}")
        arow = g.ins(f"add i64 {abase}, {g.ins(f'mul i64 {c}, {len(s.positions) * rows}')}")
        accs = list(cur)
        merge = fast and vw * s.dtype.itemsize >= 64  # (k-registers: AVX-512)
        for t, off in enumerate(state["offs"]):
            bp = g.ins(f"getelementptr {ty}, ptr %b_B, i64 {g.ins(f'add i64 {off}, {step}')}")
            bvs, masks = [], []
            for p in range(nparts):
                slot = g.ins(f"getelementptr inbounds i{vw}, ptr {table}, i64 {t * nparts + p}")
                m = g.ins(f"bitcast i{vw} {g.ins(f'load i{vw}, ptr {slot}')} to {pm}")
                pp = bp if p == 0 else g.ins(f"getelementptr {ty}, ptr {bp}, i64 {p * vw}")
                if not fast:
                    bv = g.ins(f"call {pt} @{mload}(ptr {pp}, i32 {s.dtype.itemsize}, {pm} {m}, {pt} zeroinitializer)")
                else:
                    bv = g.ins(f"load {pt}, ptr {pp}, align {s.dtype.itemsize}")
                    if not merge:
                        bv = g.ins(f"select {pm} {m}, {pt} {bv}, {pt} zeroinitializer")
                bvs.append(bv)
                masks.append(m)
            ap = g.ins(f"getelementptr inbounds {ty}, ptr %b_A, i64 {g.ins(f'add i64 {arow}, {t * rows}')}")
            for r in range(rows):
                pr = ap if r == 0 else g.ins(f"getelementptr inbounds {ty}, ptr {ap}, i64 {r}")
                av = _splat(g, ty, vw, g.ins(f"load {ty}, ptr {pr}, align {s.dtype.itemsize}"))
                for p in range(nparts):
                    i = r * nparts + p
                    f = g.ins(f"call {pt} @{fma}({pt} {av}, {pt} {bvs[p]}, {pt} {accs[i]})")
                    accs[i] = g.ins(f"select {pm} {masks[p]}, {pt} {f}, {pt} {accs[i]}") if merge else f
        g.emit(f"{c1} = add nuw nsw i64 {c}, 1")
        latch = g.cur
        g.emit(f"br label %{hd}")
        g.lines[at] = "\n".join([f"  {c} = phi i64 [0, %{pre}], [{c1}, %{latch}]"]
                                 + [f"  {a} = phi {pt} [zeroinitializer, %{pre}], [{n}, %{latch}]"
                                    for a, n in zip(cur, accs)])
        g.block(ex)
        return cur

    def tile(g: Emitter) -> None:
        """Rows [it*rows, +rows) of the column tile, channels [cb*cblock, +cblock): the channel
        loop (whole loads where the block's every tap lies inside b, masked loads else), then
        the store."""
        c0 = L.imul(cb, L.const(s.cblock))
        clen = g.v(L.imin(L.const(s.cblock), L.isub(v["kin"], c0)))
        abase = g.v(L.iadd(L.iadd(v["aoff"], L.imul(it, v["astep"])), L.imul(c0, L.const(rows * len(s.positions)))))
        c0v = g.v(c0)
        state["istride"] = istr = g.v(v["istride"])
        lo = g.ins(f"add i64 {state['near']}, {g.ins(f'mul i64 {c0v}, {istr}')}")
        top = g.ins(f"add i64 {c0v}, {g.ins(f'add i64 {clen}, -1')}")
        last = g.ins(f"mul i64 {top}, {istr}")
        hi = g.ins(f"add i64 {state['far']}, {last}")
        inside = g.ins(f"and i1 {g.icmp('sge', 'i64', lo, '0')}, {g.icmp('sle', 'i64', hi, g.v(v['blen']))}")
        if vw * s.dtype.itemsize >= 64:  # (the merge-masked multiply-adds skip 0 * w: exact needs it summed)
            inside = g.ins(f"and i1 {inside}, {g.icmp('eq', 'i64', g.v(v['exact']), '0')}")
        lf, lm, lj = g.label("df"), g.label("dm"), g.label("dj")
        g.emit(f"br i1 {inside}, label %{lf}, label %{lm}")
        g.block(lf)
        fa = channels(g, True, clen, c0v, abase)
        ef = g.cur
        g.emit(f"br label %{lj}")
        g.block(lm)
        ma = channels(g, False, clen, c0v, abase)
        em = g.cur
        g.emit(f"br label %{lj}")
        g.block(lj)
        accs = [g.ins(f"phi {pt} [{a}, %{ef}], [{b}, %{em}]") for a, b in zip(fa, ma)]
        ib = L.imul(it, L.const(rows))
        at = (L.iadd(v["ooff"], L.iadd(L.imul(ib, v["ostride"]), L.imul(jt, L.const(cols)))), v["ostride"],
              L.imin(L.const(rows), L.isub(v["mrem"], ib)),
              L.imin(L.const(cols), L.isub(v["nrem"], L.imul(jt, L.const(cols)))), L.icmplt(L.const(0), cb))
        store_tile(g, [accs[r * nparts:(r + 1) * nparts] for r in range(rows)], s.dtype, rows, cols, "O", at, "dt",
                   _streaming(g, s, at, clen, v, vw) if s.stream is not None else None)

    # per column tile: the channels in blocks (each block's image rows stay in L1 for all row
    # tiles and taps), each block summed into the output the block before stored
    ncb = X.make("idiv", L.IDX, (L.iadd(v["kin"], L.const(s.cblock - 1)), L.const(s.cblock)))
    g.stmts([L.Loop("jt", v["nj"], [Inline(column_tile), L.Loop("cb", ncb, [L.Loop("it", v["ni"], [Inline(tile)])])])])
    if s.stream is not None:
        # non-temporal stores are weakly ordered: made visible before the caller's join (on
        # x86 only an sfence or mfence orders them; LLVM's seq_cst fence there is a locked or)
        if g.mod.x86:
            g.mod.declare("llvm.x86.sse.sfence", "void", [])
            g.emit("call void @llvm.x86.sse.sfence()")
        else:
            g.emit("fence seq_cst")
