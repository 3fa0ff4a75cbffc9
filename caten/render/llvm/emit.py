"""Emitter: the state and the instruction plumbing of one LLVM function under construction
(SSA temporaries, labels, blocks, calls and intrinsics, comparisons, conversions). The numerics,
thread and GEMM modules emit through it; `FnGen` adds the loop IR on top."""

from __future__ import annotations

from collections.abc import Sequence

from caten.ir import dims as D
from caten.ir.dtypes import DType
from caten.loopir import X
from caten.render.llvm.module import Module
from caten.render.llvm.values import fhex


class Emitter:
    """Builds one function's body; values are strings (SSA names or literals)."""

    def __init__(self, mod: Module, dims: Sequence[str], defines: dict[str, D.Dim]):
        self.mod, self.dims, self.defines = mod, list(dims), defines
        self.lines: list[str | None] = []
        self.entry: list[str | None] = []  # hoisted into the entry block (dim values)
        self.dimmemo: dict = {}  # values computed in the entry block, by expression
        self.dimx: dict = {}  # dims written as loop IR (caten.lower.dimx.dim_value's memo)
        self.allocas: list[str] = []
        self.n = 0
        self.cur = "entry"
        self.scopes: list[dict] = [{}]
        self.accs: dict[str, tuple[str, DType]] = {}

    def new(self, dims: Sequence[str] | None = None, defines: dict[str, D.Dim] | None = None) -> Emitter:
        """A generator for another function of the same module (an outlined body, a trampoline)."""
        return type(self)(self.mod, self.dims if dims is None else dims, self.defines if defines is None else defines)

    def v(self, x: X) -> str:
        """The SSA name of loop-IR expression x, emitting what it needs (FnGen)."""
        raise NotImplementedError

    def stmts(self, body: list) -> None:
        """Emit loop-IR statements (FnGen)."""
        raise NotImplementedError

    # plumbing ---------------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def emit(self, s: str) -> None:
        self.lines.append("  " + s)

    def block(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.cur = name

    def ins(self, text: str) -> str:
        t = self.tmp()
        self.emit(f"{t} = {text}")
        return t

    def call(self, name: str, ret: str, args: Sequence[tuple[str, str]]) -> str:
        self.mod.declare(name, ret, [a for a, _ in args])
        return self.ins(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")

    def intr(self, base: str, ty: str, *vals: str) -> str:
        suffix = {"float": "f32", "double": "f64"}.get(ty, ty)
        return self.call(f"llvm.{base}.{suffix}", ty, [(ty, v) for v in vals])

    def fop(self, op: str, ty: str, a: str, b: str, flags: str = "contract") -> str:
        return self.ins(f"{op} {flags} {ty} {a}, {b}" if flags else f"{op} {ty} {a}, {b}")

    def fc(self, v: float, ty: str) -> str:
        return fhex(v, ty)

    def select(self, c: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"select i1 {c}, {ty} {a}, {ty} {b}")

    def fcmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"fcmp {pred} {ty} {a}, {b}")

    def icmp(self, pred: str, ty: str, a: str, b: str) -> str:
        return self.ins(f"icmp {pred} {ty} {a}, {b}")

    def conv(self, op: str, fty: str, v: str, tty: str) -> str:
        return self.ins(f"{op} {fty} {v} to {tty}")

