"""`caten run FILE [NAME=PATH.npy ...] [-o OUT]`: run one composite on .npy inputs."""

from __future__ import annotations

import click
import numpy as np

from caten.cli.arrays import load_npy as _load_array  # profile.py reads its inputs with it too
from caten.errors import Error, Span
from caten.options import Options


def run_file(file: str, inputs: list[str], options: Options, entry: str | None, output: str | None,
             weights: str | None = None) -> None:
    from caten.api import module
    from caten.read.cached import read_source_cached
    from caten.read.source import read_source

    rank = _join_group()
    mod = module(read_source_cached(file) if options.use_cache else read_source(file), options)
    src = mod.source
    if not src.names:
        raise Error(f"{file} defines no composite", Span(file, 1, 1))
    name = entry or src.names[-1]
    cdef = src.entry(name)
    params = [p.name for p in cdef.params]
    given: dict[str, np.ndarray] = {}
    if weights:
        from caten.cli.arrays import load_npz

        given.update((k, v) for k, v in load_npz(weights).items() if k in params)
    positional = []
    for arg in inputs:
        if "=" in arg:
            k, v = arg.split("=", 1)
            if k not in params:
                from caten.errors import closest

                g = closest(k, params)
                raise Error(f"`{name}` has no input named {k}" + (f"; did you mean {g}?" if g else
                            f" (inputs: {', '.join(params)})"))
            given[k] = _load_array(_ranked(v, rank), k)
        else:
            positional.append(_load_array(_ranked(arg, rank), f"#{len(positional) + 1}"))
    for p in params:
        if p not in given and positional:
            given[p] = positional.pop(0)
    missing = [p for p in params if p not in given]
    if missing:
        raise Error(f"`{name}` needs input{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                    hint=" ".join(f"{p}=PATH.npy" for p in params))
    result = getattr(mod, name.replace("-", "_"))(*(given[p] for p in params))
    if options.explain is not None:
        click.echo(options.explain.report(), err=True)
    outs = result if isinstance(result, tuple) else (result,)
    onames = [o.name for o in cdef.outputs]
    if output and rank:
        stem, dot, ext = output.rpartition(".")
        output = f"{stem}.rank{rank}.{ext}" if dot else f"{output}.rank{rank}"  # (rank 0 writes OUT itself)
    if output:
        if len(outs) == 1 and not output.endswith(".npz"):
            np.save(output, outs[0])
        else:
            np.savez(output, **dict(zip(onames, outs)))
        if options.verbose:
            click.echo(f"wrote {output}", err=True)
    else:
        for n, o in zip(onames, outs):
            click.echo(f"{n} = {np.array2string(o, threshold=50)}")


def _join_group() -> int:
    """Under torchrun (WORLD_SIZE > 1 in the environment: `torchrun --nproc-per-node N -m caten run
    ...`) this process joins the group, so the program's collectives run across the ranks; its rank."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return 0
    import caten.distributed as cd

    cd.init()
    return cd.rank()


def _ranked(path: str, rank: int) -> str:
    """An input path with `{rank}` replaced by this process's rank (each rank reads its own shard)."""
    return path.replace("{rank}", str(rank))
