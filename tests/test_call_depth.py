"""A composite that calls itself without end is refused at a fixed nesting depth (it used to run
into Python's recursion limit, raised to 10^6 frames for deep graphs: tens of seconds), while a
recursion that ends within the limit still compiles."""

import numpy as np
import pytest

import caten
from caten.elaborate.elaborator import MAX_NESTING
from caten.errors import Error

CHAIN = """
(composite chain ((X{T}[...] n) -> (Y{T}[...])) (if (= n 0) X (chain (+ X 1.0) (- n 1))))
(composite f ((X{f32}[N]) -> (Y{f32}[N])) (chain X DEPTH))
"""


def test_endless_self_call_is_a_diagnostic():
    with pytest.raises(Error, match=f"nests composite calls more than {MAX_NESTING} deep") as e:
        caten.loads("(composite f ((X{f32}[N]) -> (Y{f32}[N])) (f X))", runtime="numpy")
    assert e.value.span is not None and e.value.hint and "ends the recursion" in e.value.hint


def test_a_recursion_that_ends_within_the_limit_compiles():
    m = caten.loads(CHAIN.replace("DEPTH", str(MAX_NESTING - 10)), runtime="numpy")
    np.testing.assert_array_equal(m.f(np.zeros(3, np.float32)), np.full(3, MAX_NESTING - 10, np.float32))
    with pytest.raises(Error, match="nests composite calls"):
        caten.loads(CHAIN.replace("DEPTH", str(MAX_NESTING + 10)), runtime="numpy").f(np.zeros(3, np.float32))
