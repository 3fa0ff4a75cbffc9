"""Module: one LLVM module as a container (target triple and layout, the functions in order,
declarations, loop metadata, the definitions its functions share), rendered once as text."""

from __future__ import annotations

import re
from collections.abc import Sequence

from caten.render.llvm.units import MARK


class Module:
    """One LLVM module: functions, declarations and loop metadata, emitted once as text."""

    def __init__(self, triple: str, layout: str, cpu: str, features: str, vector_bits: int = 512):
        self.triple, self.layout, self.cpu, self.features = triple, layout, cpu, features
        self.vector_bits = vector_bits
        self.decls: dict[str, str] = {}
        self.funcs: list[str] = []
        self.mds: list[str] = []
        self.md_props: dict[str, int] = {}
        self.nfresh = 0
        self.shared: set[str] = set()
        self.roots: dict[str, bool] = {}  # function -> light: the compile units' roots (units.py)

    @property
    def x86(self) -> bool:
        """Whether the target is an x86 (its own fence and spin-wait instructions)."""
        return self.triple.startswith(("x86_64", "i686", "i386"))

    def cold_md(self) -> str:
        """Loop metadata: neither vectorize nor unroll (cold or tiny loops; saves compile time)."""
        return self._loop_md('!{!"llvm.loop.vectorize.enable", i1 false}', '!{!"llvm.loop.unroll.disable"}')

    def unroll_md(self, count: int) -> str:
        """Loop metadata: unroll `count` times (the pipeline unrolls only loops that ask)."""
        return self._loop_md(f'!{{!"llvm.loop.unroll.count", i32 {count}}}')

    def _loop_md(self, *props: str) -> str:
        ids = []
        for p in props:
            if p not in self.md_props:
                self.md_props[p] = len(self.mds)
                self.mds.append(f"!{len(self.mds)} = {p}")
            ids.append(f"!{self.md_props[p]}")
        n = len(self.mds)
        self.mds.append(f"!{n} = distinct !{{!{n}, {', '.join(ids)}}}")
        return f"!{n}"

    def oob_record(self, slot: str) -> int:
        """The bounds-checked mode's error record `slot` and its recorder, defined once per module;
        returns the number of the branch-weight metadata that marks a failing check unlikely."""
        if slot not in self.shared:
            self.shared.add(slot)
            self.funcs.append(f"@{slot} = global [5 x i64] zeroinitializer, align 8")
        if "caten_oob_record" not in self.shared:
            self.shared.add("caten_oob_record")
            from caten.render.checks import LLVM_RECORDER

            self.funcs.append(LLVM_RECORDER)
            self.oob_md = len(self.mds)
            self.mds.append(f'!{self.oob_md} = !{{!"branch_weights", i32 1048576, i32 1}}')
        return self.oob_md

    def fresh(self, hint: str) -> str:
        """A function name not yet used in this module."""
        self.nfresh += 1
        return f"caten_{hint}{self.nfresh}"

    def root(self, name: str, light: bool = False) -> None:
        """Make function `name` a compile unit of its own (caten.render.llvm.units); `light`:
        glue code, compiled without optimization."""
        self.roots[name] = light

    def declare(self, name: str, ret: str, args: Sequence[str]) -> None:
        if name not in self.decls:
            self.decls[name] = f"declare {ret} @{name}({', '.join(args)})"

    def text(self) -> str:
        attrs = f'attributes #0 = {{ nounwind "prefer-vector-width"="{self.vector_bits}" "target-cpu"="{self.cpu}"'
        if self.features:
            attrs += f' "target-features"="{self.features}"'
        attrs += " }"
        attrs += "\n" + attrs.replace("#0 = { nounwind", "#1 = { noinline nounwind", 1)
        head = [f'target datalayout = "{self.layout}"', f'target triple = "{self.triple}"', ""]
        funcs = "\n".join(self.funcs)
        if self.roots:
            marks = {name: f"{MARK}{' light' if light else ''}\n" for name, light in self.roots.items()}
            funcs = _DEFINED.sub(lambda m: marks.get(m[2], "") + m[0], funcs)
        return "\n".join(head + [funcs, ""] + list(self.decls.values()) + ["", attrs, ""] + self.mds + [""])


_DEFINED = re.compile(r"^define (internal )?\S+ @([\w.$]+)\(", re.M)
