"""A loaded program: the definitions of one source file by name, and where they came from.

It lives with the reader because it is the reader's product; the driver, the cached reader and
the Python API all start from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from caten.errors import Error, Span
from caten.read.program import CompositeDef, Unit, load_unit_file, load_unit_text


@dataclass
class Source:
    """A loaded program: its composites by name, and where it came from."""
    unit: Unit
    file: str
    by_name: dict[str, list[CompositeDef]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for c in self.unit.composites:
            self.by_name.setdefault(c.name, []).append(c)

    def entry(self, name: str) -> CompositeDef:
        if name not in self.by_name:
            from caten.errors import closest

            guess = closest(name, self.by_name)
            raise Error(f"no composite named `{name}` in {self.file}", Span(self.file, 1, 1),
                        f"did you mean `{guess}`?" if guess else f"it defines: {', '.join(self.by_name) or 'nothing'}")
        return self.by_name[name][-1]

    @property
    def names(self) -> list[str]:
        return list(self.by_name)


def read_source(path: str) -> Source:
    return Source(load_unit_file(path), path)


def read_text(text: str, file: str = "<string>", yaml: bool = False) -> Source:
    return Source(load_unit_text(text, file, yaml), file)
