"""The reference interpreter (`caten.ir.interpret`) and the elaborator's public `evaluate(form, bindings)`:
the graph a form elaborates to, under bound operands, computes what numpy computes."""

import numpy as np
import pytest

from caten.elaborate.elaborator import Elaborator
from caten.elaborate.values import Lit, Tensor
from caten.errors import Error
from caten.ir import build as B
from caten.ir import dims as D
from caten.ir import dtypes as T
from caten.ir.interpret import evaluate
from caten.read.reader import read


def _form(text: str):
    return read(text)[0]


def test_numpy_runtime_is_the_interpreter():
    from caten.runtimes import numpy_rt

    assert numpy_rt.evaluate is evaluate


def test_evaluate_form_with_bound_tensors_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(7).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    n = D.sym("N")
    binds = {"A": B.buffer(T.f32, (n,), 0, "A"),  # a graph node: evaluate wraps it as a tensor
             "B": Tensor(B.buffer(T.f32, (n,), 1, "B")), "k": Lit(3, "int")}
    el = Elaborator({})
    got = el.evaluate(_form("(let ((s (+ A B))) (* (max s 0.0) k))"), binds)
    assert isinstance(got, Tensor) and got.dtype == T.f32
    (out,) = evaluate([got.node], [a, b], {"N": 7})
    np.testing.assert_array_equal(out, (np.maximum(a + b, np.float32(0)) * np.float32(3)).astype(np.float32))
    assert el.frames == []


def test_evaluate_body_returns_and_library_calls():
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]])
    el = Elaborator({})
    body = read("(setf m (sum X :axis 1)) (return (- m 1.0) (exp m))")
    got = el.evaluate(body, {"X": Tensor(B.buffer(T.f64, (2, 3), 0, "X"))})
    outs = evaluate([v.node for v in got.values], [x], {})
    np.testing.assert_allclose(outs[0], x.sum(axis=1) - 1.0, rtol=1e-15)
    np.testing.assert_allclose(outs[1], np.exp(x.sum(axis=1)), rtol=1e-12)


def test_evaluate_error_points_at_form_and_restores_frames():
    el = Elaborator({})
    with pytest.raises(Error, match="unknown name `Y`"):
        el.evaluate(_form("(+ X Y)"), {"X": Lit(1, "int")})
    assert el.frames == []
