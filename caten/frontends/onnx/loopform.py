"""Writing ONNX control flow as caten's loop and branch forms (LANGUAGE.md section 14).

A body (a scan's lambda, a while's step, a branch) is caten text of its own: the importer's
emitted lines are collected apart while the body is lowered (`collect`), and the ONNX values it
defined are forgotten afterwards, since they exist only inside the body. Loop-carried values and
slices enter the body as parameters (`param`), so the text is written once, whatever the trip count.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from caten.frontends.onnx.types import Unsupported

HINT = ("caten runs ONNX loops and branches as its while/scan/if forms (issue #40); "
        "this one needs what they cannot express")


def snapshot(g: Any) -> dict[str, Any]:
    """The converter's mutable state, to try a lowering and roll it back when it is refused."""
    return {k: copy.copy(v) for k, v in vars(g).items() if isinstance(v, (dict, list, set))}


def restore(g: Any, snap: dict[str, Any]) -> None:
    for k, v in snap.items():
        setattr(g, k, v)


def collect(g: Any, build: Callable[[], Any]) -> tuple[list[str], Any]:
    """Run `build` with the emitted lines collected apart (a body's text): (lines, its result).
    Values the body defined are not visible after it; weights it first used stay parameters."""
    lines, names = g.lines, dict(g.names)
    g.lines = []
    try:
        res = build()
        body = g.lines
    finally:
        g.lines = lines
        for k in [k for k in g.names if k not in names]:
            if g.names[k] not in g.weights:
                del g.names[k]
        g.names.update(names)
    return body, res


def param(g: Any, var: str, dt: str | None, shape: list | None) -> str:
    """An ONNX-level name for the caten variable `var` (a body parameter), typed."""
    name = g.synth("param")
    g.names[name] = var
    g.types[name] = (dt, None if shape is None else list(shape))
    return name


def check_same(where: str, what: str, before: tuple, after: tuple) -> None:
    """A loop-carried value keeps its dtype and shape across trips (as caten's loops require)."""
    (d0, s0), (d1, s1) = before, after
    if d0 is not None and d1 is not None and d0 != d1 or (s0 is not None and s1 is not None and (
            len(s0) != len(s1) or any(a is not None and b is not None and a != b for a, b in zip(s0, s1)))):
        raise Unsupported(f"{where}: {what} changes from {d0}{s0} to {d1}{s1} between iterations", hint=HINT)


def lst(vs: list[str]) -> str:
    return f"(list {' '.join(vs)})" if vs else "(list)"


def scan(g: Any, init: list[str], xs: list[str], step: Callable[[list[str], list[str]], tuple[list[str], list[str]]],
         reverse: bool = False) -> tuple[list[str], list[str]]:
    """A `scan` over axis 0 of every `xs` (caten variables). `step(carries, slices)` emits the body
    (its arguments are caten variables of the body) and returns (next carries, ys) as variables.
    Returns the final carries and the stacked ys, as variables of the enclosing code."""
    c, x = g.fresh(), g.fresh()

    def build() -> tuple[list[str], list[str]]:
        cs = [g.emit(f"(nth {c} {j})") for j in range(len(init))]
        xv = [g.emit(f"(nth {x} {j})") for j in range(len(xs))]
        return step(cs, xv)

    lines, (nxt, ys) = collect(g, build)
    body = " ".join(lines + [f"(next {lst(nxt)} {lst(ys)})"])
    rev = " :reverse true" if reverse else ""
    r = g.emit(f"(scan (lambda ({c} {x}) {body}) {lst(init)} {lst(xs)}{rev})")
    fin, st = g.emit(f"(nth {r} 0)"), g.emit(f"(nth {r} 1)")
    return [g.emit(f"(nth {fin} {j})") for j in range(len(init))], [g.emit(f"(nth {st} {j})") for j in range(len(ys))]


def while_loop(g: Any, init: list[str], cond: Callable[[list[str]], str],
               step: Callable[[list[str]], list[str]]) -> list[str]:
    """A `while` over the state `init` (caten variables): `cond(state)` gives a rank-0 bool expression
    of the state's names (it emits nothing), `step(state)` emits the body and returns the next state's
    variables."""
    names = [g.fresh() for _ in init]
    test = cond(names)
    lines, nxt = collect(g, lambda: step(names))
    binds = " ".join(f"({n} {v})" for n, v in zip(names, init))
    body = " ".join(lines + [f"(next {' '.join(nxt)})"])
    r = g.emit(f"(while ({binds}) {test} {body})")
    return [r] if len(init) == 1 else [g.emit(f"(nth {r} {j})") for j in range(len(init))]


def branch(g: Any, pred: str, then: Callable[[], list[str]], other: Callable[[], list[str]]) -> list[str]:
    """`(if PRED THEN ELSE)` on a rank-0 bool expression: each side emits its body and returns its
    results' variables; only the taken side runs."""
    t_lines, t_out = collect(g, then)
    e_lines, e_out = collect(g, other)
    side = lambda ls, out: f"(progn {' '.join(ls + [lst(out)])})"  # noqa: E731
    r = g.emit(f"(if {pred} {side(t_lines, t_out)} {side(e_lines, e_out)})")
    return [g.emit(f"(nth {r} {j})") for j in range(len(t_out))]
