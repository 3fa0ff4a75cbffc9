"""Loop-IR kernels as text: what `--emit loops` prints and what the compile cache is keyed by.

An expression is a DAG (hash-consed `X`), and printing one as a tree can be exponentially long
(a chain of flips shares every index term), so a sub-expression read more than once is printed
once, as a numbered definition (`%3 = ...`) just before the first statement that reads it, and
named by its number after that. The walk keeps its own stack: a kernel of a 10,000-op program
prints without deep recursion. With `canon`, dim names are replaced by their canonical names, so
that programs differing only in their dims' names print (and are keyed) the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caten import loopir as L
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.ops import Op
from caten.loopir import X


def _exprs(s) -> tuple[X, ...]:
    """The expressions a statement reads, in print order."""
    if isinstance(s, L.Loop):
        return (s.extent,)
    if isinstance(s, L.Store):
        return (s.idx, s.value)
    if isinstance(s, (L.Acc,)):
        return (s.init,)
    if isinstance(s, L.SetAcc):
        return (s.value,)
    if isinstance(s, (L.MacroMM, L.DirectMM, L.PanelCopy)):
        return s.exprs()
    if isinstance(s, L.TileMM):
        return (s.kext, s.aoff, s.boff, s.ooff, s.ostride, s.rvalid, s.cvalid, s.beta)
    raise TypeError(f"unknown loop-IR statement {type(s).__name__}")


class _Printer:
    def __init__(self, canon: Mapping[str, D.Dim] | None) -> None:
        self.canon = canon
        self.uses: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.pending: list[str] = []
        self.count = 0

    def dim(self, d: D.Dim) -> str:
        return str(D.rename(d, self.canon) if self.canon else d)

    def count_uses(self, roots: Sequence[X]) -> None:
        stack = list(roots)
        while stack:
            x = stack.pop()
            n = self.uses.get(id(x), 0)
            self.uses[id(x)] = n + 1
            if n == 0:
                stack.extend(x.src)

    def leaf(self, x: X) -> str | None:
        if x.op == "const":
            return repr(x.arg) if x.dtype is L.IDX else f"{x.arg!r}:{x.dtype}"
        if x.op == "var":
            return str(x.arg) if x.dtype is L.IDX else f"{x.arg}:{x.dtype}"
        if x.op == "dim":
            return self.dim(x.arg)
        return None

    def node(self, x: X, parts: list[str]) -> str:
        if x.op == "load":
            return f"{x.arg}[{parts[0]}]:{x.dtype}"
        name = x.op.value.lower() if isinstance(x.op, Op) else str(x.op)
        arg = "" if x.arg is None else f" {x.arg!r}" if not isinstance(x.arg, T.DType) else f" {x.arg}"
        return f"({name}:{x.dtype}{arg} {' '.join(parts)})" if parts else f"({name}:{x.dtype}{arg})"

    def expr(self, root: X) -> str:
        """The text of `root`; shared sub-expressions not yet defined are queued in `pending`."""
        done: dict[int, str] = {}
        stack: list[tuple[X, bool]] = [(root, False)]
        while stack:
            x, ready = stack.pop()
            if id(x) in self.names or id(x) in done:
                continue
            text = self.leaf(x)
            if text is not None:
                done[id(x)] = text
                continue
            if not ready:
                stack.append((x, True))
                stack.extend((s, False) for s in reversed(x.src))
                continue
            text = self.node(x, [self.names.get(id(s)) or done[id(s)] for s in x.src])
            if self.uses.get(id(x), 0) > 1:
                name = f"%{self.count}"
                self.count += 1
                self.pending.append(f"{name} = {text}")
                self.names[id(x)] = name
            else:
                done[id(x)] = text
        return self.names.get(id(root)) or done[id(root)]

    def stmts(self, body: list, ind: str, out: list[str]) -> None:
        work: list[tuple[list, int, str]] = [(body, 0, ind)]
        while work:
            stmts, i, ind = work.pop()
            if i >= len(stmts):
                continue
            s = stmts[i]
            work.append((stmts, i + 1, ind))
            texts = [self.expr(e) for e in _exprs(s)]
            out += [f"{ind}{p}" for p in self.pending]
            self.pending.clear()
            out.append(ind + self.stmt(s, texts))
            if isinstance(s, L.Loop):
                work.append((s.body, 0, ind + "  "))

    @staticmethod
    def stmt(s, t: list[str]) -> str:
        if isinstance(s, L.Parallel):
            return f"parallel(<= {s.most}) for {s.var} in 0..{t[0]}:{' ' + s.hint if s.hint else ''}"
        if isinstance(s, L.Loop):
            return f"for {s.var} in 0..{t[0]}:{' ' + s.hint if s.hint else ''}"
        if isinstance(s, L.Store):
            return f"{s.buf}[{t[0]}] = {t[1]}"
        if isinstance(s, L.Acc):
            return f"{s.dtype} {s.var} = {t[0]}"
        if isinstance(s, L.SetAcc):
            return f"{s.var} = {t[0]}"
        if isinstance(s, L.PackT):
            return (f"pack {s.var} {s.dst}[{t[0]} + k*{s.width} + r] = {s.src}[{t[1]} + r*{t[2]} + k] "
                    f"(r<{t[3]}, k<{t[4]})")
        if isinstance(s, L.PackN):
            return (f"pack {s.var} {s.dtype} {s.dst}[{t[0]} + k*{s.width} + c] = {s.src}[{t[1]} + k*{t[2]} + c] "
                    f"(c<{t[3]}, k<{t[4]})")
        if isinstance(s, L.DirectMM):
            return (f"direct tiles {s.var} {s.dtype} {s.rows}x{s.cols} {s.a} x {s.b} -> {s.out} ({s.static()}; "
                    f"{', '.join(t)})")
        if isinstance(s, L.MacroMM):
            return (f"tiles {s.var} {s.dtype} {s.rows}x{s.cols} {s.a}+{t[1]} step {s.astep}, {s.b}+{t[2]} step "
                    f"{s.bstep} -> {s.out}+{t[3]} stride {t[4]} (it<{t[5]}, jt<{t[6]}, rows<{t[7]}, cols<{t[8]}, "
                    f"k<{t[0]}, beta {t[9]})")
        return (f"tile {s.var} {s.dtype} {s.rows}x{s.cols} k<{t[0]}: {s.out}[{t[3]} + r*{t[4]} + c] += "
                f"{s.a}[{t[1]} + k*{s.rows} + r] * {s.b}[{t[2]} + k*{s.cols} + c] (r<{t[5]}, c<{t[6]}, beta {t[7]})")


def kernel_text(k: L.Kernel, canon: Mapping[str, D.Dim] | None = None) -> str:
    """One kernel: its signature, then its statements (shared sub-expressions numbered)."""
    p = _Printer(canon)
    stack, roots = [k.body], []
    while stack:
        for s in stack.pop():
            roots += _exprs(s)
            if isinstance(s, L.Loop):
                stack.append(s.body)
    p.count_uses(roots)
    dims = [p.dim(D.sym(d)) for d in k.dims]
    lines = [f"kernel {k.name}({', '.join(f'{b.role} {b.dtype} *{b.name}' for b in k.params)}"
             f"{''.join(', i64 ' + d for d in dims)})"]
    p.stmts(k.body, "  ", lines)
    return "\n".join(lines)


def dump(k: L.Kernel) -> str:
    """The kernel as indented readable text for people and tests, each expression in full
    (`kernel_text`, the cache's text, shares sub-expressions instead)."""
    lines = [f"kernel {k.name}({', '.join(f'{p.role} {p.dtype} *{p.name}' for p in k.params)}"
             f"{''.join(', i64 ' + d for d in k.dims)})"]

    def walk(stmts: list, ind: str) -> None:
        for s in stmts:
            if isinstance(s, L.Loop):
                par = f" (parallel, <= {s.most} threads)" if isinstance(s, L.Parallel) else ""
                lines.append(f"{ind}for {s.var} in 0..{s.extent!r}:{par}")
                walk(s.body, ind + "  ")
            elif isinstance(s, L.Store):
                lines.append(f"{ind}{s.buf}[{s.idx!r}] = {s.value!r}")
            elif isinstance(s, L.Acc):
                lines.append(f"{ind}{s.dtype} {s.var} = {s.init!r}")
            elif isinstance(s, L.SetAcc):
                lines.append(f"{ind}{s.var} = {s.value!r}")
            elif isinstance(s, L.MacroMM):
                lines.append(f"{ind}tiles {s.rows}x{s.cols} of {s.a}[{s.aoff!r} + it*{s.astep}] x "
                             f"{s.b}[{s.boff!r} + jt*{s.bstep}] -> {s.out}[{s.ooff!r}] (it<{s.ni!r}, jt<{s.nj!r},"
                             f" rows<{s.mrem!r}, cols<{s.nrem!r}, k<{s.kext!r}, beta {s.beta!r})")
            elif isinstance(s, L.DirectMM):
                lines.append(f"{ind}direct tiles {s.rows}x{s.cols} of {s.a}[{s.aoff!r} + it*{s.astep!r}] x "
                             f"{s.b}[{s.boff!r} + q] -> {s.out}[{s.ooff!r}] ({s.static()}; "
                             f"{', '.join(map(repr, s.exprs()))})")
            elif isinstance(s, L.PackT):
                lines.append(f"{ind}pack {s.dst}[{s.doff!r} + k*{s.width} + r] = "
                             f"{s.src}[{s.soff!r} + r*{s.ld!r} + k] (r<{s.valid!r}, k<{s.klen!r})")
            elif isinstance(s, L.PackN):
                lines.append(f"{ind}pack {s.dst}[{s.doff!r} + k*{s.width} + c] = "
                             f"{s.src}[{s.soff!r} + k*{s.ld!r} + c] (c<{s.valid!r}, k<{s.klen!r})")
            elif isinstance(s, L.TileMM):
                lines.append(f"{ind}tile {s.rows}x{s.cols} k<{s.kext!r}: {s.out}[{s.ooff!r} + r*{s.ostride!r} + c]"
                             f" {'+' if s.beta.op != 'const' or s.beta.arg else ''}= "
                             f"{s.a}[{s.aoff!r} + k*{s.rows} + r] * {s.b}[{s.boff!r} + k*{s.cols} + c]"
                             f" (r<{s.rvalid!r}, c<{s.cvalid!r}, beta {s.beta!r})")
    walk(k.body, "  ")
    return "\n".join(lines)
