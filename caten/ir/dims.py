"""Symbolic dimensions: integer polynomials over dimension symbols.

A dim is a plain `int` or a `DimExpr`. Expressions are kept in a normal form (a sum of
coefficient * monomial, a monomial being a sorted tuple of atoms) so that equal dims
compare and hash equal, which shape checking and hash-consing both rely on. Floor
division, modulo, max and min that cannot be simplified become opaque atoms.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
from typing import Union

Dim = Union[int, "DimExpr"]


class Atom:
    """A symbol, or an opaque operation over dims (floordiv, mod, max, min)."""

    __slots__ = ("op", "args", "_key", "_s")

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args
        self._key = (op, tuple(_key(a) for a in args))
        self._s: str | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Atom) -> bool:
        return repr(self._key) < repr(other._key)

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.op == "sym":
            name = self.args[0]
            if name not in env:
                raise KeyError(name)
            return int(env[name])
        a, b = (evaluate(x, env) for x in self.args)
        return {"idiv": lambda: a // b if b else 0, "mod": lambda: a % b if b else 0,
                "max": lambda: max(a, b), "min": lambda: min(a, b)}[self.op]()

    def __str__(self) -> str:
        if self.op == "sym":
            return self.args[0]
        if self._s is None:  # (printed once: atoms are immutable, and sorting prints them often)
            self._s = f"({self.op} {' '.join(map(str, self.args))})"
        return self._s

    __repr__ = __str__  # also orders printed terms: deterministic, unlike the default (an address)


def _key(d: Dim) -> object:
    return d._terms_key if isinstance(d, DimExpr) else d


class DimExpr:
    """A non-constant polynomial in dimension symbols (constants are plain ints)."""

    __slots__ = ("terms", "_tk", "_s")

    def __init__(self, terms: dict[tuple[Atom, ...], int]):
        self.terms = {m: c for m, c in terms.items() if c}
        self._tk: tuple | None = None
        self._s: str | None = None

    @property
    def _terms_key(self) -> tuple:
        """The canonical key (equality, hashing), built on first use: most expressions the
        index arithmetic makes are intermediate and never compared."""
        if self._tk is None:
            self._tk = tuple(sorted(((tuple(a._key for a in m), c) for m, c in self.terms.items()), key=repr))
        return self._tk

    # construction ------------------------------------------------------------------
    @staticmethod
    def norm(terms: dict[tuple[Atom, ...], int]) -> Dim:
        terms = {m: c for m, c in terms.items() if c}
        if not terms:
            return 0
        if list(terms) == [()]:
            return terms[()]
        return DimExpr(terms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DimExpr) and self._terms_key == other._terms_key

    def __hash__(self) -> int:
        return hash(self._terms_key)

    def __add__(self, o: Dim) -> Dim:
        return add(self, o)

    __radd__ = __add__

    def __mul__(self, o: Dim) -> Dim:
        return mul(self, o)

    __rmul__ = __mul__

    def __neg__(self) -> Dim:
        return mul(self, -1)

    def __sub__(self, o: Dim) -> Dim:
        return add(self, mul(o, -1))

    def __rsub__(self, o: Dim) -> Dim:
        return add(o, mul(self, -1))

    def __floordiv__(self, o: Dim) -> Dim:
        return floordiv(self, o)

    def __str__(self) -> str:
        if self._s is not None:  # (printed once: dims are immutable, and sorting prints them often)
            return self._s
        # each atom printed once: sorting by repr(m) and then printing m again would print a nest
        # of k idiv atoms 2**k times (the key is repr(m), spelled from the same strings)
        terms = []
        for m, c in self.terms.items():
            factors = [str(a) for a in m]
            key = "(" + ", ".join(factors) + ("," if len(factors) == 1 else "") + ")"
            terms.append(((not m, key), factors, c))
        parts = []
        for _, factors, c in sorted(terms, key=lambda t: t[0]):
            if c != 1 or not factors:
                factors.insert(0, str(c))
            parts.append(factors[0] if len(factors) == 1 else f"(* {' '.join(factors)})")
        self._s = parts[0] if len(parts) == 1 else f"(+ {' '.join(parts)})"
        return self._s

    __repr__ = __str__


def _terms(d: Dim) -> dict[tuple[Atom, ...], int]:
    return dict(d.terms) if isinstance(d, DimExpr) else {(): int(d)}


def sym(name: str) -> DimExpr:
    return DimExpr({(Atom("sym", (name,)),): 1})


def add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    t = _terms(a)
    for m, c in _terms(b).items():
        t[m] = t.get(m, 0) + c
    return DimExpr.norm(t)


def mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    t: dict[tuple[Atom, ...], int] = {}
    for ma, ca in _terms(a).items():
        for mb, cb in _terms(b).items():
            m = tuple(sorted(ma + mb))
            t[m] = t.get(m, 0) + ca * cb
    return DimExpr.norm(t)


def _content(d: Dim) -> int:
    """The gcd of all coefficients (the largest integer that divides d exactly)."""
    g = 0
    for c in _terms(d).values():
        g = gcd(g, c)
    return g


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b else 0
    if isinstance(b, int) and b > 0:
        # (q*b + r) // b == q + r // b: pull out the terms that b divides
        t = _terms(a)
        q = {m: c // b for m, c in t.items() if c % b == 0}
        r = DimExpr.norm({m: c for m, c in t.items() if c % b != 0})
        if q:
            return add(DimExpr.norm(q), floordiv(r, b) if r != 0 else 0)
    if a == b:
        return 1
    return DimExpr.norm({(Atom("idiv", (a, b)),): 1})


def divides(a: Dim, b: Dim) -> bool | None:
    """Whether b divides a exactly: True, False, or None when it depends on the symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return b != 0 and a % b == 0
    if a == b or (isinstance(b, int) and b != 0 and _content(a) % b == 0):
        return True
    return None


def exact_div(c: Dim, d: Dim) -> Dim | None:
    """c / d when d divides c as polynomials, else None."""
    if isinstance(c, int) and isinstance(d, int):
        return c // d if d and c % d == 0 else None
    if c == 0:
        return 0
    if c == d:
        return 1
    if isinstance(d, int):
        if d and _content(c) % d == 0:
            return DimExpr.norm({m: k // d for m, k in c.terms.items()})
        return None
    if len(d.terms) != 1:
        return None
    (md, cd), = d.terms.items()
    if not md:
        return exact_div(c, cd)
    out: dict = {}
    for m, k in _terms(c).items():
        rest = list(m)
        for atom in md:
            if atom in rest:
                rest.remove(atom)
            else:
                return None
        if k % cd:
            return None
        out[tuple(rest)] = k // cd
    return DimExpr.norm(out)


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b if b else 0
    if divides(a, b):
        return 0
    if isinstance(b, int) and b > 0:
        r = DimExpr.norm({m: c for m, c in _terms(a).items() if c % b != 0})
        if r != a:
            return mod(r, b)
    return DimExpr.norm({(Atom("mod", (a, b)),): 1})


def sign_of(d: Dim) -> int | None:
    """1 if d >= 0, -1 if d <= 0 for every binding, else None.

    Assumes what shapes guarantee: a dimension symbol is >= 0; the other atoms (floor division,
    modulo, max, min) are bounded below through their arguments (`least`), never assumed >= 0:
    a slice's extent holds differences like (idiv (- (max ..) N) 3) that can be negative."""
    if isinstance(d, int):
        return 1 if d >= 0 else -1
    const = d.terms.get((), 0)
    lo = hi = const  # bounds with every monomial at its least value
    signs = set()
    for m, c in d.terms.items():
        if m:
            leasts = [_least(a) for a in m]
            if any(x is None or x < 0 for x in leasts):
                return None  # an atom that may be negative: no sign from this rule
            low = 1
            for x in leasts:
                low *= x
            signs.add(c > 0)
            lo += c * low
            hi += c * low
    if signs == {True} and lo >= 0:
        return 1
    if signs == {False} and hi <= 0:
        return -1
    return None


def _least(a: Atom) -> int | None:
    """A lower bound of an atom's value (None: unknown, may be negative)."""
    if a.op == "sym":
        return 0  # LANGUAGE.md 5.1: any dim may be 0
    xs = [least(x) for x in a.args]
    if a.op in ("idiv", "mod"):
        # floor division: >= 0 for a positive divisor and (idiv) a non-negative numerator
        if xs[1] is None or xs[1] < 1 or (a.op == "idiv" and (xs[0] is None or xs[0] < 0)):
            return None
        return xs[0] // a.args[1] if a.op == "idiv" and isinstance(a.args[1], int) else 0
    if a.op == "max":
        known = [x for x in xs if x is not None]
        return max(known) if known else None
    return None if None in xs else min(xs)


def least(d: Dim) -> int | None:
    """A lower bound of d for every binding (symbols >= 0), or None when d may be unbounded below."""
    if isinstance(d, int):
        return d
    total = 0
    for m, c in d.terms.items():
        if not m:
            total += c
            continue
        if c < 0:
            return None
        v = 1
        for a in m:
            x = _least(a)
            if x is None or x < 0:
                return None
            v *= x
        total += c * v
    return total


def _absorbs(a: Dim, b: Dim, op: str) -> bool:
    """b is (op a x): max(a, min(a, x)) = a and min(a, max(a, x)) = a."""
    if not isinstance(b, DimExpr) or len(b.terms) != 1:
        return False
    (m, c), = b.terms.items()
    return c == 1 and len(m) == 1 and m[0].op == op and any(x == a for x in m[0].args)


def _bound(a: Dim, b: Dim, op: str) -> Dim:
    """`max` or `min` (op) of a and b: folded when both are ints, when one absorbs the other, or
    when their difference has a known sign; else a real atom of that op."""
    other = "min" if op == "max" else "max"
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if op == "max" else min(a, b)
    if a == b or _absorbs(a, b, other):
        return a
    if _absorbs(b, a, other):
        return b
    sgn = sign_of(add(a, mul(b, -1)))
    if sgn is not None:
        return a if (sgn > 0) == (op == "max") else b
    return DimExpr.norm({(Atom(op, tuple(sorted((a, b), key=repr))),): 1})


def dmax(a: Dim, b: Dim) -> Dim:
    return _bound(a, b, "max")


def dmin(a: Dim, b: Dim) -> Dim:
    """A real `min` atom (not -max(-a, -b), whose max of negatives would break `sign_of`)."""
    return _bound(a, b, "min")


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The value of d under a binding of its symbols (KeyError names a missing one)."""
    if isinstance(d, int):
        return d
    total = 0
    for m, c in d.terms.items():
        v = c
        for a in m:
            v *= a.evaluate(env)
        total += v
    return total


def free_syms(d: Dim) -> list[str]:
    """The symbols of d in a stable order."""
    out: list[str] = []

    def walk(x: Dim) -> None:
        if isinstance(x, DimExpr):
            for m in x.terms:
                for a in m:
                    if a.op == "sym":
                        if a.args[0] not in out:
                            out.append(a.args[0])
                    else:
                        for arg in a.args:
                            walk(arg)

    walk(d)
    return out


def substitute(d: Dim, env: Mapping[str, Dim]) -> Dim:
    """d with the symbols of env replaced by dims (used for `where K = ...`)."""
    if isinstance(d, int):
        return d
    total: Dim = 0
    for m, c in d.terms.items():
        v: Dim = c
        for a in m:
            if a.op == "sym":
                v = mul(v, env.get(a.args[0], DimExpr({(a,): 1})))
            else:
                x, y = (substitute(arg, env) for arg in a.args)
                v = mul(v, {"idiv": floordiv, "mod": mod, "max": dmax, "min": dmin}[a.op](x, y))
        total = add(total, v)
    return total


class _Merges(Exception):
    """(rename) A symbol the env keeps is one it renames another to: terms would merge."""


def rename(d: Dim, env: Mapping[str, Dim]) -> Dim:
    """substitute(d, env) for an env that maps symbols to distinct new symbols (canonical names):
    the same normal form, rebuilt atom by atom without re-simplifying (a renaming cannot enable
    a simplification), so a large arena offset renames in linear time."""
    names: dict[str, str] = {}
    for k, v in env.items():
        if not (isinstance(v, DimExpr) and len(v.terms) == 1):
            return substitute(d, env)
        ((m, c),) = v.terms.items()
        if c != 1 or len(m) != 1 or m[0].op != "sym":
            return substitute(d, env)
        names[k] = m[0].args[0]
    targets = set(names.values())
    if len(targets) != len(names):
        return substitute(d, env)
    memo: dict[Atom, Atom] = {}

    def atom(a: Atom) -> Atom:
        r = memo.get(a)
        if r is None:
            if a.op == "sym":
                if a.args[0] not in names and a.args[0] in targets:
                    raise _Merges
                r = Atom("sym", (names.get(a.args[0], a.args[0]),))
            else:
                args = tuple(expr(x) for x in a.args)
                r = Atom(a.op, tuple(sorted(args, key=repr)) if a.op in ("max", "min") else args)
            memo[a] = r
        return r

    def expr(x: Dim) -> Dim:
        if isinstance(x, int):
            return x
        return DimExpr({tuple(sorted(atom(a) for a in m)): c for m, c in x.terms.items()})

    try:
        return expr(d)
    except _Merges:
        return substitute(d, env)


def prod(ds) -> Dim:
    out: Dim = 1
    for d in ds:
        out = mul(out, d)
    return out


MAX_DEGREE = 16  # symbolic dims of higher degree are computed at run time instead


def small(d: Dim) -> bool:
    """Whether d is cheap to keep symbolic: bounded degree and i64 coefficients. Folding past
    this (`(pow N 2)` squares N 63 times) would grow the expression, and memory, without bound."""
    if isinstance(d, int):
        return -(2 ** 63) <= d < 2 ** 63
    return all(len(m) <= MAX_DEGREE and -(2 ** 63) <= c < 2 ** 63 for m, c in d.terms.items())


def to_str(d: Dim) -> str:
    return str(d)
