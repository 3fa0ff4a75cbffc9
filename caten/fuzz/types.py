"""The fuzzer's program model and its type rules: a program is a list of single-op bindings
(`(setf vK (OP ...))`) over inputs, and `infer` computes each value's dtype, concrete shape and,
per axis, the dim the elaborator will know (an int, a symbolic Dim, or None when no signature
can name it). Generation and shrinking both use `infer` as their judge of well-typedness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from caten.ir import dims as D

FLOATS = ("f32", "f64")
INTS = ("i32", "i64", "i8", "u8")
MAX_ELEMS = 20000


class Invalid(Exception):
    """A statement that does not type-check (generation retries it, shrinking rejects it)."""


@dataclass(frozen=True)
class Ty:
    dtype: str
    shape: tuple[int, ...]
    keys: tuple  # per axis: int | DimExpr (what the elaborator calls it) | None (nothing nameable)


@dataclass
class Stmt:
    name: str
    op: str
    args: list[str]
    p: dict = field(default_factory=dict)


@dataclass
class Prog:
    inputs: list[tuple[str, str, tuple]]  # name, dtype, dims (ints, or symbol names when symbolic)
    sizes: dict[str, int]  # symbol -> size at the call
    wheres: dict[str, tuple[str, int]]  # Q -> (S, c): `where Q = (* c S)`
    stmts: list[Stmt]
    outputs: list[str]

    def copy(self) -> Prog:
        return Prog(list(self.inputs), dict(self.sizes), dict(self.wheres),
                    [Stmt(s.name, s.op, list(s.args), dict(s.p)) for s in self.stmts], list(self.outputs))


def used_wheres(prog: Prog) -> list[str]:
    """The `where`-defined dims some input uses (only those are written in the signature)."""
    return [q for q in prog.wheres if any(q in dims for _, _, dims in prog.inputs)]


def is_float(dt: str) -> bool:
    return dt in FLOATS


def is_int(dt: str) -> bool:
    return dt in INTS


def size_of(d, prog: Prog) -> int:
    if isinstance(d, int):
        return d
    if d in prog.wheres:
        s, c = prog.wheres[d]
        return c * prog.sizes[s]
    return prog.sizes[d]


def key_of(d, prog: Prog):
    if isinstance(d, int):
        return d
    if d in prog.wheres:  # inside the body Q is its definition
        s, c = prog.wheres[d]
        return D.mul(c, D.sym(s))
    return D.sym(d)


def infer(prog: Prog) -> dict[str, Ty]:
    """The type of every value, or Invalid."""
    env: dict[str, Ty] = {}
    plain = {d for _, _, dims in prog.inputs for d in dims if isinstance(d, str) and d not in prog.wheres}
    for q in used_wheres(prog):
        if prog.wheres[q][0] not in plain:
            raise Invalid(f"`where {q}` needs a dim no input binds")
    for name, dt, dims in prog.inputs:
        shape = tuple(size_of(d, prog) for d in dims)
        if any(n < 0 for n in shape):
            raise Invalid("negative size")
        env[name] = Ty(dt, shape, tuple(key_of(d, prog) for d in dims))
    for s in prog.stmts:
        for a in s.args:
            if a not in env:
                raise Invalid(f"{a} unbound")
        t = infer_stmt(s, [env[a] for a in s.args])
        n = 1
        for x in t.shape:
            n *= x
        if n > MAX_ELEMS:
            raise Invalid("too large")
        env[s.name] = t
    for o in prog.outputs:
        if o not in env:
            raise Invalid(f"{o} unbound")
        if any(k is None for k in env[o].keys):
            raise Invalid("an output dim has no name")
    return env


def bcast(*ts: Ty) -> tuple[tuple[int, ...], tuple]:
    rank = max(len(t.shape) for t in ts)
    shape, keys = [], []
    for ax in range(rank):
        got = [(t.shape[ax - rank + len(t.shape)], t.keys[ax - rank + len(t.shape)])
               for t in ts if ax - rank + len(t.shape) >= 0]
        wide = [(n, k) for n, k in got if k != 1]
        if any(k is None for _, k in wide) or len({D._key(k) for _, k in wide}) > 1:
            raise Invalid("shapes do not broadcast")
        n, k = wide[0] if wide else (1, 1)
        shape.append(n)
        keys.append(k)
    return tuple(shape), tuple(keys)


UNARY = {"float": ("neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "sq", "recip",
                   "expm1", "sinh", "asinh", "atanh", "erfc"),
         "int": ("neg", "abs", "sq"), "bool": ("not",)}
# the continuous ones only: a rounding (floor, fmod of floats, atan2's branch cut) applied to a value
# two correct runtimes round differently could jump by a whole step
BINARY = {"float": ("+", "-", "*", "/", "max", "min", "fmax", "fmin", "hypot", "logaddexp"),
          "int": ("+", "-", "*", "max", "min", "idiv", "mod", "fmod", "shl", "shr"),
          "bool": ("and", "or", "xor")}
COMPARE = ("<", "<=", "=", "!=", ">")
REDUCE = ("sum", "max", "min", "prod", "mean", "argmax")


def kind(dt: str) -> str:
    return "float" if is_float(dt) else "int" if is_int(dt) else "bool"


def _axis(a: int, rank: int) -> int:
    if not 0 <= a < rank:
        raise Invalid("axis out of range")
    return a


def infer_stmt(s: Stmt, ts: list[Ty]) -> Ty:  # noqa: C901 - one case per op, kept together on purpose
    p, t = s.p, ts[0]
    r = len(t.shape)
    if s.op == "un":
        if p["f"] not in UNARY[kind(t.dtype)]:
            raise Invalid("unary op and dtype")
        return t
    if s.op == "bin":
        dts = {x.dtype for x in ts}
        if len(dts) != 1:
            raise Invalid("dtypes differ")
        f = p["f"]
        if f not in COMPARE and f not in BINARY[kind(t.dtype)] or f in COMPARE and t.dtype == "bool":
            raise Invalid("binary op and dtype")
        shape, keys = bcast(*ts)
        return Ty("bool" if f in COMPARE else t.dtype, shape, keys)
    if s.op == "where":
        c, a, b = ts
        if c.dtype != "bool" or a.dtype != b.dtype:
            raise Invalid("where dtypes")
        shape, keys = bcast(c, a, b)
        return Ty(a.dtype, shape, keys)
    if s.op == "cast":
        return Ty(p["to"], t.shape, t.keys)
    if s.op == "red":
        f, axes = p["f"], sorted(set(_axis(a, r) for a in p["axes"]))
        k = kind(t.dtype)
        if f in ("sum", "prod") and k == "bool" or f == "mean" and k != "float" or f == "argmax" and \
                (len(axes) != 1 or k == "bool"):
            raise Invalid("reduction and dtype")
        if not axes or any(t.shape[a] == 0 for a in axes) and f in ("max", "min", "argmax"):
            raise Invalid("empty reduction")
        dt = "i64" if f == "argmax" else t.dtype
        if p.get("keepdims"):
            return Ty(dt, tuple(1 if i in axes else n for i, n in enumerate(t.shape)),
                      tuple(1 if i in axes else k for i, k in enumerate(t.keys)))
        return Ty(dt, tuple(n for i, n in enumerate(t.shape) if i not in axes),
                  tuple(k for i, k in enumerate(t.keys) if i not in axes))
    if s.op == "gather":
        a = p["axis"]
        return Ty(t.dtype, t.shape[:a] + (p["k"],) + t.shape[a + 1:], t.keys[:a] + (p["k"],) + t.keys[a + 1:])
    if s.op == "sort":
        return Ty("i64" if p["idx"] else t.dtype, t.shape, t.keys)
    if s.op == "scatter":
        if p["f"] == "scatter-add" and kind(t.dtype) == "bool" or p["f"] == "scatter-mul" and kind(t.dtype) == "bool":
            raise Invalid("scatter reduction and dtype")
        if t.shape[p["axis"]] == 0:
            raise Invalid("scatter into an empty axis")
        return t
    if s.op == "perm":
        perm = p["perm"]
        if sorted(perm) != list(range(r)):
            raise Invalid("not a permutation")
        return Ty(t.dtype, tuple(t.shape[i] for i in perm), tuple(t.keys[i] for i in perm))
    if s.op == "merge":
        a = _axis(p["axis"], r - 1)
        ka, kb = t.keys[a], t.keys[a + 1]
        k = None if ka is None or kb is None else D.mul(ka, kb)
        return Ty(t.dtype, t.shape[:a] + (t.shape[a] * t.shape[a + 1],) + t.shape[a + 2:],
                  t.keys[:a] + (k,) + t.keys[a + 2:])
    if s.op == "unsq":
        a = _axis(p["axis"], r + 1)
        return Ty(t.dtype, t.shape[:a] + (1,) + t.shape[a:], t.keys[:a] + (1,) + t.keys[a:])
    if s.op == "squeeze":
        a = _axis(p["axis"], r)
        if t.keys[a] != 1:
            raise Invalid("not a unit axis")
        return Ty(t.dtype, t.shape[:a] + t.shape[a + 1:], t.keys[:a] + t.keys[a + 1:])
    if s.op == "split":
        a, f = _axis(p["axis"], r), p["f"]
        if not isinstance(t.keys[a], int) or f < 1 or t.shape[a] % f:
            raise Invalid("cannot split")
        n = t.shape[a] // f
        return Ty(t.dtype, t.shape[:a] + (f, n) + t.shape[a + 1:], t.keys[:a] + (f, n) + t.keys[a + 1:])
    if s.op == "expand":
        lead, sizes = p.get("lead", []), p["sizes"]  # sizes: {axis: n} for unit axes
        for a in sizes:
            if _axis(a, r) is None or t.keys[a] != 1:
                raise Invalid("expanding a non-unit axis")
        shape = tuple(lead) + tuple(sizes.get(i, n) for i, n in enumerate(t.shape))
        keys = tuple(lead) + tuple(sizes.get(i, k) for i, k in enumerate(t.keys))
        return Ty(t.dtype, shape, keys)
    if s.op == "slice":
        shape, keys = list(t.shape), list(t.keys)
        for a, (b, e, st) in enumerate(p["bounds"]):
            _axis(a, r)
            if st < 1:
                raise Invalid("step")
            n = len(range(*slice(b, e, st).indices(t.shape[a])))
            if n == 0:
                raise Invalid("empty slice")
            whole = st == 1 and b in (0, None) and e is None
            shape[a], keys[a] = n, (n if isinstance(keys[a], int) else keys[a] if whole else None)
        return Ty(t.dtype, tuple(shape), tuple(keys))
    if s.op == "flip":
        _axis(p["axis"], r)
        return t
    if s.op == "rfft":  # n // 2 + 1 frequencies of a float's static last axis
        if r == 0 or not is_float(t.dtype) or not isinstance(t.keys[-1], int) or t.shape[-1] < 1:
            raise Invalid("rfft operand")
        m = t.shape[-1] // 2 + 1
        return Ty(t.dtype, t.shape[:-1] + (m,), t.keys[:-1] + (m,))
    if s.op == "window":
        if r == 0 or kind(t.dtype) == "bool" or not all(isinstance(k, int) for k in t.keys):
            raise Invalid("window operand")
        out = (t.shape[-1] + 2 * p["pad"] - p["k"]) // p["s"] + 1
        if out < 1:
            raise Invalid("window larger than the padded axis")
        return Ty(t.dtype, t.shape[:-1] + (out,), t.keys[:-1] + (out,))
    if s.op == "pad":
        pads = p["pads"]
        if len(pads) != r:
            raise Invalid("pad rank")
        return Ty(t.dtype, tuple(n + lo + hi for n, (lo, hi) in zip(t.shape, pads)),
                  tuple(None if k is None else D.add(k, lo + hi) for k, (lo, hi) in zip(t.keys, pads)))
    if s.op == "concat":
        a, b = ts
        ax = _axis(p["axis"], r)
        if a.dtype != b.dtype or len(b.shape) != r or any(
                i != ax and (a.keys[i] is None or D._key(a.keys[i]) != D._key(b.keys[i])) for i in range(r)):
            raise Invalid("concat shapes")
        k = None if a.keys[ax] is None or b.keys[ax] is None else D.add(a.keys[ax], b.keys[ax])
        return Ty(a.dtype, a.shape[:ax] + (a.shape[ax] + b.shape[ax],) + a.shape[ax + 1:],
                  a.keys[:ax] + (k,) + a.keys[ax + 1:])
    if s.op == "matmul":  # (integers: matmul-int, products summed in i32; the GEMM over 16-bit pairs for i8/u8)
        a, b = ts
        ints = is_int(a.dtype) and is_int(b.dtype)
        if not (ints or (is_float(a.dtype) and a.dtype == b.dtype)) or len(a.shape) != 2 or len(b.shape) != 2 or \
                a.keys[1] is None or D._key(a.keys[1]) != D._key(b.keys[0]):
            raise Invalid("matmul shapes")
        return Ty("i32" if ints else a.dtype, (a.shape[0], b.shape[1]), (a.keys[0], b.keys[1]))
    if s.op == "nbits":  # (matmul-nbits of a float [M K] against p["n"] columns: [M n])
        if not is_float(t.dtype) or len(t.shape) != 2 or not isinstance(t.keys[1], int):
            raise Invalid("matmul-nbits input")
        return Ty(t.dtype, (t.shape[0], p["n"]), (t.keys[0], p["n"]))
    if s.op == "dotimes":
        if t.dtype == "bool" or p["f"] not in ("+", "*", "max", "-"):
            raise Invalid("dotimes dtype")
        return t
    if s.op in ("copy", "loop", "if"):
        return t
    raise Invalid(f"unknown op {s.op}")
