"""Fn: one C-style function body from loop IR. Values are C expressions over named temporaries;
casts and ALU ops carry caten's semantics (saturating float->int, f16/bf16/float8 computed in f32 and
rounded after every op); EXP2/LOG2/SIN, IDIV/MOD, NaN-propagating MAX and `rand` arrive
decomposed into primitives (caten.render.cstyle.prims). Plain C renders a kernel as one serial `Fn`."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from caten import loopir as L
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.walk import Visit, drive
from caten.loopir import X
from caten.lower.dimx import bare, dim_leaf
from caten.render.cstyle import tiles as T
from caten.render.cstyle.prims import PRIMS
from caten.render.cstyle.targets import Target, ctype, idx_lit, int_lit, stype, uty

# the spellings of the ALU ops, by the class of the result ({0}, {1}, {2}: the operands)
ANY = {Op.WHERE: "({0} ? {1} : {2})", Op.CMPLT: "({0} < {1})", Op.CMPNE: "({0} != {1})"}
FLOAT = {Op.ADD: "({0} + {1})", Op.MUL: "({0} * {1})", Op.NEG: "(-{0})", Op.RECIP: "({one} / {0})",
         Op.FDIV: "({0} / {1})", Op.SQRT: "{sqrt}({0})", Op.EXP2: "{exp2}({0})",
         Op.MAX: "(({0} >= {1} || {0} != {0}) ? {0} : {1})"}  # nan propagates from either side
BOOL = {Op.NOT: "(!{0})", Op.AND: "(({0} & {1}) != 0)", Op.OR: "(({0} | {1}) != 0)", Op.XOR: "(({0} ^ {1}) != 0)",
        Op.MAX: "(({0} | {1}) != 0)", Op.ADD: "(({0} | {1}) != 0)", Op.MUL: "(({0} & {1}) != 0)"}
# integers wrap: through the unsigned type of their width ({ut}), cast back to theirs ({n})
INT = {Op.ADD: "(({n})(({ut}){0} + ({ut}){1}))", Op.MUL: "(({n})(({ut}){0} * ({ut}){1}))",
       Op.NEG: "(({n})(({ut})0 - ({ut}){0}))", Op.NOT: "(({n})~{0})", Op.AND: "(({n})({0} & {1}))",
       Op.OR: "(({n})({0} | {1}))", Op.XOR: "(({n})({0} ^ {1}))", Op.MAX: "({0} > {1} ? {0} : {1})"}
INT64 = INT | {Op.ADD: "({0} + {1})", Op.MUL: "({0} * {1})"}  # index math (and i64 data): plain, wraps in practice


class Fn:
    """Renders one function body; values are C expressions over named temporaries."""

    def __init__(self, target: Target, dims: Sequence[str], defines: dict[str, Dim], used: set[str],
                 rebase: dict[str, str] | None = None):
        self.t, self.dims, self.defines, self.used = target, list(dims), defines, used
        self.rebase = rebase or {}
        self.lines: list[str] = []
        self.decls: list[str] = []  # accumulators and shared arrays, at function scope
        self.ind = 1
        self.n = 0
        self.scopes: list[dict] = [{}]
        self.accs: dict[str, DType] = {}
        self.uses_f64 = False
        self.decoded: list[int] = []  # indices of the lines decode() wrote

    # plumbing ----------------------------------------------------------------------------------
    def emit(self, s: str) -> None:
        self.lines.append("  " * self.ind + s)

    def tmp(self, ty: str, expr: str) -> str:
        self.n += 1
        name = f"t{self.n}"
        self.emit(f"{ty} {name} = {expr};")
        return name

    def open(self, head: str) -> None:
        self.emit(head + " {")
        self.ind += 1
        self.scopes.append({})

    def close(self) -> None:
        self.scopes.pop()
        self.ind -= 1
        self.emit("}")

    def helper(self, name: str) -> str:
        self.used.add(name)
        return name

    def fmath(self, name: str, dt: DType) -> str:
        return self.t.math[name][1 if dt.bits == 64 else 0]

    # literals and dims ---------------------------------------------------------------------------
    def lit(self, v, dt: DType) -> str:
        if dt.is_bool:
            return "true" if v else "false"
        if dt.is_int:
            return int_lit(int(v), dt)
        v = float(v)
        with np.errstate(over="ignore"):  # beyond a 16-bit float's range the constant is inf, as the cast says
            if dt.name == "f16":
                v = float(np.float16(v))
            elif dt.name == "bf16":
                v = float(ml_dtypes.bfloat16(v))
            elif dt.bits == 8:  # float8: as ml_dtypes rounds a literal (past the range: nan, or inf in e5m2)
                with np.errstate(invalid="ignore"):
                    v = float(np.array(v).astype(dt.np).astype(np.float64))
            elif dt.bits == 32:
                v = float(np.float32(v))
        if dt.bits == 64:
            self.uses_f64 = True
            if math.isfinite(v):
                return f"({v.hex()})"
            bits = 0x7FF8000000000000 if math.isnan(v) else (0xFFF0000000000000 if v < 0 else 0x7FF0000000000000)
            return f"{self.t.bits[3]}({bits}UL)"
        if math.isfinite(v):
            return f"({v.hex()}f)"
        bits = 0x7FC00000 if math.isnan(v) else (0xFF800000 if v < 0 else 0x7F800000)
        return f"{self.t.bits[1]}({bits}U)"

    def dimval(self, d: Dim) -> str:
        """The i64 value of a dim outside the loop IR (entry checks, arena offsets, launch
        bounds): its loop-IR leaf (caten.lower.dimx)."""
        return self.v(dim_leaf(d, self.defines))

    # values --------------------------------------------------------------------------------------
    def v(self, x: X) -> str:
        """The C expression or temporary for x, emitting what it needs (walked without recursion:
        caten.ir.walk)."""
        return drive(self._vis(x))

    def _vis(self, x: X) -> Visit[str]:
        if x.op == "const":
            return self.lit(x.arg, x.dtype) if x.dtype != L.IDX else idx_lit(int(x.arg))
        if x.op == "var":
            return f"a_{x.arg}" if x.arg in self.accs else f"v_{x.arg}"
        for sc in reversed(self.scopes):
            r = sc.get(x)
            if r is not None:
                return r
        if x.dtype.bits == 64 and x.dtype.is_float:
            self.uses_f64 = True
        r = yield from self._v(x)
        self.scopes[-1][x] = r
        return r

    def _v(self, x: X) -> Visit[str]:
        op = x.op
        if op == "dim":
            if x.src:  # its value in primitives (caten.lower.dimx)
                return (yield self._vis(x.src[0]))
            name = bare(x.arg)  # a dynamic dim: the function's argument
            if name not in self.dims:
                raise KeyError(f"dimension {x.arg} is not an argument of this function")
            return f"d_{name}"
        if op == "load":
            return self.tmp(ctype(x.dtype), self.load(x.arg, (yield self._vis(x.src[0])), x.dtype))
        if op == "masked":
            cond = yield self._vis(x.src[0])
            self.n += 1
            name = f"t{self.n}"
            self.emit(f"{ctype(x.dtype)} {name} = {self.lit(0, x.dtype)};")
            self.open(f"if ({cond})")
            val = yield self._vis(x.src[1])
            self.emit(f"{name} = {val};")
            self.close()
            return name
        if op == "bcheck":  # caten.lower.bounds: the index, or 0 after recording the failure
            slot, kid, bid = x.arg
            idx, ext = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
            return self.tmp("i64", f"caten_bcheck({slot}, {idx}, {ext}, {kid}, {bid})")
        if op in PRIMS:  # the decompose pass's primitives (caten.render.cstyle.prims)
            srcs = []
            for a in x.src:
                srcs.append((yield self._vis(a)))
            return self.tmp(ctype(x.dtype), PRIMS[op](self, x, srcs))
        if op is Op.CAST:
            return self.tmp(ctype(x.dtype), self.cast((yield self._vis(x.src[0])), x.src[0].dtype, x.dtype))
        srcs = []
        for s in x.src:
            srcs.append((yield self._vis(s)))
        return self.tmp(ctype(x.dtype), self.alu(op, x.dtype, x.src[0].dtype if x.src else x.dtype, srcs))

    def ref(self, buf: str, idx: str) -> str:
        base = self.rebase.get(buf)
        return f"b_{buf}[{idx} + {base}]" if base else f"b_{buf}[{idx}]"

    def load(self, buf: str, idx: str, dt: DType) -> str:
        r = self.ref(buf, idx)
        if dt.is_bool:
            return f"({r} != 0)"
        if dt.name == "f16":
            return f"{self.helper('caten_h2f')}({r})"
        if dt.name == "bf16":
            return f"{self.helper('caten_bf2f')}({r})"
        if dt.is_float and dt.bits == 8:
            return f"{self.helper(f'caten_{dt.name}_u2f')}({r})"
        if dt.name == "i4":  # the low nibble sign-extended (ml_dtypes' layout: -1 is 0x0F)
            return f"((i4)((i4)((u32){r} << 4) >> 4))"
        if dt.name == "u4":
            return f"((u4)({r} & 15))"
        return r

    def store(self, buf: str, idx: str, val: str, dt: DType) -> None:
        if dt.is_bool:
            val = f"(u8)({val} ? 1 : 0)"
        elif dt.name == "f16":
            val = f"{self.helper('caten_f2h')}({val})"
        elif dt.name == "bf16":
            val = f"{self.helper('caten_f2bf')}({val})"
        elif dt.is_float and dt.bits == 8:
            val = f"{self.helper(f'caten_{dt.name}_f2u')}({val})"
        elif dt.bits == 4:  # the high nibble 0 (ml_dtypes' layout)
            val = f"(({dt.name})({val} & 15))"
        self.emit(f"{self.ref(buf, idx)} = {val};")

    def cast(self, v: str, src: DType, dst: DType) -> str:
        """A CAST with nothing left to decide: the decompose pass wrote float->int saturation and
        every rounding to f16/bf16 in primitives (an f16/bf16 value lives in an f32 register)."""
        if src == dst:
            return v
        if dst.is_bool:
            return f"({v} != {self.lit(0, src)})"
        if src.is_bool:
            return f"({v} ? {self.lit(1, dst)} : {self.lit(0, dst)})"
        if src.is_int and dst.is_int:
            return f"(({dst.name}){v})"
        if (src.is_float and dst.is_int) or (dst.is_float and dst.bits < 32):
            raise NotImplementedError(f"CAST {src} -> {dst} reaches the C-style renderer undecomposed")
        return f"(({ctype(dst)}){v})"

    def alu(self, op: Op, dt: DType, sdt: DType, s: list[str]) -> str:
        """An ALU op over operand expressions (names or literals: each may appear twice), spelled
        from the tables below by the class of its result (f16/bf16 ones are rounded by the pass)."""
        if op in ANY:
            return ANY[op].format(*s)
        if dt.is_float:
            if op not in FLOAT:
                raise NotImplementedError(f"{op} on floats: the C-style renderer spells LOG2/SIN/IDIV/MOD "
                                          "only as the decompose pass's primitives; declare "
                                          "Capabilities(native=frozenset()) or {Op.EXP2}")
            one, sqrt = ("1.0f" if ctype(dt) == "f32" else "1.0"), self.fmath("sqrt", dt)
            return FLOAT[op].format(*s, one=one, sqrt=sqrt, exp2=self.fmath("exp2", dt))
        if dt.is_bool:
            return BOOL[op].format(*s)
        n, ut = dt.name, uty(dt)
        table = INT64 if n == "i64" else INT
        if op not in table:
            raise NotImplementedError(f"{op} on {dt}: the C-style renderer spells IDIV/MOD only as the decompose "
                                      "pass's primitives; declare Capabilities(native=frozenset())")
        return table[op].format(*s, n=n, ut=ut)

    # statements ----------------------------------------------------------------------------------
    def declare_acc(self, s: L.Acc) -> None:
        if s.var not in self.accs:
            self.accs[s.var] = s.dtype
            self.decls.append(f"{ctype(s.dtype)} a_{s.var};")

    def stmt(self, s) -> None:
        if isinstance(s, L.Loop):
            self.loop(s)
        elif isinstance(s, L.Store):
            self.store(s.buf, self.v(s.idx), self.v(s.value), s.value.dtype)
        elif isinstance(s, L.Acc):
            self.declare_acc(s)
            self.emit(f"a_{s.var} = {self.v(s.init)};")
        elif isinstance(s, L.SetAcc):
            self.emit(f"a_{s.var} = {self.v(s.value)};")
        elif isinstance(s, L.TileMM):
            self.emit(T.tile_call(self, s))
        else:
            raise TypeError(f"unknown loop-IR statement {type(s).__name__}")

    def stmts(self, body: list) -> None:
        for s in body:
            self.stmt(s)

    def loop(self, s: L.Loop, start: str = "0", step: str = "") -> None:
        ext = self.v(s.extent)
        inc = f"v_{s.var} += {step}" if step else f"v_{s.var}++"
        sums = _float_sums(s.body)
        # the reassociation the loop IR allows an "acc" update: partial sums, as LLVM's vector
        # lanes give (far closer to a pairwise sum than one serial chain: 660 ulp off over 33k f32)
        if isinstance(s, L.Parallel) and s.most > 1 and self.t.name == "c":
            # one iteration a thread (OpenMP's pool); what the body accumulates is its own
            accs = sorted({a.var for a in _accs(s.body)})
            private = f" private({', '.join(f'a_{a}' for a in accs)})" if accs else ""
            # (if: a loop of one iteration opens no team, so a parallel loop inside it still can)
            self.emit(f"#pragma omp parallel for num_threads({s.most}) schedule(static, 1) if({ext} > 1){private}")
        elif sums and self.t.name == "c":
            self.emit(f"#pragma omp simd reduction(+:{', '.join(f'a_{v}' for v in sums)})")
        elif sums and not step and start == "0":
            self.partial_sums(s, ext, sums)
            return
        self.open(f"for (i64 v_{s.var} = {start}; v_{s.var} < {ext}; {inc})")
        self.stmts(s.body)
        self.close()

    def partial_sums(self, s: L.Loop, ext: str, sums: list[str]) -> None:
        """`for v: acc += x(v)` as 8 interleaved partial sums, added pairwise at the end."""
        w = _PARTIALS
        self.open("")
        for a in sums:
            self.emit(f"{ctype(self.accs[a])} p_{a}[{w}] = {{{', '.join(['0'] * w)}}};")
        self.open(f"for (i64 v_{s.var} = 0; v_{s.var} < {ext}; v_{s.var}++)")
        for st in s.body:
            self.emit(f"p_{st.var}[v_{s.var} % {w}] += {self.v(st.value.src[1])};")
        self.close()
        for a in sums:
            terms = [f"p_{a}[{i}]" for i in range(w)]
            while len(terms) > 1:
                terms = [f"({x} + {y})" for x, y in zip(terms[::2], terms[1::2])]
            self.emit(f"a_{a} = a_{a} + {terms[0]};")
        self.close()

    def decode(self, flat: str, loops: list[L.Loop]) -> None:
        """Define the variables of `loops` (the last fastest) from their flattened index `flat`:
        a device grid's point, a GEMM tile's row. The lines are marked for `body()`, which drops
        the definitions nothing reads (a size-1 loop's variable, an axis the lowering folded away)."""
        rest = flat
        for j in range(len(loops) - 1, -1, -1):
            lp = loops[j]
            if j == 0:
                self.emit(f"const i64 v_{lp.var} = {rest};")
            else:
                e = self.v(lp.extent)  # may write lines of its own
                self.emit(f"const i64 v_{lp.var} = {rest} % {e};")
                self.decoded.append(len(self.lines) - 1)
                rest = self.tmp("const i64", f"{rest} / {e}")
            self.decoded.append(len(self.lines) - 1)

    def body(self) -> str:
        return "\n".join(["  " + d for d in self.decls] + self._read_lines())

    def _read_lines(self) -> list[str]:
        """The lines without the decoded definitions that no other line names (nvcc and `cc -Wall`
        warn of each unused variable); a quotient only those read goes with them. Checked from
        the last definition back, since a line reads only what lines before it define."""
        if not self.decoded:
            return self.lines
        count = Counter(_IDENT.findall("\n".join(self.decls + self.lines)))
        drop = set()
        for i in reversed(self.decoded):
            name, rhs = _DEF.fullmatch(self.lines[i].strip()).groups()  # type: ignore[union-attr]
            if count[name] == 1:
                drop.add(i)
                count.subtract(_IDENT.findall(rhs))
        return [ln for i, ln in enumerate(self.lines) if i not in drop]


_PARTIALS = 8
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEF = re.compile(r"const i64 (\w+) = (.*);")


def _accs(body: list) -> list[L.Acc]:
    """The accumulators declared in a loop body, at any depth."""
    out = []
    for s in body:
        if isinstance(s, L.Acc):
            out.append(s)
        elif isinstance(s, L.Loop):
            out += _accs(s.body)
    return out


def _float_sums(body: list) -> list[str]:
    """The accumulators of a loop body made only of float `acc` additions, else []."""
    out = []
    for s in body:
        v = getattr(s, "value", None)
        if not (isinstance(s, L.SetAcc) and v.op is Op.ADD and v.arg == "acc" and v.dtype.name in ("f32", "f64")
                and v.src[0].op == "var" and v.src[0].arg == s.var):
            return []
        out.append(s.var)
    return out


def expand(stmts: list, tiles: bool = False) -> list:
    """The body with every statement outside the four basic kinds replaced by its `expand()`
    (e.g. TileMM: a renderer without a special path for it renders the plain loops); `tiles`:
    float TileMMs stay (the C target calls its register-tile helper: caten.render.cstyle.tiles)."""
    out: list = []
    for s in stmts:
        if isinstance(s, L.Loop):
            out.append(dataclasses.replace(s, body=expand(s.body, tiles)))  # (a Parallel stays one)
        elif isinstance(s, (L.Store, L.Acc, L.SetAcc)) or (tiles and isinstance(s, L.TileMM)
                                                            and T.supports(s.dtype) and (s.pairs or s.dtype.is_float)):
            out.append(s)
        elif hasattr(s, "expand"):
            out += expand(s.expand(), tiles)
        else:
            raise TypeError(f"unknown loop-IR statement {type(s).__name__}")
    return out


def c_function(k: L.Kernel, target: Target, defines: dict[str, Dim], used: set[str], qual: str | None = None) -> str:
    """A loop-IR kernel as one serial C-style function."""
    fn = Fn(target, k.dims, defines, used)
    body = expand(k.body, tiles=target.name == "c")
    fn.stmts(body)
    qual = qual or target.kernel
    if target.name == "c" and not _guarded(body):
        # if-conversion (off for the whole file: c_rt.FLAGS says why) back on where no load is
        # guarded: without it GCC vectorizes no loop with a select in it (exp's range clamp)
        qual += ' __attribute__((optimize("tree-loop-if-convert")))'
    return f"{qual} {k.name}({params(k, target)}) {{\n{fn.body()}\n}}"


def _guarded(body: list) -> bool:
    """Whether statements load under a condition (a `masked` value)."""
    roots: list[X] = []
    for s in body:
        if isinstance(s, L.Loop):
            if _guarded(s.body):
                return True
            roots.append(s.extent)
        else:
            roots += [getattr(s, f) for f in ("idx", "value", "init") if isinstance(getattr(s, f, None), X)]
    return any(x.op == "masked" for x in L.nodes(*roots))


def params(k: L.Kernel, t: Target) -> str:
    ps = [f"{t.gptr}{'const ' if p.role == 'in' else ''}{stype(p.dtype)} *{t.restrict} b_{p.name}" for p in k.params]
    ps += [f"i64 d_{d}" for d in k.dims]
    return ", ".join(ps) or "void"
