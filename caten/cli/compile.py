"""`caten [OPTIONS] FILE`: compile composites and write what --emit/-S ask for."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from caten.errors import Error
from caten.options import Options

if TYPE_CHECKING:
    from caten.pipeline.passes import Timings


def programs_of(file: str, options: Options, entries: list[str], timings: Timings | None = None):
    """The Programs of the chosen entries (every composite by default)."""
    from caten import pipeline
    from caten import plugin as R

    if options.plugin:
        R.load_plugin(options.plugin)
    rt = R.get(options.runtime)
    src = pipeline.read(file, timings)
    types, dims = pipeline.split_defines(dict(options.defines))
    # by default every composite that compiles on its own (helpers taking compile-time
    # parameters are compiled where they are called); all of them when none does (diagnostics)
    names = entries or [n for n in src.names if src.entry(n).standalone] or src.names
    return rt, [pipeline.compile_program(src, src.entry(n), types, dims, options.but(runtime=rt.name), timings)
                for n in names]


def compile_file(file: str, options: Options, output: str | None, asm: bool, emit: str | None,
                 entries: list[str]) -> None:
    from caten import pipeline

    tm = pipeline.Timings()
    rt, progs = programs_of(file, options, entries, tm)
    if options.explain is not None:
        click.echo(options.explain.report(), err=True)
    if emit in ("ir", "opt-ir"):
        text = "\n\n".join(p.dump() for p in progs) + "\n"
        return _write_text(output, text)
    if emit in ("schedule", "loops"):  # as the runtime gets them (its threads, its target's vector width)
        return _write_text(output, pipeline.emit(rt, progs, emit, options, tm)[".txt"])
    kind = emit or ("source" if asm else "lib")
    ok, why = rt.available()
    stem = os.path.splitext(os.path.basename(file))[0]
    if output == "-":  # like cc -S -o -: the main artifact to standard output, no companions
        output, to_stdout = None, True
    else:
        to_stdout = False
    library = os.path.splitext(os.path.basename(output))[0] if output else stem
    library = library[3:] if library.startswith("lib") and len(library) > 3 else library
    artifacts = pipeline.emit(rt, progs, kind, options.but(extra={**options.extra, "library": library}), tm)
    main_suffix = next(iter(artifacts))
    if to_stdout:
        content = artifacts[main_suffix]
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
            sys.stdout.buffer.flush()
        else:
            click.echo(content, nl=False)
        return
    path = output or (f"lib{stem}{main_suffix}" if kind == "lib" else f"{stem}{main_suffix}")
    base = os.path.splitext(path)[0]
    for i, (suffix, content) in enumerate(artifacts.items()):
        if i == 0:
            target = path
        else:  # companions (header, manifest) sit beside the main artifact, named after it
            name = os.path.basename(base)
            if suffix == ".h" and name.startswith("lib"):
                name = name[3:]
            target = os.path.join(os.path.dirname(base), name + suffix)
        mode = "wb" if isinstance(content, bytes) else "w"
        try:
            with open(target, mode) as f:
                f.write(content)
        except OSError as e:
            raise Error(f"cannot write {target}: {e.strerror}") from None
        if options.verbose:
            click.echo(f"wrote {target}", err=True)


def _write_text(output: str | None, text: str) -> None:
    if output and output != "-":
        try:
            with open(output, "w") as f:
                f.write(text)
        except OSError as e:
            raise Error(f"cannot write {output}: {e.strerror}") from None
    else:
        click.echo(text, nl=False)
