"""`caten profile FILE [NAME=PATH.npy ...]`: time each kernel of a composite against the roofline.

Inputs not given are random arrays of the signature's shapes (`-D` binds symbolic dims); floats
are normal with standard deviation 1/sqrt(last axis), as a weight initialization draws them, so
that a network's activations stay near 1: unit-variance weights made a Mixer's activations
overflow and its GELU gradients underflow into subnormals, which the CPU computes ~20x slower,
and the table blamed the kernels for it (give real inputs as NAME=PATH.npy). The
table shows per kernel its time, share, GF/s, GB/s, arithmetic intensity and how close it comes
to the roofline bound at that intensity, and under a kernel of several stages each stage's
(caten.run.profile.stage_stats); `--svg` draws the roofline with the kernels and stages on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caten.compile.roofline import Roofline
from caten.errors import Error
from caten.options import Options
from caten.run.profile import KernelStat, Profile


def profile_file(file: str, inputs: list[str], options: Options, entry: str | None, reps: int,
                 svg: str | None, remeasure: bool = False) -> tuple[Profile, Roofline]:
    """Profile `entry` of `file`: a call's time is the plain build's (what `caten.load` gives a
    caller), each kernel's the instrumented build's (its counters cost a little per kernel)."""
    from caten.api import module
    from caten.compile.roofline import roofline
    from caten.read.source import read_source
    from caten.run.profile import profile

    if options.runtime != "llvm":
        raise Error(f"caten profile times kernels of the llvm runtime, not '{options.runtime}'", hint="use -r llvm")
    src = read_source(file)
    mod = module(src, options.but(profile=True))
    name, arrays = entry_inputs(mod, file, entry, inputs)
    attr = name.replace("-", "_")
    roof = roofline(refresh=remeasure)  # before the kernels run: their pool's threads idle after
    prof = profile(getattr(mod, attr), arrays, reps, plain=getattr(module(src, options), attr))
    if not remeasure and any(st.gflops > 1.05 * roof.peak_gflops for st in prof.stats):
        # no kernel outruns the machine's peak: the cached one was measured on a busy machine
        roof = roofline(refresh=True)
    _print(name, prof, roof)
    if svg:
        with open(svg, "w", encoding="utf-8") as f:
            f.write(roofline_svg(prof.stats, roof, name))
    return prof, roof


def entry_inputs(mod: Any, file: str, entry: str | None, inputs: list[str]) -> tuple[str, list[np.ndarray]]:
    """The composite to time (`entry`, else the file's last) and its arguments: NAME=PATH.npy
    where given, random arrays of the signature's shapes otherwise."""
    from caten.cli.run import _load_array

    src = mod.source
    if not src.names:
        raise Error(f"{file} defines no composite")
    name = entry or src.names[-1]
    cdef = src.entry(name)
    given: dict[str, np.ndarray] = {}
    for arg in inputs:
        if "=" not in arg:
            raise Error(f"inputs are NAME=PATH.npy, got {arg!r}")
        k, v = arg.split("=", 1)
        given[k] = _load_array(v)
    from caten.elaborate.evaluate import where_dims

    dims = where_dims(cdef, dict(mod.dims))
    return name, [given[p.name] if p.name in given else _random(p, dims, name) for p in cdef.params]


def _random(p: Any, dims: dict[str, int], name: str) -> np.ndarray:
    from caten.ir import dtypes as T
    from caten.read.sexpr import Num, Sym

    shape = []
    for d in p.dims or []:
        if isinstance(d, Num):
            shape.append(int(d.value))
        elif isinstance(d, Sym) and d.name in dims:
            shape.append(int(dims[d.name]))
        else:
            raise Error(f"input `{p.name}` of `{name}` has a symbolic size; bind it with -D or give the input as "
                        f"{p.name}=PATH.npy")
    dt = T.lookup(p.dtype)
    if dt is None:
        raise Error(f"input `{p.name}` has type variable {p.dtype}; bind it with -D {p.dtype}=f32")
    rng = np.random.default_rng(0)
    if dt.is_float:
        return (rng.standard_normal(shape) / math.sqrt(max(1, shape[-1] if shape else 1))).astype(dt.np)
    if dt.is_bool:
        return rng.random(shape) < 0.5
    return rng.integers(0, 8, shape).astype(dt.np)


def _print(name: str, prof: Profile, roof: Roofline) -> None:
    from rich.console import Console
    from rich.table import Table

    stats = prof.stats
    total = sum(s.seconds for s in stats) or 1e-12
    t = Table(title=f"{name}: {prof.call_seconds * 1e3:.3f} ms a call (the median of {prof.calls})",
              caption=f"the build with the kernels' counters: {prof.profiled_seconds * 1e3:.3f} ms a call, its "
                      f"kernels {total * 1e3:.3f} ms; roofline: {roof.peak_gflops:.0f} GF/s, "
                      f"{roof.bandwidth_gbs:.1f} GB/s on {roof.cpu}")
    for col in ("kernel", "ms", "share", "GF/s", "GB/s", "flop/byte", "of roofline"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    def row(s: KernelStat, style: str | None = None) -> None:
        bound = roof.attainable(s.intensity)
        t.add_row(s.name, f"{s.seconds * 1e3:.3f}", f"{100 * s.seconds / total:.1f}%", f"{s.gflops:.1f}",
                  f"{s.gbytes:.1f}", f"{s.intensity:.2f}",
                  f"{100 * s.gflops / bound:.0f}%" if bound and s.flops else "-", style=style)
    for s in sorted(stats, key=lambda s: -s.seconds):
        row(s)
        for st in s.stages if len(s.stages) > 1 else []:  # (in program order: where the time goes)
            row(st, "dim")
    Console(width=140).print(t)


def roofline_svg(stats: list[KernelStat], roof: Roofline, title: str) -> str:
    """A log-log roofline plot with one dot per kernel and per stage: arithmetic intensity
    (FLOP/byte) on x, GFLOP/s on y, both with labelled decade ticks and a grid; the two
    ceilings (bandwidth's slope, the FMA peak) and the ridge named where they are drawn."""
    w, h = 720, 480
    left, right, top, bottom = 78, 24, 44, 62
    pts = [s for k in stats for s in [k, *(k.stages if len(k.stages) > 1 else [])]
           if s.flops > 0 and s.bytes > 0 and s.seconds > 0]
    ridge = roof.peak_gflops / roof.bandwidth_gbs
    xs = [s.intensity for s in pts] + [ridge]
    ys = [s.gflops for s in pts] + [roof.peak_gflops]
    x0, x1 = math.floor(math.log10(max(min(xs) / 2, 1e-4))), math.ceil(math.log10(max(xs) * 4))
    y0, y1 = math.floor(math.log10(max(min(ys) / 2, 1e-3))), math.ceil(math.log10(roof.peak_gflops * 1.5))

    def px(x: float) -> float:
        return left + (math.log10(x) - x0) / (x1 - x0) * (w - left - right)

    def py(y: float) -> float:
        return h - bottom - (math.log10(max(y, 1e-9)) - y0) / (y1 - y0) * (h - top - bottom)

    xa, xb = 10.0 ** x0, 10.0 ** x1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{_esc(title)}: roofline on '
             f'{_esc(roof.cpu)}</text>']
    for d in range(x0, x1 + 1):  # decade ticks: grid line, tick, number
        x = px(10.0 ** d)
        parts += [f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{h - bottom}" stroke="#e4e4e4"/>',
                  f'<line x1="{x:.1f}" y1="{h - bottom}" x2="{x:.1f}" y2="{h - bottom + 5}" stroke="#444"/>',
                  f'<text class="xtick" x="{x:.1f}" y="{h - bottom + 18}" text-anchor="middle">{_decade(d)}</text>']
    for d in range(y0, y1 + 1):
        y = py(10.0 ** d)
        parts += [f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#e4e4e4"/>',
                  f'<line x1="{left - 5}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#444"/>',
                  f'<text class="ytick" x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{_decade(d)}</text>']
    ry, bw = py(roof.peak_gflops), roof.bandwidth_gbs
    slope = math.degrees(math.atan2(py(xa * bw) - py(ridge * bw), px(ridge) - px(xa)))
    parts += [f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" '
              f'stroke="#444"/>',
              f'<polyline class="roof" fill="none" stroke="#c00" stroke-width="2" points="{px(xa):.1f},'
              f'{py(xa * bw):.1f} {px(ridge):.1f},{ry:.1f} {px(xb):.1f},{ry:.1f}"/>',
              f'<text class="ceiling" x="{px(xb) - 6:.1f}" y="{ry - 6:.1f}" text-anchor="end" fill="#c00">'
              f'peak {roof.peak_gflops:.0f} GFLOP/s (FMA loop)</text>',
              f'<text class="ceiling" x="0" y="0" fill="#c00" transform="translate({px(ridge) - 12:.1f},'
              f'{ry + 4:.1f}) rotate({-slope:.1f})" text-anchor="end" dy="14">memory {bw:.1f} GB/s (read stream)'
              f'</text>',
              f'<line x1="{px(ridge):.1f}" y1="{ry:.1f}" x2="{px(ridge):.1f}" y2="{h - bottom}" stroke="#c00" '
              f'stroke-dasharray="3,3"/>',
              f'<text x="{px(ridge) + 4:.1f}" y="{h - bottom - 6}" fill="#c00" font-size="10">ridge '
              f'{ridge:.2g}</text>',
              f'<text x="{left + (w - left - right) / 2}" y="{h - 16}" text-anchor="middle" font-size="12">'
              f'arithmetic intensity (FLOP/byte)</text>',
              f'<text x="18" y="{top + (h - top - bottom) / 2}" transform="rotate(-90 18 '
              f'{top + (h - top - bottom) / 2})" text-anchor="middle" font-size="12">GFLOP/s</text>']
    for s in pts:
        parts.append(f'<circle class="kernel" cx="{px(s.intensity):.1f}" cy="{py(s.gflops):.1f}" r="4" '
                     f'fill="#06c"><title>{_esc(s.name)}: {s.seconds * 1e3:.3f} ms, {s.gflops:.1f} GF/s'
                     f'</title></circle>')
        parts.append(f'<text x="{px(s.intensity) + 6:.1f}" y="{py(s.gflops) - 4:.1f}" font-size="9">'
                     f'{_esc(s.name.strip().split(" ")[0].rsplit("__", 1)[-1])}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _decade(d: int) -> str:
    """10**d as a tick reads: 0.01, 0.1, 1, 10, 100, 1000, then 1e4..."""
    return f"{10.0 ** d:g}" if -3 <= d <= 3 else f"1e{d}"


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
