"""Printing a dim expression is linear in its size (the fuzzer found `(pow N N)` hanging: repeated
squaring nests one floor division per step, and printing each level twice made 63 levels cost
2**63); a program that builds such dims compiles and computes integer powers of dims."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import caten
from caten.ir import dims as D


def test_a_deep_nest_of_divisions_prints_once_per_atom():
    e, want = D.sym("N"), "N"
    for _ in range(120):  # 2**120 steps if any level were printed twice
        e = D.floordiv(e, 2)
        want = f"(idiv {want} 2)"
    assert str(e) == want


def test_terms_print_in_a_stable_order():
    n, m = D.sym("N"), D.sym("M")
    x = D.add(D.mul(n, m), D.add(n, D.dmax(n, 3)))
    assert str(x) == "(+ (max 3 N) (* M N) N)"
    assert str(D.add(D.mul(x, -2), 7)) == "(+ (* -2 (max 3 N)) (* -2 M N) (* -2 N) 7)"


@pytest.mark.parametrize("runtime", ["numpy", "llvm"])
def test_pow_of_symbolic_dims(runtime):
    mod = caten.loads("(composite f ((X{f32}[N, M]) -> (Y{i64})) (pow N M))", runtime=runtime)
    for n, m in ((3, 4), (2, 13), (7, 1)):
        assert int(np.asarray(mod.f(np.zeros((n, m), np.float32)))) == n ** m


_STEPS = st.lists(st.tuples(st.sampled_from(["idiv", "mod", "max", "min", "add"]),
                            st.sampled_from([2, 3, 7, "N", "M"])), min_size=1, max_size=18)


@settings(max_examples=150, deadline=None)
@given(_STEPS)
def test_property_printing_visits_each_atom_a_bounded_number_of_times(steps):
    """A chain of dim operations (what a `dotimes` over dims builds) prints with a number of atom
    visits linear in the chain's length: the class of the (pow N N) hang, where each nesting
    level doubled the visits."""
    ops = {"idiv": D.floordiv, "mod": D.mod, "max": D.dmax, "min": D.dmin, "add": D.add}
    e = D.sym("N")
    for op, arg in steps:
        e = ops[op](e, D.sym(arg) if isinstance(arg, str) else arg)
    calls = [0]
    orig = D.Atom.__str__

    def counted(self):
        calls[0] += 1
        return orig(self)

    D.Atom.__str__ = counted
    try:
        text = str(e)
    finally:
        D.Atom.__str__ = orig
    assert calls[0] <= 4 * (len(steps) + 2), (calls[0], text)


@settings(max_examples=150, deadline=None)
@given(_STEPS, st.permutations(["N", "M", "K"]), st.booleans())
def test_property_renaming_is_substitution_by_symbols(steps, names, partial):
    """D.rename (the canonical names of a cache key, linear time) is D.substitute for a map of
    symbols to distinct symbols: the same normal form, printed alike."""
    ops = {"idiv": D.floordiv, "mod": D.mod, "max": D.dmax, "min": D.dmin, "add": D.add}
    e = D.add(D.sym("N"), D.mul(D.sym("K"), D.sym("M")))
    for op, arg in steps:
        e = ops[op](e, D.sym(arg) if isinstance(arg, str) else arg)
    env = {old: D.sym(new) for old, new in zip(["N", "M", "K"], names)}
    if partial:  # one symbol kept: a rename onto it merges terms (substitute does that)
        env.pop("K")
    assert str(D.rename(e, env)) == str(D.substitute(e, env))
    assert D.rename(e, env) == D.substitute(e, env)
