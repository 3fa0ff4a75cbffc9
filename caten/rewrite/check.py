"""`caten rules check`: test each rule for soundness on random inputs.

For every rule, small programs are built whose inputs are the pattern's ?vars (buffers, or
constants where a guard asks for them), over several dtypes and shapes. The pattern is
elaborated once with rules off and once with only this rule on; where the rule fired, both
graphs run on the numpy reference interpreter and must agree (floats to a tolerance of a few
ulps of the dtype; nan equals nan, infinities must match). A disagreement is a counterexample.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten.elaborate.elaborator import Elaborator
from caten.elaborate.values import Tensor
from caten.errors import Error
from caten.ir import build as B
from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.interpret import evaluate
from caten.ir.ops import Op
from caten.read.program import CompositeDef
from caten.rewrite import OPT_IN
from caten.rewrite.engine import Engine
from caten.rewrite.opclass import OpClass, instantiate
from caten.rewrite.rule import Rule, _show_pat, compile_rule

POOL = (T.f32, T.f64, T.f16, T.bf16, T.i32, T.i64, T.i8, T.u8, T.u32, T.bool_)
SAME_SHAPES = ((), (7,), (3, 5), (2, 3, 4), (1,), (4, 1))
ATTEMPTS = 160  # programs tried per rule
WANT = 24  # cases where the rule fired, enough to stop
_TOL = {"f16": (4e-3, 1e-3), "bf16": (2e-2, 1e-2), "f32": (2e-6, 1e-6), "f64": (1e-13, 1e-14)}
_SPECIAL = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan)
MAX_INSTANCES = 64  # ops (or combinations of ops) a class pattern is checked with


@dataclass
class Outcome:
    rule: Rule
    status: str  # "ok" | "unsound" | "untested" | "broken"
    cases: int = 0
    details: list[str] = field(default_factory=list)
    error: Error | None = None


# what each ?var stands for ------------------------------------------------------------------
def _roles(rule: Rule, defs: dict[str, list[CompositeDef]]) -> dict[str, tuple[str, DType | None]]:
    """?var -> (role, fixed dtype): role "tensor", "dtype" or "value" (a keyword or parameter)."""
    out: dict[str, tuple[str, DType | None]] = {}

    def put(v: tuple, role: str, dt: DType | None = None) -> None:
        if v[0] == "var":
            out.setdefault(v[1], (role, dt))
        else:
            walk(v)

    def walk(p: tuple) -> None:
        t = p[0]
        if t == "list":
            for q in p[1]:
                put(q, "value")
        elif t == "call":
            ds = defs.get(p[1], [])
            cdef = next((d for d in ds if d.arity == len(p[2])), ds[0] if ds else None)
            for i, q in enumerate(p[2]):
                prm = cdef.params[i] if cdef and i < len(cdef.params) else None
                if prm is None or prm.tensor:
                    put(q, "tensor", T.lookup(prm.dtype) if prm is not None and prm.dtype else None)
                else:
                    put(q, "dtype" if prm.name == "dtype" else "value")
            for k, q in p[3].items():
                put(q, "dtype" if k == "dtype" else "value")
        elif t == "op":
            op, args = p[1], p[2]
            if op is Op.CAST:
                put(args[0], "tensor")
                put(args[1], "dtype")
            elif op is Op.WHERE:
                put(args[0], "tensor", T.bool_)
                put(args[1], "tensor")
                put(args[2], "tensor")
            elif op is Op.EXTERN:
                for q in args[1:]:
                    put(q, "tensor")
            elif op is Op.CONST:
                put(args[0], "value")
            else:
                for q in args:
                    put(q, "tensor")
                for q in p[3].values():
                    put(q, "value")
    walk(rule.pattern)
    return out


# random values --------------------------------------------------------------------------------
def _array(rng: np.random.Generator, dt: DType, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if dt.is_bool:
        return rng.random(shape) < 0.5
    if dt.is_float:
        x = rng.standard_normal(n) * 2.0
        pick = rng.random(n) < 0.2
        x[pick] = rng.choice(np.array(_SPECIAL), size=int(pick.sum()))
        return x.reshape(shape).astype(dt.np)
    info = T.iinfo(dt)
    lo, hi = (max(info.min, -40), min(info.max, 40))
    x = rng.integers(lo, hi + 1, size=n, dtype=np.int64)
    pick = rng.random(n) < 0.1
    x[pick] = rng.choice(np.array([info.min, info.max, 0, 1], dtype=object), size=int(pick.sum()))
    return x.astype(dt.np).reshape(shape)


def _scalar(rng: np.random.Generator, dt: DType) -> Any:
    """A constant: special values (signed zeros, +-1, inf, nan; an integer type's 0, 1 and limits)
    half the time, since guards often ask for exactly those."""
    if rng.random() < 0.5 and not dt.is_bool:
        if dt.is_float:
            return float(np.array(rng.choice(np.array(_SPECIAL))).astype(dt.np))
        info = T.iinfo(dt)
        return int(rng.choice(np.array([info.min, info.max, 0, 1], dtype=object)))
    v = _array(rng, dt, (1,))[0]
    return bool(v) if dt.is_bool else int(v) if dt.is_int else float(v)


def _agree(a: np.ndarray, b: np.ndarray, signed_zeros: bool = True) -> np.ndarray:
    """Elementwise agreement: exact for integers and bool; floats within a few ulps, nan == nan,
    and zeros of the same sign (1/x tells -0.0 from 0.0) unless `signed_zeros` is off, as
    fast-math rules have it (like -ffast-math's -fno-signed-zeros)."""
    if a.dtype.kind not in "fV" and a.dtype != T.bf16.np:
        return a == b
    name = {np.dtype(np.float16): "f16", T.bf16.np: "bf16", np.dtype(np.float32): "f32"}.get(a.dtype, "f64")
    rtol, atol = _TOL[name]
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
    zeros = (x == 0) & (y == 0)
    same = close | (x == y)
    return same & (~zeros | (np.signbit(x) == np.signbit(y))) if signed_zeros else same


def _fmt(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return np.array2string(a.astype(np.float64) if a.dtype == T.bf16.np else a, threshold=24, edgeitems=4,
                               precision=6, max_line_width=100).replace("\n", "\n        ")
    return str(a)


# one rule -------------------------------------------------------------------------------------
def check_rule(rule: Rule, defs: dict[str, list[CompositeDef]], attempts: int = ATTEMPTS,
               want: int = WANT) -> Outcome:
    """Check a rule; a class pattern is checked on each op of its class (`attempts` and `want`
    each), and is untested if one of them never fired."""
    rng = np.random.default_rng(zlib.crc32(rule.name.encode()))
    total = 0
    never: list[str] = []
    for ops, inst in _instances(rule, defs):
        out = _check(rule, inst, defs, attempts, want, rng)
        if out.status in ("unsound", "broken"):
            if ops:
                out.details.insert(0, f"with {ops}")
            return out
        total += out.cases
        if not out.cases and ops:
            never.append(ops)
    if never:
        return Outcome(rule, "untested", total, [f"it never fired with {', '.join(never)}"])
    return Outcome(rule, "ok" if total else "untested", total)


def _instances(rule: Rule, defs: dict[str, list[CompositeDef]]) -> list[tuple[str, Rule]]:
    """The rule with its op variables replaced by each op of their classes (what `_check`
    elaborates and reads roles from); the rule itself where its pattern names no class."""
    heads: dict[str, frozenset] = {}

    def walk(p: tuple) -> None:
        if p[0] in ("op", "call", "list"):
            if p[0] == "op" and isinstance(p[1], OpClass):
                heads[p[1].var] = heads.get(p[1].var, p[1].members) & p[1].members
            for q in (p[1] if p[0] == "list" else list(p[2]) + list(p[3].values())):
                walk(q)
    walk(rule.pattern)
    if not heads:
        return [("", rule)]
    names = list(heads)
    combos = list(itertools.product(*(sorted(heads[v], key=lambda o: o.value) for v in names)))
    out = []
    for combo in combos[::max(1, len(combos) // MAX_INSTANCES)]:
        m = dict(zip(names, combo))
        rd = dataclasses.replace(rule.source, pattern=instantiate(rule.source.pattern, m),
                                 replacement=instantiate(rule.source.replacement, m),
                                 guard=instantiate(rule.source.guard, m) if rule.source.guard is not None else None)
        what = ", ".join(f"{v} = {o.value}" for v, o in m.items())
        out.append((what, compile_rule(rd, rule.ruleset, set(defs))))
    return out


def _check(rule: Rule, inst: Rule, defs: dict[str, list[CompositeDef]], attempts: int, want: int,
           rng: np.random.Generator) -> Outcome:
    """`rule` applied where `inst` (the rule itself, or one op of its class) matches."""
    roles = _roles(inst, defs)
    tensors = [v for v in inst.vars if roles.get(v, ("tensor", None))[0] == "tensor"]
    applied = 0
    for i in range(attempts):
        binds: dict[str, Any] = {}
        inputs: list[np.ndarray] = []
        shown: list[str] = []
        base = POOL[i % len(POOL)]
        per_var = i % 7 == 6
        scheme = (i // len(POOL)) % 3
        kinds = (i // (3 * len(POOL))) % 3  # 0: buffers, 1: constants, 2: a random mix
        shape = SAME_SHAPES[rng.integers(len(SAME_SHAPES))]
        chain = [int(rng.integers(2, 6)) for _ in range(len(tensors) + 1)]
        for v in inst.vars:
            role, fixed = roles.get(v, ("tensor", None))
            if role == "dtype":
                binds[v] = POOL[rng.integers(len(POOL))]
                shown.append(f"{v} = {binds[v]}")
                continue
            if role == "value":
                from caten.elaborate.values import Lit

                binds[v] = Lit(int(rng.integers(-1, 2)), "int")
                shown.append(f"{v} = {binds[v].value}")
                continue
            dt = fixed or (POOL[rng.integers(len(POOL))] if per_var else base)
            k = tensors.index(v)
            shp = shape if scheme != 1 else (chain[k], chain[k + 1])
            if scheme == 2:
                shp = shape if k == 0 else ((1,) * len(shape) if len(shape) and rng.random() < 0.5 else shape)
            const = kinds == 1 or (kinds == 2 and rng.random() < 0.5)
            if const:
                val = _scalar(rng, dt)
                binds[v] = Tensor(B.const(val, dt, shp))
                shown.append(f"{v} = {val!r} ({dt} constant, shape {list(shp)})")
            else:
                arr = _array(rng, dt, shp)
                binds[v] = Tensor(B.buffer(dt, shp, len(inputs), v[1:]))
                inputs.append(arr)
                shown.append(f"{v} = {dt}{list(shp)} {_fmt(arr)}")
        # the pattern as written, with rules off
        try:
            before = _elaborate(inst, defs, binds, None)
        except Error:
            continue  # the pattern does not type-check with these inputs
        if not isinstance(before, Tensor):
            continue
        engine = Engine([rule])
        try:
            after = _elaborate(inst, defs, binds, engine)
            if rule.level == "op":
                after = Tensor(engine.rewrite([after.node], rule.name)[0])
        except Error as e:
            return Outcome(rule, "broken", applied, [f"applying it fails: {e}"] + ["  with " + s for s in shown], e)
        if engine.fired == 0:
            continue  # no match, or the guard said no
        applied += 1
        a, b = evaluate([before.node, after.node], inputs, {})
        ok = _agree(a, b, signed_zeros=os.path.splitext(os.path.basename(rule.ruleset))[0] not in OPT_IN)
        if not np.all(ok):
            idx = tuple(int(j) for j in np.argwhere(~ok)[0]) if a.ndim else ()
            details = ["counterexample:"] + ["    " + s for s in shown] + [
                f"    pattern     {_show_pat(inst.pattern)} = {_fmt(a)}",
                f"    replacement = {_fmt(b)}",
                f"    first difference at index {list(idx)}: {_fmt(a[idx])} vs {_fmt(b[idx])}"]
            return Outcome(rule, "unsound", applied, details)
        if applied >= want:
            break
    return Outcome(rule, "ok" if applied else "untested", applied)


def _elaborate(rule: Rule, defs: dict[str, list[CompositeDef]], binds: dict[str, Any], engine: Engine | None) -> Any:
    elab = Elaborator(defs, call_hook=engine.call_hook if engine is not None and rule.level == "call" else None)
    if engine is not None:
        engine.elab = elab
    return elab.evaluate(rule.source.pattern, binds)
