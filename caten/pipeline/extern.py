"""Running programs that call EXTERN kernels on runtimes that compile loops.

A program with EXTERN nodes is cut at them: one compiled program computes the EXTERN
operands, the host calls the extern kernel (numpy's, e.g. BLAS for "matmul", or a collective of
caten.ir.collective on torch.distributed), and the rest of the program is compiled with the extern
results, and the materialized values of the first piece it reads, as extra inputs — recursively,
so chains of externs work. Every piece is an ordinary Program for the runtime's own `compile`.
Every process of a group cuts the same program the same way, so the collectives meet in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from caten.errors import Error
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir.collective import STARTS
from caten.ir.graph import Node, toposort
from caten.ir.ops import COLLECTIVES, EXTERNS, Op, extern_params
from caten.ir.program import Program, TensorSpec


def has_extern(program: Program) -> bool:
    """Whether the program calls a host kernel, at its top level or inside a loop or branch body."""
    nodes = toposort(program.nodes)  # (once: a large program's graph takes milliseconds to walk)
    return any(n.op is Op.EXTERN for n in nodes) or _nested_extern(program, nodes) is not None


def _nested_extern(program: Program, nodes: list[Node] | None = None) -> str | None:
    """The name of a host kernel called inside a loop or branch body (bodies are not cut), if any;
    `nodes`: the program's, in topological order, where the caller has them."""
    stack = [n for n in (nodes if nodes is not None else toposort(program.nodes)) if n.op in (Op.LOOP, Op.IF)]
    seen: set[int] = set()
    while stack:
        spec = stack.pop().arg[0]
        if id(spec) in seen:
            continue
        seen.add(id(spec))
        bodies = (spec.body, spec.cond) if hasattr(spec, "body") else (spec.then, spec.other)
        for body in filter(None, bodies):
            for m in toposort(body.outputs):
                if m.op is Op.EXTERN:
                    return m.arg[1]
                if m.op in (Op.LOOP, Op.IF):
                    stack.append(m)
    return None


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


# materialized values: a stage-1 value of one of these ops that stage 2 reads is passed to it, not
# recomputed (a forward pass's matmuls before a gradient all-reduce)
_PASSED = frozenset({Op.REDUCE, Op.COPY, Op.GATHER, Op.SCATTER, Op.SORT})


def _passed(program: Program, first: Node, before: set[int]) -> list[Node]:
    """The first materialized stage-1 values on each path from the outputs that avoids `first`."""
    out: list[Node] = []
    seen: set[int] = set()
    stack = list(reversed(program.nodes))
    while stack:
        n = stack.pop()
        if id(n) in seen or n is first:
            continue
        seen.add(id(n))
        if id(n) in before and n.op in _PASSED:
            out.append(n)
            continue
        stack.extend(reversed(n.src))
    return out


class ExternSplit:
    """An executable made of: stage 1 (operands), extern calls on the host, stage 2 (the rest).
    Stage 2 reads stage 1's materialized values it needs instead of computing them again."""

    def __init__(self, program: Program, compile_fn: Callable[[Program], object]):
        self.program = program
        nested = _nested_extern(program)
        if nested is not None:
            raise Error(f'the host kernel "{nested}" inside a loop or branch body cannot run on a compiled runtime yet',
                        hint="compute it outside the loop (the numpy runtime runs it inside)")
        first = next(n for n in toposort(program.nodes) if n.op is Op.EXTERN and
                     not any(s.op is Op.EXTERN for s in toposort(n.src)))
        self.name = first.arg[1]
        if self.name not in EXTERNS:
            raise ValueError(f"unknown extern kernel {self.name}")
        self.params = extern_params(first.arg)
        self.extern = first
        n_in = len(program.inputs)
        passed = _passed(program, first, {id(n) for n in toposort(first.src)})
        outs = list(first.src) + [p for p in passed if p not in first.src]
        self.picks = [outs.index(p) for p in passed]  # stage 1's output read by each extra stage-2 input
        # a collective may work in its operand's buffer, unless stage 2 reads that too
        self.scratch = self.name in COLLECTIVES and not any(i < len(first.src) for i in self.picks)
        self.specs = [TensorSpec(f"__extern_in{i}", s.dtype, s.shape) for i, s in enumerate(outs)]
        self.reads = {n.arg[1] for n in toposort(outs) if n.op is Op.BUFFER}  # the inputs stage 1 reads
        self.stage1 = compile_fn(Program(f"{program.name}__pre", program.inputs, self.specs, outs,
                                         program.dims, [], program.defines, program.derived))
        result = B.buffer(first.dtype, first.shape, n_in, "__extern_out")
        mapping = {id(first): result}
        extra = []
        for j, p in enumerate(passed):
            name = f"__stage1_{j}"
            mapping[id(p)] = B.buffer(p.dtype, p.shape, n_in + 1 + j, name)
            extra.append(TensorSpec(name, p.dtype, p.shape))
        rest = _replace(program.nodes, mapping)
        inputs = program.inputs + [TensorSpec("__extern_out", first.dtype, first.shape)] + extra
        self.stage2 = compile_fn(Program(f"{program.name}__post", inputs, program.outputs, rest, program.dims, [],
                                         program.defines, program.derived))

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], env: dict[str, int],
            pending: Sequence[tuple[int, Callable[[], np.ndarray]]] = ()) -> None:
        """`pending`: (input index, wait) of earlier pieces' collectives still in flight; this stage 1
        runs before them when it does not read their results (the overlap of a gradient bucket's
        all-reduce with the next bucket's backward), else after waiting."""
        ins = list(inputs)
        later = []
        for i, wait in pending:
            if i in self.reads:
                ins[i] = np.ascontiguousarray(wait())
            else:
                later.append((i, wait))
        shape = lambda spec: tuple(D.evaluate(d, env) for d in spec)  # noqa: E731
        vals = [np.empty(shape(s.shape), s.dtype.np) for s in self.specs]
        self.stage1.run(ins, vals, env)
        ops = vals[:len(self.extern.src)]
        kw = dict(self.params, scratch=True) if self.scratch else self.params
        if self.name in STARTS:
            later.append((len(ins), STARTS[self.name](*ops, **kw)))
            ins.append(np.empty(shape(self.extern.shape), self.extern.dtype.np))  # filled when it arrives
        else:
            with np.errstate(all="ignore"):  # overflow to inf is a value, as in the compiled kernels
                res = np.asarray(EXTERNS[self.name](*ops, **kw)).astype(self.extern.dtype.np, copy=False)
            ins.append(np.ascontiguousarray(res))
        ins += [vals[i] for i in self.picks]
        if isinstance(self.stage2, ExternSplit):
            self.stage2.run(ins, outputs, env, later)
            return
        for i, wait in later:
            ins[i] = np.ascontiguousarray(wait())  # (a collective keeps its operand's dtype)
        self.stage2.run(ins, outputs, env)
