"""Loop-IR expressions: hash-consed trees (`X`), their constructors, and index arithmetic that
folds constants as it builds (the ops an `X` may hold: caten.loopir's docstring)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Any

from caten.ir import dtypes as T
from caten.ir.dtypes import DType
from caten.ir.ops import Op

IDX = T.i64


def register(dt: DType) -> DType:
    """The dtype of dt's register: f16/bf16/float8 values live in f32 ones (a `bitcast` reads its bits)."""
    return T.f32 if dt in T.NARROW else dt


def _argkey(a: Any) -> Any:
    if isinstance(a, float):
        return ("f", struct.pack("<d", a))
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a)
    return a


class X:
    __slots__ = ("op", "dtype", "src", "arg", "order", "__weakref__")
    _intern: dict = {}

    op: Any
    dtype: DType
    src: tuple
    arg: Any
    order: str  # a deterministic sort key: a leaf's text, else a digest of the structure (a DAG's
    #             text can be exponentially long, so printing it to sort would be too)

    @classmethod
    def make(cls, op: Any, dtype: DType, src: tuple = (), arg: Any = None) -> X:
        key = (op, dtype, tuple(id(s) for s in src), _argkey(arg))
        hit = cls._intern.get(key)
        if hit is not None:
            return hit
        x = object.__new__(cls)
        x.op, x.dtype, x.src, x.arg = op, dtype, tuple(src), arg
        if not src and op in ("const", "var", "dim"):
            x.order = "0" + repr(x)
        else:
            text = f"{op}|{dtype}|{_argkey(arg)!r}|{'|'.join(s.order for s in src)}"
            x.order = "1" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        cls._intern[key] = x
        return x

    def __repr__(self) -> str:
        if self.op == "const":
            return repr(self.arg)
        if self.op in ("var", "dim"):
            return str(self.arg)
        if self.op == "load":
            return f"{self.arg}[{self.src[0]!r}]"
        name = self.op.value.lower() if isinstance(self.op, Op) else self.op
        return f"({name} {' '.join(map(repr, self.src))})"


def const(v: Any, dtype: DType = IDX) -> X:
    return X.make("const", dtype, (), v)


def var(name: str, dtype: DType = IDX) -> X:
    return X.make("var", dtype, (), name)


def dim(d: Any) -> X:
    if isinstance(d, int):
        return const(d)
    return X.make("dim", IDX, (), d)


def load(buf: str, idx: X, dtype: DType) -> X:
    return X.make("load", dtype, (idx,), buf)


def alu(op: Op, dtype: DType, *src: X, arg: Any = None) -> X:
    return X.make(op, dtype, tuple(src), arg)


# index arithmetic with folding -------------------------------------------------------------
def iadd(a: X, b: X) -> X:
    if a.op == "const" and a.arg == 0:
        return b
    if b.op == "const" and b.arg == 0:
        return a
    if a.op == "const" and b.op == "const":
        return const(a.arg + b.arg)
    if _splits(a) or _splits(b):
        return _rejoin(a, b)
    return alu(Op.ADD, IDX, a, b)


def _splits(x: X) -> bool:
    return x.op in ("imod", "idiv") or (x.op is Op.MUL and any(s.op in ("imod", "idiv") for s in x.src))


def _terms(x: X, out: list[X]) -> None:
    if x.op is Op.ADD and x.dtype == IDX and len(out) < 32:
        _terms(x.src[0], out)
        _terms(x.src[1], out)
    else:
        out.append(x)


def _scaled(t: X) -> tuple[int, X]:
    """Term t as (k, base) with t = k * base, k a constant (1 when t is no such product)."""
    if t.op is Op.MUL:
        for base, k in (t.src, t.src[::-1]):
            if k.op == "const" and isinstance(k.arg, int):
                return k.arg, base
    return 1, t


def _rejoin(a: X, b: X) -> X:
    """a + b, where each pair of terms k*c * (idiv x c) and k * (imod x c) is k * x again: an index
    split into a reshape's coordinates and flattened back (a reshaped buffer read at its own flat
    index, where the split cost two divisions per element in a GEMM's packing)."""
    flat: list[X] = []
    _terms(a, flat)
    _terms(b, flat)
    terms = [_scaled(t) for t in flat]
    merged = True
    while merged:
        merged = False
        for i, (k, t) in enumerate(terms):
            if t.op != "imod" or t.src[1].op != "const" or not isinstance(t.src[1].arg, int):
                continue
            x, c = t.src[0], t.src[1].arg
            j = next((j for j, (kq, q) in enumerate(terms) if j != i and q.op == "idiv" and q.src[0] is x
                      and q.src[1].op == "const" and q.src[1].arg == c and kq == k * c), None)
            if j is not None:
                terms = [p for n, p in enumerate(terms) if n not in (i, j)] + [(k, x)]
                merged = True
                break
    out = None
    for k, t in terms:
        term = t if k == 1 else alu(Op.MUL, IDX, t, const(k))
        out = term if out is None else alu(Op.ADD, IDX, out, term)
    return out if out is not None else const(0)


def imul(a: X, b: X) -> X:
    if a.op == "const":
        a, b = b, a
    if b.op == "const":
        if b.arg == 0:
            return const(0)
        if b.arg == 1:
            return a
        if a.op == "const":
            return const(a.arg * b.arg)
    return alu(Op.MUL, IDX, a, b)


def icmplt(a: X, b: X) -> X:
    return alu(Op.CMPLT, T.bool_, a, b)


def land(a: X | None, b: X) -> X:
    return b if a is None else alu(Op.AND, T.bool_, a, b)


def isub(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(a.arg - b.arg)
    if b.op == "const" and b.arg == 0:
        return a
    return iadd(a, imul(b, const(-1)))


def imax(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(max(a.arg, b.arg))
    return alu(Op.WHERE, IDX, icmplt(a, b), b, a)


def nodes(*roots: X, seen: set[int] | None = None) -> Iterator[X]:
    """Each expression node reachable from `roots` once (`seen`: ids already visited, shared by
    several walks)."""
    seen = set() if seen is None else seen
    stack = list(roots)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(x.src)


def subst(e: X, v: X, by: X) -> X:
    """e with every occurrence of v replaced by `by`."""
    memo: dict[int, X] = {}

    def go(x: X) -> X:
        if x is v:
            return by
        hit = memo.get(id(x))
        if hit is None:
            hit = memo[id(x)] = X.make(x.op, x.dtype, tuple(go(s) for s in x.src), x.arg) if x.src else x
        return hit
    return go(e)


def imin(a: X, b: X) -> X:
    if a.op == "const" and b.op == "const":
        return const(min(a.arg, b.arg))
    return alu(Op.WHERE, IDX, icmplt(a, b), a, b)
