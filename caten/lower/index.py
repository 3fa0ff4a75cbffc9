"""Affine index expressions over loop variables with symbolic-dim coefficients.

Views turn coordinates into a flat offset and back; `divmod` splits an affine offset by a
stride exactly when bounds prove it (the common case: permute, expand, slice, pad, flip,
split/merge reshapes), and falls back to real division only when they cannot.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from caten import loopir as L
from caten.ir import dims as D
from caten.ir.dims import Dim
from caten.loopir import X

Ranges = Mapping[X, tuple[Dim, Dim]]  # atom -> (lo, hi) inclusive


class Aff:
    __slots__ = ("terms", "const", "_key")

    def __init__(self, terms: Mapping[X, Dim] | None = None, const: Dim = 0):
        self.terms = {a: c for a, c in (terms or {}).items() if c != 0}
        self.const = const
        self._key = (tuple(sorted(((id(a), D._key(c)) for a, c in self.terms.items()))), D._key(const))

    @staticmethod
    def of(atom: X) -> Aff:
        return Aff({atom: 1})

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Aff) and self._key == o._key

    def __hash__(self) -> int:
        return hash(self._key)

    def key(self) -> tuple:
        return self._key

    def add(self, o: Aff) -> Aff:
        t = dict(self.terms)
        for a, c in o.terms.items():
            t[a] = D.add(t.get(a, 0), c)
        return Aff(t, D.add(self.const, o.const))

    def scale(self, k: Dim) -> Aff:
        if k == 0:
            return Aff()
        if k == 1:
            return self
        return Aff({a: D.mul(c, k) for a, c in self.terms.items()}, D.mul(self.const, k))

    def shift(self, k: Dim) -> Aff:
        return Aff(self.terms, D.add(self.const, k))

    def is_const(self) -> bool:
        return not self.terms

    def expr(self) -> X:
        out = L.dim(self.const)
        for a, c in sorted(self.terms.items(), key=lambda ac: ac[0].order):
            out = L.iadd(L.imul(a, L.dim(c)), out)
        return out


# sign and bounds of dims (dimension symbols are >= 0; other atoms bounded via dims.least) ---------
def nonneg(d: Dim) -> bool:
    lo = D.least(d)
    return lo is not None and lo >= 0


def sign(d: Dim) -> int | None:
    if nonneg(d):
        return 1
    if nonneg(D.mul(d, -1)):
        return -1
    return None


def bounds(a: Aff, ranges: Ranges) -> tuple[Dim, Dim] | None:
    lo, hi = a.const, a.const
    for atom, c in a.terms.items():
        r = ranges.get(atom)
        s = sign(c)
        if r is None or s is None:
            return None
        rl, rh = r
        if s > 0:
            lo, hi = D.add(lo, D.mul(c, rl)), D.add(hi, D.mul(c, rh))
        else:
            lo, hi = D.add(lo, D.mul(c, rh)), D.add(hi, D.mul(c, rl))
    return lo, hi


def within(a: Aff, d: Dim, ranges: Ranges) -> bool:
    """0 <= a < d for every value of the atoms."""
    b = bounds(a, ranges)
    return b is not None and nonneg(b[0]) and nonneg(D.add(d, D.add(D.mul(b[1], -1), -1)))


def divmod_aff(a: Aff, d: Dim, ranges: Ranges) -> tuple[Aff, Aff]:
    """(a // d, a % d) for a >= 0 and d > 0, simplified when bounds allow."""
    if d == 1:
        return a, Aff()
    if d == 0:
        return Aff(), a  # a stride of 0 past an empty axis: the tensor has no elements to index
    if within(a, d, ranges):
        return Aff(), a
    qt: dict = {}
    rt: dict = {}
    for atom, c in a.terms.items():
        q = D.exact_div(c, d)
        if q is not None:
            qt[atom] = q
        else:
            rt[atom] = c
    c = a.const
    rest = bounds(Aff(rt), ranges)
    if isinstance(c, int) and isinstance(d, int) and rest is not None and isinstance(rest[0], int):
        # split the constant so the remainder's least value lies in [0, d): the loop IR's
        # idiv/imod (C division) are only right for a non-negative numerator
        qc = (c + rest[0]) // d
        rc = c - qc * d
    else:
        q = D.exact_div(c, d)
        qc, rc = (q, 0) if q is not None else (0, c)
    r = Aff(rt, rc)
    q = Aff(qt, qc)
    if within(r, d, ranges):
        return q, r
    rb = bounds(r, ranges)
    if rb is None or not nonneg(rb[0]):
        q, r = Aff(), a  # a itself is >= 0: divide it whole
    re = r.expr()
    de = L.dim(d)
    return q.add(Aff.of(L.X.make("idiv", L.IDX, (re, de)))), Aff.of(L.X.make("imod", L.IDX, (re, de)))


def contiguous_strides(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """Row-major strides of `shape` (a size-1 axis keeps its stride: unflatten divides by it)."""
    return _strides(tuple(shape))


@functools.lru_cache(maxsize=4096)
def _strides(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    # memoized: the lowering asks for the same few shapes thousands of times a program
    out: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        out.append(acc)
        acc = D.mul(acc, d)
    return tuple(reversed(out))


def flatten(coords: Sequence[Aff], shape: Sequence[Dim]) -> Aff:
    out = Aff()
    for c, s, n in zip(coords, contiguous_strides(shape), shape):
        if n != 1:
            out = out.add(c.scale(s))
    return out


def unflatten(off: Aff, shape: Sequence[Dim], ranges: Ranges) -> list[Aff]:
    cs = contiguous_strides(shape)
    out: list[Aff] = []
    rem = off
    first = True
    for n, s in zip(shape, cs):
        if n == 1:
            out.append(Aff())
            continue
        if first:
            q, rem = divmod_aff(rem, s, ranges)
            first = False
        else:
            q, rem = divmod_aff(rem, s, ranges)
        out.append(q)
    return out


class Coords:
    """Coordinates in a shape, held as per-axis affine forms, a flat offset, or both."""

    __slots__ = ("shape", "_axes", "_flat")

    def __init__(self, shape: Sequence[Dim], axes: list[Aff] | None = None, flat: Aff | None = None):
        self.shape, self._axes, self._flat = tuple(shape), axes, flat

    def flat(self) -> Aff:
        if self._flat is None:
            self._flat = flatten(self._axes, self.shape)
        return self._flat

    def axes(self, ranges) -> list[Aff]:
        if self._axes is None:
            self._axes = unflatten(self._flat, self.shape, ranges)
        return self._axes

    def key(self) -> tuple:
        return ("f", self.flat().key())
