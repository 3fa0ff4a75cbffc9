"""Expanding ONNX ops that caten has no lowering for into their ONNX function bodies.

Many ONNX ops (Attention, the losses, the window functions, Mish ...) are defined by the
standard as a function of simpler ops. An op without a handler (caten.frontends.onnx.handlers) is replaced by
that body (context-dependent bodies get the node's input types), through onnx's own inliner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOMAIN = "caten.expand"


def _body(onnx: Any, node: Any, opset: int, input_type: Callable[[str], Any]) -> Any | None:
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:  # no such op at this opset: the lowering reports it
        return None
    try:
        if schema.has_function:
            vs = [v for v in schema.function_opset_versions if v <= opset]
            f = schema.get_function_with_opset_version(max(vs)) if vs else schema.function_body
            if isinstance(f, bytes):
                f = onnx.FunctionProto.FromString(f)
            return f
        if schema.has_context_dependent_function:
            types = []
            for name in node.input:
                t = input_type(name) if name else None
                if name and t is None:
                    return None
                types.append(t.SerializeToString() if t is not None else b"")
            vs = [v for v in schema.context_dependent_function_opset_versions if v <= opset] or [opset]
            raw = schema.get_context_dependent_function_with_opset_version(max(vs), node.SerializeToString(), types)
            f = onnx.FunctionProto()
            f.ParseFromString(raw)
            return f
    except Exception:  # a body onnx cannot build for these inputs: leave the node alone
        return None
    return None


def expand(model: Any, opset: int, supported: set[str], input_type: Callable[[str], Any]) -> bool:
    """Inline the function bodies of unsupported ops in `model` (in place); True if any was."""
    import onnx
    import onnx.inliner

    found: dict[str, Any] = {}
    for node in model.graph.node:
        if node.op_type in supported or node.domain not in ("", "ai.onnx", "ai.onnx.preview"):
            continue
        f = _body(onnx, node, opset, input_type)
        if f is None:
            continue
        # one local function per node: context-dependent bodies differ between nodes of one op
        fn = onnx.FunctionProto()
        fn.CopyFrom(f)
        fn.domain, fn.name = DOMAIN, f"{node.op_type}_{len(found)}"
        if not any(o.domain in ("", "ai.onnx") for o in fn.opset_import):
            fn.opset_import.add(domain="", version=opset)
        found[fn.name] = fn
        node.domain, node.op_type = DOMAIN, fn.name
    if not found:
        return False
    model.functions.extend(found.values())
    model.opset_import.add(domain=DOMAIN, version=1)
    model.CopyFrom(_inline(onnx, model))
    return True


def _inline(onnx: Any, model: Any) -> Any:
    """onnx's inliner, converting a body written for another opset than the model's (DynamicQuantizeLinear's
    is opset 11's, CenterCropPad's 18's): without conversion such a call is left un-inlined. The converter
    needs every value's type, so shapes are inferred first and the initializers typed."""
    try:
        typed = onnx.shape_inference.infer_shapes(model)
        have = {v.name for v in [*typed.graph.input, *typed.graph.value_info, *typed.graph.output]}
        typed.graph.value_info.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                      for t in typed.graph.initializer if t.name not in have)
        return onnx.inliner.inline_local_functions(typed, convert_version=True)
    except Exception:  # a model shape inference or the converter cannot take: inline as it is
        return onnx.inliner.inline_local_functions(model)
