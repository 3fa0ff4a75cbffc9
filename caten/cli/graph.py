"""`caten graph FILE -e NAME [-o g.dot|g.svg]`: the principal-op graph for Graphviz."""

from __future__ import annotations

import shutil
import subprocess

import click

from caten.errors import Error


def to_dot(prog) -> str:
    """A DOT digraph of a Program: one box per node, inputs and outputs highlighted."""
    from caten.ir.graph import fmt_arg, toposort
    from caten.ir.ops import Op

    order = toposort(prog.nodes)
    ids = {id(n): i for i, n in enumerate(order)}
    lines = [f'digraph "{prog.name}" {{', "  rankdir=TB; node [shape=box, fontname=monospace, fontsize=10];"]
    for i, n in enumerate(order):
        label = f"{n.op.value} {n.dtype} [{' '.join(map(str, n.shape))}]{fmt_arg(n)}".replace('"', '\\"')
        style = ', style=filled, fillcolor="#d8e8ff"' if n.op is Op.BUFFER else ""
        lines.append(f'  n{i} [label="{label}"{style}];')
        for s in n.src:
            lines.append(f"  n{ids[id(s)]} -> n{i};")
    for o, n in zip(prog.outputs, prog.nodes):
        lines.append(f'  out_{o.name} [label="{o}", shape=oval, style=filled, fillcolor="#ffe0c0"];')
        lines.append(f"  n{ids[id(n)]} -> out_{o.name};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(file: str, entry: str | None, output: str | None, defines: dict[str, str]) -> None:
    from caten.pipeline import compile_program, split_defines
    from caten.read.source import read_source

    src = read_source(file)
    if not src.names:
        raise Error(f"{file} defines no composite")
    types, dims = split_defines(defines)
    prog = compile_program(src, src.entry(entry or src.names[-1]), types, dims)
    dot = to_dot(prog)
    if output is None or output.endswith(".dot"):
        if output is None:
            click.echo(dot, nl=False)
            return
        with open(output, "w") as f:
            f.write(dot)
        return
    fmt = output.rsplit(".", 1)[-1]
    exe = shutil.which("dot")
    if exe is None:
        raise Error(f"writing .{fmt} needs Graphviz's `dot` on PATH", hint="write .dot instead, or install graphviz")
    r = subprocess.run([exe, f"-T{fmt}", "-o", output], input=dot, text=True, capture_output=True)
    if r.returncode != 0:
        raise Error(f"dot failed: {r.stderr.strip()}")
