"""ONNX lowerings of MatMul and Gemm (half types summed in f32, as the reference) and Det."""

from __future__ import annotations

from caten.frontends.onnx.node import N, handler
from caten.frontends.onnx.wide import NARROW


def wide_matmul(a: str, b: str, dt: str) -> str:
    """a @ b of dtype dt, through f32 when dt is a half type: numpy (so onnx's reference) sums half
    products in f32 and rounds once; a sum rounded to 11 bits at every step drifts by ulps. (Gemm's
    alpha and beta then apply in the half type, as the reference, so not the whole op is widened.)"""
    if dt in NARROW:
        return f"(cast (matmul (cast {a} f32) (cast {b} f32)) {dt})"
    return f"(matmul {a} {b})"


@handler("MatMul")
def _matmul(n: N) -> str:
    return wide_matmul(n.x(0), n.x(1), n.dt())


@handler("Gemm")
def _gemm(n: N) -> str:
    a, b = n.x(0), n.x(1)
    if n.a("transA", 0):
        a = f"(transpose {a})"
    if n.a("transB", 0):
        b = f"(transpose {b})"
    y = wide_matmul(a, b, n.dt())
    if n.a("alpha", 1.0) != 1.0:
        y = f"(* {n.lit(n.a('alpha', 1.0))} {y})"
    if n.has(2):
        c = n.x(2)
        if n.a("beta", 1.0) != 1.0:
            c = f"(* {n.lit(n.a('beta', 1.0))} {c})"
        y = f"(+ {y} {c})"
    return y


@handler("Det")
def _det(n: N) -> str:
    """The determinant of [..., M, M] for M <= 3 by its closed form (the products of entries; no
    pivoting needed); larger matrices are refused (an LU with row exchanges is not written yet)."""
    s = n.int_shape()
    m = s[-1]
    if len(s) < 2 or s[-2] != m:
        raise n.fail(f"needs square matrices, got {s}")
    if m > 3:
        raise n.fail(f"determinants of {m}x{m} matrices are not supported (up to 3x3 are)")
    x = n.x(0)
    pre = " ".join(f"[0 {d} 1]" for d in s[:-2])
    e = {(i, j): n.let(f"(reshape (slice {x} {pre} [{i} {i + 1} 1] [{j} {j + 1} 1]) [{' '.join(map(str, s[:-2]))}])")
         for i in range(m) for j in range(m)}
    if m == 1:
        return f"(contiguous {e[0, 0]})"
    if m == 2:
        return f"(- (* {e[0, 0]} {e[1, 1]}) (* {e[0, 1]} {e[1, 0]}))"
    minor = lambda a, b, c, d: f"(- (* {e[a]} {e[b]}) (* {e[c]} {e[d]}))"  # noqa: E731
    t0 = f"(* {e[0, 0]} {minor((1, 1), (2, 2), (1, 2), (2, 1))})"
    t1 = f"(* {e[0, 1]} {minor((1, 0), (2, 2), (1, 2), (2, 0))})"
    t2 = f"(* {e[0, 2]} {minor((1, 0), (2, 1), (1, 1), (2, 0))})"
    return f"(+ (- {t0} {t1}) {t2})"
