"""FnGen: one LLVM function's body from loop IR. Values are strings (SSA names or literals);
expressions are walked without recursion (caten.ir.walk). The instruction plumbing is `Emitter`;
the numerics, the thread and GEMM statements are functions in sibling modules; this class
renders values, memory, casts, the ALU and loops, and dispatches."""

from __future__ import annotations

from caten import loopir as L
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op
from caten.ir.walk import Visit, drive
from caten.loopir import X
from caten.lower.dimx import bare, dim_leaf
from caten.render.llvm import direct, float8, gemm, pack, threads
from caten.render.llvm.emit import Emitter
from caten.render.llvm.prims import PRIMS
from caten.render.llvm.values import const_str, mty, rty


class FnGen(Emitter):
    """Loop IR -> the body of one LLVM function."""

    # values -------------------------------------------------------------------------------------
    def v(self, x: X) -> str:
        """The SSA name of x, emitting what it needs (walked without recursion: caten.ir.walk)."""
        return drive(self._vis(x))

    def _vis(self, x: X) -> Visit[str]:
        if x.op == "const":
            return const_str(x.arg, x.dtype)
        if x.op == "var" and x.arg in self.accs:
            ptr, dt = self.accs[x.arg]
            return self.ins(f"load {rty(dt)}, ptr {ptr}")
        for sc in reversed(self.scopes):
            r = sc.get(x)
            if r is not None:
                return r
        r = yield from self._v(x)
        self.scopes[-1][x] = r
        return r

    def dimval(self, d) -> str:
        """The i64 value of a dim outside the loop IR (entry checks, arena offsets): its loop-IR
        leaf (caten.lower.dimx), computed in the entry block."""
        return self.v(dim_leaf(d, self.defines, self.dimx))

    def _v(self, x: X) -> Visit[str]:
        op = x.op
        if op == "dim":
            if not x.src:  # a dynamic dim: the function's argument
                name = bare(x.arg)
                if name not in self.dims:
                    raise KeyError(f"dimension {x.arg} is not an argument of this function")
                return f"%d_{name}"
            # any other dim: its value in primitives, of dim arguments and constants only, computed
            # once in the entry block from entry-block values alone (so it dominates every use)
            body, self.lines = self.lines, self.entry
            scopes, self.scopes = self.scopes, [self.dimmemo]
            try:
                return (yield self._vis(x.src[0]))
            finally:
                self.lines, self.scopes = body, scopes
        if op == "var":
            return f"%v_{x.arg}"
        if op == "load":
            return self.load(x.arg, (yield self._vis(x.src[0])), x.dtype)
        if op == "masked":
            return (yield from self.masked(x))
        if op == "bcheck":
            return (yield from self.bcheck(x))
        if op in PRIMS:
            srcs = []
            for s in x.src:
                srcs.append((yield self._vis(s)))
            return PRIMS[op](self, x, srcs)
        if op is Op.CAST:
            return self.cast((yield self._vis(x.src[0])), x.src[0].dtype, x.dtype)
        if x.arg == "acc" and op is Op.ADD and x.dtype.is_float and x.dtype not in T.NARROW \
                and x.src[1].op is Op.MUL and not any(x.src[1] in sc for sc in self.scopes):
            # a product feeding a reduction may fuse into an FMA (elementwise ops never contract)
            m = x.src[1]
            ma, mb = (yield self._vis(m.src[0])), (yield self._vis(m.src[1]))
            prod = self.fop("fmul", rty(m.dtype), ma, mb, "contract")
            return self.alu(op, x.dtype, x.dtype, [(yield self._vis(x.src[0])), prod], x.arg)
        srcs = []
        for s in x.src:
            srcs.append((yield self._vis(s)))
        return self.alu(op, x.dtype, x.src[0].dtype if x.src else x.dtype, srcs, x.arg)

    def masked(self, x: X) -> Visit[str]:
        cond = yield self._vis(x.src[0])
        pre = self.cur
        lt, lj = self.label("mt"), self.label("mj")
        self.emit(f"br i1 {cond}, label %{lt}, label %{lj}")
        self.block(lt)
        self.scopes.append({})
        try:
            val = yield self._vis(x.src[1])
        finally:
            self.scopes.pop()
        tend = self.cur
        self.emit(f"br label %{lj}")
        self.block(lj)
        ty = rty(x.dtype)
        zero = "false" if ty == "i1" else "0" if ty.startswith("i") else self.fc(0.0, ty)
        return self.ins(f"phi {ty} [{val}, %{tend}], [{zero}, %{pre}]")

    def bcheck(self, x: X) -> Visit[str]:
        """The index if it lies in [0, extent), else 0 after recording the failure (caten.lower.bounds)."""
        idx, ext = (yield self._vis(x.src[0])), (yield self._vis(x.src[1]))
        slot, kid, bid = x.arg
        ok = self.icmp("ult", "i64", idx, ext)
        bad, join = self.label("oob"), self.label("inb")
        self.emit(f"br i1 {ok}, label %{join}, label %{bad}, !prof !{self.mod.oob_record(slot)}")
        self.block(bad)
        self.emit(f"call void @caten_oob_record(ptr @{slot}, i64 {kid}, i64 {bid}, i64 {idx}, i64 {ext})")
        self.emit(f"br label %{join}")
        self.block(join)
        return self.select(ok, "i64", idx, "0")

    # memory -------------------------------------------------------------------------------------
    def ptr(self, buf: str, idx: str, dt: DType) -> str:
        return self.ins(f"getelementptr inbounds {mty(dt)}, ptr %b_{buf}, i64 {idx}")

    def load(self, buf: str, idx: str, dt: DType) -> str:
        p = self.ptr(buf, idx, dt)
        raw = self.ins(f"load {mty(dt)}, ptr {p}, align {dt.itemsize}")
        if dt.is_bool:
            return self.icmp("ne", "i8", raw, "0")
        if dt.name == "f16":
            return self.conv("fpext", "half", raw, "float")
        if dt.name == "bf16":
            w = self.conv("zext", "i16", raw, "i32")
            return self.conv("bitcast", "i32", self.ins(f"shl i32 {w}, 16"), "float")
        if dt in T.FLOAT8:
            return float8.load(self, raw, dt)
        if dt in T.INT4:  # the low nibble (ml_dtypes' layout)
            return self.conv("trunc", "i8", raw, "i4")
        return raw

    def store(self, buf: str, idx: str, val: str, dt: DType) -> None:
        if dt.is_bool:
            val = self.conv("zext", "i1", val, "i8")
        elif dt.name == "f16":
            val = self.conv("fptrunc", "float", val, "half")
        elif dt.name == "bf16":
            b = self.conv("bitcast", "float", val, "i32")
            val = self.conv("trunc", "i32", self.ins(f"lshr i32 {b}, 16"), "i16")
        elif dt in T.FLOAT8:
            val = float8.store(self, val, dt)
        elif dt in T.INT4:  # the high nibble 0, -1 as 0x0F (ml_dtypes' layout)
            val = self.conv("zext", "i4", val, "i8")
        p = self.ptr(buf, idx, dt)
        self.emit(f"store {mty(dt)} {val}, ptr {p}, align {dt.itemsize}")

    # rounding and casts -----------------------------------------------------------------------
    def round(self, dt: DType, v: str) -> str:
        """f32 value v rounded to f16 (this target's native rounding: `fptrunc` to half and back).
        The decompose pass writes every other rounding to a narrow float in primitives: a bf16 or float8 op
        that reaches the renderer is one whose result is exact (NEG, MAX)."""
        if dt.name == "f16":
            return self.conv("fpext", "half", self.conv("fptrunc", "float", v, "half"), "float")
        return v

    def cast(self, v: str, src: DType, dst: DType) -> str:
        """A CAST left by the decompose pass (which writes float->int saturation in primitives)."""
        fs, ts = rty(src), rty(dst)
        if src == dst:
            return v
        if dst.is_bool:
            if src.is_float:
                return self.fcmp("une", fs, v, self.fc(0.0, fs))
            return self.icmp("ne", fs, v, "0")
        if src.is_bool:
            if dst.is_float:
                return self.conv("uitofp", "i1", v, ts)
            return self.conv("zext", "i1", v, ts)
        if src.is_int and dst.is_int:
            if src.bits == dst.bits:
                return v
            if src.bits > dst.bits:
                return self.conv("trunc", fs, v, ts)
            return self.conv("sext" if src.kind == "int" else "zext", fs, v, ts)
        if src.is_int and dst.is_float:
            r = self.conv("sitofp" if src.kind == "int" else "uitofp", fs, v, ts)
            return self.round(dst, r)
        if (src.is_float and dst.is_int) or (dst in T.NARROW and dst != T.f16):
            raise NotImplementedError(f"CAST {src} -> {dst} reaches the LLVM renderer undecomposed")
        # float -> float
        if fs == "float" and ts == "double":
            return self.conv("fpext", "float", v, "double")
        if fs == "double" and ts == "float":
            v = self.conv("fptrunc", "double", v, "float")
        return self.round(dst, v)

    # ALU ------------------------------------------------------------------------------------------
    def alu(self, op: Op, dt: DType, sdt: DType, s: list[str], arg) -> str:
        ty, sty = rty(dt), rty(sdt)
        acc = arg == "acc"
        if op is Op.WHERE:
            return self.select(s[0], ty, s[1], s[2])
        if op in (Op.CMPLT, Op.CMPNE):
            if sdt.is_float:
                return self.fcmp("olt" if op is Op.CMPLT else "une", sty, s[0], s[1])
            pred = "ne" if op is Op.CMPNE else ("slt" if sdt.kind == "int" else "ult")
            return self.icmp(pred, sty, s[0], s[1])
        if dt.is_float:
            r = self.falu(op, ty, s, acc)
            return self.round(dt, r)
        return self.ialu(op, dt, ty, s, acc)

    def falu(self, op: Op, ty: str, s: list[str], acc: bool) -> str:
        fl = "reassoc nsz contract" if acc else ""
        if op is Op.ADD:
            return self.fop("fadd", ty, s[0], s[1], fl)
        if op is Op.MUL:
            return self.fop("fmul", ty, s[0], s[1], fl)
        if op is Op.NEG:
            return self.ins(f"fneg {ty} {s[0]}")
        if op is Op.RECIP:
            return self.fop("fdiv", ty, self.fc(1.0, ty), s[0], "")
        if op is Op.FDIV:
            return self.fop("fdiv", ty, s[0], s[1], "")
        if op is Op.SQRT:
            return self.intr("sqrt", ty, s[0])
        if op is Op.MAX and acc:  # a reduction update; the elementwise max is decomposed
            return self.intr("maximum", ty, s[0], s[1])
        raise NotImplementedError(f"{op} on floats reaches the LLVM renderer undecomposed")

    def ialu(self, op: Op, dt: DType, ty: str, s: list[str], acc: bool) -> str:
        signed = dt.kind == "int"
        if op is Op.ADD:
            return self.ins(f"add {ty} {s[0]}, {s[1]}")
        if op is Op.MUL:
            return self.ins(f"mul {ty} {s[0]}, {s[1]}")
        if op is Op.NEG:
            return self.ins(f"sub {ty} 0, {s[0]}")
        if op is Op.NOT:
            return self.ins(f"xor {ty} {s[0]}, {'true' if ty == 'i1' else -1}")
        if op in (Op.AND, Op.OR, Op.XOR):
            return self.ins(f"{op.value.lower()} {ty} {s[0]}, {s[1]}")
        if op is Op.MAX:
            if dt.is_bool:
                return self.ins(f"or i1 {s[0]}, {s[1]}")
            if acc:
                return self.intr("smax" if signed else "umax", ty, s[0], s[1])
            c = self.icmp("sgt" if signed else "ugt", ty, s[0], s[1])
            return self.select(c, ty, s[0], s[1])
        raise NotImplementedError(f"{op} on {dt} reaches the LLVM renderer undecomposed")

    # statements ------------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        for s in body:
            if isinstance(s, L.Parallel):
                threads.parallel(self, s)
            elif isinstance(s, L.Loop):
                self.loop(s)
            elif isinstance(s, L.Store):
                self.store(s.buf, self.v(s.idx), self.v(s.value), s.value.dtype)
            elif isinstance(s, L.Acc):
                ptr = f"%a_{s.var}"
                if s.var not in self.accs:
                    self.allocas.append(f"  {ptr} = alloca {rty(s.dtype)}")
                    self.accs[s.var] = (ptr, s.dtype)
                self.emit(f"store {rty(s.dtype)} {self.v(s.init)}, ptr {ptr}")
            elif isinstance(s, L.SetAcc):
                ptr, dt = self.accs[s.var]
                self.emit(f"store {rty(dt)} {self.v(s.value)}, ptr {ptr}")
            elif isinstance(s, L.TileMM):
                gemm.tilemm(self, s)
            elif isinstance(s, L.MacroMM):
                args = [f"ptr %b_{b}" for b in (s.a, s.b, s.out)] + [f"i64 {self.v(x)}" for x in s.exprs()[:-1]]
                self.emit(f"call void @{gemm.macromm(self, s)}({', '.join(args)}, i1 {self.v(s.beta)})")
            elif isinstance(s, L.DirectMM):
                args = [f"ptr %b_{b}" for b in (s.a, s.b, s.out)] + [f"i64 {self.v(x)}" for x in s.exprs()]
                self.emit(f"call void @{direct.directmm(self, s)}({', '.join(args)})")
            elif isinstance(s, L.PackT):
                pack.packt(self, s)
            elif isinstance(s, L.PackN):
                pack.packn(self, s)
            elif isinstance(s, direct.Inline):
                s.emit(self)
            elif isinstance(s, StageCall):
                self.stage_call(s)
            else:
                raise TypeError(s)

    def stage_call(self, s: StageCall) -> None:
        """The call; timed (`s.timer`: the counter array and slot) by the CPU's cycle counter,
        the cycles added atomically: the threads of a split loop call stages at once."""
        c0 = self.ins("call i64 @llvm.readcyclecounter()") if s.timer else None
        self.emit(f"call void @{s.name}({', '.join(s.args)})")
        if s.timer:
            took = self.ins(f"sub i64 {self.ins('call i64 @llvm.readcyclecounter()')}, {c0}")
            slot = self.ins(f"getelementptr inbounds i64, ptr @{s.timer[0]}, i64 {s.timer[1]}")
            self.emit(f"atomicrmw add ptr {slot}, i64 {took} monotonic")

    def loop(self, s: L.Loop) -> None:
        ext = self.v(s.extent)
        pre = self.cur
        h, b, e = self.label("lh"), self.label("lb"), self.label("le")
        iv = f"%v_{s.var}"
        self.emit(f"br label %{h}")
        self.block(h)
        at = len(self.lines)
        self.lines.append(None)
        c = self.icmp("slt", "i64", iv, ext)
        self.emit(f"br i1 {c}, label %{b}, label %{e}")
        self.block(b)
        self.scopes.append({})
        self.stmts(s.body)
        self.scopes.pop()
        nxt = self.ins(f"add nuw nsw i64 {iv}, 1")
        latch = self.cur
        self.emit(f"br label %{h}" + (f", !llvm.loop {self.mod.cold_md()}" if s.hint == "cold" else ""))
        self.lines[at] = f"  {iv} = phi i64 [0, %{pre}], [{nxt}, %{latch}]"
        self.block(e)

    def text(self, header: str, ret: str = "ret void") -> str:
        body = [ln for ln in self.lines if ln is not None]
        return "\n".join([header, "entry:", *self.allocas, *self.entry, *body, "  " + ret, "}"])


class StageCall:
    """A call of an outlined stage (renderer-private statement); `bufs`, `dims` (in its
    parameters' order) and `reads` (loop counters) are what it uses, for a Parallel around it to
    pass on (threads.uses, caten.lower.dimargs)."""

    def __init__(self, name: str, args: list[str], bufs: list[str], dims: list[str], reads: set[str],
                 timer: tuple[str, int] | None = None):
        self.name, self.args, self.bufs, self.dims, self.reads = name, args, bufs, dims, reads
        self.timer = timer  # (a profiled kernel's counter array, this stage's slot in it)

