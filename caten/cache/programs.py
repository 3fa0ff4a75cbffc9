"""Programs to bytes and back, iteratively: graphs can be far deeper than a recursive encoder's
recursion. The bytes are cache data (caten.cache.codec, JSON): loading them runs no code. It sits in
the cache, which knows the IR, so that the IR never depends on how the cache stores it.

Nodes are written in topological order with operand indices, and rebuilt with `Node.make`, so
a loaded program is hash-consed like a freshly elaborated one. They are rebuilt on first use of
`nodes` (`Stored`): a warm load reads only the signature and the stored key (the compiled code
comes from the program-level cache, caten.pipeline.restore), and GPT-2 small's 1,800 nodes cost
~15 ms to decode and rebuild.
"""

from __future__ import annotations

import dataclasses
import threading

from caten.cache import codec
from caten.ir import dtypes as T
from caten.ir.graph import Node, toposort
from caten.ir.ops import Op
from caten.ir.program import Program

FORMAT = 4
_lock = threading.Lock()


def dumps(prog: Program) -> bytes:
    # a node is a list of lists (its shape, its operands' indices): JSON's own arrays, which
    # decode with no per-object hook (tuples are tagged objects: a third of a warm load's decode)
    order = toposort(prog.nodes)
    ids = {id(n): i for i, n in enumerate(order)}
    flat = [[n.op.value, n.dtype.name, list(n.shape), [ids[id(s)] for s in n.src], n.arg] for n in order]
    prog.key()  # stored with the program: a warm load need not hash the graph again
    fields = {f.name: getattr(prog, f.name) for f in dataclasses.fields(prog) if f.name != "nodes"}
    graph = codec.Lazy({"flat": flat, "outs": [ids[id(n)] for n in prog.nodes]})  # (decoded on first use)
    return codec.dumps((FORMAT, graph, fields))


def loads(blob: bytes) -> Program:
    """The program of an entry (its graph rebuilt on first use of `nodes`); raises ValueError
    (or codec.CodecError) on an entry of another layout."""
    fmt, graph, fields = codec.loads(blob)
    if fmt != FORMAT or not isinstance(graph, codec.Lazy) or set(graph) != {"flat", "outs"}:
        raise ValueError(f"serialized program format {fmt}, expected {FORMAT}")
    if not isinstance(fields, dict) or "nodes" in fields or not isinstance(fields.get("cached_key"), str):
        raise ValueError("malformed serialized program")
    p = Stored(nodes=[], **fields)  # (a dataclass's own checks of its fields; the graph replaced below)
    del p.__dict__["nodes"]
    p.__dict__["_graph"] = graph
    return p


class Stored(Program):
    """A Program read from the cache: `nodes` is rebuilt from the entry on first use (`loads`);
    everything else is as stored, the structural key included."""

    @property  # type: ignore[override]
    def nodes(self) -> list[Node]:
        d = self.__dict__
        if "nodes" not in d:
            with _lock:
                if "nodes" not in d:
                    d["nodes"] = _graph(d["_graph"])
        return d["nodes"]

    @nodes.setter
    def nodes(self, value: list[Node]) -> None:
        self.__dict__["nodes"] = value

    def __eq__(self, other: object) -> bool:
        """Equal to a Program of equal fields (the dataclass's own test wants the same class)."""
        if not isinstance(other, Program):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(Program) if f.compare)

    __hash__ = None  # type: ignore[assignment]  (as Program's: mutable)


def _graph(graph: codec.Lazy) -> list[Node]:
    """The output nodes of a stored graph (raises codec.CodecError on a malformed one: an entry is
    written and read by the same code, caten.pipeline.front's fingerprint, so only a bug can)."""
    flat, outs = graph["flat"], graph["outs"]
    nodes: list[Node] = []
    try:
        for op, dt, shape, src, arg in flat:
            if type(shape) is not list or type(src) is not list:
                raise ValueError("malformed node in a serialized program")
            nodes.append(Node.make(Op(op), T.BY_NAME[dt], tuple(shape), tuple(nodes[i] for i in src), arg))
        return [nodes[i] for i in outs]
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise codec.CodecError(f"unreadable program in the cache: {e}") from e
