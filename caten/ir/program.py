"""A compiled-to-graph composite: what every runtime receives.

The front end produces a `Program` per (composite, dtype binding): BUFFER nodes for the
inputs, output nodes, the dimension symbols that stay dynamic, and the `where`
constraints that must be checked at call time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.ir.dtypes import DType
from caten.ir.graph import Node, dump, structural_hash


def c_symbol(name: str) -> str:
    """A composite's name as a C identifier (ASCII letters, digits, `_`; not starting with a digit)."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else "_" + s


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: DType
    shape: tuple[Dim, ...]

    def __str__(self) -> str:
        dims = "" if not self.shape else "[" + ", ".join(map(str, self.shape)) + "]"
        return f"{self.name}{{{self.dtype}}}{dims}"


@dataclass(frozen=True)
class Constraint:
    """`lhs = rhs` from a `where` clause between dims that inputs already determine, or a
    call-time condition of an op (`empty` set to the dim that must not be 0: its message)."""
    lhs: Dim
    rhs: Dim
    text: str
    empty: Dim | None = None


@dataclass
class Program:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    nodes: list[Node]  # one per output, in order
    dims: list[str]  # dynamic dimension symbols, in order of first appearance in the signature
    constraints: list[Constraint] = field(default_factory=list)
    defines: dict[str, int] = field(default_factory=dict)  # dims fixed at compile time (-D)
    derived: dict[str, Dim] = field(default_factory=dict)  # dims computed from the others (where K = (/ N 2))
    invariant: tuple[int, ...] = ()  # a loop body's inputs every trip reads unchanged (caten.ir.control)
    aliases: tuple[tuple[int, int], ...] = ()  # (output, input): the output is written into that input
    cached_key: str | None = field(default=None, compare=False, repr=False)  # key(), once computed

    def dim_defines(self) -> dict[str, Dim]:
        """What code generators substitute for non-argument dims: the -D values, and each
        derived dim's expression over the dynamic dims (kernels and C ABI entries take only
        `dims`; a derived one is computed from them where it is used)."""
        return {**self.defines, **self.derived}

    def dump(self) -> str:
        head = f"composite {self.name} ({' '.join(map(str, self.inputs))} -> {' '.join(map(str, self.outputs))})"
        return head + "\n" + dump(self.nodes, [o.name for o in self.outputs])

    def key(self) -> str:
        """A structural hash: equal graphs and signatures give equal keys, whatever the names
        (of the composite, its tensors or its dimension symbols)."""
        if self.cached_key is None:
            self.cached_key = self._key()
        return self.cached_key

    def _key(self) -> str:
        rename = self.canonical_dims()

        def canon(d: Dim) -> str:
            return str(D.substitute(d, rename))

        sig = [(t.dtype.name, tuple(canon(d) for d in t.shape)) for t in self.inputs + self.outputs]
        extra = ([canon(D.sym(s)) for s in self.dims], sorted((canon(D.sym(k)), canon(v)) for k, v in
                                                              self.derived.items()),
                 [(canon(c.lhs), canon(c.rhs)) for c in self.constraints], sorted(self.defines.items()),
                 self.aliases)
        return structural_hash(self.nodes, rename) + repr((sig, extra))

    def in_place(self) -> frozenset[int]:
        """The aliased outputs that code may compute directly in their input's memory: a SCATTER
        into that very input, which nothing else reads (a cache appended to). The scatter then
        writes only its positions, with no copy of the rest; every other aliased output is computed
        apart and copied into its input after the run."""
        from caten.ir.graph import toposort
        from caten.ir.ops import Op

        readers: dict[int, int] = {}
        for n in toposort(self.nodes):
            for s in n.src:
                readers[id(s)] = readers.get(id(s), 0) + 1
        outs = [id(n) for n in self.nodes]
        fast = set()
        for i, j in self.aliases:
            n = self.nodes[i]
            base = n.src[0] if n.op is Op.SCATTER else None
            if base is not None and base.op is Op.BUFFER and base.arg[1] == j and readers.get(id(base)) == 1 \
                    and id(base) not in outs and outs.count(id(n)) == 1:
                fast.add(i)
        return frozenset(fast)

    def canonical_dims(self) -> dict[str, Dim]:
        """Each dimension symbol -> `_d0`, `_d1`, ... by first appearance: names stop mattering."""
        order: list[str] = []
        for t in self.inputs + self.outputs:
            for d in t.shape:
                order += [s for s in D.free_syms(d) if s not in order]
        order += [s for s in self.dims + list(self.derived) if s not in order]
        return {s: D.sym(f"_d{i}") for i, s in enumerate(order)}

    def bind_dims(self, shapes: list[tuple[int, ...]]) -> dict[str, int]:
        """Values of the dynamic dims, read off concrete input shapes (inputs already checked)."""
        env: dict[str, int] = dict(self.defines)
        for spec, shape in zip(self.inputs, shapes):
            for d, n in zip(spec.shape, shape):
                if isinstance(d, D.DimExpr):
                    syms = D.free_syms(d)
                    if len(syms) == 1 and d == D.sym(syms[0]):
                        env.setdefault(syms[0], int(n))
        return env
