"""GEMMs on a GPU as thread-block tiles: a kernel whose grid loops hold one float sum of
products, each factor varying along a disjoint part of those loops (a matmul, a batched one, a
convolution as an implicit GEMM, with whatever the schedule fused into the operands and the
store), is rendered as the classic register-blocked GEMM. A work-group of 256 work-items owns a
BM x BN block of the output; per step of BK it stages both operands' BM x BK and BK x BN tiles
in shared memory (each element computed once, by the operand's own expression, under a bounds
guard), and each work-item accumulates a TM x TN micro-tile in registers from them. The
generic mapping (caten.render.cstyle.grid) gives each output element one work-item or work-group
that reads whole rows and columns from memory: 4096^3 would take minutes.

Rows are the grid loops only the first factor reads, columns those only the second reads, the
rest a batch; several loops of one kind are one flattened dimension (a convolution's image
rows are batch x height x width). The reduced loops are one flattened K likewise."""

from __future__ import annotations

import os
from dataclasses import dataclass

from caten import loopir as L
from caten.errors import Error
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.ops import Op
from caten.loopir import X
from caten.render.cstyle.fn import Fn, params
from caten.render.cstyle.loops import extent, variables
from caten.render.cstyle.targets import Target, ctype, kernel_head


@dataclass(frozen=True)
class Tile:
    """A work-group's output block (bm x bn), its K step (bk) and a work-item's micro-tile (tm x tn,
    multiples of 4: read from shared memory four at a time); `pf` 1: the next step's operands are
    loaded into registers while this step computes (their latency hidden, at the cost of the
    registers)."""
    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 8
    tn: int = 8
    pf: int = 0

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @staticmethod
    def from_env(default: Tile | None = None) -> Tile:
        """`CATEN_GPU_GEMM=BM,BN,BK,TM,TN[,PF]` (a tuning's choice) over the default."""
        spec = os.environ.get("CATEN_GPU_GEMM", "")
        if not spec:
            return default or Tile()
        hint = ("five or six positive integers BM,BN,BK,TM,TN[,PF]: TM and TN multiples of 4 dividing BM and "
                "BN, BMxBK and BNxBK multiples of the work-items (BM/TM x BN/TN), at most 1024 of them")
        try:
            vals = [int(v) for v in spec.split(",")]
            if len(vals) not in (5, 6):
                raise ValueError(spec)
            t = Tile(*vals)
        except ValueError:
            raise Error(f"CATEN_GPU_GEMM={spec!r} is not a tile shape", hint=hint) from None
        if min(t.bm, t.bn, t.bk, t.tm, t.tn) < 1 or t.tm % 4 or t.tn % 4 or t.bm % t.tm or t.bn % t.tn \
                or t.threads > 1024 or (t.bm * t.bk) % t.threads or (t.bn * t.bk) % t.threads:
            raise Error(f"CATEN_GPU_GEMM={spec!r} is not a tile shape", hint=hint)
        return t


@dataclass
class Match:
    rows: list[L.Loop]  # grid loops only x reads
    cols: list[L.Loop]  # grid loops only y reads
    batch: list[L.Loop]  # the other grid loops
    acc: L.Acc
    ks: list[L.Loop]  # the reduced loops, outermost first
    x: X
    y: X
    after: list  # the stores of the sum


def match(chain: list[L.Loop], body: list) -> Match | None:
    """The GEMM in grid loops `chain` around `body`, or None."""
    if len(body) < 3 or not isinstance(body[0], L.Acc) or not isinstance(body[1], L.Loop):
        return None
    acc, after = body[0], body[2:]
    if acc.dtype.name not in ("f32", "f64") or acc.init.op != "const" or acc.init.arg != 0:
        return None
    if not all(isinstance(s, L.Store) for s in after):
        return None
    ks = [body[1]]
    while len(ks[-1].body) == 1 and isinstance(ks[-1].body[0], L.Loop):
        ks.append(ks[-1].body[0])
    inner = ks[-1].body
    if len(inner) != 1 or not isinstance(inner[0], L.SetAcc) or inner[0].var != acc.var:
        return None
    v = inner[0].value
    if not (v.op is Op.ADD and v.arg == "acc" and v.src[0].op == "var" and v.src[0].arg == acc.var
            and v.src[1].op is Op.MUL and v.dtype == acc.dtype and v.src[1].dtype == acc.dtype):
        return None
    if any(extent(lp.extent) is None for lp in ks):  # (the grid's loops have theirs)
        return None
    x, y = v.src[1].src
    grid, kv = {lp.var for lp in chain}, {lp.var for lp in ks}
    vx, vy = variables(x), variables(y)
    if not (vx <= grid | kv and vy <= grid | kv):
        return None
    rows = [lp for lp in chain if lp.var in vx and lp.var not in vy]
    cols = [lp for lp in chain if lp.var in vy and lp.var not in vx]
    if not rows or not cols:
        return None
    for s in after:
        if not variables(s.idx) | variables(s.value) <= grid | {acc.var}:
            return None
    batch = [lp for lp in chain if lp not in rows and lp not in cols]
    return Match(rows, cols, batch, acc, ks, x, y, after)


def _unit(x: X, var: str) -> bool:
    """Whether the first load in x steps by one element along loop `var` (its index has the
    term `var` with coefficient 1): the fast direction for filling a shared tile."""
    for n in L.nodes(x):
        if n.op == "load":
            return _coef(n.src[0], var) == 1
    return False


def _coef(x: X, var: str) -> int | None:
    """The coefficient of `var` in affine index x (None where it is not affine in it)."""
    if x.op == "var":
        return 1 if x.arg == var else 0
    if var not in variables(x):
        return 0
    if x.op is Op.ADD:
        a, b = (_coef(s, var) for s in x.src)
        return None if a is None or b is None else a + b
    if x.op is Op.MUL:
        a, b = x.src
        if b.op == "const":
            a, b = b, a
        c = _coef(b, var)
        return None if a.op != "const" or c is None else int(a.arg) * c
    return None


class _GemmFn(Fn):
    def size(self, loops: list[L.Loop]) -> str:
        out = "1L"
        for lp in loops:
            out = self.tmp("const i64", f"{out} * {self.v(lp.extent)}")
        return out


def kernel(name: str, k: L.Kernel, m: Match, target: Target, defines: dict, used: set[str],
           tile: Tile) -> tuple[str, Dim, int, bool]:
    """The device kernel of GEMM `m`, run in "groups" mode: its source, its work-groups (an
    expression of the dims), their size, whether it uses f64."""
    t, nt = tile, tile.threads
    f = _GemmFn(target, k.dims, defines, used)
    f.declare_acc(m.acc)
    a = f"a_{m.acc.var}"
    px = 4 if _unit(m.x, m.ks[-1].var) else 0  # (a row of k written by consecutive items: pad the banks)
    py = 4 if not _unit(m.y, _last(m.cols)) else 0
    ty = ctype(m.acc.dtype)
    zero = f.lit(0, m.acc.dtype)
    f.decls.append(f"{target.shared} {ty} sx[{t.bk}][{t.bm + px}];")
    f.decls.append(f"{target.shared} {ty} sy[{t.bk}][{t.bn + py}];")
    f.decls.append(f"{ty} acc[{t.tm}][{t.tn}];")
    f.emit(f"const i64 g = {target.grp};")
    f.emit(f"const i32 lid = {target.lid};")
    nrow, ncol, nk = f.size(m.rows), f.size(m.cols), f.size(m.ks)
    nbc = f.tmp("const i64", f"({ncol} + {t.bn - 1}) / {t.bn}")
    nbr = f.tmp("const i64", f"({nrow} + {t.bm - 1}) / {t.bm}")
    f.emit(f"const i64 c0 = (g % {nbc}) * {t.bn};")
    f.emit(f"const i64 r0 = ((g / {nbc}) % {nbr}) * {t.bm};")
    f.decode(f"(g / {nbc} / {nbr})", m.batch)
    f.emit(f"const i32 tx = lid % {t.bn // t.tn}, ty = lid / {t.bn // t.tn};")
    f.emit("#pragma unroll")
    f.open(f"for (i32 r = 0; r < {t.tm}; r++)")
    f.emit("#pragma unroll")
    f.emit(f"for (i32 c = 0; c < {t.tn}; c++) acc[r][c] = {zero};")
    f.close()
    sides = [_Side("sx", m.x, m.rows, nrow, t.bm, px > 0, "r0"), _Side("sy", m.y, m.cols, ncol, t.bn, py > 0, "c0")]
    if t.pf:
        for s in sides:
            f.decls.append(f"{ty} r{s.arr}[{s.b * t.bk // nt}];")
            _load(f, s, m.ks, nk, t.bk, nt, "0L", f"r{s.arr}[l]")
        f.open(f"for (i64 k0 = 0; k0 < {nk}; k0 += {t.bk})")
        for s in sides:
            _each(f, s, t.bk, nt)
            f.emit(f"{s.arr}[kk][ii] = r{s.arr}[l];")
            f.close()
        f.emit(f"{target.barrier};")
        f.open(f"if (k0 + {t.bk} < {nk})")
        for s in sides:
            _load(f, s, m.ks, nk, t.bk, nt, f"k0 + {t.bk}", f"r{s.arr}[l]")
        f.close()
    else:
        f.open(f"for (i64 k0 = 0; k0 < {nk}; k0 += {t.bk})")
        for s in sides:
            _load(f, s, m.ks, nk, t.bk, nt, "k0", f"{s.arr}[kk][ii]")
        f.emit(f"{target.barrier};")
    fma = f.fmath("fma", m.acc.dtype)
    f.emit("#pragma unroll")
    f.open(f"for (i32 kk = 0; kk < {t.bk}; kk++)")
    f.emit(f"{ty} xr[{t.tm}], yr[{t.tn}];")
    f.emit("#pragma unroll")
    f.emit(f"for (i32 r = 0; r < {t.tm}; r++) xr[r] = sx[kk][{_slot('r', 'ty', t.bm, t.tm)}];")
    f.emit("#pragma unroll")
    f.emit(f"for (i32 c = 0; c < {t.tn}; c++) yr[c] = sy[kk][{_slot('c', 'tx', t.bn, t.tn)}];")
    f.emit("#pragma unroll")
    f.open(f"for (i32 r = 0; r < {t.tm}; r++)")
    f.emit("#pragma unroll")
    f.emit(f"for (i32 c = 0; c < {t.tn}; c++) acc[r][c] = {fma}(xr[r], yr[c], acc[r][c]);")
    f.close()
    f.close()
    f.emit(f"{target.barrier};")
    f.close()
    f.emit("#pragma unroll")
    f.open(f"for (i32 r = 0; r < {t.tm}; r++)")
    f.emit("#pragma unroll")
    f.open(f"for (i32 c = 0; c < {t.tn}; c++)")
    f.emit(f"const i64 row = r0 + {_slot('r', 'ty', t.bm, t.tm)}, col = c0 + {_slot('c', 'tx', t.bn, t.tn)};")
    f.open(f"if (row < {nrow} && col < {ncol})")
    f.decode("row", m.rows)
    f.decode("col", m.cols)
    f.emit(f"{a} = acc[r][c];")
    f.stmts(m.after)
    f.close()
    f.close()
    f.close()
    count = D.mul(D.prod([extent(lp.extent) for lp in m.batch]),
                  D.mul(_blocks(m.rows, t.bm), _blocks(m.cols, t.bn)))
    head = kernel_head(target, nt)
    kp = L.Kernel(name, k.params, k.dims, [])
    return f"{head} {name}({params(kp, target)}) {{\n{f.body()}\n}}", count, nt, f.uses_f64


def _last(loops: list[L.Loop]) -> str:
    return loops[-1].var


def _blocks(loops: list[L.Loop], b: int) -> Dim:
    return D.floordiv(D.add(D.prod([extent(lp.extent) for lp in loops]), b - 1), b)


def _slot(i: str, t: str, block: int, micro: int) -> str:
    """Micro-tile entry i of work-item t along a block: four adjacent entries per group of
    block / (micro / 4), so that a warp reads each group of four as one vector without bank
    conflicts and neighbouring work-items hold neighbouring columns."""
    return f"({i} / 4) * {block * 4 // micro} + {t} * 4 + {i} % 4"


@dataclass
class _Side:
    """One operand's tile: shared array `arr`[k][i] of b rows (i: the grid loops `loops`, n in all,
    from `base`); `k_fast`: consecutive work-items take consecutive k (x steps by one along k)."""
    arr: str
    x: X
    loops: list[L.Loop]
    n: str
    b: int
    k_fast: bool
    base: str


def _each(f: _GemmFn, s: _Side, bk: int, nt: int) -> None:
    """Open the (unrolled) loop over a work-item's elements l of side s's tile: kk, ii."""
    f.emit("#pragma unroll")
    f.open(f"for (i32 l = 0; l < {s.b * bk // nt}; l++)")
    f.emit(f"const i32 e = lid + l * {nt};")
    if s.k_fast:
        f.emit(f"const i32 kk = e % {bk}, ii = e / {bk};")
    else:
        f.emit(f"const i32 kk = e / {s.b}, ii = e % {s.b};")


def _load(f: _GemmFn, s: _Side, ks: list[L.Loop], nk: str, bk: int, nt: int, k0: str, dst: str) -> None:
    """Each of a work-item's elements of side s's tile at K step k0 into `dst` (shared memory or
    registers): computed by the operand's expression where it lies inside the operand, else 0."""
    _each(f, s, bk, nt)
    f.emit(f"const i64 w = {s.base} + ii, kf = {k0} + kk;")
    f.emit(f"{ctype(s.x.dtype)} val = {f.lit(0, s.x.dtype)};")
    f.open(f"if (w < {s.n} && kf < {nk})")
    f.decode("w", s.loops)
    f.decode("kf", ks)
    f.emit(f"val = {f.v(s.x)};")
    f.close()
    f.emit(f"{dst} = val;")
    f.close()
