"""The gradient forms of docs/language.md section 12 (`grad`, `value-and-grad`, `vjp`), user `:vjp`
clauses, and their diagnostics. Values are checked against numpy formulas and central finite
differences (tests/gradcheck.py); torch comparisons are in test_grad_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

import caten
from tests.gradcheck import assert_close, caten_grads, fd_grads
from tests.test_cli import caten_cli

_rng = np.random.default_rng(7)


def r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


VJP = """
(composite f ((X{f32}[N, M], W{f32}[M, K]) -> (Y{f32}[N, K])) (tanh (matmul X W)))
(composite g ((X{f32}[N, M], W{f32}[M, K], C{f32}[N, K]) -> (GX{f32}[N, M], GW{f32}[M, K]))
  (setf gs (vjp f X W :wrt [X W] :cotangent C))
  (return (nth gs 0) (nth gs 1)))
"""


@pytest.mark.parametrize("runtime", ["numpy", "llvm", "c"])
def test_vjp_of_a_non_scalar_output(runtime):
    x, w, c = r(3, 4), r(4, 2), r(3, 2)
    gx, gw = caten.loads(VJP, runtime=runtime).g(x, w, c)
    d = c * (1 - np.tanh(x @ w) ** 2)
    np.testing.assert_allclose(gx, d @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, x.T @ d, rtol=1e-5, atol=1e-6)


ALIAS = """
(composite f ((A{f32}[N], B{f32}[N]) -> (L{f32})) (sum (* (exp A) B)))
(composite g ((X{f32}[N]) -> (GA{f32}[N], GB{f32}[N], GE{f32}[N]))
  (return (grad f X X :wrt A) (grad f X X :wrt B) (grad f (exp X) X :wrt B)))
"""


def test_the_same_tensor_passed_twice_is_differentiated_per_parameter():
    """Hash-consing makes both arguments one node; d/dA must still hold B fixed (and an argument
    equal to a node computed inside f must not pick up f's internal path)."""
    x = r(5)
    ga, gb, ge = caten.loads(ALIAS, runtime="llvm").g(x)
    np.testing.assert_allclose(ga, np.exp(x) * x, rtol=1e-6)
    np.testing.assert_allclose(gb, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(ge, np.exp(np.exp(x)), rtol=1e-6)


CUSTOM = """
(composite ste-round ((X{T}[...]) -> (Y{T}[...]))
  "round to the nearest integer; the gradient passes straight through"
  :vjp ((dY) dY)
  (- X (MOD X 1)))
(composite f ((X{f32}[N]) -> (L{f32})) (sum (* (ste-round X) X)))
(composite g ((X{f32}[N]) -> (G{f32}[N])) (grad f X :wrt X))
"""


def test_a_user_vjp_clause_replaces_the_expansions_gradient():
    x = np.array([0.3, 1.7, -2.2], np.float32)
    g = caten.loads(CUSTOM, runtime="llvm").g(x)
    np.testing.assert_allclose(g, (x - np.mod(x, 1)) + x, rtol=1e-6)  # d/dx [round(x) x] with round' = 1


def test_f64_gradients_match_finite_differences():
    x = _rng.standard_normal((3, 4))
    w = _rng.standard_normal((4,))
    body = "(sum (* (softmax (* A B) :axis 1) (log-softmax A :axis 0)))"
    got = caten_grads(body, [x, w], [0, 1], "llvm")
    assert_close(got, fd_grads(body, [x, w], [0, 1]), rtol=1e-6, atol=1e-8)


def test_integer_casts_pass_no_gradient():
    x = r(4) * 3
    got = caten_grads("(sum (+ (CAST (CAST A i32) f32) (* A A)))", [x], [0], "numpy")
    np.testing.assert_allclose(got[1], 2 * x, rtol=1e-6)


def test_grad_of_a_library_composite_and_kinks_give_a_subgradient():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    got = caten_grads("(sum (relu A))", [x], [0], "llvm")
    assert got[1][0] == 0 and got[1][2] == 1 and 0 <= got[1][1] <= 1


DIAG = """(composite loss ((X{f32}[B, D], W{f32}[D, K], I{i32}[B]) -> (L{f32}))
  (mse (matmul X W) (VIEW (CAST I f32) :unsqueeze 1)))
(composite vec ((X{f32}[B, D], W{f32}[D, K]) -> (Y{f32}[B, K])) (matmul X W))
"""
MISUSE = {
    "(composite s ((X{f32}[B, D], W{f32}[D, K], I{i32}[B]) -> (G{f32}[B])) (grad loss X W I :wrt I))":
        ("cannot differentiate with respect to `I`: its argument is i32", "floating-point"),
    "(composite s ((X{f32}[B, D], W{f32}[D, K]) -> (G{f32}[D, K])) (grad vec X W :wrt W))":
        ("needs a floating-point scalar first output", "vjp"),
    "(composite s ((X{f32}[B, D], W{f32}[D, K], I{i32}[B]) -> (G{f32}[D, K])) (grad loss X W I :wrt Wt))":
        ("`loss` has no parameter `Wt`", "did you mean `W`"),
    "(composite s ((X{f32}[B, D], W{f32}[D, K]) -> (G{f32}[D, K])) "
    "(vjp vec X W :wrt W :cotangent (CONST 1.0 :shape [(dim X 0)])))":
        ("the cotangent is f32[B] but `vec`'s first output is f32[B, K]", "shaped like the output"),
}


@pytest.mark.parametrize("line", sorted(MISUSE))
def test_misuse_is_a_diagnostic_at_the_call(tmp_path, line):
    message, hint = MISUSE[line]
    (tmp_path / "m.lisp").write_text(DIAG + line + "\n")
    rc, out, err = caten_cli(["-r", "numpy", "m.lisp", "-e", "s", "--emit", "ir"], tmp_path)
    assert rc == 1 and "Traceback" not in out + err
    first = err.splitlines()[0]
    assert first.startswith("m.lisp:4:") and "error: " in first and message in first, err
    assert "^" in err and hint in err, err


def test_rounding_composites_pass_no_gradient():
    """round-to-minifloat is flat almost everywhere; the expansion's add-and-subtract-2**23 trick
    used to pass the cotangent straight through (gradient 1)."""
    x = np.array([0.3, -1.7, 2.2], np.float32)
    got = caten_grads("(sum (* (round-to-minifloat A) (+ A 1)))", [x], [0], "llvm")
    rounded = caten.loads("(composite r ((X{f32}[N]) -> (Y{f32}[N])) (round-to-minifloat X))", runtime="numpy").r(x)
    np.testing.assert_allclose(got[1], rounded, rtol=1e-6)  # d/dA [round(A) (A + 1)] = round(A) + 0


def test_pow_f64_magnitude_outside_its_domain_takes_p_s_gradient():
    """Where x <= 0 the result is P: the gradient w.r.t. x is 0 and P's is the cotangent (the
    expansion's was nan: 0 * nan from the branch not taken)."""
    x, b, p = np.array([-2.0, 3.0]), np.array([1.5, 2.0]), np.array([7.0, 9.0])
    got = caten_grads("(sum (pow-f64-magnitude A B C))", [x, b, p], [0, 1, 2], "llvm")
    np.testing.assert_allclose(got[1], [0.0, 2.0 * 3.0], rtol=1e-12)
    np.testing.assert_allclose(got[2], [0.0, 9.0 * np.log(3.0)], rtol=1e-12)
    np.testing.assert_allclose(got[3], [1.0, 0.0])


WRT_ONE = """
(composite f ((A{f32}[N], B{f32}[N]) -> (L{f32})) (sum (* (exp A) B)))
(composite g ((X{f32}[N], Y{f32}[N]) -> (GA{f32}[N], GB{f32}[N], L{f32}, VA{f32}[N], VB{f32}[N], C{f32}[N]))
  (setf ga (grad f X Y :wrt [A]))
  (setf gb (grad f X Y :wrt B))
  (setf lv (value-and-grad f X Y :wrt [A]))
  (setf lw (value-and-grad f X Y :wrt B))
  (setf c (vjp f X Y :wrt [B] :cotangent (sum Y)))
  (return (nth ga 0) gb (nth lv 0) (nth lv 1) (nth lw 1) (nth c 0)))
"""


def test_wrt_a_list_of_one_name_gives_a_list_and_a_bare_name_the_gradient():
    """`:wrt [A]` is a list literal, so `nth` picks from it, as with several names; `:wrt B` is the
    gradient itself. value-and-grad is flat either way: the value, then the gradients."""
    x, y = r(5), r(5)
    ga, gb, loss, va, vb, c = caten.loads(WRT_ONE, runtime="numpy").g(x, y)
    np.testing.assert_allclose(ga, np.exp(x) * y, rtol=1e-6)  # d/dA sum(exp(A) B)
    np.testing.assert_allclose(gb, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(loss, np.sum(np.exp(x) * y), rtol=1e-5)
    np.testing.assert_allclose(va, np.exp(x) * y, rtol=1e-6)
    np.testing.assert_allclose(vb, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(c, np.sum(y) * np.exp(x), rtol=1e-5)
