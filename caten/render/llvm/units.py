"""A rendered module split into compile units: one LLVM module per kernel stage, kernel, GEMM
tile function and the thread pool, plus one for the program's entries.

Units compile independently (in parallel, on several processes) and each is cached by its
content: editing one kernel recompiles only its units. A unit's exported function is named by
the hash of its canonical text (own and helper function names, local value names and metadata
numbers renumbered; the units it calls by their own content names), so equal code has one name
in every program and a JIT engine links it once. The renderer marks roots with a `; unit` (or
`; unit light`: glue code, compiled without optimization) comment line before their `define`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MARK = "; unit"
_DEFINE = re.compile(r"define (internal )?(\S+) @([\w.$]+)\((.*)\)[^(]*\{$")
_GLOBAL_REF = re.compile(r"@([\w.$]+)")
_MD_REF = re.compile(r"!(\d+)\b")
_LOCAL = re.compile(r"%([\w.$-]+)")
_LABEL = re.compile(r"^([\w.$-]+):", re.M)
_COMMUTATIVE = re.compile(r"^(  %[\w.$-]+ = (?:add|mul|and|or|xor|fadd|fmul)(?: [a-z]+)* [\w<> ]+? )"
                          r"([%\w.$-]+), ([%\w.$-]+)$", re.M)


@dataclass
class Unit:
    """One LLVM module: `name` is the symbol it exports (the loader links a unit whose symbol
    it already has only once), `key` hashes its canonical text."""

    name: str
    text: str
    key: str
    light: bool


@dataclass
class _Fn:
    name: str
    text: str
    internal: bool
    ret: str
    params: str
    root: bool
    light: bool


def split(text: str) -> list[Unit] | None:
    """The units of a module rendered by caten.render.llvm, callees before callers; None where
    the module does not split (state shared between units: a bounds-check record, counters)."""
    head, fns, globs, decls, attrs, mds = _parse(text)
    roots = [f for f in fns.values() if f.root and f.internal]
    if not roots:
        return None
    entry = [f for f in fns.values() if not f.internal]
    refs = {f.name: set(_GLOBAL_REF.findall(f.text)) - {f.name} for f in fns.values()}
    groups: dict[str, list[str]] = {r.name: _members([r.name], refs, fns) for r in roots}
    groups[""] = _members([f.name for f in entry], refs, fns)
    owner: dict[str, str] = {}
    for g, members in groups.items():
        for m in members:
            for gl in refs[m]:
                if gl in globs and owner.setdefault(gl, g) != g:
                    return None  # a global two units touch: one module keeps it one object
    final: dict[str, str] = {}
    units: list[Unit] = []
    for g in _order(groups, refs, fns):
        members = groups[g]
        body = _assemble(g, members, fns, refs, globs, owner, decls, attrs, mds, head, final)
        if body is None:
            return None
        canon = _canonical(body, [g] + [m for m in members if m != g] if g else members)
        key = hashlib.sha256(canon.encode()).hexdigest()[:24]
        if g:
            final[g] = f"caten_u{key}"
            if any(u.name == final[g] for u in units):
                continue  # a stage equal to another one: compiled and linked once
            body = re.sub(rf"@{re.escape(g)}\b(?![\w.$])", f"@{final[g]}", body)
            units.append(Unit(final[g], body, key, fns[g].light))
        else:
            units.append(Unit(entry[0].name, body, key, True))
    return units


def _parse(text: str):
    """Top-level items of a module's text: functions (with their `; unit` marks), globals,
    declarations, attribute groups and metadata."""
    head: list[str] = []
    fns: dict[str, _Fn] = {}
    globs: dict[str, str] = {}
    decls: dict[str, str] = {}
    attrs: list[str] = []
    mds: dict[int, str] = {}
    lines = text.split("\n")
    i, mark = 0, None
    while i < len(lines):
        ln = lines[i]
        if ln.startswith(MARK):
            mark = ln[len(MARK):].strip()
        elif ln.startswith("define"):
            m = _DEFINE.match(ln)
            if m is None:
                raise ValueError(f"unexpected function header: {ln[:80]}")
            j = lines.index("}", i)
            fns[m[3]] = _Fn(m[3], "\n".join(lines[i:j + 1]), bool(m[1]), m[2], m[4], mark is not None,
                            mark == "light")
            i, mark = j, None
        elif ln.startswith("@"):
            globs[_GLOBAL_REF.match(ln)[1]] = ln
        elif ln.startswith("declare"):
            decls[_GLOBAL_REF.search(ln)[1]] = ln
        elif ln.startswith("attributes"):
            attrs.append(ln)
        elif ln.startswith("!"):
            mds[int(_MD_REF.match(ln)[1])] = ln
        elif ln.startswith("target"):
            head.append(ln)
        i += 1
    return head, fns, globs, decls, attrs, mds


def _members(start: list[str], refs: dict[str, set[str]], fns: dict[str, _Fn]) -> list[str]:
    """`start` and the helpers it reaches that are not roots of their own (helpers reached from
    two units are copied into both: they are internal)."""
    out, todo = list(start), list(start)
    while todo:
        for r in sorted(refs[todo.pop()]):
            f = fns.get(r)
            if f is not None and f.internal and not f.root and r not in out:
                out.append(r)
                todo.append(r)
    return out


def _order(groups: dict[str, list[str]], refs: dict[str, set[str]], fns: dict[str, _Fn]) -> list[str]:
    """Groups with the units they call first (their content names go into the caller's text)."""
    calls = {g: {r for m in ms for r in refs[m] if r in groups and r != g} for g, ms in groups.items()}
    done: list[str] = []
    state: dict[str, int] = {}
    for start in groups:
        stack = [(start, iter(sorted(calls[start])))]
        state.setdefault(start, 1)
        while stack:
            g, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                if state[g] == 1:
                    state[g] = 2
                    done.append(g)
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(calls[nxt]))))
    return done


def _assemble(g, members, fns, refs, globs, owner, decls, attrs, mds, head, final) -> str | None:
    """A unit's module text: its globals and functions, declarations of what it calls, its
    metadata renumbered from 0 (so its text does not depend on the rest of the module)."""
    used = set().union(*(refs[m] for m in members))
    out = list(head) + [globs[x] for x in sorted(used) if x in globs and owner.get(x) == g]
    for m in members:
        f = fns[m]
        t = f.text
        if m == g:
            t = t.replace("define internal ", "define ", 1)
        out.append(t)
    text = "\n".join(out)
    for r in sorted(used):
        if r in final:
            text = re.sub(rf"@{re.escape(r)}\b(?![\w.$])", f"@{final[r]}", text)
    ext: dict[str, str] = {}  # two roots of equal code have one name: one declaration
    for r in sorted(used):
        if r in final:
            f = fns[r]
            types = ", ".join(p.split()[0] for p in f.params.split(", ")) if f.params else ""
            ext[final[r]] = f"declare {f.ret} @{final[r]}({types})"

        elif r in decls:
            ext[r] = decls[r]
        elif r in fns and r not in members:
            return None  # an entry or an unmarked function another unit defines
    text, md = _renumber(text, mds)
    return "\n".join([text, "", *ext.values(), "", *attrs, "", *md, ""])


def _renumber(text: str, mds: dict[int, str]) -> tuple[str, list[str]]:
    """Metadata the text refers to (and what that refers to), numbered from 0 by first use."""
    order: dict[int, int] = {}
    todo = [int(n) for n in _MD_REF.findall(text)]
    while todo:
        n = todo.pop(0)
        if n in mds and n not in order:
            order[n] = len(order)
            todo.extend(int(x) for x in _MD_REF.findall(mds[n].split("=", 1)[1]))

    def sub(m: re.Match) -> str:
        n = int(m[1])
        return f"!{order[n]}" if n in order else m[0]
    lines = [_MD_REF.sub(sub, mds[n]) for n in sorted(order, key=order.get)]
    return _MD_REF.sub(sub, text), lines


def _canonical(text: str, names: list[str]) -> str:
    """The text with its own function names and local value names replaced by their order of
    first appearance: two renderings of the same code hash alike wherever they sit."""
    if names:
        own = {n: f"@F{i}" for i, n in enumerate(names)}
        text = re.sub(rf"@({'|'.join(map(re.escape, own))})\b(?![\w.$])", lambda m: own[m[1]], text)
    seen: dict[str, str] = {}

    def rename(parts: list[str], pre: str, post: str) -> str:
        """re.split's pieces, a name at each odd index, the names renamed."""
        for i in range(1, len(parts), 2):
            n = seen.get(parts[i])
            if n is None:
                n = seen[parts[i]] = f"v{len(seen)}"
            parts[i] = pre + n + post
        return "".join(parts)
    text = rename(_LOCAL.split(text), "%", "")
    text = rename(_LABEL.split(text), "", ":")
    # operands of a commutative op in one order: a dim product spelled `C*DT` in one kernel and
    # `DT*T` in its twin (operands follow the symbols' names) is the same code
    return _COMMUTATIVE.sub(lambda m: f"{m[1]}{', '.join(sorted((m[2], m[3])))}", text)
