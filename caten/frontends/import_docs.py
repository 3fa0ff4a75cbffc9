"""The supported-op tables of docs/import.md, generated from the lowering tables.

    python -m caten.frontends.import_docs [--check]

rewrites the blocks between `<!-- BEGIN NAME -->` and `<!-- END NAME -->` in docs/import.md
(`--check`: exit 1 if they are stale instead).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "import.md"


def _grid(names: list[str], cols: int = 6) -> str:
    rows = [names[i:i + cols] for i in range(0, len(names), cols)]
    head = "| " + " | ".join([""] * cols) + " |\n|" + "---|" * cols + "\n"
    return head + "\n".join("| " + " | ".join(f"`{n}`" for n in r) + " |" * 1 + " |" * (cols - len(r))
                            for r in rows) + "\n"


def blocks() -> dict[str, str]:
    from caten.frontends.onnx.handlers import HANDLERS
    from caten.frontends.torch import export  # noqa: F401  (fill ATEN)
    from caten.frontends.torch.aten_core import available
    from caten.frontends.torch.context import ATEN

    onnx_ops = sorted(set(HANDLERS) | {"Constant", "Shape", "Size"})
    aten_ops = sorted({k.removeprefix("aten.") for k in ATEN if available(k)})
    return {"onnx-ops": f"{len(onnx_ops)} ONNX op types have a lowering:\n\n" + _grid(onnx_ops),
            "aten-ops": f"{len(aten_ops)} ATen overloads have a lowering:\n\n" + _grid(aten_ops, 4)}


def render(text: str) -> str:
    for name, body in blocks().items():
        pat = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
        text = pat.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)
    return text


def main(argv: list[str]) -> int:
    old = DOC.read_text()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print("docs/import.md is stale: python -m caten.frontends.import_docs")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
