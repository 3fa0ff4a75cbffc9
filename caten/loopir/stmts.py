"""The loop IR: what a kernel is after lowering, shared by every renderer (LLVM, C-like).

Expressions (`X`) are hash-consed trees; statements are plain objects. Index arithmetic is
i64. Values of f16/bf16 live in registers as f32 and are rounded after every op, as the
reference does.

Expression ops (`X.op`):
  "const" arg=value | "dim" arg=Dim (i64) | "var" arg=name | "load" arg=buffer, src=(idx,)
  "dim" arg=Dim src=(value,): after the decompose pass, every dim but a dynamic one (a bare
    symbol: the function's argument), its value written in primitives (caten.lower.dimx);
    renderers spell the value, sizes read the Dim
  "masked" src=(cond, value): value if cond else 0, value evaluated only under cond
  "rand" arg=seed src=(ctr i64,) or (ctr i64, key u64: a runtime seed XORed into the key) -> u32
  | an `Op` (ALU, CAST, WHERE)
  "idiv"/"imod" src=(a, b): truncating (C) division and remainder in the dtype of a, signed or
    unsigned by that dtype; b is never 0, nor -1 with a the minimum (index math: a >= 0, b > 0).
  An `Op.ADD/MUL/MAX` with arg "acc" is a reduction update that may be reassociated.
The primitives the decompose pass (caten.lower.decompose) writes EXP2, LOG2, SIN, IDIV, MOD,
NaN-propagating MAX, "rand", f16/bf16 rounding and float->int casts in, for renderers that lack
those ops natively:
  "bitcast" src=(x,): x's bits read as another dtype of the same width (exponent and mantissa
    fields for exp2/log2/Payne-Hanek; fabs and copysign are bit masks through it); u32 to
    f16/bf16 reads the bits of the f32 register such a value lives in (a rounded value)
  "shl"/"shr" src=(a, n): shift by 0 <= n < bits, n of a's dtype; "shr" is arithmetic for signed
    dtypes, logical for unsigned ones (exponent fields, 32-bit limbs, threefry's rotations)
  "floor"/"rint" src=(x,): round down / to nearest, ties to even (exp2's and sin's range
    reductions, float floor division); both are single instructions on CPUs and GPUs
  "fma" src=(a, b, c): a*b + c rounded once (Cody-Waite and double-double steps need the exact
    product; polynomials use it so results do not depend on whether a CPU fuses)
  "fmod" src=(a, b): C's fmod, exact (float IDIV/MOD start from it; it is a long loop otherwise)
  "lut" arg=tuple of ints src=(idx i64,): entry idx of a constant table (the bits of 1/pi)
Statements: Loop(var, extent, body) and its Parallel form (iterations may run on threads),
  Store(buf, idx, value), Acc(var, dtype, init),
  SetAcc(var, value), TileMM (a GEMM micro-kernel over packed panels), MacroMM (the
  tiles of a packed block), DirectMM (a convolution's tiles reading its image in place),
  PackT (a transposing copy: a row panel packed from a row-major matrix) and PackN (a straight
  copy of a panel whose lanes are contiguous); their `expand()` gives the same computation in the other
  statements, for renderers without a register-tile path.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op

IDX = T.i64


def register(dt: DType) -> DType:
    """The dtype of dt's register: f16/bf16 values live in f32 ones (a `bitcast` reads its bits)."""
    return T.f32 if dt in (T.f16, T.bf16) else dt


def _argkey(a: Any) -> Any:
    if isinstance(a, float):
        return ("f", struct.pack("<d", a))
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a)
    return a


class X:
    __slots__ = ("op", "dtype", "src", "arg", "order", "__weakref__")
    _intern: dict = {}

    op: Any
    dtype: DType
    src: tuple
    arg: Any
    order: str  # a deterministic sort key: a leaf's text, else a digest of the structure (a DAG's
    #             text can be exponentially long, so printing it to sort would be too)

    @classmethod
    def make(cls, op: Any, dtype: DType, src: tuple = (), arg: Any = None) -> X:
        key = (op, dtype, tuple(id(s) for s in src), _argkey(arg))
        hit = cls._intern.get(key)
        if hit is not None:
            return hit
        x = object.__new__(cls)
        x.op, x.dtype, x.src, x.arg = op, dtype, tuple(src), arg
        if not src and op in ("const", "var", "dim"):
            x.order = "0" + repr(x)
        else:
            text = f"{op}|{dtype}|{_argkey(arg)!r}|{'|'.join(s.order for s in src)}"
            x.order = "1" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        cls._intern[key] = x
        return x

    def __repr__(self) -> str:
        if self.op == "const":
            return repr(self.arg)
        if self.op in ("var", "dim"):
            return str(self.arg)
        if self.op == "load":
            return f"{self.arg}[{self.src[0]!r}]"
        name = self.op.value.lower() if isinstance(self.op, Op) else self.op
        return f"({name} {' '.join(map(repr, self.src))})"


def const(v: Any, dtype: DType = IDX) -> X:
    return X.make("const", dtype, (), v)


def var(name: str, dtype: DType = IDX) -> X:
    return X.make("var", dtype, (), name)


def dim(d: Any) -> X:
    if isinstance(d, int):
        return const(d)
    return X.make("dim", IDX, (), d)


def load(buf: str, idx: X, dtype: DType) -> X:
    return X.make("load", dtype, (idx,), buf)


def alu(op: Op, dtype: DType, *src: X, arg: Any = None) -> X:
    return X.make(op, dtype, tuple(src), arg)


# index arithmetic with folding -------------------------------------------------------------
def iadd(a: X, b: X) -> X:
    if a.op == "const" and a.arg == 0:
        return b
    if b.op == "const" and b.arg == 0:
        return a
    if a.op == "const" and b.op == "const":
        return const(a.arg + b.arg)
    return alu(Op.ADD, IDX, a, b)


def imul(a: X, b: X) -> X:
    if a.op == "const":
        a, b = b, a
    if b.op == "const":
        if b.arg == 0:
            return const(0)
        if b.arg == 1:
            return a
        if a.op == "const":
            return const(a.arg * b.arg)
    return alu(Op.MUL, IDX, a, b)


def icmplt(a: X, b: X) -> X:
    return alu(Op.CMPLT, T.bool_, a, b)


def land(a: X | None, b: X) -> X:
    return b if a is None else alu(Op.AND, T.bool_, a, b)


# statements ----------------------------------------------------------------------------------
@dataclass
class Loop:
    var: str
    extent: X
    body: list = field(default_factory=list)
    hint: str = ""  # "cold": rarely run or tiny (renderers may skip vectorizing/unrolling it); "outer": a
    #                 kernel's outer loop split over threads, after its packed-once operands


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
    the names of the loop variables of `expand()`."""
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

    def expand(self) -> list:
        r, c, k, acc = (f"{self.var}_{x}" for x in "rcka")
        rv, cv, kv = var(r), var(c), var(k)
        av = load(self.a, iadd(self.aoff, iadd(imul(kv, const(self.rows)), rv)), self.dtype)
        bv = load(self.b, iadd(self.boff, iadd(imul(kv, const(self.cols)), cv)), self.dtype)
        upd = alu(Op.ADD, self.dtype, var(acc, self.dtype), alu(Op.MUL, self.dtype, av, bv), arg="acc")
        oidx = iadd(self.ooff, iadd(imul(rv, self.ostride), cv))
        accv = var(acc, self.dtype)
        val = alu(Op.WHERE, self.dtype, self.beta, alu(Op.ADD, self.dtype, load(self.out, oidx, self.dtype), accv),
                  accv)
        body = [Acc(acc, self.dtype, const(0.0, self.dtype)), Loop(k, self.kext, [SetAcc(acc, upd)]),
                Store(self.out, oidx, val)]
        return [Loop(r, self.rvalid, [Loop(c, self.cvalid, body)])]


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
                      imin(const(self.cols), iadd(self.nrem, imul(jb, const(-1)))), self.beta)
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


def isub(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(a.arg - b.arg)
    if b.op == "const" and b.arg == 0:
        return a
    return iadd(a, imul(b, const(-1)))


def imax(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(max(a.arg, b.arg))
    return alu(Op.WHERE, IDX, icmplt(a, b), b, a)


def nodes(*roots: X, seen: set[int] | None = None) -> Iterator[X]:
    """Each expression node reachable from `roots` once (`seen`: ids already visited, shared by
    several walks)."""
    seen = set() if seen is None else seen
    stack = list(roots)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(x.src)


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


def subst(e: X, v: X, by: X) -> X:
    """e with every occurrence of v replaced by `by`."""
    memo: dict[int, X] = {}

    def go(x: X) -> X:
        if x is v:
            return by
        hit = memo.get(id(x))
        if hit is None:
            hit = memo[id(x)] = X.make(x.op, x.dtype, tuple(go(s) for s in x.src), x.arg) if x.src else x
        return hit
    return go(e)


def imin(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(min(a.arg, b.arg))
    return alu(Op.WHERE, IDX, icmplt(a, b), a, b)


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
