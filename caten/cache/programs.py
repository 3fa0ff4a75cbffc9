"""Programs to bytes and back, iteratively: graphs can be far deeper than a recursive encoder's
recursion. The bytes are cache data (caten.cache.codec, JSON): loading them runs no code. It sits in
the cache, which knows the IR, so that the IR never depends on how the cache stores it.

Nodes are written in topological order with operand indices, and rebuilt with `Node.make`, so
a loaded program is hash-consed like a freshly elaborated one.
"""

from __future__ import annotations

import dataclasses

from caten.cache import codec
from caten.ir import dtypes as T
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.program import Program

FORMAT = 3


def dumps(prog: Program) -> bytes:
    # a node is a list of lists (its shape, its operands' indices): JSON's own arrays, which
    # decode with no per-object hook (tuples are tagged objects: a third of a warm load's decode)
    order = toposort(prog.nodes)
    ids = {id(n): i for i, n in enumerate(order)}
    flat = [[n.op.value, n.dtype.name, list(n.shape), [ids[id(s)] for s in n.src], n.arg] for n in order]
    prog.key()  # stored with the program: a warm load need not hash the graph again
    fields = {f.name: getattr(prog, f.name) for f in dataclasses.fields(prog) if f.name != "nodes"}
    return codec.dumps((FORMAT, flat, [ids[id(n)] for n in prog.nodes], fields))


def loads(blob: bytes) -> Program:
    fmt, flat, outs, fields = codec.loads(blob)
    if fmt != FORMAT:
        raise ValueError(f"serialized program format {fmt}, expected {FORMAT}")
    nodes: list[Node] = []
    for op, dt, shape, src, arg in flat:
        if type(shape) is not list or type(src) is not list:
            raise ValueError("malformed node in a serialized program")
        nodes.append(Node.make(Op(op), T.BY_NAME[dt], tuple(shape), tuple(nodes[i] for i in src), arg))
    return Program(nodes=[nodes[i] for i in outs], **fields)
