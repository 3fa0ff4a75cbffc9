"""The C entry's impl, `NAME__impl(in..., out..., arena, dims...)`: an entry plan's steps
(caten.lower.entry) spelled in C -- kernel calls, and loops and branches around calls of their
bodies' impls (a loop's state swapped by pointer, never copied per trip)."""

from __future__ import annotations

from caten.lower.entry import IfStep, LoopStep, nested
from caten.render.cstyle import fn as CF
from caten.render.cstyle.targets import C, stype

__all__ = ["impl", "nested"]


def impl(plan, defines: dict, used: set[str]) -> str:
    """`NAME__impl(in..., out..., arena, dims...)`: the plan's steps in order."""
    g = CF.Fn(C, list(plan.dims), defines, used)
    sig = [f"{'const ' if b[:2] == 'in' else ''}{stype(dt)} *b_{b}" for b, dt in plan.inputs + plan.outputs]
    dims = [f"i64 d_{d}" for d in plan.dims]
    called = plan.buffers_used()
    for b, dt, off in plan.temps:
        if b in called:  # a temporary no step here takes would be an unused variable (cc -Wall warns)
            g.emit(f"{stype(dt)} *b_{b} = ({stype(dt)} *)(arena + {g.dimval(off)});")
    for j, step in enumerate(plan.calls):
        if isinstance(step, LoopStep):
            _loop(g, step, j)
        elif isinstance(step, IfStep):
            bufs = [f"b_{c}" for c in step.captures + step.outs]
            g.emit(f"if (*(const bool *)b_{step.pred}) {_call(step.then, bufs, f'b_{step.arena}')}")
            g.emit(f"else {_call(step.other, bufs, f'b_{step.arena}')}")
        else:
            k, bufs, ds = step
            g.emit(f"{k}({', '.join([f'b_{b}' for b in bufs] + [f'd_{d}' for d in ds])});")
    return f"void {plan.name}__impl({', '.join(sig + ['u8 *arena'] + dims)}) {{\n{g.body()}\n}}"


def _call(sub, bufs: list[str], arena: str, dims: dict[str, str] | None = None) -> str:
    dims = dims or {}
    args = [f"(void *)({b})" for b in bufs] + [f"(u8 *)({arena})"] + [dims.get(d, f"d_{d}") for d in sub.dims]
    return f"{sub.name}__impl({', '.join(args)});"


def _bound(g, b) -> str:
    return f"*(const i64 *)b_{b}" if isinstance(b, str) else g.dimval(b)


def _loop(g, s: LoopStep, j: int) -> None:
    """The loop: state copied in, trips calling the body with the current and next state swapped
    (pointers, no copy per trip), the final state copied out."""
    nc = len(s.state)
    g.emit("{")
    for k, ((cur, nxt), init, n) in enumerate(zip(s.state, s.inits, s.sizes)):
        g.emit(f"memcpy(b_{cur}, b_{init}, (size_t){g.dimval(n)});")
        g.emit(f"u8 *c{j}_{k} = (u8 *)b_{cur}, *n{j}_{k} = (u8 *)b_{nxt};")
    g.emit(f"i64 s{j} = {_bound(g, s.start)};")
    end = _bound(g, s.end) if s.end is not None else None
    if s.trips is not None:
        last = f"s{j} + {g.dimval(s.trips)}"
        end = last if end is None else f"({end} < {last} ? {end} : {last})"
    g.emit(f"i64 e{j} = {end if end is not None else 'INT64_MAX'};")
    g.emit(f"for (i64 i{j} = s{j}; i{j} < e{j}; i{j}++) {{")
    idx = {s.index: f"i{j}", s.first: f"(i64)(i{j} == s{j})"}
    cur = [f"c{j}_{k}" for k in range(nc)]
    if s.cond is not None:
        g.emit(_call(s.cond, cur + [f"b_{c}" for c in s.captures] + [f"b_{s.flag}"],
                     f"(u8 *)b_{s.arena} + {g.dimval(s.cond_offset)}", idx))
        g.emit(f"if (!*(const bool *)b_{s.flag}) break;")
    pos = f"(i{j} - s{j})"
    if s.reverse and s.trips is not None:
        pos = f"({g.dimval(s.trips)} - 1 - {pos})"
    xs = [f"(const u8 *)b_{x} + {pos} * {g.dimval(n)}" for x, n in s.xs]
    ys = [f"(u8 *)b_{y} + {pos} * {g.dimval(n)}" for y, n in s.ys]
    g.emit(_call(s.body, cur + [f"b_{c}" for c in s.captures] + xs + [f"n{j}_{k}" for k in range(nc)] + ys,
                 f"b_{s.arena}", idx))
    for k in range(nc):
        g.emit(f"{{ u8 *t = c{j}_{k}; c{j}_{k} = n{j}_{k}; n{j}_{k} = t; }}")
    g.emit("}")
    for k, (fin, n) in enumerate(zip(s.finals, s.sizes)):
        if fin is not None:
            g.emit(f"memcpy(b_{fin}, c{j}_{k}, (size_t){g.dimval(n)});")
    g.emit("}")


