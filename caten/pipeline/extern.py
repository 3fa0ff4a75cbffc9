"""Running programs that call EXTERN kernels on runtimes that compile loops.

A program with EXTERN nodes is cut at them: one compiled program computes the EXTERN
operands, the host calls the extern kernel (numpy's, e.g. BLAS for "matmul"), and the rest of
the program is compiled with the extern results as extra inputs — recursively, so chains of
externs work. Every piece is an ordinary Program for the runtime's own `compile`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from caten.ir import build as B
from caten.ir import dims as D
from caten.ir.graph import Node, toposort
from caten.ir.ops import EXTERNS, Op
from caten.ir.program import Program, TensorSpec


def has_extern(program: Program) -> bool:
    return any(n.op is Op.EXTERN for n in toposort(program.nodes))


def _replace(nodes: Sequence[Node], mapping: dict[int, Node]) -> list[Node]:
    """`nodes` with each node of `mapping` (by id) swapped for its replacement, rebuilt bottom-up."""
    memo: dict[int, Node] = {}
    for n in toposort(nodes):
        if id(n) in mapping:
            memo[id(n)] = mapping[id(n)]
        elif n.src:
            memo[id(n)] = Node.make(n.op, n.dtype, n.shape, tuple(memo[id(s)] for s in n.src), n.arg)
        else:
            memo[id(n)] = n
    return [memo[id(n)] for n in nodes]


class ExternSplit:
    """An executable made of: stage 1 (operands), extern calls on the host, stage 2 (the rest)."""

    def __init__(self, program: Program, compile_fn: Callable[[Program], object]):
        self.program = program
        first = next(n for n in toposort(program.nodes) if n.op is Op.EXTERN and
                     not any(s.op is Op.EXTERN for s in toposort(n.src)))
        self.name = first.arg[1]
        if self.name not in EXTERNS:
            raise ValueError(f"unknown extern kernel {self.name}")
        self.extern = first
        n_in = len(program.inputs)
        operand_specs = [TensorSpec(f"__extern_in{i}", s.dtype, s.shape) for i, s in enumerate(first.src)]
        self.stage1 = compile_fn(Program(f"{program.name}__pre", program.inputs, operand_specs, list(first.src),
                                         program.dims, [], program.defines, program.derived))
        result = B.buffer(first.dtype, first.shape, n_in, "__extern_out")
        rest = _replace(program.nodes, {id(first): result})
        inputs = program.inputs + [TensorSpec("__extern_out", first.dtype, first.shape)]
        self.stage2 = compile_fn(Program(f"{program.name}__post", inputs, program.outputs, rest, program.dims, [],
                                         program.defines, program.derived))

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int]) -> None:
        shape = lambda spec: tuple(D.evaluate(d, env) for d in spec)  # noqa: E731
        ops = [np.empty(shape(s.shape), s.dtype.np) for s in self.extern.src]
        self.stage1.run(inputs, ops, env)
        with np.errstate(all="ignore"):  # overflow to inf is a value, as in the compiled kernels
            res = np.asarray(EXTERNS[self.name](*ops)).astype(self.extern.dtype.np, copy=False)
        res = np.ascontiguousarray(res)
        self.stage2.run(list(inputs) + [res], outputs, env)
