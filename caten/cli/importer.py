"""`caten import model.onnx -o model.lisp`: an ONNX graph as caten text plus its weights as .npz."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from caten.errors import Error


def import_onnx(path: str, output: str | None, name: str) -> None:
    """Write the composite to OUTPUT (default: MODEL.lisp) and the initializers to OUTPUT.npz."""
    from caten.frontends.deps import need

    onnx = need("onnx", "onnx")
    from caten.frontends.onnx import convert

    try:
        model = onnx.load(path)
    except FileNotFoundError:
        raise Error(f"{path}: no such file") from None
    except Exception as e:  # protobuf could not decode it
        raise Error(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
    conv = convert(model, name)
    out = Path(output) if output else Path(path).with_suffix(".lisp")
    out.write_text(conv.text)
    wpath = out.with_suffix(".npz")
    if conv.weights:
        np.savez(wpath, **conv.weights)
    ins = " ".join(f"{n}=PATH.npy" for n in conv.inputs)
    click.echo(f"wrote {out}" + (f" and {wpath} ({len(conv.weights)} weights)" if conv.weights else ""), err=True)
    click.echo(f"run it: caten run {out} {ins}" + (f" --weights {wpath}" if conv.weights else ""), err=True)


def register(cli: click.Group, diagnostics) -> None:
    """Add `caten import` to the command group."""

    @cli.command("import")
    @click.argument("model", type=click.Path())
    @click.option("-o", "output", type=click.Path(), help="output .lisp (weights go to the .npz beside it)")
    @click.option("-e", "--entry", "name", default="model", show_default=True, help="name of the composite")
    @diagnostics
    def import_cmd(model: str, output: str | None, name: str) -> None:
        """Translate an ONNX model into a caten composite (weights to .npz)."""
        import_onnx(model, output, name)
