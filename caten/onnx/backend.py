"""caten as an `onnx.backend.base.Backend`, so onnx's own backend tests run against caten.

`prepare` keeps the model; each `run` converts it for the inputs' shapes, treating inputs that
decide shapes (a Reshape's target, a Slice's bounds ...) as compile-time constants, compiles
it (once per distinct specialization; the compile cache keeps the code) and runs it. Tensors of
ONNX's narrow types caten has no dtype for (FLOAT8E8M0, float4, int4, int2) cross as their carrier
(caten.frontends.onnx.narrow) and outputs declared narrow come back as ml_dtypes arrays; the four
float8 formats caten has are passed as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten.frontends.deps import need

onnx = need("onnx", "onnx")
from onnx.backend.base import Backend, BackendRep  # noqa: E402

RUNTIME = "llvm"


class CatenRep(BackendRep):
    """A prepared model; compiled variants are kept per input shapes and baked-in values."""

    def __init__(self, model: Any, runtime: str):
        self.model, self.runtime = model, runtime
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self._mods: dict[str, Any] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        import caten
        from caten.frontends.onnx import convert
        from caten.frontends.onnx.boundary import flat_feeds
        from caten.frontends.onnx.narrow import NARROW, from_carrier

        if isinstance(inputs, dict):
            feeds = {k: _carry(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = {n: _carry(v) for n, v in zip(self.input_names, inputs)}
        flat = flat_feeds(self.model, feeds)
        conv = convert(self.model, "model", available=feeds, shapes={n: v.shape for n, v in flat.items()})
        mod = self._mods.get(conv.text)
        if mod is None:
            mod = self._mods[conv.text] = caten.loads(conv.text, runtime=self.runtime)
        out = mod.model(*[flat[n] for n in conv.inputs], *conv.weights.values())
        outs = list(out) if isinstance(out, tuple) else [out]
        codes = {vo.name: vo.type.tensor_type.elem_type for vo in self.model.graph.output}
        res: list[Any] = []
        for n, kind in zip(conv.outputs, conv.layout):
            if kind is None:  # an empty optional
                res.append(None)
            elif kind == "tensor":
                o = outs.pop(0)
                res.append(from_carrier(o, codes[n]) if codes.get(n) in NARROW else o)
            else:  # a sequence: a list of its tensors
                res.append([outs.pop(0) for _ in range(int(kind))])
        return tuple(res)


def _carry(v: Any) -> Any:
    """A fed value with its tensors as caten carries them (a sequence: a list; an empty optional: None)."""
    from caten.frontends.onnx.narrow import to_carrier

    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [_carry(e) for e in v]
    return to_carrier(np.asarray(v))[0]


class CatenBackend(Backend):
    """onnx's Backend interface over caten (CPU through the llvm runtime by default)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> CatenRep:
        return CatenRep(model, kwargs.get("runtime", RUNTIME))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """One node as a one-node graph (output types from onnx's shape inference)."""
        from onnx import helper

        xs = [np.asarray(v) for v in inputs]
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
               for n, x in zip(node.input, xs)]
        outs = [helper.make_empty_tensor_value_info(n) for n in node.output]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], "node", ins, outs),
                                  opset_imports=[helper.make_opsetid("", opset)])
        model = onnx.shape_inference.infer_shapes(model)
        return cls.prepare(model, device, **kwargs).run(xs)


prepare = CatenBackend.prepare
run_model = CatenBackend.run_model
run_node = CatenBackend.run_node
supports_device = CatenBackend.supports_device
