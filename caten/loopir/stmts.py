"""Loop-IR statements: loops, stores, accumulators and the GEMM/convolution tile statements whose
`expand()` gives the same computation in the plain ones (caten.loopir's docstring lists them)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.loopir.expr import IDX, X, alu, const, iadd, icmplt, imin, imul, isub, land, load, nodes, var


# statements ----------------------------------------------------------------------------------
@dataclass
class Loop:
    var: str
    extent: X
    body: list = field(default_factory=list)
    hint: str = ""  # "cold": rarely run or tiny (renderers may skip vectorizing/unrolling it); "outer": a
    #                 kernel's outer loop split over threads, after its packed-once operands; "serial":
    #                 iterations must run in turn (a SCATTER's axis: two may write one element)


@dataclass
class Parallel(Loop):
    """A loop whose iterations are independent (disjoint writes, private scratch): a renderer
    may run them on up to `most` threads at once; as a plain Loop it runs them in turn."""
    most: int = 1


@dataclass
class Store:
    buf: str
    idx: X
    value: X


@dataclass
class Acc:
    var: str
    dtype: DType
    init: X


@dataclass
class SetAcc:
    var: str
    value: X


@dataclass
class TileMM:
    """A register-tiled multiply-accumulate over packed, zero-padded panels:

        for r in 0..rvalid, c in 0..cvalid:
            acc = sum over k in 0..kext of a[aoff + k*rows + r] * b[boff + k*cols + c]  (reassociable)
            out[ooff + r*ostride + c] = (out[ooff + r*ostride + c] if beta else 0) + acc

    `rows`/`cols` are ints; the panels hold rows (cols) values per k, so a renderer may keep the
    whole rows x cols tile in vector registers and store only the valid part. `var` prefixes
    the names of the loop variables of `expand()`. `pairs` (i32 only): each panel value is a word
    of two 16-bit integers, k pairs (low half first), and a * b is the sum of the two halves'
    products (x86's vpmaddwd); kext counts pairs (caten.schedule.pairs)."""
    var: str
    dtype: DType
    rows: int
    cols: int
    kext: X
    a: str
    aoff: X
    b: str
    boff: X
    out: str
    ooff: X
    ostride: X
    rvalid: X
    cvalid: X
    beta: X
    pairs: bool = False

    def expand(self) -> list:
        r, c, k, acc = (f"{self.var}_{x}" for x in "rcka")
        rv, cv, kv = var(r), var(c), var(k)
        av = load(self.a, iadd(self.aoff, iadd(imul(kv, const(self.rows)), rv)), self.dtype)
        bv = load(self.b, iadd(self.boff, iadd(imul(kv, const(self.cols)), cv)), self.dtype)
        prod = pair_dot(av, bv) if self.pairs else alu(Op.MUL, self.dtype, av, bv)
        upd = alu(Op.ADD, self.dtype, var(acc, self.dtype), prod, arg="acc")
        oidx = iadd(self.ooff, iadd(imul(rv, self.ostride), cv))
        accv = var(acc, self.dtype)
        val = alu(Op.WHERE, self.dtype, self.beta, alu(Op.ADD, self.dtype, load(self.out, oidx, self.dtype), accv),
                  accv)
        body = [Acc(acc, self.dtype, const(0.0, self.dtype)), Loop(k, self.kext, [SetAcc(acc, upd)]),
                Store(self.out, oidx, val)]
        return [Loop(r, self.rvalid, [Loop(c, self.cvalid, body)])]


def pair_dot(a: X, b: X) -> X:
    """lo(a)*lo(b) + hi(a)*hi(b) of two i32 words of two 16-bit integers each, in i32."""
    def lo(x: X) -> X:
        return alu(Op.CAST, T.i32, alu(Op.CAST, T.i16, x))

    def hi(x: X) -> X:  # the top half, signed: an arithmetic shift (the renderers' "shr" primitive; a CAST
        return X.make("shr", T.i32, (x, const(16, T.i32)))  # from f64 would need the decompose pass, long done)

    return alu(Op.ADD, T.i32, alu(Op.MUL, T.i32, lo(a), lo(b)), alu(Op.MUL, T.i32, hi(a), hi(b)))


@dataclass
class MacroMM:
    """The tiles of one packed block: for jt < nj, it < ni, a TileMM of panel A `it` (offset
    aoff + it*astep) and panel B `jt` (boff + jt*bstep) into out[ooff + it*rows*ostride +
    jt*cols ...], valid up to mrem rows and nrem columns from the block's origin. Every GEMM
    has this same shape, so a renderer may emit it once per module and call it."""
    var: str
    dtype: DType
    rows: int
    cols: int
    kext: X
    a: str
    aoff: X
    astep: int
    b: str
    boff: X
    bstep: int
    out: str
    ooff: X
    ostride: X
    ni: X
    nj: X
    mrem: X
    nrem: X
    beta: X
    pairs: bool = False

    def exprs(self) -> tuple[X, ...]:
        return (self.kext, self.aoff, self.boff, self.ooff, self.ostride, self.ni, self.nj, self.mrem, self.nrem,
                self.beta)

    def expand(self) -> list:
        jt, it = var(f"{self.var}_jt"), var(f"{self.var}_it")
        ib, jb = imul(it, const(self.rows)), imul(jt, const(self.cols))
        tile = TileMM(self.var, self.dtype, self.rows, self.cols, self.kext,
                      self.a, iadd(self.aoff, imul(it, const(self.astep))),
                      self.b, iadd(self.boff, imul(jt, const(self.bstep))),
                      self.out, iadd(self.ooff, iadd(imul(ib, self.ostride), jb)), self.ostride,
                      imin(const(self.rows), iadd(self.mrem, imul(ib, const(-1)))),
                      imin(const(self.cols), iadd(self.nrem, imul(jb, const(-1)))), self.beta, self.pairs)
        return [Loop(it.arg, self.ni, [Loop(jt.arg, self.nj, [tile])])]


@dataclass
class PanelCopy:
    """A copy that packs one GEMM panel, `valid` of its `width` lanes by `klen` k rows, from
    src[soff ...] (row stride `ld`) to dst[doff + k*width + lane] (PackT, PackN)."""
    var: str
    dtype: DType
    width: int
    dst: str
    doff: X
    src: str
    soff: X
    ld: X
    valid: X
    klen: X

    def exprs(self) -> tuple[X, ...]:
        return (self.doff, self.soff, self.ld, self.valid, self.klen)


@dataclass
class PackT(PanelCopy):
    """A transposing copy, a GEMM's row panel packed from a row-major a (rows < width):
    dst[doff + k*width + r] = src[soff + r*ld + k] for k < klen, r < valid. A renderer may move
    whole vectors of k and transpose them in registers; `expand()` is the plain loops."""

    def expand(self) -> list:
        k, r = var(f"{self.var}_k"), var(f"{self.var}_r")
        at = iadd(self.soff, iadd(imul(r, self.ld), k))
        return [Loop(k.arg, self.klen, [Loop(r.arg, self.valid, [
            Store(self.dst, iadd(self.doff, iadd(imul(k, const(self.width)), r)), load(self.src, at, self.dtype))],
            "cold")], "cold")]


@dataclass
class PackN(PanelCopy):
    """A straight copy, a GEMM's panel packed from a matrix whose panel lanes are contiguous (the
    columns of a row-major b: the Mixer's weights): dst[doff + k*width + c] = src[soff + k*ld + c]
    for c < valid, 0 for valid <= c < width, k < klen. A renderer may move whole rows of the
    panel with (masked) vector loads; `expand()` is the plain loops."""

    def expand(self) -> list:
        k, c, z = var(f"{self.var}_k"), var(f"{self.var}_c"), var(f"{self.var}_z")
        row = iadd(self.doff, imul(k, const(self.width)))
        return [Loop(k.arg, self.klen, [
            Loop(c.arg, self.valid, [Store(self.dst, iadd(row, c),
                                           load(self.src, iadd(self.soff, iadd(imul(k, self.ld), c)), self.dtype))]),
            Loop(z.arg, isub(const(self.width), self.valid), [Store(self.dst, iadd(row, iadd(self.valid, z)),
                                                                     const(0.0, self.dtype))], "cold")])]


@dataclass
class DirectMM:
    """Direct convolution tiles (caten.schedule.direct): a MacroMM whose b is read in place.

        for it < ni, jt < nj, r < min(rows, mrem - it*rows), c < min(cols, nrem - jt*cols):
            q = q0 + jt*cols + c
            out[ooff + (it*rows + r)*ostride + jt*cols + c] = sum over i < kin, taps t of
                a[aoff + it*astep + (i*ntaps + t)*rows + r] * (b[boff + i*istride + off(t) + q] if ok(t, q) else 0)

    with off(t) = sum(tcoef . positions[t]) and ok(t, q): for each bound (lane, shifts) with
    limits lo, hi: lo <= lane(q) + shifts . positions[t] < hi, lane 0 being q // width and 1
    q % width. a is packed as MacroMM's panels, all of K in one block; b's lanes outside the
    bounds are never read. `var` prefixes the names of `expand()`'s loop variables."""
    var: str
    dtype: DType
    rows: int
    cols: int
    cblock: int  # inner indices (channels) a renderer may sum per pass over the tiles, into out
    positions: tuple[tuple[int, ...], ...]
    bounds: tuple[tuple[int, tuple[int, ...]], ...]  # (lane, shifts) of each bound
    a: str
    aoff: X
    astep: X
    b: str
    boff: X
    blen: X  # b's elements: where a tile's vectors all lie in [0, blen), a renderer may load them whole
    exact: X  # 1: a holds an infinity or a NaN, so each masked lane's 0 * a must be summed (NaN)
    q0: X
    kin: X
    istride: X
    tcoef: tuple[X, ...]
    width: X
    lims: tuple[X, ...]  # lo, hi of each bound
    out: str
    ooff: X
    ostride: X
    ni: X
    nj: X
    mrem: X
    nrem: X
    stream: X | None = None  # nonzero where out is written once, for the caller, and too large
    #                          to stay in cache: a renderer may store a single pass's tiles past it

    def params(self) -> list[tuple[str, X]]:
        """The expressions, each with a name (a renderer's function parameters), in one order."""
        named = [(f, getattr(self, f)) for f in ("aoff", "astep", "boff", "blen", "exact", "q0", "kin", "istride")]
        named += [(f"tc{i}", x) for i, x in enumerate(self.tcoef)] + [("width", self.width)]
        named += [(f"lim{i}", x) for i, x in enumerate(self.lims)]
        named += [(f, getattr(self, f)) for f in ("ooff", "ostride", "ni", "nj", "mrem", "nrem")]
        return named + ([("stream", self.stream)] if self.stream is not None else [])

    def exprs(self) -> tuple[X, ...]:
        return tuple(x for _, x in self.params())

    def static(self) -> str:
        """What the expressions do not say: the taps' positions and the bounds' lanes and shifts."""
        return f"taps {list(self.positions)} bounds {list(self.bounds)} channels {self.cblock} a pass" \
            + (", streamed" if self.stream is not None else "")

    def expand(self) -> list:
        it, jt, r, c = (var(f"{self.var}_{x}") for x in ("it", "jt", "r", "c"))
        acc = var(f"{self.var}_a", self.dtype)
        q = iadd(self.q0, iadd(imul(jt, const(self.cols)), c))
        lanes = (X.make("idiv", IDX, (q, self.width)), X.make("imod", IDX, (q, self.width)))
        ib = imul(it, const(self.rows))
        body: list = [Acc(acc.arg, self.dtype, const(0.0, self.dtype))]
        for t, pos in enumerate(self.positions):
            iv = var(f"{self.var}_i{t}")
            ok = None
            for (lane, shifts), lo, hi in zip(self.bounds, self.lims[0::2], self.lims[1::2]):
                x = iadd(lanes[lane], const(sum(s * p for s, p in zip(shifts, pos))))
                ok = land(ok, land(alu(Op.NOT, T.bool_, icmplt(x, lo)), icmplt(x, hi)))
            off = const(0)
            for k, p in zip(self.tcoef, pos):
                off = iadd(off, imul(k, const(p)))
            bv = load(self.b, iadd(iadd(self.boff, imul(iv, self.istride)), iadd(off, q)), self.dtype)
            if ok is not None:
                bv = X.make("masked", self.dtype, (ok, bv))
            k = iadd(imul(iv, const(len(self.positions))), const(t))
            av = load(self.a, iadd(iadd(self.aoff, imul(it, self.astep)), iadd(imul(k, const(self.rows)), r)),
                      self.dtype)
            upd = alu(Op.ADD, self.dtype, acc, alu(Op.MUL, self.dtype, av, bv), arg="acc")
            body.append(Loop(iv.arg, self.kin, [SetAcc(acc.arg, upd)]))
        oidx = iadd(self.ooff, iadd(imul(iadd(ib, r), self.ostride), iadd(imul(jt, const(self.cols)), c)))
        body.append(Store(self.out, oidx, acc))
        rv = imin(const(self.rows), isub(self.mrem, ib))
        cv = imin(const(self.cols), isub(self.nrem, imul(jt, const(self.cols))))
        return [Loop(it.arg, self.ni, [Loop(jt.arg, self.nj, [Loop(r.arg, rv, [Loop(c.arg, cv, body)])])])]


def walk_stmts(stmts: list) -> Iterator[tuple[Any, list[X]]]:
    """Each statement, those in loop bodies included, with the expressions its fields hold."""
    stack = list(stmts)
    while stack:
        s = stack.pop()
        roots: list[X] = []
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, X):
                roots.append(v)
            elif isinstance(v, tuple):
                roots += [e for e in v if isinstance(e, X)]
            elif f.name == "body" and isinstance(v, list):
                stack.extend(v)
        yield s, roots


def stmt_vars(stmts: list) -> set[str]:
    """The names of the variables that statements' expressions read (their loops' own included)."""
    seen: set[int] = set()
    names: set[str] = set()
    for _, roots in walk_stmts(stmts):
        names.update(x.arg for x in nodes(*roots, seen=seen) if x.op == "var")
    return names


@dataclass
class BufParam:
    name: str
    dtype: DType
    role: str  # "in" | "out" | "temp"


@dataclass
class Kernel:
    """One function: loops over buffers passed by pointer, dims passed as i64."""
    name: str
    params: list[BufParam]
    dims: list[str]
    body: list
