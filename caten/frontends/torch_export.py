"""`caten.from_torch`: a torch.nn.Module captured by torch.export, as caten text (LANGUAGE.md 13).

The exported program is decomposed to ATen's core IR; each call becomes one `setf` over
caten library names. Parameters and buffers become inputs bound by the returned module;
symbolic sizes (`dynamic_shapes`) become dim symbols, so one compiled program serves every
batch size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from caten.errors import Error
from caten.frontends.deps import need
from caten.frontends.onnx import lit, sym

_DT = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16",
       "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}
ATEN: dict[str, Callable[[Ctx, Any], Any]] = {}


def aten(*names: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        for n in names:
            ATEN[n] = fn
        return fn
    return deco


def dtype_of(t: Any) -> str:
    name = str(t).replace("torch.", "")
    if name not in _DT:
        raise Error(f"torch dtype {name} has no caten counterpart")
    return _DT[name]


class Ctx:
    """Translation state: caten text for each fx value, dims as caten dim expressions."""

    def __init__(self) -> None:
        self.vals: dict[str, Any] = {}
        self.lines: list[str] = []
        self.taken: set[str] = {"nil", "t", "true", "false", "inf", "nan"}

    def dim(self, d: Any) -> str:
        """An int or SymInt as caten dim text (symbols are the inputs' symbolic sizes)."""
        if isinstance(d, int):
            return str(d)
        return _sympy_text(d.node.expr)

    def arg(self, a: Any) -> Any:
        """An fx argument: a node's caten text (tensor var or dim text), or a Python value."""
        import torch.fx

        if isinstance(a, torch.fx.Node):
            if a.name in self.vals:
                return self.vals[a.name]
            val = a.meta.get("val")
            if val is not None and not hasattr(val, "shape"):
                return self.dim(val)
            raise Error(f"torch.export node `{a.name}` is used before it is computed")
        if isinstance(a, (list, tuple)):
            return [self.arg(x) for x in a]
        if hasattr(a, "node") and hasattr(a.node, "expr"):
            return self.dim(a)
        return a

    def emit(self, name: str, expr: str) -> str:
        var = sym(name, self.taken, "v_")
        self.lines.append(f"(setf {var} {expr})")
        return var


def _sympy_text(e: Any) -> str:
    import sympy

    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return str(e)
    if isinstance(e, sympy.Add):
        return "(+ " + " ".join(_sympy_text(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(* " + " ".join(_sympy_text(a) for a in e.args) + ")"
    if type(e).__name__ == "FloorDiv":
        return f"(/ {_sympy_text(e.args[0])} {_sympy_text(e.args[1])})"
    raise Error(f"symbolic size `{e}` has no caten dim expression")


def lst(xs: Any) -> str:
    return "[" + " ".join(str(x) for x in xs) + "]"


def _meta(node: Any) -> Any:
    return node.meta.get("val")


def scalar(c: Ctx, v: Any, like: Any) -> str:
    """A Python number as a literal of the dtype of the tensor node `like`."""
    return lit(v, dtype_of(_meta(like).dtype))


def operand(c: Ctx, a: Any, other: Any) -> str:
    import torch.fx

    if isinstance(a, torch.fx.Node):
        return c.arg(a)
    return scalar(c, a, other)


def convert_exported(ep: Any, name: str = "forward") -> tuple[str, list[str], list[np.ndarray]]:
    """(caten text, user input names, weight arrays in parameter order) of an ExportedProgram."""
    c = Ctx()
    sig = ep.graph_signature
    params: list[str] = []
    weights: list[np.ndarray] = []
    user: list[str] = []
    spec_by_name = {s.arg.name: s for s in sig.input_specs}
    user_params: list[str] = []
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = _meta(node)
        var = sym(node.name, c.taken, "x_")
        c.vals[node.name] = var
        dims = ", ".join(c.dim(d) for d in val.shape)
        ann = f"{var}{{{dtype_of(val.dtype)}}}" + (f"[{dims}]" if val.dim() else "")
        spec = spec_by_name[node.name]
        if spec.kind.name == "USER_INPUT":
            user.append(node.name)
            user_params.append(ann)
        else:
            t = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            weights.append(t.detach().cpu().numpy())
            params.append(ann)
    outs: list[tuple[str, str]] = []
    for node in ep.graph.nodes:
        if node.op == "call_function":
            val = _meta(node)
            if val is not None and hasattr(val, "node") and hasattr(val.node, "expr"):
                c.vals[node.name] = c.dim(val)  # size arithmetic: a dim expression of the input sizes
                continue
            key = str(node.target)
            fn = ATEN.get(key)
            if fn is None:
                if node.target is __import__("operator").getitem:
                    c.vals[node.name] = c.vals[node.args[0].name][node.args[1]]
                    continue
                raise Error(f"torch.export node `{node.name}`: ATen op `{key}` is not supported by caten's importer",
                            None, "docs/import.md lists the supported ATen ops")
            res = fn(c, node)
            if isinstance(res, list):
                c.vals[node.name] = [None if r is None else c.emit(f"{node.name}_{i}", r) for i, r in enumerate(res)]
            elif isinstance(res, str) and not hasattr(_meta(node), "shape"):
                c.vals[node.name] = res  # a size computed from sizes: dim text
            else:
                c.vals[node.name] = c.emit(node.name, res)
        elif node.op == "output":
            for i, o in enumerate(node.args[0]):
                val = _meta(o)
                var = c.vals[o.name]
                dims = ", ".join(c.dim(d) for d in val.shape)
                oname = sym(f"out{i}", c.taken)
                outs.append((var, f"{oname}{{{dtype_of(val.dtype)}}}" + (f"[{dims}]" if val.dim() else "")))
    sig_text = f"(({' '.join(user_params + params)}) -> ({' '.join(a for _, a in outs)}))"
    body = "\n  ".join(c.lines + [f"(return {' '.join(v for v, _ in outs)})"])
    text = f";; captured from torch.export by caten\n(composite {name} {sig_text}\n  {body})\n"
    return text, user, weights


class TorchModule:
    """A captured module compiled by caten: call it with numpy arrays or torch tensors."""

    def __init__(self, text: str, inputs: list[str], weights: list[np.ndarray], runtime: str, **kw: Any):
        from caten.api import loads  # `caten.loads` itself: the package `caten` imports this module

        self.source, self.inputs, self.weights, self.runtime = text, inputs, weights, runtime
        self._fn = loads(text, runtime=runtime, **kw).forward

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.inputs):
            raise Error(f"the module takes {len(self.inputs)} input(s), got {len(args)}")
        xs = [a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a) for a in args]
        return self._fn(*xs, *self.weights)


def from_torch(module: Any, example_args: Any, dynamic_shapes: Any = None, runtime: str = "llvm",
               **kw: Any) -> TorchModule:
    """Capture `module` with torch.export (core ATen IR) and compile it with caten."""
    torch = need("torch", "torch")
    from caten.frontends import torch_ops  # noqa: F401  (registers the ATen lowerings)

    args = tuple(example_args) if isinstance(example_args, (list, tuple)) else (example_args,)
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes).run_decompositions()
    except Exception as e:  # torch's own diagnostics, in one line
        msg = re.sub(r"\s+", " ", str(e))[:300]
        raise Error(f"torch.export could not capture the module: {type(e).__name__}: {msg}") from None
    text, user, weights = convert_exported(ep)
    return TorchModule(text, user, weights, runtime, **kw)
