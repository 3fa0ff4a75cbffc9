"""Delta debugging over a failing program's forms: greedily try smaller variants and keep one
whenever it still fails the same way (same target, same kind of failure), until none helps.

Variants: fewer outputs; a binding replaced by one of its operands (the binding and what only
it used disappear); a binary op's tensor operand replaced by a literal; smaller input sizes.
Every variant must still type-check (`infer`), so the result is a valid program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from caten.fuzz.types import Invalid, Prog, Stmt, infer


def prune(prog: Prog) -> Prog:
    """Drop the bindings no output needs, and the inputs nothing uses (one input stays)."""
    need = set(prog.outputs)
    keep = []
    for s in reversed(prog.stmts):
        if s.name in need:
            keep.append(s)
            need.update(s.args)
    prog.stmts = list(reversed(keep))
    used = need | set(prog.outputs)
    ins = [inp for inp in prog.inputs if inp[0] in used]
    bases = {prog.wheres[d][0] for _, _, dims in ins for d in dims if d in prog.wheres}
    bound = {d for _, _, dims in ins for d in dims}
    for inp in prog.inputs:  # an input that alone binds the dim a kept `where` is defined from stays
        if inp not in ins and bases - bound & set(inp[2]):
            ins.append(inp)
            bound |= set(inp[2])
    prog.inputs = [inp for inp in prog.inputs if inp in ins] or prog.inputs[:1]
    return prog


def _rename(prog: Prog, old: str, new: str) -> Prog:
    q = prog.copy()
    q.stmts = [s for s in q.stmts if s.name != old]
    for s in q.stmts:
        s.args = [new if a == old else a for a in s.args]
    q.outputs = [new if o == old else o for o in q.outputs]
    return q


def variants(prog: Prog) -> Iterator[Prog]:
    if len(prog.outputs) > 1:
        for o in prog.outputs:
            q = prog.copy()
            q.outputs = [o]
            yield q
    for s in reversed(prog.stmts):  # hoist an operand into the binding's place
        for a in dict.fromkeys(s.args):
            yield _rename(prog, s.name, a)
    for i, s in enumerate(prog.stmts):
        if s.op == "bin" and len(s.args) == 2:
            q = prog.copy()
            q.stmts[i].args = [s.args[0]]
            q.stmts[i].p["lit"] = 2
            yield q
    for i, s in enumerate(prog.stmts):
        for params in simpler_params(s):
            q = prog.copy()
            q.stmts[i].p = params
            yield q
    for sym, n in prog.sizes.items():
        for m in sorted({1, 2, n // 2}):
            if 1 <= m < n:
                q = prog.copy()
                q.sizes[sym] = m
                yield q
    for j, (name, dt, dims) in enumerate(prog.inputs):
        for k, d in enumerate(dims):
            if isinstance(d, int):
                for m in sorted({1, 2, d // 2}):
                    if 1 <= m < d:
                        q = prog.copy()
                        q.inputs[j] = (name, dt, dims[:k] + (m,) + dims[k + 1:])
                        yield q


def shrink(prog: Prog, fails: Callable[[Prog], bool], budget: int = 80) -> Prog:
    """The smallest variant of `prog` found (in at most `budget` trials) for which `fails` holds."""
    cur = prune(prog.copy())
    try:
        infer(cur)
    except Invalid:
        cur = prog.copy()
    tried = 0
    progress = True
    while progress and tried < budget:
        progress = False
        for q in variants(cur):
            q = prune(q)
            try:
                infer(q)
            except Invalid:
                continue
            tried += 1
            if fails(q):
                cur, progress = q, True
                break
            if tried >= budget:
                break
    return cur


def simpler_params(s: Stmt) -> Iterator[dict]:
    """Simpler parameters for one binding: zero pads, whole slices, fewer axes, fewer repeats."""
    p = s.p
    if s.op == "pad":
        for i, (lo, hi) in enumerate(p["pads"]):
            for new in ((0, hi), (lo, 0)):
                if new != (lo, hi):
                    yield {**p, "pads": p["pads"][:i] + [new] + p["pads"][i + 1:]}
    elif s.op == "slice":
        b = p["bounds"]
        if len(b) > 1:
            yield {**p, "bounds": b[:-1]}
        for i, (st, e, step) in enumerate(b):
            for new in ((0, e, step), (st, None, step), (st, e, 1)):
                if new != (st, e, step):
                    yield {**p, "bounds": b[:i] + [new] + b[i + 1:]}
    elif s.op == "red":
        if len(p["axes"]) > 1:
            for a in p["axes"]:
                yield {**p, "axes": [x for x in p["axes"] if x != a]}
        if p.get("keepdims"):
            yield {**p, "keepdims": False}
    elif s.op == "expand" and p.get("lead"):
        yield {**p, "lead": []}
    elif s.op == "dotimes" and p["n"] > 1:
        yield {**p, "n": 1}
    elif s.op == "perm" and p["perm"] != sorted(p["perm"]):
        yield {**p, "perm": sorted(p["perm"])}
