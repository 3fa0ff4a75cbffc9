"""`caten import model.onnx -o model.lisp` (or a torch.export `model.pt2`): the graph as caten
text plus its weights as .npz; `--list-ops` lists the ops the model needs and which caten lacks,
before anything is translated."""

from __future__ import annotations

import re
from pathlib import Path

import click
import numpy as np

from caten.errors import Error


def _load_onnx(path: str) -> object:
    from caten.frontends.deps import need

    onnx = need("onnx", "onnx")
    try:
        return onnx.load(path)
    except FileNotFoundError:
        raise Error(f"{path}: no such file") from None
    except Exception as e:  # protobuf could not decode it
        raise Error(f"{path}: not a readable ONNX model ({type(e).__name__})") from None


def import_onnx(path: str, output: str | None, name: str) -> None:
    """Write the composite to OUTPUT (default: MODEL.lisp) and the initializers to OUTPUT.npz."""
    from caten.frontends.onnx import convert

    conv = convert(_load_onnx(path), name)
    out = Path(output) if output else Path(path).with_suffix(".lisp")
    out.write_text(conv.text)
    wpath = out.with_suffix(".npz")
    if conv.weights:
        np.savez(wpath, **conv.weights)
    ins = " ".join(f"{n}=PATH.npy" for n in conv.inputs)
    click.echo(f"wrote {out}" + (f" and {wpath} ({len(conv.weights)} weights)" if conv.weights else ""), err=True)
    click.echo(f"run it: caten run {out} {ins}" + (f" --weights {wpath}" if conv.weights else ""), err=True)


def _load_pt2(path: str) -> object:
    """The ExportedProgram of a `torch.export.save` file, decomposed to ATen's core IR (the graph
    as saved when torch cannot decompose it)."""
    from caten.frontends.deps import need

    torch = need("torch", "torch")
    if not Path(path).exists():
        raise Error(f"{path}: no such file")
    try:
        ep = torch.export.load(path)
    except Exception as e:  # not a torch.export archive
        raise Error(f"{path}: not a readable torch.export program ({type(e).__name__})") from None
    from caten.frontends.torch.export import decompose

    return decompose(ep)


def _list(path: str) -> int:
    """Print each op the model needs, `ok` or `missing` (an aten op with why it is refused, or that no
    lowering is written yet); the number missing."""
    if path.endswith(".pt2"):
        from caten.frontends.torch.aten_core import available
        from caten.frontends.torch.export import needed_ops
        from caten.frontends.torch.refused import why

        rows = [(op, available(op)) for op in needed_ops(_load_pt2(path))]
        reasons = {op: why(op) for op, ok in rows if not ok}
    else:
        from caten.frontends.onnx.handlers import HANDLERS

        model = _load_onnx(path)
        known = set(HANDLERS) | {"Constant", "Shape", "Size"}
        rows = [(t, t in known) for t in sorted({nd.op_type for nd in model.graph.node})]
        reasons = {}
    for op, ok in rows:
        click.echo(f"{'ok     ' if ok else 'missing'} {op}" + (f": {reasons[op]}" if op in reasons else ""))
    lacking = sum(not ok for _, ok in rows)
    click.echo(f"{len(rows)} op(s), {lacking} missing", err=True)
    return lacking


def import_pt2(path: str, output: str | None, name: str) -> None:
    """A torch.export program as caten text and .npz weights (one Error naming every missing op)."""
    from caten.frontends.torch.export import convert_exported

    text, inputs, weights = convert_exported(_load_pt2(path), name)
    out = Path(output) if output else Path(path).with_suffix(".lisp")
    out.write_text(text)
    wpath = out.with_suffix(".npz")
    if weights:  # keyed by parameter name, as `caten run --weights` binds them
        names = re.findall(r"([^\s(]+)\{", re.search(r"\(\((.*?)\) ->", text).group(1))[len(inputs):]
        np.savez(wpath, **dict(zip(names, weights)))
    click.echo(f"wrote {out}" + (f" and {wpath} ({len(weights)} weights)" if weights else ""),
               err=True)


def register(cli: click.Group, diagnostics) -> None:
    """Add `caten import` to the command group."""

    @cli.command("import")
    @click.argument("model", type=click.Path())
    @click.option("-o", "output", type=click.Path(), help="output .lisp (weights go to the .npz beside it)")
    @click.option("-e", "--entry", "name", default="model", show_default=True, help="name of the composite")
    @click.option("--list-ops", is_flag=True, help="list the ops the model needs (ok / missing), translate nothing")
    @diagnostics
    def import_cmd(model: str, output: str | None, name: str, list_ops: bool) -> None:
        """Translate an ONNX model or a torch.export .pt2 into a caten composite (weights to .npz)."""
        if list_ops:
            raise SystemExit(1 if _list(model) else 0)
        if model.endswith(".pt2"):
            import_pt2(model, output, name)
        else:
            import_onnx(model, output, name)
