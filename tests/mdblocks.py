"""Markdown as the documentation tests read it: fenced blocks (indented ones inside list items
too) with the `<!-- docs-test: ... -->` marker written above a block, headings as GitHub anchors
them, and relative links.

A marker says what a block needs before it can run, in `;`-separated clauses:
`needs torch|onnx|gpu` (skipped where that is absent), `files NAME...` (stand-ins the test writes
for the block's placeholder files: `prog.lisp`, `x.npy`, ...), `long` (not run by the suite:
minutes), `continues` (a python block that runs after the page's previous python block, in its
namespace).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

_MARKER = re.compile(r"^\s*<!--\s*docs-test:(.*?)-->\s*$")
CLAUSES = ("needs", "files", "long", "continues")


@dataclass
class Block:
    info: str  # the info string: "sh", "python", "lisp", "" ...
    text: str  # the body, dedented to the fence's indentation
    line: int  # 1-based line of the opening fence
    marker: dict[str, list[str]] = field(default_factory=dict)


def parse_marker(text: str, where: str) -> dict[str, list[str]]:
    """`needs onnx; files model.onnx x.npy` -> {"needs": ["onnx"], "files": [...]}."""
    out: dict[str, list[str]] = {}
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        key, *vals = clause.split()
        if key not in CLAUSES:
            raise ValueError(f"{where}: unknown docs-test clause {key!r} (known: {', '.join(CLAUSES)})")
        out[key] = vals
    return out


def blocks(text: str, where: str = "") -> list[Block]:
    """Every fenced block of a markdown text, with the marker on the line above it (if any)."""
    out: list[Block] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        ln = lines[i]
        indent = len(ln) - len(ln.lstrip(" "))
        if ln.lstrip(" ").startswith("```"):
            info = ln.strip()[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            body = textwrap.dedent("".join(lines[i + 1:j])) if indent else "".join(lines[i + 1:j])
            m = _MARKER.match(lines[i - 1]) if i else None
            out.append(Block(info, body, i + 1, parse_marker(m.group(1), f"{where}:{i + 1}") if m else {}))
            i = j + 1
        else:
            i += 1
    return out


def _unfenced(text: str) -> list[str]:
    out, fenced = [], False
    for ln in text.splitlines():
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(ln)
    return out


def prose(text: str) -> str:
    """The text without fenced blocks and inline code (where `[a](b)` is code, not a link)."""
    return "\n".join(re.sub(r"`[^`]*`", "", ln) for ln in _unfenced(text))


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but `-` and `_`
    dropped, spaces as `-`; a repeated slug gets `-1`, `-2` ..."""
    seen: dict[str, int] = {}
    out = set()
    for ln in _unfenced(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", ln)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(text: str) -> list[str]:
    """The targets of the page's relative links (`[text](target)`; web and mail links left out)."""
    found = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", prose(text))
    return [t for t in found if not re.match(r"^[a-z]+:", t)]
