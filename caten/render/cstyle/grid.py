"""Grid mapping for the device targets: which leading loops of a kernel have independent
iterations (spread over work-items, "items" mode, or over work-groups whose work-items share the
inner loops, "groups" mode: strided loops, tree reductions in shared memory, barriers), and the
device kernels that result."""

from __future__ import annotations

from dataclasses import dataclass

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.ops import COMBINERS, Op
from caten.loopir import X
from caten.render.cstyle import gemm as G
from caten.render.cstyle.fn import Fn, expand, params
from caten.render.cstyle.loops import extent, variables, walk
from caten.render.cstyle.targets import Target, ctype, dim_py, eval_dim, kernel_head


def parallel_ok(loop: L.Loop, rebased: set[str]) -> bool:
    """Iterations of `loop` touch disjoint memory and carry no register state."""
    ext = extent(loop.extent)
    if ext is None or loop.hint == "serial":
        return False
    inner_accs = {s.var for s in walk(loop.body) if isinstance(s, L.Acc)}
    for s in walk(loop.body):
        if isinstance(s, L.SetAcc) and s.var not in inner_accs:
            return False
        if isinstance(s, L.Store) and ext != 1 and s.buf not in rebased and loop.var not in variables(s.idx):
            return False
    return True


_COMBINE = COMBINERS  # the op table's reduce combiners


def reduction_loop(loop: L.Loop, var: str) -> Op | None:
    """The combining op if `loop` only updates accumulator `var` with an associative op (and
    accumulators of its own, started inside it: the blocks of a blocked sum, caten.lower.reduce)."""
    op = None
    own: set[str] = set()
    for s in walk([loop]):
        if isinstance(s, L.Loop):  # (any extent: a block's loop ends at min(c, rest), a thread's chunk
            continue               # of blocks at min(n, rest); extents read loop variables and dims)
        if isinstance(s, L.Acc) and s.var != var:
            own.add(s.var)
            continue
        if not isinstance(s, L.SetAcc) or (s.var != var and s.var not in own):
            return None
        v = s.value
        if not (isinstance(v.op, Op) and v.op in _COMBINE and v.src and v.src[0].op == "var" and v.src[0].arg == s.var):
            return None
        if v.op is not Op.OR and v.arg != "acc":
            return None
        if s.var != var:
            continue
        if op is not None and op is not v.op:
            return None
        op = v.op
    return op


def _blocked(loop: L.Loop) -> bool:
    """Whether `loop` runs the blocks of a blocked sum (caten.lower.reduce): each iteration sums a
    block into an accumulator of its own, then adds that to the outer one. A work-group then
    shares each block (2048 elements: 8 a work-item) rather than giving whole blocks to a few
    work-items (a softmax row of 4096: two)."""
    b = loop.body
    return (len(b) == 3 and isinstance(b[0], L.Acc) and isinstance(b[1], L.Loop) and isinstance(b[2], L.SetAcc)
            and b[0].var in variables(b[2].value)  # (the block's own loop ends at min(c, rest): its body decides)
            and reduction_loop(L.Loop(b[1].var, L.const(1), b[1].body), b[0].var) is not None)


def _sums_into(s: object, acc: str) -> bool:
    """Whether statement s (the one after accumulator `acc` is declared) is a loop that sums into it."""
    return isinstance(s, L.Loop) and any(isinstance(u, L.SetAcc) and u.var == acc for u in walk([s]))


def coop_ok(stmts: list, rebased: set[str]) -> bool:
    """Whether a work-group can share `stmts` (see `DeviceFn.coop`)."""
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, L.Acc):
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            if _sums_into(nxt, s.var):
                if reduction_loop(nxt, s.var) is None and not parallel_ok(nxt, rebased) and not coop_ok(nxt.body,
                                                                                                        rebased):
                    return False
                i += 2
                continue
        elif isinstance(s, L.Loop) and not parallel_ok(s, rebased):
            if extent(s.extent) is None or not coop_ok(s.body, rebased):
                return False
        i += 1
    return True


class DeviceFn(Fn):
    """A device kernel body: grid-mapped leading loops, then serial or work-group-shared code."""

    def __init__(self, *a, local: int = 1, **kw):
        super().__init__(*a, **kw)
        self.L = local
        self.shared: dict[str, str] = {}

    def strided(self, loop: L.Loop) -> None:
        self.loop(loop, start="(i64)lid", step=f"{self.L}")

    def tree_reduce(self, var: str, dt: DType, op: Op) -> None:
        nw = self.L // 32
        if self.t.shuffle and self.L % 32 == 0 and nw & (nw - 1) == 0 and not dt.is_bool and dt.bits >= 32:
            self.warp_reduce(var, dt, op, nw)
            return
        st = "u8" if dt.is_bool else ctype(dt)
        arr = self.shared.get(st)
        if arr is None:
            arr = self.shared[st] = f"red_{st}"
            self.decls.append(f"{self.t.shared} {st} {arr}[{self.L}];")
        b = self.t.barrier
        self.emit(f"{arr}[lid] = a_{var};")
        self.emit(f"{b};")
        self.open(f"for (i32 s = {self.L // 2}; s > 0; s >>= 1)")
        self.open("if (lid < s)")
        x = f"(({ctype(dt)}){arr}[lid])" if dt.is_bool else f"{arr}[lid]"
        y = f"(({ctype(dt)}){arr}[lid + s])" if dt.is_bool else f"{arr}[lid + s]"
        self.emit(f"{ctype(dt)} x = {x}, y = {y};")
        self.emit(f"{arr}[lid] = {self.alu(op, dt, dt, ['x', 'y'])};")
        self.close()
        self.emit(f"{b};")
        self.close()
        self.emit(f"a_{var} = {arr}[0]{' != 0' if dt.is_bool else ''};")
        self.emit(f"{b};")

    def warp_reduce(self, var: str, dt: DType, op: Op, nw: int) -> None:
        """A target with warp shuffles (CUDA): each warp combines its 32 values by them, then every
        warp combines the `nw` warps' results from shared memory the same way: two barriers, where the tree
        in shared memory takes log2(L) + 2. Each lane combines in the same butterfly order (and
        x op y equals y op x), so every work-item holds the same result."""
        st, a = ctype(dt), f"a_{var}"
        arr = self.shared.get(f"w{st}")
        if arr is None:
            arr = self.shared[f"w{st}"] = f"wred_{st}"
            self.decls.append(f"{self.t.shared} {st} {arr}[{nw}];")
        comb = self.alu(op, dt, dt, ["x", "y"])
        shfl = f"{{ {st} x = {a}, y = {self.t.shuffle.format(x='x', o='o')}; {a} = {comb}; }}"
        self.emit(f"for (i32 o = 16; o > 0; o >>= 1) {shfl}")
        self.emit(f"if ((lid & 31) == 0) {arr}[lid >> 5] = {a};")
        self.emit(f"{self.t.barrier};")
        self.emit(f"{a} = {arr}[lid & {nw - 1}];")
        if nw > 1:
            self.emit(f"for (i32 o = {nw // 2}; o > 0; o >>= 1) {shfl}")
        self.emit(f"{self.t.barrier};")

    def coop(self, stmts: list) -> None:
        """Run `stmts` with the whole work-group: parallel loops strided over the work-items,
        reductions strided then combined in shared memory, scalar stores by work-item 0, a
        barrier after every statement that writes memory."""
        b = self.t.barrier
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, L.Acc):
                self.stmt(s)
                nxt = stmts[i + 1] if i + 1 < len(stmts) else None
                if _sums_into(nxt, s.var):
                    op = reduction_loop(nxt, s.var)
                    if op is not None:
                        if _blocked(nxt):  # the blocks in turn, each strided over the work-items
                            ext = self.v(nxt.extent)
                            self.open(f"for (i64 v_{nxt.var} = 0; v_{nxt.var} < {ext}; v_{nxt.var}++)")
                            self.stmt(nxt.body[0])
                            self.strided(nxt.body[1])
                            self.stmt(nxt.body[2])
                            self.close()
                        else:
                            self.strided(nxt)
                        self.tree_reduce(s.var, s.dtype, op)
                    else:
                        self.coop([nxt])
                    i += 2
                    continue
            elif isinstance(s, L.SetAcc):
                self.stmt(s)
            elif isinstance(s, L.Store):
                self.open("if (lid == 0)")
                self.stmt(s)
                self.close()
                self.emit(f"{b};")
            elif isinstance(s, L.Loop):
                if parallel_ok(s, set(self.rebase)):
                    self.strided(s)
                    if any(isinstance(u, L.Store) for u in walk([s])):
                        self.emit(f"{b};")
                else:
                    ext = self.v(s.extent)
                    self.open(f"for (i64 v_{s.var} = 0; v_{s.var} < {ext}; v_{s.var}++)")
                    self.coop(s.body)
                    self.close()
            else:
                self.stmt(s)
            i += 1


@dataclass
class DeviceKernel:
    name: str
    params: list[L.BufParam]
    dims: list[str]
    mode: str  # "items": one work-item per grid iteration; "groups": one work-group per iteration
    count: Dim  # grid iterations (work-items or work-groups)
    local: int  # work-group size
    source: str = ""

    def global_size(self, env: dict[str, int]) -> int:
        n = eval_dim(self.count, env)
        return n * self.local if self.mode == "groups" else -(-n // self.local) * self.local

    def launch_info(self) -> dict:
        args = [{"kind": "buffer", "name": p.name, "dtype": p.dtype.name,
                 "access": "read" if p.role == "in" else "readwrite"} for p in self.params]
        args += [{"kind": "dim", "name": d, "type": "i64"} for d in self.dims]
        count = dim_py(self.count)
        groups = count if self.mode == "groups" else f"(({count}) + {self.local - 1}) // {self.local}"
        return {"kernel": self.name, "args": args, "mode": self.mode, "count": count, "local_size": self.local,
                "num_groups": groups, "global_size": f"({groups}) * {self.local}"}


def _launches(body: list) -> list[list]:
    """The top-level statements as launches, in order: one per loop nest, with the statements
    before it (and the last one with those after), where no accumulator crosses between them
    (the kernels communicate through memory only): a GPU sum's work-groups' partials, then their
    total, are two launches."""
    segs: list[list] = [[]]
    for s in body:
        segs[-1].append(s)
        if isinstance(s, L.Loop):
            segs.append([])
    if not segs[-1]:
        segs.pop()
    elif len(segs) > 1:
        tail = segs.pop()
        segs[-1] += tail
    if len(segs) < 2:
        return [body]
    owned = [{s.var for s in walk(seg) if isinstance(s, L.Acc)} for seg in segs]
    for i, seg in enumerate(segs):
        used: set[str] = set()
        for s in walk(seg):
            if isinstance(s, L.SetAcc):
                used.add(s.var)
            for f in ("idx", "value", "init", "extent"):
                x = getattr(s, f, None)
                if isinstance(x, X):
                    used |= variables(x)
        if any(used & acc for j, acc in enumerate(owned) if j != i):
            return [body]
    return segs


def device_kernels(k: L.Kernel, outer: int, local_bufs: dict[str, Dim], target: Target, defines: dict[str, Dim],
                   used: set[str], local: int, coop: bool, chunk: int = 1,
                   gemm: G.Tile | None = None) -> tuple[list[DeviceKernel], dict[str, Dim]]:
    """Map one loop-IR kernel to device kernels. `local_bufs`: kernel-local slice buffers and
    their slice sizes; returns the kernels and the element counts those buffers need.
    `chunk` > 1 (CPUs): in "items" mode a work-item runs `chunk` iterations of the innermost
    grid loop as a plain loop, which the device compiler vectorizes. `gemm`: GEMM nests become
    thread-block tiles of this shape (caten.render.cstyle.gemm)."""
    kbody = expand(k.body)
    roots = _launches(kbody) if not local_bufs else [kbody]
    out: list[DeviceKernel] = []
    sizes: dict[str, Dim] = {}
    rebased = set(local_bufs)
    for ri, root in enumerate(roots):
        name = k.name if len(roots) == 1 else f"{k.name}_{ri}"
        chain: list[L.Loop] = []
        body = root
        while len(body) == 1 and isinstance(body[0], L.Loop) and parallel_ok(body[0], rebased):
            chain.append(body[0])
            body = body[0].body
        found = G.match(chain, body) if gemm is not None and not local_bufs else None
        if found is not None:
            src, count, nt, f64 = G.kernel(name, k, found, target, defines, used, gemm)
            dk = DeviceKernel(name, k.params, list(k.dims), "groups", count, nt, src)
            dk.uses_f64 = f64  # type: ignore[attr-defined]
            out.append(dk)
            continue
        exts = [extent(lp.extent) for lp in chain]
        groups = coop and local > 1 and any(isinstance(s, L.Loop) for s in body) and coop_ok(body, rebased)
        small = isinstance(exts[-1], int) and exts[-1] <= chunk // 4 if chain else True
        chunked = chunk > 1 and not groups and not local_bufs and not small
        count = D.prod(exts) if not chunked else \
            D.mul(D.prod(exts[:-1]), D.floordiv(D.add(exts[-1], chunk - 1), chunk))
        nouter = min(outer, len(chain))
        rebase: dict[str, str] = {}
        for b, slice_elems in local_bufs.items():
            rebase[b] = f"rb_{b}"
            sizes[b] = D.mul(D.prod(exts[:nouter]), slice_elems)
        fn = DeviceFn(target, k.dims, defines, used, rebase, local=local if groups else 1)
        fn.emit(f"const i64 g = {target.grp if groups else target.gid};")
        if groups:
            fn.emit(f"const i32 lid = {target.lid};")
            if not chain:
                fn.emit("(void)g;")  # one work group: its index is unused (nvcc warns otherwise)
        else:
            fn.emit(f"if (g >= {fn.dimval(count)}) return;")
        rest = "g"
        if chunked:
            e = fn.v(chain[-1].extent)
            nchunks = fn.tmp("const i64", f"({e} + {chunk - 1}) / {chunk}")
            fn.emit(f"const i64 c0 = ({rest} % {nchunks}) * {chunk};")
            fn.emit(f"const i64 c1 = c0 + {chunk} < {e} ? c0 + {chunk} : {e};")
            rest = fn.tmp("const i64", f"{rest} / {nchunks}")
        fn.decode(rest, chain[:-1] if chunked else chain)
        if local_bufs:
            lin = "0"
            for lp in chain[:nouter]:
                lin = f"({lin} * {fn.v(lp.extent)} + v_{lp.var})"
            for b, slice_elems in local_bufs.items():
                fn.emit(f"const i64 rb_{b} = {lin} * {fn.dimval(slice_elems)};")
        if groups:
            fn.coop(body)
        elif chunked:
            fn.open(f"for (i64 v_{chain[-1].var} = c0; v_{chain[-1].var} < c1; v_{chain[-1].var}++)")
            fn.stmts(body)
            fn.close()
        else:
            fn.stmts(body)
        kp = L.Kernel(name, k.params, k.dims, [])
        head = kernel_head(target, fn.L if groups else local)
        src = f"{head} {name}({params(kp, target)}) {{\n{fn.body()}\n}}"
        dk = DeviceKernel(name, k.params, list(k.dims), "groups" if groups else "items", count,
                          fn.L if groups else local, src)
        dk.uses_f64 = fn.uses_f64  # type: ignore[attr-defined]
        out.append(dk)
    return out, sizes


