"""ONNX graph -> caten composite text (LANGUAGE.md section 13).

One `setf` per ONNX node, written with library names (`ops/*.lisp`), so the result is readable
caten that every runtime compiles. Initializers become extra inputs (saved to `.npz` by
`caten import`); `dim_param` dims become dim symbols. Shape arithmetic on constants (Shape,
Gather of a shape, Concat of dims ...) is folded here, at conversion time, as any compiler
with static shapes does; everything else is emitted as caten text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.frontends.deps import need
from caten.frontends.onnx.boundary import UNFED, declare_input, declare_output, flat_feeds
from caten.frontends.onnx.narrow import carrier_dtype, to_carrier
from caten.frontends.onnx.types import DTYPES, Unsupported, caten_dtype
from caten.frontends.text import lit, sym


@dataclass
class Converted:
    """A converted graph: the caten text and how to call its composite."""

    text: str
    name: str
    inputs: list[str]  # ONNX graph inputs passed at run time, in parameter order
    weights: dict[str, np.ndarray]  # then these, by parameter name, in order
    outputs: list[str]  # ONNX output names
    static: dict[str, np.ndarray] = field(default_factory=dict)  # graph inputs baked in as constants
    # per ONNX output, how many composite results it takes: "tensor" one, an int k a sequence of k
    # tensors (a Python list at the boundary), None an empty optional (no result, None at the boundary)
    layout: list[str | int | None] = field(default_factory=list)


class Graph:
    """Conversion state: caten names, known constants and inferred types of ONNX values."""

    def __init__(self, model: Any, available: Mapping[str, np.ndarray] | None, shapes: Mapping[str, tuple] | None):
        onnx = need("onnx", "onnx")
        from onnx import numpy_helper

        self.onnx = onnx
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 21)
        self.available = dict(available or {})
        self.static: dict[str, np.ndarray] = {}
        self.taken: set[str] = {"nil", "t", "true", "false", "inf", "nan"}
        self.names: dict[str, str] = {}  # ONNX value -> caten variable
        self.consts: dict[str, np.ndarray] = {}
        self.types: dict[str, tuple[str | None, list | None]] = {}
        self.narrow: dict[str, int] = {}  # values of a narrow ONNX type (carried: narrow.py) -> its code
        self.lines: list[str] = []
        self.params: list[tuple[str, str]] = []  # (onnx name, caten signature entry) of run-time inputs
        self.weights: dict[str, np.ndarray] = {}
        self.weight_params: list[str] = []
        self.dims: dict[str, str] = {}
        self.count = 0
        self.producer: dict[str, Any] = {}
        # sequences and optionals exist only at conversion time: a sequence is the list of its
        # elements' value names, an optional the name of its value or None (ONNX names or `synth` ones)
        self.seqs: dict[str, list[str]] = {}
        self.opts: dict[str, str | None] = {}
        self.inlined = 0
        g = model.graph
        for init in g.initializer:
            self.set_const(init.name, numpy_helper.to_array(init))
        self.shapes = dict(shapes or {})
        # dim symbols are the graph inputs' dim_params; inference's own (unk__0) are unknown dims
        self.dim_params = {d.dim_param for vi in g.input if vi.type.HasField("tensor_type")
                           for d in vi.type.tensor_type.shape.dim if d.dim_param}
        self._infer()
        self._expand()

    def _expand(self) -> None:
        """Ops without a lowering but with an ONNX function body become that body."""
        from caten.frontends.onnx.expand import expand
        from caten.frontends.onnx.handlers import supported_ops

        sup = supported_ops()
        if all(n.op_type in sup for n in self.model.graph.node):
            return
        m = self.onnx.ModelProto()
        m.CopyFrom(self.model)
        changed = False
        for _ in range(4):  # bodies may use ops that have bodies themselves
            if not expand(m, self.opset, sup, self._type_proto):
                break
            changed = True
            self.model = m
            self._infer()
        if changed:
            for init in m.graph.initializer:
                if init.name not in self.consts:
                    self.set_const(init.name, self.onnx.numpy_helper.to_array(init))

    def set_const(self, name: str, v: np.ndarray) -> None:
        """Record a constant; a narrow-typed one (ml_dtypes) as its carrier, remembering its type."""
        self.consts[name], code = to_carrier(v)
        if code is not None:
            self.narrow[name] = code

    def code(self, name: str) -> int | None:
        """The ONNX element type of a value (a narrow type, not its carrier, where it has one)."""
        if name in self.narrow:
            return self.narrow[name]
        dt = self.dtype(name)
        return None if dt is None else next(k for k, v in DTYPES.items() if v == dt)

    def _type_proto(self, name: str) -> Any:
        code, shape = self.code(name), self.shape(name)
        if code is None:
            return None
        dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
        return self.onnx.helper.make_tensor_type_proto(code, dims)

    # ---- types ---------------------------------------------------------------------------
    def _infer(self) -> None:
        onnx = self.onnx
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        for vi in m.graph.input:
            if vi.name in self.shapes and vi.type.HasField("tensor_type"):
                shp = vi.type.tensor_type.shape
                shp.ClearField("dim")
                for d in self.shapes[vi.name]:
                    shp.dim.add().dim_value = int(d)
        try:
            m = onnx.shape_inference.infer_shapes(m, data_prop=True)
        except Exception:  # inference is a help, not a requirement
            pass
        for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            dt = carrier_dtype(tt.elem_type)
            if dt is not None and tt.elem_type not in DTYPES:
                self.narrow[vi.name] = tt.elem_type
            shape = None
            if tt.HasField("shape"):
                shape = [self._dim(d) for d in tt.shape.dim]
            old = self.types.get(vi.name)
            if old is None or (old[1] is None and shape is not None):
                self.types[vi.name] = (dt, shape)
        for name, shp in self.shapes.items():
            dt = self.types.get(name, (None, None))[0]
            self.types[name] = (dt, list(shp))
        for name, v in self.consts.items():
            self.types[name] = (caten_dtype(v.dtype), list(v.shape))

    def _complete(self, name: str) -> bool:
        s = self.shape(name)
        return s is not None and None not in s

    def _dim(self, d: Any) -> int | str | None:
        if d.HasField("dim_value"):
            return d.dim_value
        return d.dim_param if d.dim_param in self.dim_params and d.dim_param not in self.shapes else None

    def infer_node(self, node: Any) -> None:
        """Output types of one node from onnx's inference, given what is known of its inputs
        (constants as initializers, so shape arithmetic propagates where the whole-graph pass stopped)."""
        if all(self._complete(o) for o in node.output if o):
            return
        onnx, helper, numpy_helper = self.onnx, self.onnx.helper, self.onnx.numpy_helper
        ins, inits = [], []
        for name in node.input:
            if not name or any(v.name == name for v in ins):
                continue
            if name in self.consts and self.consts[name].size <= 4096:
                inits.append(numpy_helper.from_array(self.consts[name], name))
                continue
            code, shape = self.code(name), self.shape(name)
            if code is None:
                return
            dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
            ins.append(helper.make_tensor_value_info(name, code, dims))
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        m = helper.make_model(helper.make_graph([node], "n", ins, outs, inits),
                              opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        try:
            m = onnx.shape_inference.infer_shapes(m, data_prop=True)
        except Exception:
            return
        for vi in list(m.graph.output) + list(m.graph.value_info):
            if vi.name in node.output and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                tt = vi.type.tensor_type
                shape = [self._dim(d) for d in tt.shape.dim]
                if not self._complete(vi.name):
                    self.types[vi.name] = (carrier_dtype(tt.elem_type), shape)
                    if tt.elem_type not in DTYPES and self.types[vi.name][0] is not None:
                        self.narrow[vi.name] = tt.elem_type

    def dtype(self, name: str) -> str | None:
        if name in self.consts:
            return caten_dtype(self.consts[name].dtype)
        return self.types.get(name, (None, None))[0]

    def shape(self, name: str) -> list | None:
        if name in self.consts:
            return list(self.consts[name].shape)
        s = self.types.get(name, (None, None))[1]
        return None if s is None else list(s)

    # ---- emission ------------------------------------------------------------------------
    def fresh(self) -> str:
        self.count += 1
        return sym(f"t{self.count}", self.taken)

    def emit(self, expr: str, onnx_name: str | None = None) -> str:
        var = self.fresh()
        self.lines.append(f"(setf {var} {expr})")
        if onnx_name is not None:
            self.names[onnx_name] = var
        return var

    def dim_text(self, d: Any) -> str:
        if isinstance(d, int) and not isinstance(d, bool):
            return str(d)
        if d not in self.dims:
            self.dims[d] = sym(str(d) if d else f"D{len(self.dims)}", self.taken, "D_")
        return self.dims[d]

    def annot(self, var: str, dt: str, shape: list) -> str:
        return f"{var}{{{dt}}}" if not shape else f"{var}{{{dt}}}[{', '.join(self.dim_text(d) for d in shape)}]"

    def synth(self, base: str) -> str:
        """A fresh value name (no ONNX name has `#`) for a value the importer makes up, e.g. an element."""
        self.count += 1
        return f"{base}#{self.count}"

    def bind(self, dst: str, src: str) -> None:
        """Make value `dst` the same as the known value `src` (a tensor, constant, sequence or optional)."""
        if src in self.seqs:
            self.seqs[dst] = list(self.seqs[src])
            return
        if src in self.opts:
            self.opts[dst] = self.opts[src]
            return
        if src in self.consts:
            self.consts[dst] = self.consts[src]
        elif src in self.names:
            self.names[dst] = self.names[src]
        else:
            raise Unsupported(f"value `{src}` is used before it is computed")
        if src in self.narrow:
            self.narrow[dst] = self.narrow[src]
        if src in self.types:
            self.types[dst] = self.types[src]

    def inline(self, body: Any, bind: Mapping[str, str]) -> list[str]:
        """Lower subgraph `body` (a GraphProto: a Loop/Scan/If/SequenceMap body) into this composite
        once more, e.g. once per unrolled iteration; returns its outputs' value names.

        bind maps each body input name to a known value (any kind `bind` takes: tensor, constant,
        sequence, optional); inputs left out must not be used. Each call renames every value the body
        defines (inputs, initializers, node outputs, also inside nested subgraphs) to `name@k`, k
        fresh per call, so repeated calls never collide; names the body does not define are the
        enclosing graph's values and stay as they are. Bind an output to a node's output with
        `g.bind(node.output[i], returned[i])`."""
        self.inlined += 1
        k = self.inlined
        defined = {vi.name for vi in body.input} | {i.name for i in body.initializer}
        defined |= {o for node in body.node for o in node.output if o}
        ren = {v: f"{v}@{k}" for v in defined}
        for vi in body.input:
            if vi.name in bind:
                self.bind(ren[vi.name], bind[vi.name])
        for init in body.initializer:
            self.set_const(ren[init.name], self.onnx.numpy_helper.to_array(init))
        for node in body.node:
            m = self.onnx.NodeProto()
            m.CopyFrom(node)
            _rename(m, ren)
            for o in m.output:
                if o:
                    self.producer[o] = m
            lower_node(self, m)
        return [ren.get(vo.name, vo.name) for vo in body.output]

    def tensor(self, name: str) -> str:
        """The caten variable holding ONNX value `name` (constants become inputs or literals)."""
        if name in self.names:
            return self.names[name]
        if name in self.seqs or name in self.opts:
            raise Unsupported(f"value `{name}` is a sequence or optional where a tensor is expected",
                              hint="sequences and optionals are taken apart at conversion time, by their own ops")
        if name in self.consts:
            v = self.consts[name]
            dt = caten_dtype(v.dtype)
            if dt is None:
                raise Unsupported(f"constant `{name}` has dtype {v.dtype}, which caten does not have")
            if v.size == 1 or (v.size > 0 and v.size <= 4096 and np.all(v == v.flat[0])):
                shape = " ".join(str(d) for d in v.shape)
                return self.emit(f"(full [{shape}] {lit(v.flat[0], dt)} :dtype {dt})", name)
            var = sym(name, self.taken, "w_")
            self.names[name] = var
            self.weights[var] = v
            self.weight_params.append(self.annot(var, dt, list(v.shape)))
            return var
        raise Unsupported(f"value `{name}` is used before it is computed")

    def _fold_needed(self, name: str, depth: int) -> np.ndarray | None:
        return _fold_needed_impl(self, name, depth)

    def const(self, name: str, what: str, node: Any) -> np.ndarray:
        """A compile-time value: an initializer, a Constant, a folded value, or an input the caller
        supplied for specialization (the backend's shape-determining inputs)."""
        if name in self.consts:
            return self.consts[name]
        if name in self.available:
            v = np.asarray(self.available[name])
            self.static[name] = v
            return v
        v = self._fold_needed(name, 0)
        if v is not None:
            return v
        raise Unsupported(f"{node.op_type} node `{node.name or node.output[0]}`: its {what} (`{name}`) must be a "
                          "constant (an initializer or Constant), computed at run time it is not supported")


def _fold_needed_impl(g: Graph, name: str, depth: int) -> np.ndarray | None:
    """Fold the producers of a value that must be a compile-time constant, using the inputs the
    caller supplied for specialization where they feed it (the backend's shape operands)."""
    from caten.frontends.onnx.fold import fold_op

    node = g.producer.get(name)
    if node is None or depth > 64:
        return None
    if node.op_type in ("Shape", "Size"):
        shape = g.shape(node.input[0])
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        if node.op_type == "Size":
            out = [np.array(int(np.prod(shape)), np.int64)]
        else:
            start, end = _attr_int(node, "start", 0), _attr_int(node, "end", None)
            out = [np.array(shape[slice(start, end)], np.int64)]
    else:
        xs: list[np.ndarray | None] = []
        for i in node.input:
            if not i:
                xs.append(None)
            elif i in g.consts:
                xs.append(g.consts[i])
            elif i in g.available:
                g.static[i] = np.asarray(g.available[i])
                xs.append(g.static[i])
            else:
                v = _fold_needed_impl(g, i, depth + 1)
                if v is None:
                    return None
                xs.append(v)
        if any(x is not None and x.size > 4096 for x in xs):
            return None
        try:
            out = fold_op(node.op_type, node, xs)
        except Exception:  # numpy could not fold it: the caller reports the operand
            return None
        if out is None:
            return None
    for o, v in zip(node.output, out):
        g.consts.setdefault(o, np.asarray(v))
    return g.consts.get(name)


def _rename(node: Any, ren: Mapping[str, str]) -> None:
    """Rename inputs and outputs of `node` and of the nodes of its subgraphs (in place)."""
    for i, v in enumerate(node.input):
        node.input[i] = ren.get(v, v)
    for i, v in enumerate(node.output):
        node.output[i] = ren.get(v, v)
    for a in node.attribute:
        for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for vi in list(sub.input) + list(sub.output):
                vi.name = ren.get(vi.name, vi.name)
            for inner in sub.node:
                _rename(inner, ren)


def lower_node(g: Graph, node: Any) -> None:
    """Emit one node: folded when it is shape arithmetic on constants, else through its handler."""
    from caten.frontends.onnx import fold, handlers, nbits

    if node.domain not in ("", "ai.onnx", "ai.onnx.preview.training", "ai.onnx.ml") and \
            not (node.domain == "com.microsoft" and node.op_type in nbits.MICROSOFT):
        raise Unsupported(f"node `{node.name or node.output[0]}`: op domain `{node.domain}` is not supported")
    g.infer_node(node)
    if fold.try_fold(g, node):
        return
    handlers.lower(g, node)
    g.infer_node(node)  # operands the lowering folded may let inference reach the outputs now


def _attr_int(node: Any, name: str, default: Any) -> Any:
    return next((a.i for a in node.attribute if a.name == name), default)


def _signature(g: Graph, outputs: list[tuple[str, str]]) -> str:
    ins = " ".join([p for _, p in g.params] + g.weight_params)
    outs = " ".join(a for _, a in outputs)
    return f"(({ins}) -> ({outs}))"


def convert(model: Any, name: str = "model", available: Mapping[str, np.ndarray] | None = None,
            shapes: Mapping[str, tuple] | None = None) -> Converted:
    """Translate an ONNX ModelProto into one caten composite named `name`.

    `shapes` fixes graph input shapes (the backend compiles per input shape); `available` are input
    values a node may need at compile time (shape operands); those inputs are then baked in."""
    g = Graph(model, flat_feeds(model, available or {}), shapes)
    graph = g.model.graph
    g.producer = {o: node for node in graph.node for o in node.output if o}
    init_names = set(g.consts)
    for vi in graph.input:
        if vi.name not in init_names:
            declare_input(g, vi.name, vi.type, (available or {}).get(vi.name, UNFED))
    from caten.frontends.onnx.qdq import fused

    for node in fused(g, graph.node):  # quantized layers (QDQ) run as integer kernels
        lower_node(g, node)
    outs: list[tuple[str, str]] = []
    layout = [declare_output(g, vo.name, outs) for vo in graph.output]
    if not outs:
        raise Unsupported("the graph has no tensor output (only empty sequences or optionals)")
    ret = f"(return {' '.join(v for v, _ in outs)})"
    # run-time inputs baked in as constants stay parameters only where also used as tensors
    g.params = [(n, p) for n, p in g.params if n not in g.static or _mentions(g.lines + [ret], g.names[n])]
    body = "\n  ".join(g.lines + [ret])
    text = f";; imported from ONNX (opset {g.opset}) by caten\n(composite {name} {_signature(g, outs)}\n  {body})\n"
    return Converted(text, name, [n for n, _ in g.params], dict(g.weights), [vo.name for vo in graph.output],
                     dict(g.static), layout)


def _mentions(lines: list[str], var: str) -> bool:
    pat = re.compile(r"(?<![A-Za-z0-9_\-])" + re.escape(var) + r"(?![A-Za-z0-9_\-{])")
    return any(pat.search(line) for line in lines)
