"""`caten.from_torch`: a torch.nn.Module captured by torch.export, as caten text (LANGUAGE.md 13).

The exported program is decomposed to ATen's core IR; each call becomes one `setf` over
caten library names. Parameters and buffers become inputs bound by the returned module;
symbolic sizes (`dynamic_shapes`) become dim symbols, so one compiled program serves every
batch size.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from caten.errors import Error
from caten.frontends.deps import need
from caten.frontends.text import sym
from caten.frontends.torch import (  # noqa: F401  (register the ATen lowerings)
    aten,
    aten_backward,
    aten_compose,
    aten_core,
    aten_nn,
    aten_nn_core,
    aten_quant,
    control,
)
from caten.frontends.torch.context import Ctx, dtype_of, meta
from caten.frontends.torch.refused import REFUSED, why


def convert_exported(ep: Any, name: str = "forward") -> tuple[str, list[str], list[np.ndarray]]:
    """(caten text, user input names, weight arrays in parameter order) of an ExportedProgram."""
    c = Ctx()
    sig = ep.graph_signature
    params: list[str] = []
    weights: list[np.ndarray] = []
    user: list[str] = []
    spec_by_name = {s.arg.name: s for s in sig.input_specs}
    user_params: list[str] = []
    mutated = _mutated(ep)  # placeholder -> the output that updates it
    anns: dict[str, str] = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = meta(node)
        var = sym(node.name, c.taken, "x_")
        c.vals[node.name] = var
        dims = ", ".join(c.dim(d) for d in val.shape)
        ann = anns[node.name] = f"{var}{{{dtype_of(val.dtype)}}}" + (f"[{dims}]" if val.dim() else "")
        spec = spec_by_name[node.name]
        if spec.kind.name == "USER_INPUT":
            user.append(node.name)
            user_params.append(ann)
        else:
            t = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            w = t.detach().cpu().numpy()
            weights.append(np.array(w) if node.name in mutated else w)  # (the module's own state, not torch's)
            params.append(ann)
    missing = missing_ops(ep)
    if missing:  # every missing op at once, before anything is lowered
        raise Error("ATen op(s) not supported by caten's importer: " + "; ".join(f"`{m}`: {why(m)}" for m in missing),
                    None, "docs/import.md lists the supported ATen ops and how to add one")
    outs: list[tuple[str, str]] = []
    for node in ep.graph.nodes:
        if node.op == "call_function":
            control.lower_call(c, node)
        elif node.op == "output":
            kinds = [s.kind.name for s in sig.output_specs]
            for i, o in enumerate(o for o, k in zip(node.args[0], kinds) if k == "USER_OUTPUT"):
                val = meta(o)
                var = c.vals[o.name]
                dims = ", ".join(c.dim(d) for d in val.shape)
                oname = sym(f"out{i}", c.taken)
                outs.append((var, f"{oname}{{{dtype_of(val.dtype)}}}" + (f"[{dims}]" if val.dim() else "")))
            # a buffer or input the module updates (a KV cache, running statistics): an output of the
            # input's own name, which caten writes into that input's array (LANGUAGE: in-place outputs)
            for ph, upd in mutated.items():
                outs.append((c.vals[upd], anns[ph]))
    params += [ann for ann, _ in c.consts]
    weights += [v for _, v in c.consts]
    sig_text = f"(({' '.join(user_params + params)}) -> ({' '.join(a for _, a in outs)}))"
    body = "\n  ".join(c.lines + [f"(return {' '.join(v for v, _ in outs)})"])
    text = f";; captured from torch.export by caten\n(composite {name} {sig_text}\n  {body})\n"
    return text, user, weights


def _mutated(ep: Any) -> dict[str, str]:
    """{placeholder: the graph value written back into it} for the buffers and user inputs that
    the exported program mutates."""
    sig = ep.graph_signature
    by_target = {s.target: s.arg.name for s in sig.input_specs if s.target is not None}
    out = {}
    for s in sig.output_specs:
        kind = s.kind.name
        if kind == "BUFFER_MUTATION":
            out[by_target[s.target]] = s.arg.name
        elif kind == "USER_INPUT_MUTATION":
            out[s.target] = s.arg.name
    return out


def needed_ops(ep: Any) -> list[str]:
    """The ATen ops the graph calls (size arithmetic and tuple picks left out; `.item()`, whose
    result is a symbol too, kept: it is refused), sorted."""
    import operator

    return sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
                   and (str(n.target) in REFUSED or not (hasattr(meta(n), "node") and hasattr(meta(n).node, "expr")))})


def missing_ops(ep: Any) -> list[str]:
    """The ops of `needed_ops` the importer cannot lower (yet)."""
    return [op for op in needed_ops(ep) if not aten_core.available(op)]


class TorchModule:
    """A captured module compiled by caten: call it with numpy arrays or torch tensors."""

    def __init__(self, text: str, inputs: list[str], weights: list[np.ndarray], runtime: str,
                 n_outputs: int | None = None, **kw: Any):
        from caten.api import loads  # `caten.loads` itself: the package `caten` imports this module

        self.source, self.inputs, self.weights, self.runtime = text, inputs, weights, runtime
        self._fn = loads(text, runtime=runtime, **kw).forward
        self.n_outputs = n_outputs  # the module's own outputs; the in-place updates follow them

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.inputs):
            raise Error(f"the module takes {len(self.inputs)} input(s), got {len(args)}")
        xs = [a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a) for a in args]
        out = self._fn(*xs, *self.weights)
        if self.n_outputs is None or not isinstance(out, tuple) or len(out) == self.n_outputs:
            return out
        return out[0] if self.n_outputs == 1 else out[:self.n_outputs]


def decompose(ep: Any) -> Any:
    """`ep` lowered to ATen's core IR but for the recurrent layers (`control.KEEP`); the graph as
    captured where torch's decomposition fails (its ops are then imported as they are, or named
    as missing)."""
    import torch

    table = torch.export.default_decompositions()
    for name in control.KEEP:  # recurrent layers stay whole: one loop each, not a cell per step
        table.pop(getattr(torch.ops.aten, name.split(".")[1]).input, None)
    try:
        return ep.run_decompositions(table)
    except Exception:  # a torch limitation, not the user's: the captured graph is still valid
        return ep


def from_torch(module: Any, example_args: Any, dynamic_shapes: Any = None, runtime: str = "llvm",
               decomposed: bool = True, **kw: Any) -> TorchModule:
    """Capture `module` with torch.export and compile it with caten; `decomposed=False` imports
    the graph as captured (torch's pre-decomposition ATen ops) instead of the core IR."""
    torch = need("torch", "torch")
    args = tuple(example_args) if isinstance(example_args, (list, tuple)) else (example_args,)
    try:
        if dynamic_shapes is not None and hasattr(module, "modules"):  # a recurrent layer keeps a dynamic length
            with control.recurrent_as_scan(module):
                ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        else:
            ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    except Error:
        raise
    except Exception as e:  # torch's own diagnostics, in one line
        msg = re.sub(r"\s+", " ", str(e))[:300]
        raise Error(f"torch.export could not capture the module: {type(e).__name__}: {msg}") from None
    ep = decompose(ep) if decomposed else ep
    text, user, weights = convert_exported(ep)
    n = sum(s.kind.name == "USER_OUTPUT" for s in ep.graph_signature.output_specs)
    return TorchModule(text, user, weights, runtime, n, **kw)
